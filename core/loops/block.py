"""The plain block decode rule (kind "block-causal": SDAR, Stable-DiffCoder, LLaDA2.0), as an iterator of Frames.

Block diffusion as the references run it (JetAstra/SDAR generate.py): the canvas is the
prompt followed by the slots, cut into blocks of the release's size from position 0.
Attention is bidirectional inside a block and causal across blocks, so

1. the prompt's full blocks are prefilled into the KV cache once (block-causal mask);
2. the open block is denoised against that cache, read-only: each step runs only the block,
   samples a token for every position (temperature, top-k, top-p as the reference), and
   commits the masked positions whose confidence is above the release's threshold, or at
   least the step's scheduled share, most confident first (low-confidence-dynamic);
3. when the block has no masks left, one more pass writes its keys and values, and the next
   block opens. Finished blocks are never changed.

A frame is yielded after every step, so the editor shows the blocks sharpening one after
another. After a block that holds an end token the run stops and the rest is padding (a
release whose generate returns the answer up to its first end token drops what follows it:
BlockRule.cut_at_end). Tokens already in a block (the prompt's tail, a rewrite's kept draft) are
held: sharpen never overwrites them, where SDAR's generate.py can (docs/models.md). The set-up,
passes and frames are core/loops/scaffold.py's, shared with subblock.py and editing.py.
"""
from __future__ import annotations

from typing import Callable, Iterator

import torch
import torch.nn.functional as F

from ..canvas import Canvas
from ..settings import Sampling
from .frame import Frame
from .scaffold import BlockRun, DecodeRule, effective_rule


def transfer_schedule(block: int, steps: int) -> list[int]:
    """Tokens to commit at each of `steps` steps of a block: an even share, the remainder first."""
    base, extra = divmod(block, steps)
    return [base + (1 if i < extra else 0) for i in range(steps)]


def sample(logits: torch.Tensor, temperature: float, top_k: int | None, top_p: float | None, generator) -> tuple[torch.Tensor, torch.Tensor]:
    """(tokens, their probabilities) [B, P] from logits [B, P, V], as the reference samples:
    temperature, then top-k, then top-p, then a multinomial draw; temperature 0 is the argmax."""
    B, P, V = logits.shape
    flat = logits.reshape(-1, V)  # [B*P, V]
    if temperature == 0:
        probs = F.softmax(flat, dim=-1)
        token = probs.argmax(-1, keepdim=True)  # [B*P, 1]
        return token.view(B, P), probs.gather(-1, token).view(B, P)
    if temperature != 1.0:
        flat = flat / temperature
    if top_k:
        kth = torch.topk(flat, min(top_k, V)).values[..., -1, None]
        flat = torch.where(flat < kth, torch.full_like(flat, float("-inf")), flat)
    if top_p is not None and top_p < 1.0:
        ordered, order = torch.sort(flat, descending=True)
        beyond = torch.cumsum(F.softmax(ordered, dim=-1), dim=-1) > top_p
        beyond[..., 1:] = beyond[..., :-1].clone()  # keep the token that crosses p
        beyond[..., 0] = False
        flat = flat.masked_fill(torch.zeros_like(beyond).scatter(-1, order, beyond), float("-inf"))
    probs = F.softmax(flat, dim=-1)  # [B*P, V]
    token = torch.multinomial(probs, num_samples=1, generator=generator)  # [B*P, 1]
    return token.view(B, P), probs.gather(-1, token).view(B, P)


def gumbel_sample(logits: torch.Tensor, temperature: float, generator) -> tuple[torch.Tensor, torch.Tensor]:
    """(tokens, their probabilities) [B, P] as LLaDA-style references draw them: Gumbel-max in
    float64 at the temperature (the argmax at 0); the probability from the untempered softmax."""
    if temperature == 0:
        token = logits.argmax(-1)  # [B, P]
    else:
        noise = torch.rand(logits.shape, generator=generator, device=logits.device, dtype=torch.float64)
        token = (logits.double().exp() / (-torch.log(noise)) ** temperature).argmax(-1)
    p = F.softmax(logits.double(), dim=-1).gather(-1, token[..., None]).squeeze(-1)
    return token, p  # float64: the reference ranks commits by it


