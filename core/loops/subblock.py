"""Fast-dLLM v2's block decode (kind "block-causal", BlockRule.sub_block set), as an iterator of Frames.

Fast-dLLM v2 keeps Qwen2.5's autoregressive head: the logits at position p predict token p+1
(its token shift), so a block's first token comes from the pass before it. Its `batch_sample`
(NVlabs/Fast-dLLM v2/generation_functions.py, on the release's modeling.py) runs:

1. the prompt's full blocks (of `bd_size`, 32) prefilled into the KV cache once; when the prompt
   ends on a block boundary, the prefill's last row writes the next block's first token;
2. each block in sub-blocks of 8, left to right: every step runs the whole block against the
   read-only cache, shifts the logits by one, and in the current sub-block commits every masked
   token whose probability is above the threshold, and the most probable one in any case;
3. a block without masks is written into the cache by one more pass, whose last row writes the
   first token of the next block. A committed end token ends the run after its block.

Differences from the reference, on purpose: a prompt of exactly one block is prefilled like any
other (the reference then decodes the next block without it in the cache), and the blocks run
for the span's slots, not up to a global max_new_tokens.
"""
from __future__ import annotations

from typing import Callable, Iterator

import torch

from ..canvas import Canvas
from ..settings import Sampling
from .block import sample
from .frame import Frame
from .scaffold import BlockRun, DecodeRule, effective_rule


def subblock_denoise(denoiser, canvas: Canvas, settings: Sampling = Sampling(), should_stop: Callable[[], bool] = lambda: False,
                     ban: bool = True) -> Iterator[Frame]:
    """The loop over one prompt canvas (its one slot range at the end); a Frame per step, the last done.
    `--block-size` and `--threshold` replace the release's bd_size and threshold (batch_sample's
    block_size and threshold); the sub-block stays the release's small_block_size."""
    rule = effective_rule(denoiser.spec.block, settings)
    run = BlockRun.open(denoiser, canvas, settings, rule, ban)
    x, mask_id, size, slots = run.x, run.mask_id, rule.size, run.slots
    sub = min(rule.sub_block, size)
    B, total_len = x.shape
    device = x.device
    total = len(run.blocks) * size

    def next_token(last_row: torch.Tensor, position: int) -> None:
        """The token a pass's last row predicts (greedy, as the reference) becomes `position`'s."""
        if position < total_len and position >= slots.start:
            logits = last_row if run.banned is None else last_row.index_fill(-1, run.banned, float("-inf"))
            if run.steer is not None:  # the row proposes `position`'s token (the shift): steer it as that slot
                logits = run.steer.constrain(logits[:, None], x, [position])[:, 0]  # [B, V]
            p, token = logits.softmax(-1).max(-1)  # [B]
            keep = x[:, position] == mask_id
            x[:, position] = torch.where(keep, token, x[:, position])
            run.confidence[:, position] = torch.where(keep, p, run.confidence[:, position])
            run.written[:, position] |= keep

    with torch.inference_mode():
        # want = prefill: with the shift, its row is the prefill's last one (the next block's first token).
        row = run.prefill(want_shift=1)
        if row is not None and slots.start == run.blocks.start * size:
            next_token(row[:, 0], slots.start)
    yield run.frame(0, total)
    step = 0
    finished = torch.zeros(B, dtype=torch.bool, device=device)
    for k in run.blocks:
        block = run.block(k)  # [P]
        for s0 in range(0, size, sub):
            part = slice(k * size + s0, k * size + s0 + sub)  # the open sub-block's positions
            while True:
                if should_stop():
                    return
                with torch.inference_mode():
                    masked = x[:, block] == mask_id  # [B, P]
                    live = masked[:, s0:s0 + sub]
                    if not bool(live.any()):
                        break
                    logits = run.masked_logits(block, k)  # [B, P, V]
                    proposal, p_token = sample(logits[:, s0:s0 + sub], settings.temperature, settings.top_k, settings.top_p, run.generator)  # [B, S]
                    p_live = torch.where(live, p_token, torch.full_like(p_token, float("-inf")))
                    commit = p_live > rule.threshold
                    commit[torch.arange(B, device=device), p_live.argmax(-1)] = True  # the most probable, in any case
                    commit &= live
                    if run.steer is not None:  # masked_logits already rows logits by the position they propose
                        # (the denoiser's shift); settle the sub-block's commits together, by those positions
                        span_commit = torch.zeros_like(masked)
                        span_commit[:, s0:s0 + sub] = commit
                        span_prop = x[:, block].clone()  # [B, P]
                        span_prop[:, s0:s0 + sub] = proposal
                        span_p = torch.zeros(masked.shape, dtype=p_token.dtype, device=device)
                        span_p[:, s0:s0 + sub] = p_token
                        span_prop, span_p = run.settle(k, span_prop, span_commit, span_p, logits)
                        proposal, p_token = span_prop[:, s0:s0 + sub], span_p[:, s0:s0 + sub]
                    x[:, part] = torch.where(commit, proposal, x[:, part])
                    run.guesses[:, part] = torch.where(live & ~commit, proposal, x[:, part])
                    run.confidence[:, part] = torch.where(live, p_token, run.confidence[:, part])
                    run.written[:, part] |= commit
                    finished |= (torch.isin(proposal, run.end_ids) & commit).any(1)
                step += 1
                yield run.frame(step, total)
        if bool(finished.all()):  # an end token was committed: the rest is padding, no pass writes this block
            break
        with torch.inference_mode():  # write the block; its last row gives the next block's first token
            row = run.write_block(block, k, want=block[-1:] + 1)
            next_token(row[:, 0], run.block_end(k))
    # batch_sample stops at its end token: what follows it is padding; the end token stays the one
    # committed (<|im_end|> is reported as <|im_end|>, not as the pad).
    run.finish(cut=True)
    yield run.frame(step, total, done=True)


SUB_BLOCK = DecodeRule("sub-block", subblock_denoise, lambda rule: frozenset({"threshold", "top_p"}),
                       "sub-blocks committed above a threshold, as batch_sample; it has no steps, top-k or fixed schedule",
                       lambda rule, settings, answer: rule.size, lambda rule, settings: {"threshold": rule.threshold, "sub_block": rule.sub_block})
