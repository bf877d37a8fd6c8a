"""LLaDA2.1's decode: block diffusion that edits its own committed tokens (token-to-token editing).

As the release's `generate` does it (LLaDA2.1-mini modeling_llada2_moe.py; tests/golden/
llada2_decode.py records it step by step), per block of the canvas (prompt, then slots):

1. every step runs the open block against the read-only cache of the blocks before it and
   takes, per position, the sampled token and its probability;
2. mask-to-token: the masked positions above `threshold` commit, or, when fewer than one is,
   the single most confident one;
3. token-to-token: every already committed position of the block that is not prompt, whose
   sampled token differs from the one it holds with probability above `editing threshold`,
   is replaced: an edit;
4. once the block has no masks, up to `max_post_steps` more steps run editing only, and the
   block ends at the first step that changes nothing. One more pass writes its keys and
   values, and the next block opens. Finished blocks are never changed.

The two published modes (LLaDA2.1 model card): quality, threshold 0.7 / editing 0.5; speed,
0.5 / 0.0 (any change the model prefers is taken). A frame after every step marks the slots
edited in that step "edited", with the token each held before, so the editor draws an edit
apart from a fresh commit; the last frame counts commits and edits per span.
"""
from __future__ import annotations

import time
from typing import Callable, Iterator

import torch

from ..canvas import Canvas
from ..constraints.steering import Steering
from ..models.model import Attend
from ..settings import Sampling
from .block import prefill_prompt, sample
from .frame import EDITED, Frame, finished_rows, slot_states

# (mask-to-token threshold, token-to-token editing threshold) of the release's two modes.
EDIT_MODES = {"quality": (0.7, 0.5), "speed": (0.5, 0.0)}
MAX_POST_STEPS = 16  # editing-only steps after a block's masks are gone (the release's max_post_steps)
MIN_TRANSFER = 1  # masked positions committed per step at the least (the release's num_to_transfer)


def edit_steps_per_block(size: int, max_post_steps: int = MAX_POST_STEPS) -> int:
    """The most steps a block takes: one commit a step at the least, then the editing-only steps."""
    return size + max_post_steps


def mask_commits(p_token: torch.Tensor, masked: torch.Tensor, threshold: float) -> torch.Tensor:
    """[B, P]: masked positions above `threshold`, or, where fewer than MIN_TRANSFER are, the
    MIN_TRANSFER most confident masked ones (the release's rule)."""
    confidence = torch.where(masked, p_token, torch.full_like(p_token, float("-inf")))  # [B, P]
    sure = (confidence > threshold) & masked
    k = min(MIN_TRANSFER, confidence.shape[1])
    top = torch.zeros_like(masked).scatter(1, confidence.topk(k, dim=1).indices, True) & masked  # [B, P]
    return torch.where(sure.sum(1, keepdim=True) >= MIN_TRANSFER, sure, top)


def token_edits(proposal: torch.Tensor, p_token: torch.Tensor, held: torch.Tensor, editable: torch.Tensor,
                editing_threshold: float) -> torch.Tensor:
    """[B, P]: committed, editable positions whose sampled token differs from the held one with
    probability above `editing_threshold`."""
    return editable & (p_token > editing_threshold) & (proposal != held)


