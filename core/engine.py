"""The engine's front door: an edit request in, frames out, the new text at the end.

    for update in run_request(denoiser, EditRequest(text, spans, sampling, editing)):
        ...draw update.frame...
    result = update.result   # on the done frame

The request (core/request.py) arrives whole, its spans validated once when it was built. The
engine knows no loop kind by name: the model's Kind (core/loops/kinds.py) resolves the settings,
builds the canvases and runs the loop; the engine turns the done frame into text (dropping what
a model may not write into a file), ranks samples and candidates, and runs the adaptive-length
rounds. `run_edit` is the same with the request spelled as arguments (tests and benchmarks).
Everything here is pure data in and out; the denoiser is the only state.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace
from typing import Callable, Iterator

from .candidates import CandidatePlan, plan_for_count, rank, score_rows, selected_tokens
from .canvas import span_text
from .changes import ChangeSet
from .models.denoiser import DenoiserLike
from .errors import Cancelled, ModelError, UsageError
from .instruct import instruction_refusal
from .length import AdaptiveLength, filled_up, next_budgets, start_budget
from .newlines import drop_undecodable, match_newlines, newline_style
from .result import EditResult, SpanResult  # noqa: F401 (the engine's result types: imported from here too)
from .loops import Frame, LoopRules, kind_of
from .loops.guidance import refuse_unguided
from .request import EditRequest
from .settings import LENGTHS, Editing, Sampling
from .spans import Span

log = logging.getLogger(__name__)

DEFAULT_CONTEXT_TOKENS = Editing().context_tokens  # fixed text around the spans the model sees (half before, half after)


@dataclass(frozen=True)
class EditFrame:
    """A sampler frame plus, on the last one, the finished result."""

    frame: Frame
    result: EditResult | None = None

    @property
    def done(self) -> bool:
        return self.frame.done


def check_instructions(denoiser: DenoiserLike, spans) -> None:
    if any(s.instruction for s in spans) and not denoiser.spec.takes_instructions:
        raise UsageError(instruction_refusal(denoiser.spec))


def candidate_plan(editing: Editing, path: str | None = None) -> CandidatePlan | None:
    """The CandidatePlan an Editing request asks for (`path` names the language candidates parse); None: off."""
    return plan_for_count(editing.candidates, path=path) if editing.candidates > 1 else None


def run_request(denoiser: DenoiserLike, request: EditRequest, should_stop: Callable[[], bool] = lambda: False,
                rules: LoopRules = LoopRules(), plan: CandidatePlan | None = None) -> Iterator[EditFrame]:
    """Denoise all spans of the request together; the last EditFrame carries the result.

    Candidates (core/candidates.py, `request.editing.candidates` or an explicit `plan`): several
    lengths per infill span as rows of the same batch, ranked by parse validity, then confidence.
    `length="adaptive"` (core/length.py) re-runs with a longer canvas while a span fills up; its
    frames restart at step 0 per round. `rules` are the loop's own (core/loops/masked.py), for
    the benchmarks and tests that measure them; no setting reaches them.
    """
    kind = kind_of(denoiser)
    ordered = list(request.spans)  # sorted and validated when the request was built
    check_instructions(denoiser, ordered)
    refuse_unguided(denoiser.spec, request.sampling)  # --cfg-scale: LLaDA's reference only, for every loop kind
    settings = kind.settings(denoiser, request)  # what this kind reads, resolved; anything else set is refused
    plan = plan if plan is not None else candidate_plan(request.editing, request.path)
    text = request.text
    blanks = [leading_blank(text, s, ordered[i - 1].end if i else 0) for i, s in enumerate(ordered)]
    if request.editing.length == "adaptive":
        updates = _adaptive_runs(denoiser, kind, request, settings, should_stop, plan, rules)
    else:
        updates = _run_round(denoiser, kind, request, ordered, settings, should_stop, plan, rules)
    for update in updates:
        if update.result is not None and any(blanks):
            update = EditFrame(update.frame, narrowed(update.result, text, ordered, blanks))
        yield update


def run_edit(
    denoiser: DenoiserLike,
    text: str,
    spans: list[Span],
    settings: Sampling = Sampling(),
    context_tokens: int = DEFAULT_CONTEXT_TOKENS,
    should_stop: Callable[[], bool] = lambda: False,
    candidates: CandidatePlan | None = None,
    length: str = "fixed",
    rules: LoopRules = LoopRules(),
    prompt: str = "auto",
) -> Iterator[EditFrame]:
    """run_request with the request spelled as arguments (`candidates`: an explicit CandidatePlan)."""
    if length not in LENGTHS:
        raise UsageError(f"unknown length policy {length!r}; known: {', '.join(LENGTHS)}")
    request = EditRequest(text, tuple(spans), settings, Editing(context_tokens=context_tokens, length=length, prompt=prompt))
    yield from run_request(denoiser, request, should_stop, rules, candidates)


def leading_blank(text: str, span: Span, floor: int) -> int:
    """How many spaces and tabs stand right before `span` (on its line, after `floor`).

    BPE tokenizers glue a space to the word after it (" return"), so a model writing after a
    prefix that ends in blanks writes a blank of its own again: `     return` with five spaces,
    `if  x`. When the prefix ends in blanks, the span's text starts at its first non-blank
    character (`narrowed`); the blanks before the span stay exactly as they were.
    """
    n = 0
    while span.start - n > floor and text[span.start - n - 1] in " \t":
        n += 1
    return n


def narrowed(result: EditResult, text: str, ordered: list[Span], blanks: list[int]) -> EditResult:
    """The result with each span's leading blanks dropped where the text before it ends in blanks
    (leading_blank), its whole texts and candidates rebuilt over the spans as given."""
    def own(piece: str, n: int) -> str:
        return piece.lstrip(" \t") if n else piece

    spans = tuple(replace(r, span=s, text=own(r.text, n), alternatives=tuple(own(a, n) for a in r.alternatives))
                  for r, s, n in zip(result.spans, ordered, blanks))
    samples = tuple(ChangeSet.of((r.span.start, r.span.end, r.alternatives[k] if r.alternatives else r.text) for r in spans).apply(text)
                    for k in range(max(1, len(result.samples))))
    candidates = []
    for c in result.candidates:
        texts = tuple(own(t, n) for t, n in zip(c.texts, blanks))
        candidates.append(replace(c, texts=texts, text=ChangeSet.of((s.start, s.end, t) for s, t in zip(ordered, texts)).apply(text)))
    return replace(result, spans=spans, text=samples[0], samples=samples, candidates=tuple(candidates))


def _run_round(denoiser, kind, request: EditRequest, ordered: list[Span], settings: Sampling,
               should_stop: Callable[[], bool], plan: CandidatePlan | None = None,
               rules: LoopRules = LoopRules()) -> Iterator[EditFrame]:
    """One denoising run over `ordered` (the request's spans, or a round's budgets of them)."""
    tok, spec, text = denoiser.tokenizer, denoiser.spec, request.text
    prepared = kind.prepare(denoiser, request, ordered, settings, plan)  # the canvases of the model's kind
    frames = kind.frames(prepared, should_stop, rules)
    row_lengths = prepared.row_lengths
    canvases = prepared.canvases
    read = sum(len(c.ids) - sum(len(r) for r in c.slots) for c in canvases)
    cut = any(c.cut for c in canvases)
    started = time.perf_counter()
    for frame in frames:
        if not frame.done:
            yield EditFrame(frame)
            continue
        _check_finite_run(frame)
        used = kind.used(prepared, frame)
        # Text a model writes into a file never holds its special tokens or control bytes (a NUL makes a
        # source file "binary"): the masked loops never propose them, a random-token loop (DiffusionGemma,
        # which samples as its reference does) can, so they are dropped here as well.
        banned = getattr(denoiser, "banned_ids", None)
        drop = frozenset((*spec.end_ids, spec.mask_id, *(banned.tolist() if banned is not None else ())))
        newline = newline_style(text)
        per_sample = [[drop_undecodable(match_newlines(span_text(list(ids), tok, drop), newline), text) for ids in sample]
                      for sample in frame.final_ids]
        seconds = time.perf_counter() - started
        if row_lengths is not None:
            result = _ranked_result(text, ordered, frame, per_sample, row_lengths, settings.samples, drop, plan, tok, seconds)
            yield EditFrame(frame, replace(result, prompt_tokens=read, context_cut=cut, settings=used))
            continue
        scores = [_sample_score(frame, b) for b in range(len(per_sample))]
        ranking = sorted(range(len(per_sample)), key=lambda b: -scores[b]) if len(per_sample) > 1 else [0]
        texts = [ChangeSet.of((s.start, s.end, t) for s, t in zip(ordered, per_sample[b])).apply(text) for b in ranking]
        best = ranking[0]
        span_results = tuple(
            SpanResult(
                span=span,
                text=per_sample[best][i],
                tokens=sum(1 for t in frame.final_ids[best][i] if t not in drop),
                alternatives=tuple(per_sample[b][i] for b in ranking),
                commits=frame.edit_counts[i][0] if frame.edit_counts else None,
                edits=frame.edit_counts[i][1] if frame.edit_counts else None,
            )
            for i, span in enumerate(ordered)
        )
        result = EditResult(texts[0], span_results, frame.step, seconds, tuple(texts), best_row=best, prompt_tokens=read,
                            context_cut=cut, settings=used)
        yield EditFrame(frame, result)


def _check_finite_run(frame: Frame) -> None:
    """ModelError when a commit's probability is NaN: the logits went non-finite after the first
    pass (only that one is checked on the device, each later check would be a host read per step;
    a float16 overflow deep in a long run, say). Its tokens are argmax over NaN, so nothing is written.
    Read from the done frame's confidences, already on the host."""
    if frame.final_confidence is not None and any(p != p for sample in frame.final_confidence for span in sample for p in span):
        raise ModelError("the model's logits turned non-finite (NaN or infinity) during the run: its weights overflow in "
                         "this dtype or are broken; nothing was written")


