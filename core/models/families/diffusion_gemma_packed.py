"""DiffusionGemma's decoder pass for several runs at once: continuous batching of the random-token loop.

    view.canvas_logits(canvas, self_conditioning, context)   # a run's step, through core/batch.py
    -> CanvasPass handed to the StepBatcher -> packed_canvas_logits(model, passes) for the pack

Each run keeps its own canvas, encoder cache, schedule, seed and random stream
(core/loops/random_token.py runs as it does alone); only its decoder pass goes through the
batcher. The pass is transformers' own model (DiffusionGemmaForBlockDiffusion), not sharpen's
Transformer, so `packed_scores` cannot run it: this module is its packed forward, built from the
model's own submodules in the order its `forward` calls them.

**Packed rows, not padding.** Everything in a decoder step but attention works row by row: the
scaled embedding, self-conditioning (a row's previous logits, softmaxed, times the embedding, then
a gated MLP), the RMS norms, rotary at each row's own position, the q/k/v/o projections, the dense
MLP, the router (a token's top-k from its own scores, no capacity limit) and each expert (on the
rows routed to it), the final norm, the vocabulary projection and the soft cap. So the canvas rows
of every run are laid end to end, [1, N, hidden], and go through those once per step: one read of
the weights and one pass of the expert loop for the whole batch, which is where a step's cost is
(the experts run one expert at a time in eager mode, a launch per expert hit per layer). Attention
is the one place rows meet, and it runs per run, over that run's own keys: its encoder cache (the
context before its canvas, a different length per run; a sliding layer's cache keeps only its
window) followed by its own canvas, bidirectionally, by the same attention call transformers makes
for that run alone, with the run's own masks. Padding instead would pad every run's encoder cache
to the longest context and every canvas to the longest one and mask the pad keys, while the pass
alone runs with no mask at all (transformers drops it when nothing is padded), so a padded run
would go through another attention kernel than alone and could round differently, and the pad
rows would cost the row-wise work for nothing. Packed, no row of one run ever meets another run's
keys, and each run's logits are bit for bit those of its pass alone on the CPU
(tests/test_batching_random.py).

The encoder pass (the context, once per run) is not packed: it runs in the run's own thread,
beside the others' packed steps, as a run's host-side sampling does.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ...batch import Pass


@dataclass(eq=False)  # compared by identity, as Pass
class CanvasPass(Pass):
    """One run's decoder pass: its canvas (Pass.ids [B, C]) and what the decoder reads besides it."""

    self_conditioning: torch.Tensor | None = None  # [B, C, V] the run's previous logits; None on its first step
    context: object = None  # diffusion_gemma.Context: its encoder cache, masks and canvas positions


def canvas_pass(canvas: torch.Tensor, self_conditioning: torch.Tensor | None, context) -> CanvasPass:
    """A run's step as a pass for the batcher: every canvas row is computed and projected."""
    C = canvas.shape[1]
    return CanvasPass(canvas, context.positions[0], None, torch.arange(C, device=canvas.device),
                      self_conditioning=self_conditioning, context=context)


@torch.no_grad()  # as the pass alone (torchao's quantized experts refuse inference mode)
def packed_canvas_logits(model, passes: list[CanvasPass]) -> list[torch.Tensor]:
    """Every pass's logits [B, C, V] float32 from one packed decoder forward (see the module's notes).

    Follows DiffusionGemmaForBlockDiffusion.forward -> DiffusionGemmaDecoderModel.forward ->
    DiffusionGemmaDecoderTextLayer.forward (transformers 5.24) step for step, the attention per run."""
    decoder = model.model.decoder
    text = decoder.text_config
    sizes = [p.ids.numel() for p in passes]  # B * C rows each
    ids = torch.cat([p.ids.reshape(-1) for p in passes])[None]  # [1, N]
    embeds = decoder.embed_tokens(ids)  # [1, N, H]
    soft = _soft_embeddings(decoder, passes, embeds)  # [1, N, H]
    x = decoder.self_conditioning(embeds, soft)  # [1, N, H]
    positions = torch.cat([p.context.positions[0].repeat(p.ids.shape[0]) for p in passes])[None]  # [1, N] each row's own position
    rope = {kind: decoder.rotary_emb(x, positions, kind) for kind in decoder.unique_layer_types}  # cos, sin [1, N, D]
    for i, layer in enumerate(decoder.layers[: text.num_hidden_layers]):
        kind = text.layer_types[i]
        residual = x
        h = _attention(layer.self_attn, layer.input_layernorm(x), rope[kind], passes, sizes, kind)  # [1, N, H]
        x = residual + layer.post_attention_layernorm(h)
        residual = x
        dense = layer.post_feedforward_layernorm_1(layer.mlp(layer.pre_feedforward_layernorm(x)))  # [1, N, H]
        flat = residual.reshape(-1, residual.shape[-1])  # [N, H] all runs' rows routed together
        _, weights, experts = layer.router(flat)  # [N, K] each
        routed = layer.experts(layer.pre_feedforward_layernorm_2(flat), experts, weights).reshape(residual.shape)
        x = residual + layer.post_feedforward_layernorm(dense + layer.post_feedforward_layernorm_2(routed))
        x *= layer.layer_scalar
    logits = model.lm_head(decoder.norm(x)).to(torch.float32)  # [1, N, V]
    cap = model.final_logit_softcapping
    logits = torch.tanh(logits / cap) * cap
    return [part.view(*p.ids.shape, -1) for part, p in zip(logits[0].split(sizes), passes)]


