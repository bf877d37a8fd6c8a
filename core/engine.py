"""The engine's front door: text + spans in, frames out, the new text at the end.

    for frame in run_edit(denoiser, text, spans, settings):
        ...draw frame...
    result = frame.result   # on the done frame

Everything here is pure data in and out; the denoiser is the only state.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace
from typing import Callable, Iterator

from .candidates import CandidatePlan, ExactRows, candidate_rows, plan_canvas_spans, plan_for_count, rank, score_rows, selected_tokens
from .canvas import build_canvas, span_text
from .changes import ChangeSet
from .models.denoiser import DenoiserLike
from .errors import Cancelled, ModelError, UsageError
from .instruct import build_instruct_canvas, instruction_refusal, uses_chat
from .length import AdaptiveLength, filled_up, next_budgets, start_budget
from .newlines import drop_undecodable, match_newlines, newline_style
from .prompted import prompt_canvas, prompt_form
from .result import EditResult, SpanResult  # noqa: F401 (the engine's result types: imported from here too)
from .loops import Frame, LoopRules, run_loop, slot_room
from .loops.masked import refuse_unguided
from .settings import LENGTHS, Editing, Sampling
from .spans import Span, validate_spans

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


def check_instructions(denoiser: DenoiserLike, spans: list[Span]) -> None:
    if any(s.instruction for s in spans) and not denoiser.spec.takes_instructions:
        raise UsageError(instruction_refusal(denoiser.spec))


def edit_options(editing: Editing, path: str | None = None) -> dict:
    """run_edit's keyword arguments for an Editing request (`path` names the language candidates parse)."""
    options: dict = {"context_tokens": editing.context_tokens, "length": editing.length, "prompt": editing.prompt}
    if editing.candidates > 1:
        options["candidates"] = plan_for_count(editing.candidates, path=path)
    return options


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
    """Denoise all spans of `text` together in one canvas; the last EditFrame carries the result.

    `candidates` (core/candidates.py): several lengths per infill span as rows of the same
    batch, ranked by parse validity, then confidence. `length="adaptive"` (core/length.py)
    re-runs with a longer canvas while a span fills up (the policy is core/length.py); its
    frames restart at step 0 per round. `rules` are the loop's own (core/loops/masked.py), for
    the benchmarks and tests that measure them; no setting reaches them. `prompt` (Editing.prompt):
    how an edit reaches a block-causal model (core/prompted.py); other kinds ignore it.
    """
    if length not in LENGTHS:
        raise UsageError(f"unknown length policy {length!r}; known: {', '.join(LENGTHS)}")
    ordered = validate_spans(text, spans)
    check_instructions(denoiser, ordered)
    blanks = [leading_blank(text, s, ordered[i - 1].end if i else 0) for i, s in enumerate(ordered)]
    if length == "adaptive":
        updates = _adaptive_runs(denoiser, text, ordered, settings, context_tokens, should_stop, candidates, rules, prompt=prompt)
    else:
        updates = run_once(denoiser, text, ordered, settings, context_tokens, should_stop, candidates, rules, prompt)
    for update in updates:
        if update.result is not None and any(blanks):
            update = EditFrame(update.frame, narrowed(update.result, text, ordered, blanks))
        yield update


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


