"""Spans: the regions of a text to (re)generate, as pure data, and the pure functions on them."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from .errors import SpanError

if TYPE_CHECKING:
    from .constraints import Constraint

Mode = Literal["infill", "rewrite"]
MODES = ("infill", "rewrite")


@dataclass(frozen=True)
class Span:
    start: int  # character offset, inclusive
    end: int  # character offset, exclusive; start == end is an insertion point (infill only)
    mode: Mode = "infill"
    max_tokens: int | None = None  # infill: slot budget (None: derived from the selection)
    strength: float = 0.5  # rewrite: share of the span's tokens re-noised
    instruction: str | None = None  # instruct checkpoints only
    label: str = ""  # how the user wrote it (e.g. "3:5-3:20"), for error messages
    # What the span's finished text must be (core/constraints/): every step keeps it completable.
    constraint: "Constraint | None" = None
    # rewrite: the answer starts as the span's own tokens, none masked (strength is not read), each
    # one the model may replace, with a tail of mask slots to grow into (core/prompted.py
    # REVISE_TAIL). Only a loop that edits its own tokens reads it (LLaDA2.1's, core/loops/editing.py);
    # every other kind refuses it (core/loops/kind.py refuse_revise).
    revise: bool = False

    @property
    def name(self) -> str:
        return self.label or f"{self.start}-{self.end}"


def validate_spans(text: str, spans: list[Span]) -> list[Span]:
    """Check every span against the text; return them sorted by start. Errors name the span."""
    if not spans:
        raise SpanError("no span to edit")
    for span in spans:
        if span.mode not in MODES:
            raise SpanError(f"span {span.name}: unknown mode {span.mode!r} (use infill or rewrite)")
        if span.start > span.end:
            raise SpanError(f"span {span.name}: end is before start")
        if span.start < 0 or span.end > len(text):
            raise SpanError(f"span {span.name}: outside the text ({len(text)} characters)")
        if span.mode == "rewrite" and span.start == span.end:
            raise SpanError(f"span {span.name}: a rewrite needs a non-empty span")
        if span.max_tokens is not None and not 1 <= span.max_tokens <= 4096:
            raise SpanError(f"span {span.name}: max_tokens must be between 1 and 4096")
        if span.revise and span.mode != "rewrite":
            raise SpanError(f"span {span.name}: revise starts from the span's own text; it needs mode rewrite")
        if not 0.0 <= span.strength <= 1.0:  # 0: nothing re-noised (DiffusionGemma still refines the draft)
            raise SpanError(f"span {span.name}: strength must be in [0, 1]")
    ordered = sorted(spans, key=lambda s: (s.start, s.end))
    for before, after in zip(ordered, ordered[1:]):
        if after.start == before.start == before.end == after.end:
            raise SpanError(f"span {after.name} overlaps span {before.name} (the same insertion point twice)")
        if after.start < before.end:
            raise SpanError(f"span {after.name} overlaps span {before.name}")
    return ordered
