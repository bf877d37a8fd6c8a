"""Rotary position embeddings, rotate-half convention (transformers' Llama and Qwen2; LLaDA's).

Moved out of core/models/model.py: the table and its application are the position math every
family's attention shares, with no module state; model.py's Transformer builds the table once
per dtype and its attention applies it.
"""
from __future__ import annotations

import torch


def rotary_table(head_dim: int, max_len: int, theta: float, device=None) -> torch.Tensor:
    """Each position's rotation as a [L, 2, 2, D/2] float32 table: entry [p, i, j] multiplies
    half i of a head (first or second) into half j of the result (see apply_rotary).

    The rotate-half convention (transformers' Llama, Qwen2; LLaDA's) is
    first' = first * cos - second * sin and second' = second * cos + first * sin.
    """
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32, device=device) / head_dim))  # [D/2]
    angles = torch.outer(torch.arange(max_len, dtype=torch.float32, device=device), inv_freq)  # [L, D/2]
    cos, sin = angles.cos(), angles.sin()
    from_first = torch.stack([cos, sin], dim=1)  # [L, 2 (to first, to second), D/2]
    from_second = torch.stack([-sin, cos], dim=1)
    return torch.stack([from_first, from_second], dim=1)  # [L, 2 (from), 2 (to), D/2]


def apply_rotary(x: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """Rotate-half RoPE in two kernels: a broadcast product of each half with its two table
    entries, then the sum over the source half. x [B, H, S, D]; table [S, 2, 2, D/2] in x's
    dtype (Transformer.rope) -> [B, H, S, D].

    In bfloat16 each product is rounded and the pair summed in float32 and rounded once: the
    same arithmetic as transformers' Llama/Qwen2 rotary in bfloat16 (cos and sin cast to the
    model's dtype). The previous form, x * cos + roll(x) * signed_sin with float32 upcasts,
    was six launches in bfloat16.
    """
    # Computed in [B, S, H, D] order, the projections' own layout (x is a transposed view of it):
    # the result keeps that layout, so attention's output reshapes back without a copy.
    halves = x.transpose(1, 2).unflatten(-1, (2, x.shape[-1] // 2)).unsqueeze(-2)  # [B, S, H, 2 (from), 1, D/2], a view
    rotated = (halves * table[:, None]).sum(-3)  # [B, S, H, 2, 2, D/2] -> [B, S, H, 2 (to), D/2]
    return rotated.flatten(-2).transpose(1, 2)  # [B, H, S, D]
