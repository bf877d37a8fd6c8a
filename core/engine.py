"""The engine's front door: text + spans in, frames out, the new text at the end.

    for frame in run_edit(denoiser, text, spans, settings):
        ...draw frame...
    result = frame.result   # on the done frame

Everything here is pure data in and out; the denoiser is the only state.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Iterator

from .canvas import build_canvas, span_text
from .denoiser import Denoiser
from .errors import Cancelled, UsageError
from .files import match_newlines, newline_style
from .instruct import build_instruct_canvas, uses_chat
from .sampler import Frame, SamplerSettings, denoise
from .spans import Span, splice, validate_spans

if TYPE_CHECKING:
    from .candidates import CandidatePlan

DEFAULT_CONTEXT_TOKENS = 1024  # fixed text around the spans the model sees (half before, half after)


@dataclass(frozen=True)
class SpanResult:
    span: Span  # as given (offsets into the original text)
    text: str  # the new text of the span, best sample
    tokens: int  # tokens generated (pad/eos removed)
    alternatives: tuple[str, ...]  # every sample's text, best first (alternatives[0] == text)


@dataclass(frozen=True)
class EditResult:
    text: str  # the whole new text (best sample)
    spans: tuple[SpanResult, ...]
    steps: int  # denoising steps run (forward passes after the start)
    seconds: float
    samples: tuple[str, ...] = field(default=())  # whole text per sample, best first
    candidates: tuple = field(default=())  # with a CandidatePlan: the ranked core.candidates.Candidate list
    best_row: int = 0  # the batch row the result came from (final_ids[best_row] on the done frame)

    @property
    def tokens(self) -> int:
        return sum(s.tokens for s in self.spans)


@dataclass(frozen=True)
class EditFrame:
    """A sampler frame plus, on the last one, the finished result."""

    frame: Frame
    result: EditResult | None = None

    @property
    def done(self) -> bool:
        return self.frame.done


def check_instructions(denoiser: Denoiser, spans: list[Span]) -> None:
    if any(s.instruction for s in spans) and not denoiser.spec.chat_template:
        raise UsageError("an instruction needs an instruct checkpoint with a chat template; this model has none")


LENGTHS = ("fixed", "adaptive")  # fixed: the span's slot budget; adaptive: grow while the span fills up (length.py)


def run_edit(
    denoiser: Denoiser,
    text: str,
    spans: list[Span],
    settings: SamplerSettings = SamplerSettings(),
    context_tokens: int = DEFAULT_CONTEXT_TOKENS,
    should_stop: Callable[[], bool] = lambda: False,
    candidates: CandidatePlan | None = None,
    length: str = "fixed",
) -> Iterator[EditFrame]:
    """Denoise all spans of `text` together in one canvas; the last EditFrame carries the result.

    `candidates` (core/candidates.py): several lengths per infill span as rows of the same
    batch, ranked by parse validity, then confidence. `length="adaptive"` (core/length.py)
    re-runs with a longer canvas while a span fills up; its frames restart at step 0 per round.
    """
    if length not in LENGTHS:
        raise UsageError(f"unknown length policy {length!r}; known: {', '.join(LENGTHS)}")
    ordered = validate_spans(text, spans)
    check_instructions(denoiser, ordered)
    if length == "adaptive":
        from .length import adaptive_edit

        yield from adaptive_edit(denoiser, text, ordered, settings, context_tokens, should_stop, candidates)
        return
    yield from run_once(denoiser, text, ordered, settings, context_tokens, should_stop, candidates)


def run_once(denoiser: Denoiser, text: str, ordered: list[Span], settings: SamplerSettings, context_tokens: int,
             should_stop: Callable[[], bool], candidates: CandidatePlan | None = None) -> Iterator[EditFrame]:
    """One denoising run over validated, sorted spans (run_edit's body, reused by length.py)."""
    tok, spec = denoiser.tokenizer, denoiser.spec
    pad = spec.pad_id if spec.pad_id is not None else spec.eos_id
    row_lengths = None
    if uses_chat(ordered):  # an instruction: the canvas is a chat turn (instruct.py)
        canvas = build_instruct_canvas(text, ordered, tok, spec, context_tokens, denoiser.max_len)
    elif candidates is not None and pad is not None:
        from . import candidates as C

        wide, row_lengths = C.plan_canvas_spans(ordered, C.selected_tokens(text, ordered, tok), candidates)
        canvas = build_canvas(text, wide, tok, spec.mask_id, context_tokens, denoiser.max_len)
        canvas = C.candidate_rows(canvas, row_lengths, pad)
        if candidates.exact:
            denoiser = C.ExactRows(denoiser, canvas, settings.samples)
    else:
        canvas = build_canvas(text, ordered, tok, spec.mask_id, context_tokens, denoiser.max_len)
    started = time.perf_counter()
    for frame in denoise(denoiser, canvas, settings, should_stop):
        if not frame.done:
            yield EditFrame(frame)
            continue
        drop = (*spec.end_ids, spec.mask_id)
        newline = newline_style(text)
        per_sample = [[match_newlines(span_text(list(ids), tok, drop), newline) for ids in sample] for sample in frame.final_ids]
        seconds = time.perf_counter() - started
        if row_lengths is not None:
            result = _ranked_result(text, ordered, frame, per_sample, row_lengths, settings.samples, drop, candidates, tok, seconds)
            yield EditFrame(frame, result)
            continue
        scores = [_sample_score(frame, b) for b in range(len(per_sample))]
        ranking = sorted(range(len(per_sample)), key=lambda b: -scores[b]) if len(per_sample) > 1 else [0]
        texts = [splice(text, [(s.start, s.end, t) for s, t in zip(ordered, per_sample[b])]) for b in ranking]
        best = ranking[0]
        span_results = tuple(
            SpanResult(
                span=span,
                text=per_sample[best][i],
                tokens=sum(1 for t in frame.final_ids[best][i] if t not in drop),
                alternatives=tuple(per_sample[b][i] for b in ranking),
            )
            for i, span in enumerate(ordered)
        )
        result = EditResult(texts[0], span_results, frame.step, seconds, tuple(texts), best_row=best)
        yield EditFrame(frame, result)


def _ranked_result(text, ordered, frame, per_sample, row_lengths, samples, drop, plan, tokenizer, seconds) -> EditResult:
    """Candidates scored (parse, then confidence) and ranked: best first, the rest alternatives."""
    from .candidates import rank, score_rows

    ranked = rank(score_rows(text, ordered, frame, row_lengths, samples, per_sample, drop, plan, tokenizer))
    best = ranked[0]
    b = best.batch
    span_results = tuple(
        SpanResult(
            span=span,
            text=best.texts[i],
            tokens=sum(1 for t in frame.final_ids[b][i] if t not in drop),
            alternatives=tuple(c.texts[i] for c in ranked),
        )
        for i, span in enumerate(ordered)
    )
    return EditResult(best.text, span_results, frame.step, seconds, tuple(c.text for c in ranked), tuple(ranked), b)


def _sample_score(frame: Frame, sample: int) -> float:
    # Alternatives are ranked by the sampler's own confidence; syntax-aware scoring plugs in here later.
    return frame.sample_scores[sample] if frame.sample_scores else 0.0


def apply_edit(denoiser: Denoiser, text: str, spans: list[Span], settings: SamplerSettings = SamplerSettings(), **kwargs) -> EditResult:
    """Run an edit to the end and return its result (no frames)."""
    last = None
    for last in run_edit(denoiser, text, spans, settings, **kwargs):
        pass
    if last is None or last.result is None:
        raise Cancelled("the edit was cancelled")
    return last.result