def _soft_embeddings(decoder, passes: list[CanvasPass], embeds: torch.Tensor) -> torch.Tensor:
    """[1, N, H] each row's self-conditioning signal: its previous logits' expected embedding, zero
    for a run on its first step (as the decoder alone, given no logits)."""
    weight = decoder.embed_tokens.weight  # [V, H]
    given = [p.self_conditioning.reshape(-1, p.self_conditioning.shape[-1]) for p in passes if p.self_conditioning is not None]
    if not given:
        return torch.zeros_like(embeds)
    probs = torch.cat(given).softmax(dim=-1, dtype=torch.float32).to(weight.dtype)  # [M, V]
    soft = iter((probs @ weight * decoder.embed_tokens.embed_scale.to(embeds.dtype)).split(
        [p.ids.numel() for p in passes if p.self_conditioning is not None]))  # [rows, H] per run that has logits
    parts = [next(soft) if p.self_conditioning is not None else embeds.new_zeros(p.ids.numel(), embeds.shape[-1]) for p in passes]
    return torch.cat(parts)[None]


def _attention(attn, h: torch.Tensor, rope, passes: list[CanvasPass], sizes: list[int], kind: str) -> torch.Tensor:
    """DiffusionGemmaDecoderTextAttention.forward over packed rows [1, N, H]: the projections once,
    the attention per run over its own encoder cache then its own canvas. -> [1, N, H]"""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
    from transformers.models.diffusion_gemma.modeling_diffusion_gemma import apply_rotary_pos_emb, eager_attention_forward

    cos, sin = rope
    shape = (*h.shape[:-1], -1, attn.head_dim)
    q = apply_rotary_pos_emb(attn.q_norm(attn.q_proj(h).view(shape)), cos, sin, unsqueeze_dim=2)  # [1, N, Hq, D]
    k = attn.k_proj(h).view(shape)  # [1, N, Hkv, D]
    v = attn.v_norm(attn.v_proj(h).view(shape) if attn.v_proj is not None else k)  # full layers: values are the raw keys
    k = apply_rotary_pos_emb(attn.k_norm(k), cos, sin, unsqueeze_dim=2)
    interface = ALL_ATTENTION_FUNCTIONS.get_interface(attn.config._attn_implementation, eager_attention_forward)
    outs = []
    for p, q_p, k_p, v_p in zip(passes, q.split(sizes, 1), k.split(sizes, 1), v.split(sizes, 1)):
        B, C = p.ids.shape
        q_p, k_p, v_p = (t.reshape(B, C, *t.shape[2:]).transpose(1, 2) for t in (q_p, k_p, v_p))  # [B, heads, C, D]
        keys, values = attn.append_to_cache(p.context.cache, k_p, v_p)  # its own context's keys, then its canvas
        out, _ = interface(attn, q_p, keys, values, p.context.decoder_mask[kind], dropout=0.0, scaling=attn.scaling,
                           sliding_window=attn.sliding_window, is_causal=attn.is_causal)  # [B, C, Hq, D]
        outs.append(out.reshape(B * C, -1))  # [B*C, Hq*D]
    return attn.o_proj(torch.cat(outs)[None])  # [1, N, H]
