"""The native backbone's packed forward: several runs' passes as one sequence of rows.

Row-wise work (embedding, norms, rotary at each row's own position, the q/k/v, output and
feed-forward matmuls, the vocabulary projection) runs once over every pass's rows laid end to
end; attention runs per pass, over that pass's own keys (its canvas, or its own cache up to its
own key length), exactly as Transformer.hidden runs it for that pass alone. Nothing is padded, so
no row can attend to a pad and each pass's logits are its own (tests/test_batching.py).

A pass is anything with `ids` [b, S], `positions` [S], `cache`, `rows` [W] and `attend`, as
core/batch.py's Pass; the batcher decides which passes share a pack, this module only runs one.
DiffusionGemma's encoder-decoder has its own (families/diffusion_gemma_packed.py), and a compiled
denoiser a bucketed one (compiled_pack.py).
"""
from __future__ import annotations

import torch

from .model import Transformer


def packed_scores(model: Transformer, passes: list) -> list[torch.Tensor]:
    """Every pass's logits [b, W, V] from one packed forward (see the module's notes).

    Row-wise work runs once over all passes' rows laid end to end, [1, N, dim]; attention runs
    per pass, over its own keys, exactly as Transformer.hidden runs it for that pass alone."""
    device = model.embed.weight.device
    longest = max(max(p.ids.shape[1], p.cache.length if p.cache is not None else 0) for p in passes)
    if longest > model.cfg.max_seq_len:
        raise ValueError(f"canvas of {longest} tokens exceeds max_seq_len {model.cfg.max_seq_len}")
    sizes = [p.ids.numel() for p in passes]  # b * S rows each
    ids = torch.cat([p.ids.reshape(-1) for p in passes])[None]  # [1, N]
    positions = torch.cat([p.positions.repeat(p.ids.shape[0]) for p in passes])  # [N] each row's own position
    x = model.embed(ids)  # [1, N, dim]
    rope = model.rope(device, longest, x.dtype)[positions]  # [N, 2, 2, D/2]
    for i, layer in enumerate(model.layers):
        attn = layer.attn
        q, k, v = attn.project(layer.attn_norm(x), rope)  # [1, H, N, D], [1, Hkv, N, D] x2
        outs = []
        for p, q_p, k_p, v_p in zip(passes, q.split(sizes, 2), k.split(sizes, 2), v.split(sizes, 2)):
            b, S = p.ids.shape
            per_run = [t.reshape(t.shape[1], b, S, t.shape[3]).transpose(0, 1) for t in (q_p, k_p, v_p)]  # [b, H or Hkv, S, D]
            layer_cache = None if p.cache is None else (p.cache.k[i], p.cache.v[i])
            # Its own keys: FULL over its canvas or cache, or a block-causal run's cache[:k*size]
            # then its open block (p.attend.keys differs per run: nothing to pad).
            outs.append(attn.attend(*per_run, p.positions, layer_cache, p.attend).reshape(b * S, -1))  # [b*S, H D]
        x = layer.feed_forward(x + attn.output(torch.cat(outs)[None]))  # [1, N, dim]
    hidden = [h.view(p.ids.shape[0], p.ids.shape[1], -1)[:, p.rows] for p, h in zip(passes, x[0].split(sizes))]  # [b, W, dim] each
    wanted = [h.shape[0] * h.shape[1] for h in hidden]
    logits = model.project(torch.cat([h.reshape(-1, h.shape[-1]) for h in hidden])[None])[0]  # [sum b*W, V]
    return [part.view(h.shape[0], h.shape[1], -1) for part, h in zip(logits.split(wanted), hidden)]