def _adaptive_runs(denoiser, kind, request: EditRequest, settings: Sampling, should_stop: Callable[[], bool],
                   candidates: CandidatePlan | None = None, rules: LoopRules = LoopRules(),
                   policy: AdaptiveLength = AdaptiveLength()) -> Iterator[EditFrame]:
    """Rounds of _run_round with growing budgets (core/length.py's policy); only the last round's done frame is yielded.

    With a CandidatePlan the best candidate's length is the one judged and grown from, and
    the next round's ladder is centred on it. With exact rows (CandidatePlan.exact) no row
    can end early, so a span grows when its longest rung won.
    """
    text, ordered = request.text, list(request.spans)
    end_ids = denoiser.spec.end_ids
    selected = selected_tokens(text, ordered, denoiser.tokenizer, denoiser.max_len)
    budgets = [start_budget(s, n, policy) for s, n in zip(ordered, selected)]
    room = kind.slot_room(denoiser)
    caps = [min(s.max_tokens or policy.max_tokens, room) for s in ordered]
    steps, seconds = 0, 0.0
    for round_ in range(policy.rounds):
        spans = [s if b is None else replace(s, max_tokens=b) for s, b in zip(ordered, budgets)]
        done = None
        for update in _run_round(denoiser, kind, request, spans, settings, should_stop, candidates, rules):
            if update.done:
                done = update
            else:
                yield update
        if done is None:  # cancelled
            return
        frame, result = done.frame, done.result
        steps, seconds = steps + result.steps, seconds + result.seconds
        b = result.best_row
        used = list(result.candidates[0].lengths) if result.candidates else budgets
        used = [None if budget is None else n for budget, n in zip(budgets, used)]  # rewrites never grow
        if candidates is not None and candidates.exact and result.candidates:
            # Exact rows cannot end early, so "filled up" means: the longest rung won.
            top = [max(c.lengths[i] for c in result.candidates) for i in range(len(ordered))]
            filled = [n is not None and n == t for n, t in zip(used, top)]
        else:
            filled = [n is not None and filled_up(frame.final_ids[b][i], frame.final_confidence[b][i], n, end_ids, policy)
                      for i, n in enumerate(used)]
        grown = next_budgets(budgets, used, filled, caps, policy.grow)
        log.debug("adaptive round %d: budgets %s used %s filled %s -> %s", round_, budgets, used, filled, grown)
        if grown == budgets or round_ == policy.rounds - 1:
            break
        budgets = grown
    spans_back = tuple(replace(r, span=s) for r, s in zip(result.spans, ordered))  # offsets as the caller gave them
    yield EditFrame(frame, replace(result, spans=spans_back, steps=steps, seconds=seconds))


def _ranked_result(text, ordered, frame, per_sample, row_lengths, samples, drop, plan, tokenizer, seconds) -> EditResult:
    """Candidates scored (parse, then confidence) and ranked: best first, the rest alternatives."""
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


def apply_edit(denoiser: DenoiserLike, text: str, spans: list[Span], settings: Sampling = Sampling(), **kwargs) -> EditResult:
    """Run an edit to the end and return its result (no frames)."""
    last = None
    for last in run_edit(denoiser, text, spans, settings, **kwargs):
        pass
    if last is None or last.result is None:
        raise Cancelled("the edit was cancelled")
    return last.result