def run_once(denoiser: DenoiserLike, text: str, ordered: list[Span], settings: Sampling, context_tokens: int,
             should_stop: Callable[[], bool], candidates: CandidatePlan | None = None,
             rules: LoopRules = LoopRules(), prompt: str = "auto") -> Iterator[EditFrame]:
    """One denoising run over validated, sorted spans (run_edit's body; a round of the adaptive loop)."""
    tok, spec = denoiser.tokenizer, denoiser.spec
    refuse_unguided(spec, settings)  # --cfg-scale: LLaDA's reference only, for every loop kind
    pad = spec.pad_id if spec.pad_id is not None else spec.eos_id
    row_lengths = None
    if spec.loop == "random-token" and candidates is not None:
        raise UsageError("--candidates needs a masked-diffusion model; this one starts from random tokens (use --samples for alternatives)")
    if spec.loop == "block-causal":  # it cannot see text after its block: one prompt per span (prompted.py)
        if candidates is not None:
            raise UsageError("--candidates needs a masked-diffusion model; this one writes block by block (use --samples for alternatives)")
        form = prompt_form(spec, prompt)
        if form == "fim" and uses_chat(ordered):
            raise UsageError("an instruction needs --prompt chat; fill-in-the-middle tokens have no place for it")
        canvas = tuple(prompt_canvas(text, s, tok, spec, form, context_tokens, denoiser.max_len, settings.seed) for s in ordered)
    elif uses_chat(ordered):  # an instruction: the canvas is a chat turn (instruct.py)
        canvas = build_instruct_canvas(text, ordered, tok, spec, context_tokens, denoiser.max_len)
    elif candidates is not None and pad is not None:
        wide, row_lengths = plan_canvas_spans(ordered, selected_tokens(text, ordered, tok, denoiser.max_len), candidates)
        canvas = build_canvas(text, wide, tok, spec.mask_id, context_tokens, denoiser.max_len)
        canvas = candidate_rows(canvas, row_lengths, pad)
        if candidates.exact:
            denoiser = ExactRows(denoiser, canvas, settings.samples)
    else:
        canvas = build_canvas(text, ordered, tok, spec.mask_id, context_tokens, denoiser.max_len)
    frames = run_loop(denoiser, canvas, settings, should_stop, rules)  # the loop of the model's kind (core/loops/)
    canvases = canvas if isinstance(canvas, tuple) else (canvas,)
    read = sum(len(c.ids) - sum(len(r) for r in c.slots) for c in canvases)
    cut = any(c.cut for c in canvases)
    started = time.perf_counter()
    for frame in frames:
        if not frame.done:
            yield EditFrame(frame)
            continue
        _check_finite_run(frame)
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
            result = _ranked_result(text, ordered, frame, per_sample, row_lengths, settings.samples, drop, candidates, tok, seconds)
            yield EditFrame(frame, replace(result, prompt_tokens=read, context_cut=cut))
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
        result = EditResult(texts[0], span_results, frame.step, seconds, tuple(texts), best_row=best, prompt_tokens=read, context_cut=cut)
        yield EditFrame(frame, result)


def _check_finite_run(frame: Frame) -> None:
    """ModelError when a commit's probability is NaN: the logits went non-finite after the first
    pass (only that one is checked on the device, each later check would be a host read per step;
    a float16 overflow deep in a long run, say). Its tokens are argmax over NaN, so nothing is written.
    Read from the done frame's confidences, already on the host."""
    if frame.final_confidence is not None and any(p != p for sample in frame.final_confidence for span in sample for p in span):
        raise ModelError("the model's logits turned non-finite (NaN or infinity) during the run: its weights overflow in "
                         "this dtype or are broken; nothing was written")


def _adaptive_runs(denoiser, text: str, ordered: list[Span], settings: Sampling, context_tokens: int,
                   should_stop: Callable[[], bool], candidates=None, rules: LoopRules = LoopRules(),
                   policy: AdaptiveLength = AdaptiveLength(), prompt: str = "auto") -> Iterator[EditFrame]:
    """Rounds of run_once with growing budgets (core/length.py's policy); only the last round's done frame is yielded.

    With a CandidatePlan the best candidate's length is the one judged and grown from, and
    the next round's ladder is centred on it. With exact rows (CandidatePlan.exact) no row
    can end early, so a span grows when its longest rung won.
    """
    end_ids = denoiser.spec.end_ids
    selected = selected_tokens(text, ordered, denoiser.tokenizer, denoiser.max_len)
    budgets = [start_budget(s, n, policy) for s, n in zip(ordered, selected)]
    room = slot_room(denoiser)
    caps = [min(s.max_tokens or policy.max_tokens, room) for s in ordered]
    steps, seconds = 0, 0.0
    for round_ in range(policy.rounds):
        spans = [s if b is None else replace(s, max_tokens=b) for s, b in zip(ordered, budgets)]
        done = None
        for update in run_once(denoiser, text, spans, settings, context_tokens, should_stop, candidates, rules, prompt):
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
