"""What one attention pass sees and keeps: the KV cache, the `Attend` policy and the block-causal mask.

Moved out of core/models/model.py (as gpt-fast keeps its cache apart from the model): the loops
build these and hand them to the model per pass (core/loops/scaffold.py, core/batch.py), the
model only reads them, so they are the seam between a decode rule and the transformer.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


class KVCache:
    """Keys and values of a whole canvas, per layer: [B, Hkv, T, D].

    A forward pass over a chunk of positions writes that chunk's keys/values in and
    attends over the full cache, so the fixed context is computed once and reused.
    """

    def __init__(self, n_layers: int, batch: int, n_kv_heads: int, length: int, head_dim: int, dtype, device) -> None:
        shape = (batch, n_kv_heads, length, head_dim)
        # One device for all layers, or (a model spread over devices) each layer's own.
        devices = list(device) if isinstance(device, (list, tuple)) else [device] * n_layers
        self.k = [torch.zeros(shape, dtype=dtype, device=d) for d in devices]
        self.v = [torch.zeros(shape, dtype=dtype, device=d) for d in devices]
        self.length = length


@dataclass(frozen=True)
class Attend:
    """One pass's attention policy: which keys its positions see, and what it does to the cache.

    Without a cache the keys are the pass's own positions; with one, `write=True` first writes
    the chunk's keys/values at its positions and then attends over cache[:keys] (default: the
    whole cache), while `write=False` leaves the cache untouched and attends over cache[:keys]
    followed by the chunk's own keys/values (block diffusion's open block: finished blocks are
    read-only). `mask` [S, K] (True: query may see key, over those K keys in that order) narrows
    it further; None lets every query see every key.
    """

    mask: torch.Tensor | None = None
    keys: int | None = None
    write: bool = True


FULL = Attend()  # bidirectional over everything: the masked-diffusion families


def block_causal_mask(positions: torch.Tensor, keys: int, block: int) -> torch.Tensor:
    """[S, keys] bool: query at canvas position p sees key k iff k's block is not after p's
    (bidirectional inside a block, causal across blocks; blocks of `block` from position 0)."""
    key_blocks = torch.arange(keys, device=positions.device) // block  # [K]
    return key_blocks[None, :] <= (positions // block)[:, None]  # [S, K]
