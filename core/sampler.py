"""The denoising loop, as an iterator of Frames.

A canvas holds mask slots; each step runs the denoiser once over the whole batch, proposes
a token for every masked slot of the current block, ranks the proposals by the policy and
commits the best of them (a fixed quota per step, or every one above a confidence
threshold). The loop yields a Frame after every step, so the editor can draw the text
sharpening without copying the loop; a cancel callback is checked between steps.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable, Iterator

import torch

from ..kernels import reference as K
from .canvas import Canvas
from .denoiser import Denoiser

SCHEDULES = ("fixed", "threshold")
REWRITE_ORDERS = ("confidence", "random")


@dataclass(frozen=True)
class SamplerSettings:
    steps: int | None = None  # upper bound on steps; None: up to one step per slot
    policy: str = "confidence"  # which proposals commit first: confidence | margin | entropy | random
    schedule: str = "threshold"  # fixed: an even quota per step; threshold: also every proposal above `threshold`
    threshold: float = 0.9  # Fast-dLLM's parallel-commit threshold
    block_size: int | None = None  # semi-autoregressive blocks of slots, left to right (None: one block)
    temperature: float = 0.0  # 0: greedy proposals; > 0: Gumbel-max sampling in float64
    top_k: int | None = None
    top_p: float | None = None
    seed: int = 0  # same seed, same canvas, same model: same result
    samples: int = 1  # alternatives denoised together as one batch
    remask_below: float | None = None  # error correction: re-mask committed tokens whose probability falls below this
    rewrite_order: str = "confidence"  # which tokens a rewrite re-noises first: least confident, or random

    def __post_init__(self) -> None:
        if self.policy not in K.POLICIES:
            raise ValueError(f"unknown policy {self.policy!r}; known: {', '.join(K.POLICIES)}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"unknown schedule {self.schedule!r}; known: {', '.join(SCHEDULES)}")
        if self.rewrite_order not in REWRITE_ORDERS:
            raise ValueError(f"unknown rewrite order {self.rewrite_order!r}; known: {', '.join(REWRITE_ORDERS)}")
        if self.steps is not None and self.steps < 1:
            raise ValueError("steps must be at least 1")
        if self.block_size is not None and self.block_size < 1:
            raise ValueError("block_size must be at least 1")
        if self.samples < 1:
            raise ValueError("samples must be at least 1")
        if not 0.0 < self.threshold <= 1.0:
            raise ValueError("threshold must be in (0, 1]")


@dataclass(frozen=True)
class SpanState:
    tokens: tuple[int | None, ...]  # committed ids, None where still masked
    confidence: tuple[float, ...]  # probability at commit, or of the current guess while masked
    guesses: tuple[int, ...]  # the model's current best token for every slot (the blurry preview)


@dataclass(frozen=True)
class Frame:
    step: int  # 0 is the starting canvas (for rewrites: the re-noised draft)
    total_steps: int  # planned steps; threshold commits may finish earlier
    spans: tuple[SpanState, ...]  # of the first sample
    masked: int  # slots still masked, first sample
    elapsed: float  # seconds since the loop started
    done: bool = False
    final_ids: tuple[tuple[tuple[int, ...], ...], ...] | None = None  # done only: [sample][span] slot ids
    sample_scores: tuple[float, ...] | None = None  # done only: mean log-probability of each sample's commits


def _plan_blocks(slot_positions: torch.Tensor, block_size: int | None) -> list[torch.Tensor]:
    if block_size is None or block_size >= len(slot_positions):
        return [slot_positions]
    return list(slot_positions.split(block_size))


def _steps_for(block_len: int, total_slots: int, steps: int | None) -> int:
    if steps is None:
        return block_len
    return max(1, min(block_len, math.ceil(steps * block_len / total_slots)))


def denoise(
    denoiser: Denoiser,
    canvas: Canvas,
    settings: SamplerSettings = SamplerSettings(),
    should_stop: Callable[[], bool] = lambda: False,
) -> Iterator[Frame]:
    """Run the loop over `canvas`; yield a Frame per step; the last one has done=True.

    When `should_stop()` turns true between steps, the iterator ends without a done frame.
    """
    device, mask_id = denoiser.device, denoiser.spec.mask_id
    generator = torch.Generator(device=device).manual_seed(settings.seed)
    B = settings.samples
    x = torch.tensor(canvas.ids, device=device).repeat(B, 1)  # [B, T]
    T = x.shape[1]
    slot_positions = torch.tensor([p for r in canvas.slots for p in r], dtype=torch.long, device=device)  # [N]
    is_slot = torch.zeros(T, dtype=torch.bool, device=device)
    is_slot[slot_positions] = True
    confidence = torch.zeros(B, T, device=device)  # [B, T] probability at commit time
    guesses = x.clone()
    started = time.perf_counter()

    def frame(step: int, total: int, done: bool = False) -> Frame:
        row, conf, guess = x[0].tolist(), confidence[0].tolist(), guesses[0].tolist()
        states = tuple(
            SpanState(
                tokens=tuple(None if row[p] == mask_id else row[p] for p in r),
                confidence=tuple(conf[p] for p in r),
                guesses=tuple(guess[p] for p in r),
            )
            for r in canvas.slots
        )
        final = scores = None
        if done:
            final = tuple(tuple(tuple(x[b, r.start:r.stop].tolist()) for r in canvas.slots) for b in range(B))
            scores = tuple(confidence[:, is_slot].clamp_min(1e-9).log().mean(1).tolist())
        masked = sum(t is None for s in states for t in s.tokens)
        return Frame(step, total, states, masked, time.perf_counter() - started, done, final, scores)

    _renoise_rewrites(denoiser, canvas, settings, x, confidence, generator)
    blocks = _plan_blocks(slot_positions, settings.block_size)
    plan = [_steps_for(len(b), len(slot_positions), settings.steps) for b in blocks]
    total = sum(plan)
    yield frame(0, total)

    step = 0
    for block, block_steps in zip(blocks, plan):
        in_block = torch.zeros(T, dtype=torch.bool, device=device)
        in_block[block] = True
        generated = torch.zeros(B, T, dtype=torch.bool, device=device)  # committed by this loop, so re-maskable
        # Error correction may undo commits; a hard cap keeps the loop finite.
        for block_step in range(2 * block_steps if settings.remask_below else block_steps):
            if should_stop():
                return
            active = (x == mask_id) & in_block  # [B, T]
            remaining = active.sum(1)  # [B]
            if not bool(remaining.any()):
                break
            final_step = 2 * block_steps - 1 if settings.remask_below else block_steps - 1
            last = block_step >= final_step
            logits = denoiser.logits(x)  # [B, T, V]
            flat = logits[active]  # [M, V] masked positions in this block only
            proposal = K.propose(flat, settings.temperature, settings.top_k, settings.top_p, generator)  # [M]
            ranking, p_token = K.score(flat, proposal, settings.policy, generator)  # [M], [M]
            full_rank = torch.full((B, T), float("-inf"), device=device)
            full_rank[active] = ranking.float()
            full_p = torch.zeros(B, T, device=device)
            full_p[active] = p_token
            proposals = x.clone()
            proposals[active] = proposal

            steps_left = max(1, block_steps - block_step)
            quota = remaining if last else (remaining + steps_left - 1) // steps_left  # [B]
            if settings.schedule == "threshold":
                quota = torch.maximum(quota, ((full_p >= settings.threshold) & active).sum(1))
            commit = K.select_commits(full_rank, active, quota)  # [B, T]

            if settings.remask_below and not last:
                # Committed earlier, now improbable under the fuller context: send back to mask.
                p_now = logits.softmax(-1).gather(-1, x[..., None]).squeeze(-1)  # [B, T]
                weak = generated & (p_now < settings.remask_below)
                x = torch.where(weak, torch.full_like(x, mask_id), x)
                generated &= ~weak
            x = torch.where(commit, proposals, x)
            confidence = torch.where(commit, full_p, confidence)
            generated |= commit
            still = (x == mask_id) & is_slot
            guesses = torch.where(still, proposals, x)
            confidence = torch.where(still & active, full_p, confidence)
            step += 1
            yield frame(step, total)
    yield frame(step, total, done=True)


def _renoise_rewrites(denoiser: Denoiser, canvas: Canvas, settings: SamplerSettings, x: torch.Tensor, confidence: torch.Tensor, generator) -> None:
    """Re-mask a share of each rewrite span's own tokens, least confident first (in place on x)."""
    rewrites = [(span, r) for span, r in zip(canvas.spans, canvas.slots) if span.mode == "rewrite" and len(r)]
    if not rewrites:
        return
    if settings.rewrite_order == "confidence":
        p_now = denoiser.logits(x).softmax(-1).gather(-1, x[..., None]).squeeze(-1)  # [B, T]
        confidence.copy_(p_now)  # the kept tokens show how sure the model was of them
    else:
        p_now = torch.rand(x.shape, generator=generator, device=x.device, dtype=torch.float64).float()
        confidence.fill_(1.0)
    for span, r in rewrites:
        n = max(1, math.ceil(span.strength * len(r)))
        weakest = p_now[:, r.start:r.stop].argsort(dim=1)[:, :n] + r.start  # [B, n]
        x.scatter_(1, weakest, denoiser.spec.mask_id)
