"""Triton kernels for the denoising step, each checked against kernels/reference.py.

fused_confidence: one program per position of the block; a masked (active) one streams its row of logits once and
keeps running softmax statistics (max, sum of exp, sum of exp * logit), the top two
logits and the best (optionally Gumbel-perturbed) score. From those it writes the
proposal, its probability, the top1 - top2 probability margin and minus the entropy:
what the reference computes with a softmax, a gather, a topk and a sum over [M, V]. A
position already committed reads nothing: its program writes zeros and ends (no host sync
decides which rows to launch).

select_commits: one program per batch row ranks the block's positions by pairwise
comparison (blocks are short, so P^2 compares in registers beat a sort) and marks the
quota best active ones.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _fused_confidence_kernel(
    logits_ptr, noise_ptr, active_ptr, tok_ptr, p_ptr, margin_ptr, negent_ptr,
    V, stride_l, stride_n, inv_temp,
    HAS_NOISE: tl.constexpr, HAS_ACTIVE: tl.constexpr, BLOCK_V: tl.constexpr,
):
    row = tl.program_id(0)
    base = logits_ptr + row * stride_l
    n_cols = V
    if HAS_ACTIVE:
        active = tl.load(active_ptr + row) != 0
        n_cols = tl.where(active, V, 0)  # a committed position: no iterations, nothing read
    m = tl.full((), float("-inf"), tl.float32)  # running max of logits
    s = tl.full((), 0.0, tl.float32)  # running sum of exp(logit - m)
    t = tl.full((), 0.0, tl.float32)  # running sum of exp(logit - m) * logit (for the entropy)
    top1 = tl.full((), float("-inf"), tl.float32)
    top2 = tl.full((), float("-inf"), tl.float32)
    if HAS_NOISE:
        best = tl.full((), float("-inf"), tl.float64)  # best Gumbel-perturbed score so far
    else:
        best = tl.full((), float("-inf"), tl.float32)
    best_idx = tl.full((), 0, tl.int32)
    best_logit = tl.full((), float("-inf"), tl.float32)
    for start in range(0, n_cols, BLOCK_V):
        cols = start + tl.arange(0, BLOCK_V)
        valid = cols < V
        x = tl.load(base + cols, mask=valid, other=-float("inf")).to(tl.float32)
        x = tl.where(x != x, -float("inf"), x)  # NaN (a float16 overflow upstream) never wins, never poisons the sums
        chunk_max = tl.max(x, axis=0)
        new_m = tl.maximum(m, chunk_max)
        # Until a finite logit is seen the running max is -inf, and exp(-inf - -inf) is NaN:
        # subtract a finite stand-in instead (every exp is then 0, and so is the sum so far).
        safe_m = tl.where(new_m == -float("inf"), 0.0, new_m)
        scale = tl.exp(m - safe_m)
        e = tl.where(valid, tl.exp(x - safe_m), 0.0)
        s = s * scale + tl.sum(e, axis=0)
        t = t * scale + tl.sum(e * tl.where(e > 0.0, x, 0.0), axis=0)  # no 0 * -inf from padding or banned ids
        m = new_m
        # Top two logits: merge the chunk's best two with the running pair.
        c1_idx = tl.argmax(x, axis=0, tie_break_left=True)
        c2 = tl.max(tl.where(cols == start + c1_idx, -float("inf"), x), axis=0)
        top2 = tl.maximum(tl.maximum(tl.minimum(top1, chunk_max), top2), c2)
        top1 = tl.maximum(top1, chunk_max)
        if HAS_NOISE:
            g = tl.load(noise_ptr + row * stride_n + cols, mask=valid, other=0.0)
            score = tl.where(valid, x.to(tl.float64) * inv_temp + g, -float("inf"))
        else:
            score = x
        idx = tl.argmax(score, axis=0, tie_break_left=True)
        chunk_best = tl.max(score, axis=0)
        better = chunk_best > best  # strict: the earliest index wins ties, as torch.argmax
        best_idx = tl.where(better, start + idx, best_idx)
        best_logit = tl.where(better, tl.max(tl.where(cols == start + idx, x, -float("inf")), axis=0), best_logit)
        best = tl.where(better, chunk_best, best)
    read = n_cols > 0
    s = tl.where(read, s, 1.0)  # a skipped row: finite placeholders, then zeros below
    m = tl.where(read, m, 0.0)
    log_s = tl.log(s)
    tl.store(tok_ptr + row, tl.where(read, best_idx, 0).to(tl.int64))
    tl.store(p_ptr + row, tl.where(read, tl.exp(best_logit - m) / s, 0.0))
    tl.store(margin_ptr + row, tl.where(read, (tl.exp(top1 - m) - tl.exp(top2 - m)) / s, 0.0))
    tl.store(negent_ptr + row, tl.where(read, t / s - m - log_s, 0.0))


def fused_confidence(logits: torch.Tensor, noise: torch.Tensor | None, temperature: float, active: torch.Tensor | None = None):
    """logits [M, V] (any float dtype), noise [M, V] float64 or None, active [M] bool or None
    -> (tokens, p, margin, -entropy), each [M]; rows that are not active get zeros."""
    M, V = logits.shape
    logits = logits.contiguous()
    out_tok = torch.empty(M, dtype=torch.long, device=logits.device)
    out_p, out_margin, out_negent = (torch.empty(M, dtype=torch.float32, device=logits.device) for _ in range(3))
    if M == 0:
        return out_tok, out_p, out_margin, out_negent
    has_noise = noise is not None
    noise_arg = noise.contiguous() if has_noise else logits  # unused pointer when no noise
    active_arg = active.to(torch.int8).contiguous() if active is not None else out_tok  # unused without
    block_v = min(4096, triton.next_power_of_2(V))
    _fused_confidence_kernel[(M,)](
        logits, noise_arg, active_arg, out_tok, out_p, out_margin, out_negent,
        V, logits.stride(0), noise_arg.stride(0), 1.0 / temperature if has_noise else 1.0,
        HAS_NOISE=has_noise, HAS_ACTIVE=active is not None, BLOCK_V=block_v,
    )
    return out_tok, out_p, out_margin, out_negent


@triton.jit
def _select_kernel(rank_ptr, active_ptr, quota_ptr, out_ptr, P, BLOCK_P: tl.constexpr, TILE: tl.constexpr):
    row = tl.program_id(0)
    i = tl.arange(0, BLOCK_P)
    valid_i = i < P
    act_i = tl.load(active_ptr + row * P + i, mask=valid_i, other=0) != 0
    r_i = tl.load(rank_ptr + row * P + i, mask=valid_i, other=-float("inf"))
    r_i = tl.where(act_i, r_i, -float("inf"))
    ahead = tl.zeros([BLOCK_P], dtype=tl.int32)  # active positions ranked before i
    for start in range(0, P, TILE):
        j = start + tl.arange(0, TILE)
        valid_j = j < P
        act_j = tl.load(active_ptr + row * P + j, mask=valid_j, other=0) != 0
        r_j = tl.load(rank_ptr + row * P + j, mask=valid_j, other=-float("inf"))
        beats = (r_j[None, :] > r_i[:, None]) | ((r_j[None, :] == r_i[:, None]) & (j[None, :] < i[:, None]))
        ahead += tl.sum((beats & act_j[None, :] & valid_j[None, :]).to(tl.int32), axis=1)
    quota = tl.load(quota_ptr + row)
    chosen = act_i & (ahead < quota)
    tl.store(out_ptr + row * P + i, chosen.to(tl.int8), mask=valid_i)


def select_commits(ranking: torch.Tensor, active: torch.Tensor, quota: torch.Tensor) -> torch.Tensor:
    """ranking/active [B, P], quota [B] -> commit mask [B, P] bool."""
    B, P = ranking.shape
    out = torch.zeros(B, P, dtype=torch.int8, device=ranking.device)
    if P == 0:
        return out.bool()
    _select_kernel[(B,)](
        ranking.float().contiguous(), active.to(torch.int8).contiguous(), quota.to(torch.int32).contiguous(), out,
        P, BLOCK_P=triton.next_power_of_2(P), TILE=min(32, triton.next_power_of_2(P)),
    )
    return out.bool()
