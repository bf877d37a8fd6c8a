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

A revise span (Span.revise; the next-edit path, core/next_edit/predict.py) starts its slots
from its own tokens, then a tail of masks (core/prompted.py). The reference never starts an
answer from given tokens (its canvas is the prompt, then masks), but its rule has a place for
them: it holds only the prompt (positions before the answer) and lets step 3 replace any other
token that is not a mask. So a revise canvas holds the prompt only: its draft is editable from
the first step, and a block of draft without masks goes straight to the editing-only steps of
4 (a token is kept unless the model prefers another one with probability above the editing
threshold). A kept draft token's confidence is the model's probability of it at the last step
(the release's rule has no confidence for a token it did not write; hunks are rated by it).
"""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Callable, Iterator

import torch

from ..canvas import Canvas
from ..settings import Sampling
from .block import sample
from .frame import EDITED, Frame, slot_states
from .scaffold import BlockRun, DecodeRule, effective_rule

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


def held_probability(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """[B, P]: the probability the model gives the token each position holds (logits [B, P, V])."""
    return torch.softmax(logits.float(), dim=-1).gather(-1, tokens[..., None]).squeeze(-1)


def edit_thresholds(mode: str, settings: Sampling) -> tuple[float, float]:
    """(mask-to-token threshold, editing threshold): the mode's (EDIT_MODES), each replaced by the
    user's --threshold / --editing-threshold where given; --schedule fixed commits one a step (no
    mask-to-token threshold: the reference at a threshold no probability passes)."""
    threshold, editing_threshold = EDIT_MODES[mode]
    if settings.threshold is not None:
        threshold = settings.threshold
    if settings.schedule == "fixed":
        threshold = math.inf
    if settings.editing_threshold is not None:
        editing_threshold = settings.editing_threshold
    return threshold, editing_threshold


def edit_denoise(denoiser, canvas: Canvas, settings: Sampling = Sampling(), should_stop: Callable[[], bool] = lambda: False,
                 ban: bool = True, mode: str = "quality", max_post_steps: int = MAX_POST_STEPS) -> Iterator[Frame]:
    """The loop over one prompt canvas (its one slot range at the end); a Frame per step, the last done.

    Sampling as every loop (temperature, top-k, top-p, seed, samples); the thresholds come from
    `mode` (EDIT_MODES) unless set (edit_thresholds); --block-size replaces the release's block
    length. `ban=False` lets a slot take any id, as the reference does.
    """
    threshold, editing_threshold = edit_thresholds(mode, settings)
    rule = effective_rule(denoiser.spec.block, replace(settings, threshold=None))  # the block size; thresholds above
    run = BlockRun.open(denoiser, canvas, settings, rule, ban)
    x, mask_id, size, n, slots = run.x, run.mask_id, rule.size, run.n, run.slots
    B, total_len = x.shape
    device = x.device
    # Only the model's own commits are edited: never the prompt (its tail shares the first block),
    # nor a rewrite's kept draft (the user's text; --strength says how much of it is re-noised).
    # A revise span's draft is the model's to edit from the start: only the prompt is held (the
    # reference's own rule: its generate holds the positions before the answer, nothing else).
    held = x[0] != mask_id  # [T]
    revise = any(s.revise for s in canvas.spans)  # a prompt canvas holds one span (none in some tests)
    draft = torch.zeros_like(held)  # [T] a revise span's starting tokens (rated at every step)
    if revise:
        draft[slots.start:slots.stop] = held[slots.start:slots.stop]
        held[slots.start:slots.stop] = False
    commits = torch.zeros(B, total_len, dtype=torch.long, device=device)  # per position: mask-to-token commits
    edits = torch.zeros(B, total_len, dtype=torch.long, device=device)  # per position: token-to-token edits
    edited_now = torch.zeros(total_len, dtype=torch.bool, device=device)
    replaced = torch.zeros(total_len, dtype=torch.long, device=device)
    total = len(run.blocks) * edit_steps_per_block(size, max_post_steps)  # a bound: a block usually settles sooner

    def frame(step: int, done: bool = False) -> Frame:
        counts = None
        if done:
            counts = ((int(commits[0, slots.start:slots.stop].sum()), int(edits[0, slots.start:slots.stop].sum())),)
        state = slot_states(x[0, :n], mask_id)
        state = torch.where(edited_now[:n], torch.full_like(state, EDITED), state)
        return run.frame(step, total, done, state=state, replaced=replaced[:n].clone(), counts=counts, written=(commits > 0)[:, :n])

    run.prefill()
    yield frame(0)
    step = 0
    for k in run.blocks:
        block = run.block(k)  # [P]
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
                logits = run.masked_logits(block, k)  # [B, P, V]
                proposal, p_token = sample(logits, settings.temperature, settings.top_k, settings.top_p, run.generator)
                commit = mask_commits(p_token, masked, threshold) if any_masked else torch.zeros_like(masked)
                edit = token_edits(proposal, p_token, tokens, ~masked & editable, editing_threshold)
                proposal, p_token = run.settle(k, proposal, commit | edit, p_token, logits)  # commits and edits that clash under a constraint
                change = commit | edit
                x[:, block] = torch.where(change, proposal, tokens)
                run.guesses[:, block] = torch.where(masked & ~commit, proposal, x[:, block])
                run.confidence[:, block] = torch.where(change | masked, p_token, run.confidence[:, block])
                if revise:  # the kept draft tokens: the model's probability of each, now
                    kept = draft[block] & ~change  # [B, P]
                    run.confidence[:, block] = torch.where(kept, held_probability(logits, x[:, block]), run.confidence[:, block])
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
            run.write_block(block, k)
        if run.ended(run.block_end(k)):  # every sample has ended its answer: the rest is padding
            break
    run.finish()
    yield frame(step, done=True)


def _used(rule, settings: Sampling) -> dict:
    threshold, editing_threshold = edit_thresholds(settings.editing, settings)
    return {"threshold": None if math.isinf(threshold) else threshold, "editing_threshold": editing_threshold,
            "max_post_steps": MAX_POST_STEPS}


EDITING = DecodeRule("editing", lambda denoiser, canvas, settings, should_stop=lambda: False, ban=True:
                     edit_denoise(denoiser, canvas, settings, should_stop, ban, mode=settings.editing),
                     lambda rule: frozenset({"threshold", "editing_threshold", "top_k", "top_p", "schedule"}),
                     "token-to-token editing as LLaDA2.1's generate; it takes no step count (--editing off runs LLaDA2.0's decode)",
                     lambda rule, settings, answer: edit_steps_per_block(rule.size), _used)