def commits(p_token: torch.Tensor, masked: torch.Tensor, share: int, threshold: float | None) -> torch.Tensor:
    """[B, P] which masked positions commit: low-confidence-dynamic (every one above `threshold`
    when there are at least `share` of them) or static (the `share` most confident)."""
    confidence = torch.where(masked, p_token, torch.full_like(p_token, float("-inf")))  # [B, P]
    share = min(share, confidence.shape[1])
    top = torch.zeros_like(masked).scatter(1, torch.topk(confidence, share, dim=1).indices, True)  # [B, P]
    if threshold is None:
        return top & masked
    sure = confidence > threshold
    enough = sure.sum(1, keepdim=True) >= share  # [B, 1]
    return torch.where(enough, sure, top) & masked


def block_denoise(denoiser, canvas: Canvas, settings: Sampling = Sampling(), should_stop: Callable[[], bool] = lambda: False,
                  ban: bool = True) -> Iterator[Frame]:
    """Run the loop over a prompt canvas (one slot range, at its end); a Frame per step, the last done.

    `settings.steps` caps the steps per block (default: the block size, one token a step at
    the least; a release whose generate clamps them to the answer's length does so too);
    `--block-size` / `--threshold` replace the release's (effective_rule); temperature / top-k /
    top-p / seed / samples as for every loop. `ban=False` lets a slot take any id, as the
    references do (sharpen bans the mask and stray specials).
    """
    rule = effective_rule(denoiser.spec.block, settings)
    run = BlockRun.open(denoiser, canvas, settings, rule, ban)
    x, mask_id, size = run.x, run.mask_id, rule.size
    steps = plain_steps(rule, settings, len(run.slots))
    schedule = transfer_schedule(size, steps)  # rule.schedule "masks": recomputed per block from its masks
    total = len(run.blocks) * steps
    run.prefill()
    yield run.frame(0, total)
    step = 0
    for k in run.blocks:
        block = run.block(k)  # [P]
        if rule.schedule == "masks":  # shares of the masks the block starts with; empty steps are skipped
            schedule = [n for n in transfer_schedule(int((x[0, block] == mask_id).sum()), steps) if n] or [0]
        for block_step in range(len(schedule) + 1):
            if should_stop():
                return
            with torch.inference_mode():
                tokens = x[:, block]  # [B, P]
                masked = tokens == mask_id
                if not bool(masked.any()):  # the one host sync per step: the block is done, write it
                    run.write_block(block, k)
                    break
                logits = run.masked_logits(block, k)  # [B, P, V]
                if rule.sampler == "gumbel":
                    proposal, p_token = gumbel_sample(logits, settings.temperature, run.generator)
                else:
                    proposal, p_token = sample(logits, settings.temperature, settings.top_k, settings.top_p, run.generator)
                share = schedule[min(block_step, len(schedule) - 1)]
                commit = commits(p_token, masked, share, rule.threshold if settings.schedule == "threshold" else None)
                proposal, p_token = run.settle(k, proposal, commit, p_token, logits)  # commits that clash under a constraint
                x[:, block] = torch.where(commit, proposal, tokens)
                run.guesses[:, block] = torch.where(commit | ~masked, x[:, block], proposal)
                run.confidence[:, block] = torch.where(commit | masked, p_token.float(), run.confidence[:, block])
                run.written[:, block] |= commit
            step += 1
            yield run.frame(step, total)
        if run.ended(run.block_end(k)):  # every sample has ended its answer: the rest is padding
            break
    run.finish()
    yield run.frame(step, total, done=True)


def plain_steps(rule, settings: Sampling, answer: int) -> int:
    """Steps per block: --steps (default the block size), at most one token a step at the least;
    clamped to the answer's length where the release's generate does (LLaDA2.0)."""
    steps = min(rule.size, settings.steps or rule.size)
    return max(1, min(steps, answer)) if rule.steps_within_answer else steps


def _reads(rule) -> frozenset[str]:
    reads = {"steps", "schedule"}
    if rule.threshold is not None:  # a release whose generate has a confidence threshold
        reads.add("threshold")
    if rule.sampler == "multinomial":  # Gumbel-max (Stable-DiffCoder) has no top-k / top-p
        reads |= {"top_k", "top_p"}
    return frozenset(reads)


def _used(rule, settings: Sampling) -> dict:
    return {"threshold": rule.threshold if settings.schedule == "threshold" else None}


PLAIN = DecodeRule("block", block_denoise, _reads, "block diffusion as its reference generate runs it",
                   lambda rule, settings, answer: plain_steps(rule, settings, answer), _used)
