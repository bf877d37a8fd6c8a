"""The masked-diffusion loop (kind "masked"), as an iterator of Frames.

A canvas holds mask slots; each step runs the denoiser once over the batch, proposes a
token for every masked slot of the current block, ranks the proposals by the policy and
commits the best of them (an even quota per step, plus, with the threshold schedule,
every proposal the model is sure enough of). A Frame is yielded after every step, so the
editor draws the text sharpening without copying the loop; a cancel callback is checked
between steps.

Speed (Fast-dLLM's two ideas): with `cache="prefix"` or `"dual"`, the first step runs the
whole canvas and keeps every layer's keys and values; later steps of a block recompute only
the block (dual) or the block and what follows it (prefix) against that cache. At a new
block, `refresh="canvas"` runs the whole canvas again (Fast-dLLM; released checkpoints'
default); `refresh="block"` (the embedded model's) recomputes only the finished block, whose
keys and values went stale when its masks became tokens, together with the new one; there the
infill's length pass (LoopRules.expected_length) is the whole-canvas pass that fills the cache,
and the first block recomputes the slots it padded with itself. Only the block's rows are
projected to the vocabulary.

Host reads ("is anything left to fill in this block?"; on a GPU each read stalls the launch
queue until the device catches up). On a CPU, where a read costs nothing, the loop asks before
every step. On CUDA (LoopRules.reads "planned") it asks once per block, at its start, and not
at all inside a fixed-schedule block, whose quota fills it by its last step (a pad that ends a
span early leaves the block's remaining steps with nothing to do); the threshold schedule may
fill a block early, so it asks after every step, one step late: the flag is copied to pinned
memory behind the step and read after the next step is queued, so the queue never drains (a
finished block costs one idle step). Frames keep device tensors
and turn into Python lists only when a consumer reads them. Random draws are hashes of
(seed, step, row, token) (kernels/reference.py counter_uniform): no generator state, so the
same seed gives the same result on every path and a captured graph may hold the draw.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Callable, Iterator

import torch

from ...kernels import step as kernels
from ...kernels.reference import row_keys, seed_key
from ..canvas import Canvas
from ..constraints.steering import Steering
from ..models.denoiser import DenoiserLike
from ..errors import UsageError
from ..settings import CPU_BLOCK_SIZE, MASKED_THRESHOLD, Sampling, default_block_size
from .frame import Frame, slot_states
from .guidance import Guided, refuse_unguided
from .spans import index_in, pad_after_end, pad_past_expected_length, renoise_rewrites

REWRITE_ORDERS = ("confidence", "random")
READS = ("auto", "every-step", "planned")


@dataclass(frozen=True)
class LoopRules:
    """How the loop itself behaves, beyond what a user can set (core/settings.py's Sampling).

    The defaults are the product; the other values exist for the benchmarks and tests that
    measure what each rule buys (bench/speed.py runs LLaDA's plain loop with
    expected_length=False). Not settings: no flag or config key reaches them.
    """

    remask_below: float | None = None  # error correction: re-mask committed tokens whose probability falls below this
    rewrite_order: str = "confidence"  # which tokens a rewrite re-noises first: least confident, or random
    pad_ends_span: bool = True  # infill: a committed pad/eos ends the span, masked slots after it become pad
    defer_end: bool = True  # commit content before pad/eos proposals; pads commit once only pads are proposed
    expected_length: bool = True  # infill: first pad the slots past the model's expected span length (see _expected_lengths)
    reads: str = "auto"  # "block finished?" reads: before every step, or planned (see the module's notes); auto: planned on CUDA

    def __post_init__(self) -> None:
        if self.rewrite_order not in REWRITE_ORDERS:
            raise ValueError(f"unknown rewrite order {self.rewrite_order!r}; known: {', '.join(REWRITE_ORDERS)}")
        if self.reads not in READS:
            raise ValueError(f"unknown read policy {self.reads!r}; known: {', '.join(READS)}")


def _plan(spans: list[range], settings: Sampling, device, default_size: int = CPU_BLOCK_SIZE) -> list[tuple[torch.Tensor, int, list[int]]]:
    """Blocks of slot positions, left to right: (positions on `device`, step budget, positions on the host).

    Block k holds the k-th run of `block_size` slots of every span, so several marked regions
    sharpen side by side (parallel edits) while each is written left to right. A step budget
    adds up to exactly `steps` (at least one step per block, at most one per slot): each block
    gets one step, and the rest is shared in proportion to the slots beyond each block's first
    (cumulative rounding, so the shares sum to the whole).
    """
    spans = [r for r in spans if len(r)]
    n = sum(len(r) for r in spans)
    size = settings.block_size if settings.block_size is not None else default_size  # unset: per device (settings.py)
    size = size or max((len(r) for r in spans), default=1)
    longest = max((len(r) for r in spans), default=0)
    blocks = [[p for r in spans for p in r[k:k + size]] for k in range(0, longest, size)]
    budget = n if settings.steps is None else min(n, max(settings.steps, len(blocks)))
    extra, capacity = budget - len(blocks), n - len(blocks)
    plan, seen, bound = [], 0, 0
    for block in blocks:
        seen += len(block) - 1
        previous, bound = bound, (extra * seen // capacity if capacity else 0)
        plan.append((torch.tensor(block, dtype=torch.long, device=device), 1 + bound - previous, block))
    return plan


def denoise(
    denoiser: DenoiserLike,
    canvas: Canvas,
    settings: Sampling = Sampling(),
    should_stop: Callable[[], bool] = lambda: False,
    rules: LoopRules = LoopRules(),
) -> Iterator[Frame]:
    """Run the loop over `canvas`; yield a Frame per step; the last one has done=True.

    When `should_stop()` turns true between steps, the iterator ends without a done frame.
    """
    if settings.threshold is None:  # unset: the masked loop's own (the masked Kind resolves it before a run)
        settings = replace(settings, threshold=MASKED_THRESHOLD)
    device, mask_id = denoiser.device, denoiser.spec.mask_id
    try:
        impl = kernels.choose(settings.kernels, device)
    except ValueError as exc:  # e.g. triton asked for on a CPU
        raise UsageError(str(exc)) from None
    use_cache = settings.cache != "none" and denoiser.supports_cache
    banned = denoiser.banned_ids.to(device)
    generator = torch.Generator(device=device).manual_seed(settings.seed)  # once per run: the random rewrite order
    # Counter-based draws (no generator inside the steps): the run's key and a step counter on
    # the device, advanced in place, so no step bakes its number into a graph.
    draws = settings.temperature > 0.0 or settings.policy == "random"
    run_key = torch.tensor(seed_key(settings.seed), dtype=torch.long, device=device)
    step_key = torch.zeros((), dtype=torch.long, device=device)
    planned = rules.reads == "planned" or (rules.reads == "auto" and device.type == "cuda")
    # A compiled denoiser compiles the step's sampling math too (fused kernels, not one per op).
    choose = denoiser.compiled_sampler(_choose) if hasattr(denoiser, "compiled_sampler") else _choose
    if canvas.rows:  # candidates: each row its own start, each sampled `samples` times
        x = torch.tensor(canvas.rows, device=device).repeat_interleave(settings.samples, dim=0)  # [B, T]
    else:
        x = torch.tensor(canvas.ids, device=device).repeat(settings.samples, 1)  # [B, T]
    B = x.shape[0]
    T = x.shape[1]
    slot_positions = torch.tensor([p for r in canvas.slots for p in r], dtype=torch.long, device=device)  # [N]
    confidence = torch.zeros(B, T, device=device)  # probability at commit (or of the guess while masked)
    guesses = x.clone()  # [B, T]
    started = time.perf_counter()

    def frame(step: int, total: int, done: bool = False) -> Frame:
        final = scores = final_conf = None
        if done:
            final = tuple(tuple(tuple(x[b, r.start:r.stop].tolist()) for r in canvas.slots) for b in range(B))
            final_conf = tuple(tuple(tuple(confidence[b, r.start:r.stop].tolist()) for r in canvas.slots) for b in range(B))
            # Mean log-probability of what this run wrote (kept draft tokens and pre-filled pads excluded).
            logp = torch.where(denoised, confidence.clamp_min(1e-9).log(), torch.zeros_like(confidence))
            scores = tuple((logp.sum(1) / denoised.sum(1).clamp_min(1)).tolist())
        return Frame(step, total, time.perf_counter() - started, done, "masked", x[0].clone(), confidence[0].clone(),
                     guesses[0].clone(), slot_states(x[0], mask_id), canvas.slots, final, scores, final_conf)

    renoise_rewrites(denoiser, canvas, rules.rewrite_order, x, confidence, generator)
    # Constrained spans (core/constraints): checked before the first step (ConstraintError when no
    # text of the span's length can match), then every step's logits and commits go through it.
    steer = Steering.for_canvas(denoiser, canvas, B)
    if steer is not None:
        steer.prepare(x)
    denoised = x == mask_id  # [B, T] the positions this run fills
    refuse_unguided(denoiser.spec, settings)
    if settings.cfg_scale > 0:  # from here every pass is guided; the prompt is what is not masked now
        denoiser = Guided(denoiser, ~denoised, settings.cfg_scale)
    end_ids = torch.tensor(denoiser.spec.end_ids, dtype=torch.long, device=device)
    infill_slots = [r for span, r in zip(canvas.spans, canvas.slots) if span.mode == "infill" and len(r)]
    # An infill span's first slot holds content, as in training (no trained span is empty).
    span_openings = {r.start for r in infill_slots} if end_ids.numel() else set()
    cache = previous_host = first_logits = None
    if rules.expected_length and infill_slots and end_ids.numel():
        if use_cache and _refresh(denoiser, settings) == "block":
            # The length pass fills the cache: it is a whole-canvas pass, and with block refresh the
            # first block then recomputes only what the padding made stale (the infill slots) with
            # itself, as every later block recomputes the block before it, instead of a second
            # whole-canvas pass (about a fifth of an embedded-model infill's CPU time).
            cache = denoiser.new_cache(B, T)
            previous_host = [p for r in infill_slots for p in r]
        first_logits = pad_past_expected_length(denoiser, x, slot_positions, infill_slots, end_ids, mask_id, denoised, banned, cache, steer)
        if steer is not None:  # a trim the constraint cannot live with gives the span its slots back
            steer.prepare(x)
            denoised |= x == mask_id
    guesses = x.clone()
    if cache is not None:  # every slot's first guess, from the length pass (the padded ones keep their pad)
        _update_guesses(first_logits, x, slot_positions, guesses, confidence, mask_id)
    plan = _plan(list(canvas.slots), settings, device, default_block_size(device.type, _parameters(denoiser)))
    total = sum(steps for _, steps, _ in plan)
    yield frame(0, total)

    step = 0
    for block, block_steps, block_host in plan:
        if use_cache:  # what each step of this block recomputes, decided on the host once per block
            step_run, refresh_run = _runs(denoiser, settings, block_host, previous_host, T, device)
        opening_rows = [i for i, pos in enumerate(block_host) if pos in span_openings]
        opening_rows = torch.tensor(opening_rows, device=device)[:, None] if opening_rows else None  # [F, 1]
        final_step = 2 * block_steps - 1 if rules.remask_below else block_steps - 1
        generated = torch.zeros(B, len(block), dtype=torch.bool, device=device)  # committed here, so re-maskable
        # Steps left after each step of the block, on the device (a graph reads it as data): the
        # quota spreads what is masked over them; 1 from the block's budget on (its last step).
        steps_left = torch.arange(block_steps, block_steps - final_step - 1, -1, device=device).clamp_min(1)  # [final_step + 1]
        block_rows = (torch.arange(B, device=device)[:, None] * T + block).reshape(-1)  # [B*P] each row's place, for its draws
        with torch.inference_mode():
            if not bool((x[:, block] == mask_id).any()):  # at its start: already filled (pads)?
                continue
        # Inside the block, when planned: no reads with the fixed schedule; the threshold schedule
        # (and error correction, which re-masks) may finish early, so they ask after every step.
        asks = not planned or settings.schedule == "threshold" or rules.remask_below
        finished = _Finished(device, lag=1 if planned else 0) if asks else None
        for block_step in range(final_step + 1):
            if should_stop():
                return
            if finished is not None and finished.done():
                break
            # Inference mode for the step's bookkeeping too: on a CPU, where a step is some fifty
            # small ops, skipping autograd's dispatch keys is a measurable share of it.
            with torch.inference_mode():
                tokens = x[:, block]  # [B, P]
                active = tokens == mask_id  # [B, P]
                step_key += 1
                noise_keys = row_keys(run_key, step_key, block_rows) if draws else None  # [B*P]
                last = block_step == final_step
                if not use_cache:
                    logits = denoiser.logits(x, want=block)  # [B, P, V]
                elif block_step > 0:
                    logits = denoiser.logits(x, want=block, run=step_run, cache=cache)  # [B, P, V]
                elif refresh_run is not None:
                    # Cheap refresh (dKV-Cache's idea): the finished block's keys/values are the ones
                    # that went stale (mask -> tokens); recompute it with the new block, keep the rest.
                    logits = denoiser.logits(x, want=block, run=refresh_run, cache=cache)  # [B, P, V]
                else:
                    # Refresh: the whole canvas once, keys/values kept; every slot's guess updated.
                    cache = denoiser.new_cache(B, T)
                    all_logits = denoiser.logits(x, want=slot_positions, cache=cache)  # [B, N, V]
                    _update_guesses(all_logits, x, slot_positions, guesses, confidence, mask_id)
                    logits = all_logits[:, index_in(slot_positions, block)]  # [B, P, V]

                if steer is not None:  # constrained slots: only tokens that keep their span completable
                    logits = steer.constrain(logits, x, block_host)
                logits, proposal, p_token, commit = choose(logits, active, noise_keys, steps_left[block_step], banned, opening_rows,
                                                           end_ids, settings, rules, impl, denoiser.spec.tempered_scores)
                if steer is not None:  # commits that clash with each other: settled one at a time
                    proposal, p_token = steer.settle(x, block_host, proposal, commit, p_token, logits)

                if rules.remask_below and not last:
                    # Committed earlier, improbable under the fuller context now: back to mask.
                    p_now = logits.softmax(-1).gather(-1, tokens[..., None]).squeeze(-1)  # [B, P]
                    weak = generated & (p_now < rules.remask_below)
                    tokens = torch.where(weak, torch.full_like(tokens, mask_id), tokens)
                    generated &= ~weak
                tokens = torch.where(commit, proposal, tokens)
                generated |= commit
                still = tokens == mask_id
                x[:, block] = tokens
                guesses[:, block] = torch.where(still, proposal, tokens)
                block_conf = confidence[:, block]
                confidence[:, block] = torch.where(commit | (still & active), p_token, block_conf)
                if rules.pad_ends_span and end_ids.numel():
                    pad_after_end(x, infill_slots, end_ids, mask_id, denoised, guesses)
                if finished is not None:
                    finished.note(x[:, block] == mask_id)
            step += 1
            yield frame(step, total)
        previous_host = block_host
    yield frame(step, total, done=True)


def _parameters(denoiser) -> int:
    """The model's parameter count, where the denoiser has a torch model (0 otherwise)."""
    model = getattr(denoiser, "model", None)
    return sum(p.numel() for p in model.parameters()) if hasattr(model, "parameters") else 0


class _Finished:
    """Whether a block has no masks left, asked after every step of it (see the module's notes).

    With lag 0 the answer is read at once. Planned (lag 1), each step's flag is copied (on CUDA,
    to pinned host memory behind the step) and `done` reads the flag of the step before the last one queued:
    by then that copy has landed (its event has passed) while the last step still runs, so the
    queue never drains. The price is one step that finds nothing to do.
    """

    def __init__(self, device: torch.device, lag: int) -> None:
        self.lag = lag  # steps between a flag's step and its read: 0 at once, 1 planned
        self.pinned = lag > 0 and device.type == "cuda"
        self.flags: list[tuple[torch.Tensor, object]] = []  # per step: (masks left?, its copy's event)

    def note(self, masked: torch.Tensor) -> None:
        left = masked.any()  # on the device
        if not self.pinned:
            self.flags.append((left, None))
            return
        host = torch.empty((), dtype=torch.bool, pin_memory=True)
        host.copy_(left, non_blocking=True)
        event = torch.cuda.Event()
        event.record()
        self.flags.append((host, event))

    def done(self) -> bool:
        if len(self.flags) <= self.lag:
            return False
        left, event = self.flags.pop(0)
        if event is not None:
            event.synchronize()  # the copy behind an earlier step: passed long ago
        return not bool(left)


def _choose(logits, active, noise_keys, steps_left, banned, opening_rows, end_ids, settings: Sampling, rules: LoopRules,
            impl: str, tempered: bool):
    """A step's sampling math, from the block's logits [B, P, V] to (the filtered logits, the
    proposals, their probabilities, which of them commit), each [B, P] but the logits. Tensors
    and settings only, no host reads and no generator: what a compiled denoiser compiles."""
    B, V = active.shape[0], logits.shape[-1]
    logits = logits.index_fill(-1, banned, float("-inf"))  # never propose the mask, control bytes, stray specials
    if opening_rows is not None:  # never pad/eos in an infill's first slot: never an empty infill
        logits[:, opening_rows, end_ids] = float("-inf")
    proposal, p_token, ranking = kernels.propose_and_score(
        logits.reshape(-1, V), settings.temperature, settings.top_k, settings.top_p, settings.policy, None, impl,
        active.reshape(-1), tempered, noise_keys,
    )
    proposal, p_token, ranking = (t.view(B, -1) for t in (proposal, p_token, ranking))  # [B, P]
    return logits, proposal, p_token, _commits(proposal, p_token, ranking, active, steps_left, end_ids, settings, rules, impl)


def _commits(proposal, p_token, ranking, active, steps_left, end_ids, settings: Sampling, rules: LoopRules, impl):
    """Which proposals of a block commit this step: [B, P] bool.

    An even share of what is still masked (all of it on the block's last step), plus, with
    the threshold schedule, every proposal at least `threshold` sure (Fast-dLLM).
    """
    remaining = active.sum(1)  # [B]
    quota = (remaining + steps_left - 1) // steps_left  # [B]
    sure = (p_token >= settings.threshold) & active  # [B, P]
    if rules.defer_end and end_ids.numel():
        # Content before pad: a model sure of the pad at the far end would otherwise
        # close the span from the right before writing anything (the "EOS trap").
        is_end = torch.isin(proposal, end_ids) & active
        ranking = torch.where(is_end, ranking - 1e3, ranking)
        only_end = ~(active & ~is_end).any(1)  # [B] nothing but pad proposed: close it
        sure = sure & ~is_end
        quota = torch.where(only_end, remaining, quota)
    if settings.schedule == "threshold":
        quota = torch.maximum(quota, sure.sum(1))
    return kernels.select_commits(ranking, active, quota, impl)


def _refresh(denoiser, settings: Sampling) -> str:
    """How a new block refreshes the cache: the run's setting, else the model's own."""
    return settings.refresh or denoiser.spec.default_refresh


def _runs(denoiser, settings: Sampling, block: list[int], previous: list[int] | None, T: int, device):
    """(positions a block step recomputes, positions the block's first step recomputes when the
    cache is refreshed block-wise, else None), sorted, as device tensors.

    Built from host lists once per block, so no step reads a device tensor to find them (on a
    GPU such a read stalls the launch queue). Each run holds every row that scores the block
    (the block itself, or the positions before it for shifted families).
    """
    rows = sorted(set(block) | set(denoiser.source_positions(block)))
    if settings.cache == "dual":  # only the block; the rest of the canvas comes from the cache
        step = rows
        refresh = sorted(set(previous) | set(rows)) if previous else None
    else:  # prefix: the block and everything after it
        step = list(range(rows[0], T))
        refresh = list(range(min(previous[0], rows[0]), T)) if previous else None
    if _refresh(denoiser, settings) != "block":
        refresh = None  # the whole canvas is recomputed at each new block instead
    as_tensor = lambda positions: torch.tensor(positions, dtype=torch.long, device=device)  # noqa: E731
    return as_tensor(step), (as_tensor(refresh) if refresh is not None else None)


def _update_guesses(logits, x, positions, guesses, confidence, mask_id) -> None:
    """Refresh the preview of every still-masked slot from a full pass (in place)."""
    probs = logits.softmax(-1)  # [B, N, V]
    p, best = probs.max(-1)  # [B, N]
    masked = x[:, positions] == mask_id
    guesses[:, positions] = torch.where(masked, best, x[:, positions])
    confidence[:, positions] = torch.where(masked, p, confidence[:, positions])
