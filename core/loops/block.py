"""The block-causal loop (kind "block-causal": SDAR, Fast-dLLM v2, LLaDA2), as an iterator of Frames.

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
another. After a block that holds an end token the run stops and the rest is padding.
Tokens already in a block (the prompt's tail, a rewrite's kept draft) are held.
"""
from __future__ import annotations

import time
from typing import Callable, Iterator

import torch
import torch.nn.functional as F

from .. import prefix_cache
from ..canvas import Canvas
from ..models.model import Attend
from ..settings import Sampling
from .frame import Frame, finished_rows, slot_states


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


def prefill_prompt(denoiser, x: torch.Tensor, cache, prefill: int, size: int, want_shift: int = 0) -> torch.Tensor:
    """The prompt's full blocks, once, into the cache (bidirectional inside each block, causal
    across them); the logits of the prefill's last row (`want_shift` 1: the row a token-shifted
    model predicts the next position from)."""
    return prefix_cache.prefill(denoiser, x, cache, prefill, size, want_shift)  # from the longest prefix an earlier run prefilled


def block_denoise(denoiser, canvas: Canvas, settings: Sampling = Sampling(), should_stop: Callable[[], bool] = lambda: False,
                  ban: bool = True) -> Iterator[Frame]:
    """Run the loop over a prompt canvas (one slot range, at its end); a Frame per step, the last done.

    `settings.steps` caps the steps per block (default: the block size, one token a step at
    the least); temperature / top-k / top-p / seed / samples as for every loop. `ban=False`
    lets a slot take any id, as the references do (sharpen bans the mask and stray specials).
    """
    spec, rule = denoiser.spec, denoiser.spec.block
    device, mask_id, size = denoiser.device, spec.mask_id, rule.size
    (slots,) = canvas.slots
    n = len(canvas.ids)
    # Whole blocks (the last one's tail past the slots denoised and dropped), or a short last block.
    total_len = -(-n // size) * size if rule.pad_last else n
    x = torch.full((settings.samples, total_len), mask_id, dtype=torch.long, device=device)  # [B, T]
    x[:, :n] = torch.tensor(canvas.ids, device=device)
    B = x.shape[0]
    banned = denoiser.banned_ids.to(device) if ban else None
    end_ids = torch.tensor(spec.end_ids, dtype=torch.long, device=device)
    generator = torch.Generator(device=device).manual_seed(settings.seed)
    steps = min(size, settings.steps or size)
    schedule = transfer_schedule(size, steps)  # rule.schedule "masks": recomputed per block from its masks
    first = slots.start // size  # the first block that holds a slot; blocks before it are prompt only
    blocks = range(first, -(-total_len // size))
    confidence = torch.zeros(B, total_len, device=device)
    guesses = x.clone()
    written = torch.zeros(B, total_len, dtype=torch.bool, device=device)  # what this run committed
    started = time.perf_counter()

    def frame(step: int, done: bool = False) -> Frame:
        final, final_conf, scores = finished_rows(x, confidence, written, slots) if done else (None, None, None)
        return Frame(step, len(blocks) * steps, time.perf_counter() - started, done, "block-causal", x[0, :n].clone(),
                     confidence[0, :n].clone(), guesses[0, :n].clone(), slot_states(x[0, :n], mask_id), canvas.slots,
                     final, scores, final_conf)

    cache = denoiser.new_cache(B, total_len)
    prefill = first * size
    with torch.inference_mode():
        if prefill:
            prefill_prompt(denoiser, x, cache, prefill, size)
    yield frame(0)
    step = 0
    for k in blocks:
        end = min((k + 1) * size, total_len)
        block = torch.arange(k * size, end, device=device)  # [P]
        if rule.schedule == "masks":  # shares of the masks the block starts with; empty steps are skipped
            schedule = [n for n in transfer_schedule(int((x[0, block] == mask_id).sum()), steps) if n] or [0]
        for block_step in range(len(schedule) + 1):
            if should_stop():
                return
            with torch.inference_mode():
                tokens = x[:, block]  # [B, P]
                masked = tokens == mask_id
                if not bool(masked.any()):  # the one host sync per step: the block is done, write it
                    denoiser.logits(x, want=block[-1:], run=block, cache=cache, attend=Attend(keys=end))
                    break
                logits = denoiser.logits(x, want=block, run=block, cache=cache, attend=Attend(keys=k * size, write=False))  # [B, P, V]
                if banned is not None:
                    logits = logits.index_fill(-1, banned, float("-inf"))
                if rule.sampler == "gumbel":
                    proposal, p_token = gumbel_sample(logits, settings.temperature, generator)
                else:
                    proposal, p_token = sample(logits, settings.temperature, settings.top_k, settings.top_p, generator)
                share = schedule[min(block_step, len(schedule) - 1)]
                commit = commits(p_token, masked, share, rule.threshold if settings.schedule == "threshold" else None)
                x[:, block] = torch.where(commit, proposal, tokens)
                guesses[:, block] = torch.where(commit | ~masked, x[:, block], proposal)
                confidence[:, block] = torch.where(commit | masked, p_token.float(), confidence[:, block])
                written[:, block] |= commit
            step += 1
            yield frame(step)
        ended = torch.isin(x[:, slots.start:min(end, slots.stop)], end_ids).any(1)  # [B]
        if end_ids.numel() and bool(ended.all()):  # every sample has ended its answer: the rest is padding
            rest = x[:, slots.start:slots.stop]
            x[:, slots.start:slots.stop] = torch.where(rest == mask_id, end_ids[0], rest)
            break
    yield frame(step, done=True)


def chained(denoiser, canvases: tuple[Canvas, ...], settings: Sampling = Sampling(), should_stop: Callable[[], bool] = lambda: False,
            ban: bool = True, one: Callable[..., Iterator[Frame]] = block_denoise, per_block: int | None = None) -> Iterator[Frame]:
    """Several spans one after another, each its own prompt canvas (core/prompted.py), as one
    run's frames: earlier spans show their result, the running one its blocks, later ones masks.
    `one` runs one canvas (block_denoise, or core/loops/editing.py's edit_denoise); `per_block`,
    the most steps it takes per block where that is not the steps setting (an editing loop's)."""
    mask_id = denoiser.spec.mask_id
    lengths = [len(c.slots[0]) for c in canvases]
    starts = [sum(lengths[:j]) for j in range(len(lengths))]
    slots = tuple(range(s, s + n) for s, n in zip(starts, lengths))
    shown = torch.full((sum(lengths),), mask_id, dtype=torch.long)  # [N] every span's slots, side by side
    confidence, guesses = torch.zeros(sum(lengths)), shown.clone()
    state, replaced = slot_states(shown, mask_id), torch.zeros_like(shown)  # the running span's edited slots pass through
    counts: list[tuple[int, int]] = []
    size = denoiser.spec.block.size
    steps = per_block or min(size, settings.steps or size)
    total = sum((-(-len(c.ids) // size) - c.slots[0].start // size) * steps for c in canvases)
    finals, final_conf, scores = [], [], []
    base, started = 0, time.perf_counter()

    def frame(step: int, done: bool = False) -> Frame:
        final = conf = score = None
        if done:
            final = tuple(tuple(span[b] for span in finals) for b in range(settings.samples))
            conf = tuple(tuple(span[b] for span in final_conf) for b in range(settings.samples))
            score = tuple(sum(s[b] for s in scores) / len(scores) for b in range(settings.samples))
        return Frame(step, total, time.perf_counter() - started, done, "block-causal", shown.clone(), confidence.clone(),
                     guesses.clone(), state.clone(), slots, final, score, conf, _replaced=replaced.clone(),
                     edit_counts=tuple(counts) if done and len(counts) == len(canvases) else None)

    yield frame(0)
    for canvas, start, n in zip(canvases, starts, lengths):
        r = canvas.slots[0]
        last = None
        for last in one(denoiser, canvas, settings, should_stop, ban):
            shown[start:start + n] = last._ids[r.start:r.stop].cpu()
            state[start:start + n] = last._state[r.start:r.stop].cpu()
            replaced[start:start + n] = last._replaced[r.start:r.stop].cpu() if last._replaced is not None else 0
            confidence[start:start + n] = last._confidence[r.start:r.stop].cpu()
            guesses[start:start + n] = last._guesses[r.start:r.stop].cpu()
            if last.step and not last.done:
                yield frame(base + last.step)
        if last is None or not last.done:  # cancelled
            return
        base += last.step
        finals.append([sample[0] for sample in last.final_ids])
        final_conf.append([sample[0] for sample in last.final_confidence])
        scores.append(last.sample_scores)
        if last.edit_counts is not None:
            counts.append(last.edit_counts[0])
    yield frame(base, done=True)
