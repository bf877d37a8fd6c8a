"""What an edit produced: the engine's result as plain data (core/engine.py makes it, a remote
backend rebuilds it from a server's answer).

A module of its own, importing no torch: a run against a server (app/remote.py) builds the same
result without loading any model code.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .changes import ChangeSet
from .spans import Span


@dataclass(frozen=True)
class SpanResult:
    span: Span  # as given (offsets into the original text)
    text: str  # the new text of the span, best sample
    tokens: int  # tokens generated (pad/eos removed)
    alternatives: tuple[str, ...]  # every sample's text, best first (alternatives[0] == text)
    # Loops that edit their own tokens (LLaDA2.1, core/loops/editing.py): the first sample's
    # mask-to-token commits and token-to-token edits in this span; None for the other loops.
    commits: int | None = None
    edits: int | None = None


@dataclass(frozen=True)
class EditResult:
    text: str  # the whole new text (best sample)
    spans: tuple[SpanResult, ...]
    steps: int  # denoising steps run (forward passes after the start)
    seconds: float
    samples: tuple[str, ...] = field(default=())  # whole text per sample, best first
    candidates: tuple = field(default=())  # with a CandidatePlan: the ranked core.candidates.Candidate list
    best_row: int = 0  # the batch row the result came from (final_ids[best_row] on the done frame)
    # Tokens the model read besides the slots (the context that fit, a prompt's or chat's own
    # tokens): what a server reports as the request's prompt tokens.
    prompt_tokens: int = 0
    # Some text around the spans did not fit the canvas (Canvas.cut): a server's truncated prompt.
    context_cut: bool = False
    # The settings the loop actually ran with (steps, block size, thresholds: the model's Kind says
    # which; core/loops/kind.py), for --json.
    settings: dict = field(default_factory=dict)
    # Of prompt_tokens, those the run took from the model's prefix cache instead of computing them
    # (core/prefix_cache.py: block-causal models, whole blocks an earlier run prefilled).
    cached_tokens: int = 0

    @property
    def tokens(self) -> int:
        return sum(s.tokens for s in self.spans)

    def changes(self, choice: int = 0) -> ChangeSet:
        """The edit itself, as a value every front end applies: each span's range becomes the
        text of alternative `choice` (0: the best). `changes().apply(original) == text`."""
        return ChangeSet.of((r.span.start, r.span.end, r.alternatives[choice] if r.alternatives else r.text) for r in self.spans)