def edit_denoise(denoiser, canvas: Canvas, settings: Sampling = Sampling(), should_stop: Callable[[], bool] = lambda: False,
                 ban: bool = True, mode: str = "quality", max_post_steps: int = MAX_POST_STEPS) -> Iterator[Frame]:
    """The loop over one prompt canvas (its one slot range at the end); a Frame per step, the last done.

    Sampling as every loop (temperature, top-k, top-p, seed, samples); the thresholds come from
    `mode` (EDIT_MODES). `ban=False` lets a slot take any id, as the reference does.
    """
    threshold, editing_threshold = EDIT_MODES[mode]
    spec, size = denoiser.spec, denoiser.spec.block.size
    device, mask_id = denoiser.device, spec.mask_id
    (slots,) = canvas.slots
    n = len(canvas.ids)
    total_len = -(-n // size) * size  # whole blocks: the tail past the slots is denoised and dropped
    x = torch.full((settings.samples, total_len), mask_id, dtype=torch.long, device=device)  # [B, T]
    x[:, :n] = torch.tensor(canvas.ids, device=device)
    B = x.shape[0]
    banned = denoiser.banned_ids.to(device) if ban else None
    end_ids = torch.tensor(spec.end_ids, dtype=torch.long, device=device)
    generator = torch.Generator(device=device).manual_seed(settings.seed)
    first = slots.start // size  # blocks before it are prompt only: prefilled once
    blocks = range(first, total_len // size)
    # Only the model's own commits are edited: never the prompt (its tail shares the first block),
    # nor a rewrite's kept draft (the user's text; --strength says how much of it is re-noised).
    held = x[0] != mask_id  # [T]
    confidence = torch.zeros(B, total_len, device=device)
    guesses = x.clone()
    commits = torch.zeros(B, total_len, dtype=torch.long, device=device)  # per position: mask-to-token commits
    edits = torch.zeros(B, total_len, dtype=torch.long, device=device)  # per position: token-to-token edits
    edited_now = torch.zeros(total_len, dtype=torch.bool, device=device)
    replaced = torch.zeros(total_len, dtype=torch.long, device=device)
    started = time.perf_counter()

    def frame(step: int, done: bool = False) -> Frame:
        final = scores = final_conf = counts = None
        if done:
            final, final_conf, scores = finished_rows(x, confidence, (commits > 0)[:, :n], slots)
            counts = ((int(commits[0, slots.start:slots.stop].sum()), int(edits[0, slots.start:slots.stop].sum())),)
        state = slot_states(x[0, :n], mask_id)
        state = torch.where(edited_now[:n], torch.full_like(state, EDITED), state)
        total = len(blocks) * edit_steps_per_block(size, max_post_steps)  # a bound: a block usually settles sooner
        return Frame(step, total, time.perf_counter() - started, done, "block-causal", x[0, :n].clone(),
                     confidence[0, :n].clone(), guesses[0, :n].clone(), state, canvas.slots, final, scores, final_conf,
                     _replaced=replaced[:n].clone(), edit_counts=counts)

    # A constrained span (core/constraints): checked before any pass; commits and edits steered.
    steer = Steering.for_canvas(denoiser, canvas, B, opening_banned=False)
    if steer is not None:
        steer.prepare(x)
    cache = denoiser.new_cache(B, total_len)
    prefill = first * size
    with torch.inference_mode():
        if prefill:
            prefill_prompt(denoiser, x, cache, prefill, size)
    yield frame(0)
    step = 0
    for k in blocks:
        block = torch.arange(k * size, (k + 1) * size, device=device)  # [P]
        editable = ~held[block]  # [P]
        post = 0
        edited = torch.zeros((), dtype=torch.bool, device=device)  # did the last step edit anything
        editing_only = False  # did the last step start without masks
        while True:
            if should_stop():
                return
            with torch.inference_mode():
                tokens = x[:, block]  # [B, P]
                masked = tokens == mask_id
                any_masked, last_edited = torch.stack([masked.any(), edited]).tolist()  # the step's one host read
                if editing_only and not last_edited:  # an editing-only step changed nothing: the block is settled
                    break
                editing_only = not any_masked
                if not any_masked:
                    post += 1
                    if post > max_post_steps:
                        break
                logits = denoiser.logits(x, want=block, run=block, cache=cache, attend=Attend(keys=k * size, write=False))  # [B, P, V]
                if banned is not None:
                    logits = logits.index_fill(-1, banned, float("-inf"))
                if steer is not None:  # constrained masked slots: only tokens that keep their span completable
                    logits = steer.constrain(logits, x, range(k * size, (k + 1) * size))
                proposal, p_token = sample(logits, settings.temperature, settings.top_k, settings.top_p, generator)
                commit = mask_commits(p_token, masked, threshold) if any_masked else torch.zeros_like(masked)
                edit = token_edits(proposal, p_token, tokens, ~masked & editable, editing_threshold)
                if steer is not None:  # commits and edits that would break a span: settled one at a time
                    proposal, p_token = steer.settle(x, range(k * size, (k + 1) * size), proposal, commit | edit, p_token, logits)
                change = commit | edit
                x[:, block] = torch.where(change, proposal, tokens)
                guesses[:, block] = torch.where(masked & ~commit, proposal, x[:, block])
                confidence[:, block] = torch.where(change | masked, p_token, confidence[:, block])
                commits[:, block] += commit.long()
                edits[:, block] += edit.long()
                edited_now.zero_()
                edited_now[block] = edit[0]
                replaced.zero_()
                replaced[block] = torch.where(edit[0], tokens[0], 0)
                edited = edit.any()
            step += 1
            yield frame(step)
        edited_now.zero_()
        with torch.inference_mode():  # the finished block, written once into the cache for the next
            denoiser.logits(x, want=block[-1:], run=block, cache=cache, attend=Attend(keys=(k + 1) * size))
        ended = torch.isin(x[:, slots.start:min((k + 1) * size, slots.stop)], end_ids).any(1)  # [B]
        if end_ids.numel() and bool(ended.all()):  # every sample has ended its answer: the rest is padding
            rest = x[:, slots.start:slots.stop]
            x[:, slots.start:slots.stop] = torch.where(rest == mask_id, end_ids[0], rest)
            break
    yield frame(step, done=True)
