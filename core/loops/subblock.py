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

import time
from typing import Callable, Iterator

import torch

from ..canvas import Canvas
from ..constraints.steering import refuse_constraints
from ..models.model import Attend
from ..settings import Sampling
from .block import prefill_prompt, sample
from .frame import Frame, finished_rows, slot_states


def subblock_denoise(denoiser, canvas: Canvas, settings: Sampling = Sampling(), should_stop: Callable[[], bool] = lambda: False,
                     ban: bool = True) -> Iterator[Frame]:
    """The loop over one prompt canvas (its one slot range at the end); a Frame per step, the last done."""
    refuse_constraints(canvas, "sub-block")  # its shifted next-token commits are not steered yet
    spec, rule = denoiser.spec, denoiser.spec.block
    device, mask_id, size, sub = denoiser.device, spec.mask_id, rule.size, rule.sub_block
    (slots,) = canvas.slots
    n = len(canvas.ids)
    total_len = -(-n // size) * size
    B = settings.samples
    x = torch.full((B, total_len), mask_id, dtype=torch.long, device=device)  # [B, T]
    x[:, :n] = torch.tensor(canvas.ids, device=device)
    banned = denoiser.banned_ids.to(device) if ban else None
    end_ids = torch.tensor(spec.end_ids, dtype=torch.long, device=device)
    generator = torch.Generator(device=device).manual_seed(settings.seed)
    confidence = torch.zeros(B, total_len, device=device)
    guesses = x.clone()
    written = torch.zeros(B, total_len, dtype=torch.bool, device=device)
    first = slots.start // size
    blocks = range(first, total_len // size)
    started, step = time.perf_counter(), 0

    def frame(step: int, done: bool = False) -> Frame:
        final, final_conf, scores = finished_rows(x, confidence, written, slots) if done else (None, None, None)
        return Frame(step, len(blocks) * size, time.perf_counter() - started, done, "block-causal", x[0, :n].clone(),
                     confidence[0, :n].clone(), guesses[0, :n].clone(), slot_states(x[0, :n], mask_id), canvas.slots,
                     final, scores, final_conf)

    def next_token(last_row: torch.Tensor, position: int) -> None:
        """The token a pass's last row predicts (greedy, as the reference) becomes `position`'s."""
        if position < total_len and position >= slots.start:
            logits = last_row if banned is None else last_row.index_fill(-1, banned, float("-inf"))
            p, token = logits.softmax(-1).max(-1)  # [B]
            keep = x[:, position] == mask_id
            x[:, position] = torch.where(keep, token, x[:, position])
            confidence[:, position] = torch.where(keep, p, confidence[:, position])
            written[:, position] |= keep

    cache = denoiser.new_cache(B, total_len)
    prefill = first * size
    with torch.inference_mode():
        if prefill:
            # want = prefill: with the shift, its row is the prefill's last one (the next block's first token).
            row = prefill_prompt(denoiser, x, cache, prefill, size, want_shift=1)
            if slots.start == prefill:
                next_token(row[:, 0], prefill)
    yield frame(0)
    finished = torch.zeros(B, dtype=torch.bool, device=device)
    for k in blocks:
        block = torch.arange(k * size, (k + 1) * size, device=device)  # [P]
        for s0 in range(0, size, sub):
            part = slice(s0, s0 + sub)
            while True:
                if should_stop():
                    return
                with torch.inference_mode():
                    masked = x[:, block] == mask_id  # [B, P]
                    if not bool(masked[:, part].any()):
                        break
                    logits = denoiser.logits(x, want=block, run=block, cache=cache, attend=Attend(keys=k * size, write=False))  # [B, P, V]
                    if banned is not None:
                        logits = logits.index_fill(-1, banned, float("-inf"))
                    proposal, p_token = sample(logits[:, part], settings.temperature, settings.top_k, settings.top_p, generator)  # [B, S]
                    live = masked[:, part]
                    p_live = torch.where(live, p_token, torch.full_like(p_token, float("-inf")))
                    commit = p_live > rule.threshold
                    commit[torch.arange(B, device=device), p_live.argmax(-1)] = True  # the most probable, in any case
                    commit &= live
                    tokens = x[:, block][:, part]
                    x[:, k * size + s0:k * size + s0 + sub] = torch.where(commit, proposal, tokens)
                    guesses[:, k * size + s0:k * size + s0 + sub] = torch.where(live & ~commit, proposal, x[:, k * size + s0:k * size + s0 + sub])
                    confidence[:, k * size + s0:k * size + s0 + sub] = torch.where(live, p_token, confidence[:, k * size + s0:k * size + s0 + sub])
                    written[:, k * size + s0:k * size + s0 + sub] |= commit
                    finished |= (torch.isin(proposal, end_ids) & commit).any(1)
                step += 1
                yield frame(step)
        if bool(finished.all()):  # an end token was committed: the rest is padding, no pass writes this block
            rest = x[:, slots.start:slots.stop]
            ended = torch.isin(rest, end_ids).cumsum(1) > 0
            x[:, slots.start:slots.stop] = torch.where(ended, end_ids[0], rest)
            break
        with torch.inference_mode():  # write the block; its last row gives the next block's first token
            row = denoiser.logits(x, want=block[-1:] + 1, run=block, cache=cache, attend=Attend(keys=(k + 1) * size))
            next_token(row[:, 0], (k + 1) * size)
    rest = x[:, slots.start:slots.stop]  # a sample that ended before the others: what follows its end is padding
    x[:, slots.start:slots.stop] = torch.where(torch.isin(rest, end_ids).cumsum(1) > 0, end_ids[0], rest) if end_ids.numel() else rest
    yield frame(step, done=True)
