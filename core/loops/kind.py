"""A loop kind: the whole path of one kind of model from an edit request to frames.

    kind = kind_of(denoiser)                        # core/loops/kinds.py: the table, by spec.loop
    settings = kind.settings(denoiser, request)     # what this model's loop reads; the rest refused
    prepared = kind.prepare(denoiser, request, spans, settings, plan)   # canvases from the request
    for frame in kind.frames(prepared, should_stop, rules): ...         # the loop's Frames

The engine (core/engine.py) knows no kind by name: it asks the model's Kind. A Kind says

- `model`: the Protocol its loop reads from a model (tests hold every loaded model to it);
- `noise`: how its canvas starts, "mask" or "random" (what a front end calls an unsharp slot);
- `reads`: which sampling settings its loop reads for this model (a block-causal release's
  depend on its decode rule);
- `settings`: those settings resolved (an unset threshold becomes the one the loop uses),
  refusing in one line any other that a user set: no option is silently ignored;
- `prepare`: the canvas (or canvases) the request becomes for this model;
- `frames`: its loop over them;
- `used`: the settings the loop actually ran with, for --json;
- `slot_room`: how many slots one span may grow to.

A span that revises its own text (Span.revise: the answer starts as the span's tokens, each one
the model's to replace) is read by a loop that edits its own tokens only (LLaDA2.1's,
core/loops/editing.py); every other kind refuses it in `settings` (`refuse_revise`).

A new kind is one file holding a class with these members and one entry in kinds.py's table.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Callable, Iterator, Protocol

from ..canvas import Canvas, build_canvas
from ..errors import UsageError
from ..instruct import build_instruct_canvas, uses_chat
from ..request import EditRequest
from ..settings import Sampling
from ..spans import Span
from .frame import Frame
from .masked import LoopRules


@dataclass(frozen=True)
class Prepared:
    """A request made ready for one kind's loop."""

    denoiser: object  # the model the loop reads (candidate rows may wrap it: core/candidates.py ExactRows)
    canvas: Canvas | tuple[Canvas, ...]  # one canvas, or (block-causal) one prompt canvas per span
    settings: Sampling  # resolved: what the loop runs with
    row_lengths: tuple | None = None  # candidate rows: per row, each span's length (core/candidates.py)

    @property
    def canvases(self) -> tuple[Canvas, ...]:
        return self.canvas if isinstance(self.canvas, tuple) else (self.canvas,)


class Kind(Protocol):
    name: str
    model: type  # the Protocol a model of this kind satisfies
    noise: str  # "mask" | "random"

    def reads(self, denoiser, sampling: Sampling) -> frozenset[str]: ...  # the Sampling fields its loop reads for this model

    def settings(self, denoiser, request: EditRequest) -> Sampling: ...

    def prepare(self, denoiser, request: EditRequest, spans: list[Span], settings: Sampling, plan) -> Prepared: ...

    def frames(self, prepared: Prepared, should_stop: Callable[[], bool], rules: LoopRules) -> Iterator[Frame]: ...

    def used(self, prepared: Prepared, done: Frame) -> dict: ...

    def slot_room(self, denoiser) -> int: ...


DEFAULTS = Sampling()


def refuse_unread(sampling: Sampling, honoured: frozenset[str] | set[str], model: str, why: str) -> None:
    """UsageError, one line, for the first Sampling setting a user set (differs from its default)
    that `model`'s loop does not read: `why` says what the loop is."""
    for f in fields(Sampling):
        if f.name not in honoured and getattr(sampling, f.name) != getattr(DEFAULTS, f.name):
            raise UsageError(f"--{f.name.replace('_', '-')} has no effect on {model} ({why}); leave it unset")


def refuse_revise(request: EditRequest, model: str, why: str) -> None:
    """UsageError, one line, when a span asks to revise its own text on a loop that never replaces
    a token it holds (`why` says what the loop is)."""
    span = next((s for s in request.spans if s.revise), None)
    if span is not None:
        raise UsageError(f"span {span.name}: revise needs a model that edits its own tokens (LLaDA2.1's editing decode); "
                         f"{model} does not ({why})")


def refuse_prompt_form(request: EditRequest, model: str) -> None:
    """--prompt reaches block-causal models only: elsewhere the text around a span is in the canvas."""
    if request.editing.prompt != "auto":
        raise UsageError(f"--prompt has no effect on {model} (it sees the text around a span in its canvas); leave it unset")


def model_name(denoiser) -> str:
    spec = denoiser.spec
    return spec.name or spec.family


def plain_canvas(denoiser, request: EditRequest, spans: list[Span]) -> Canvas:
    """The canvas of a model that sees the whole text: a chat turn for an instruction
    (core/instruct.py), else the text with mask slots in place (core/canvas.py)."""
    tok, spec, context = denoiser.tokenizer, denoiser.spec, request.editing.context_tokens
    if uses_chat(spans):
        return build_instruct_canvas(request.text, spans, tok, spec, context, denoiser.max_len)
    return build_canvas(request.text, spans, tok, spec.mask_id, context, denoiser.max_len)
