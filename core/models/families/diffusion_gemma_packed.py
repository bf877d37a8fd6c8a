"""DiffusionGemma's passes for several runs at once: continuous batching of the random-token loop.

    view.encode(ids, canvas_length)                          # a run's context, once: an EncodePass
    view.canvas_logits(canvas, self_conditioning, context)   # a run's step: a CanvasPass
    -> handed to the StepBatcher, whose pack runs as run_packed(model, passes) (one pass: run_alone)

Each run keeps its own canvas, encoder cache, schedule, seed and random stream
(core/loops/random_token.py runs as it does alone); only its passes go through the batcher. The
model is transformers' own (DiffusionGemmaForBlockDiffusion), not sharpen's Transformer, so
`packed_scores` cannot run it: this module is its packed forward, built from the model's own
submodules in the order its `forward` calls them.

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
would go through another attention kernel than alone and could round differently; the sliding
layers' caches differ in length by run too; and the pad rows would cost the row-wise work, and a
pass through the experts, for nothing. Packed, no row of one run ever meets another run's
keys, and each run's logits are bit for bit those of its pass alone on the CPU
(tests/test_batching_random.py).

The encoder pass (the context before the canvas, once per run) packs too: the encoder and the
decoder share every layer weight, so a run's encoder rows go through the same row-wise work in the
same pack as other runs' canvas rows, and attend causally (a sliding layer within its window) over
their own context, writing that run's own cache, as the encoder alone does. A run joining the batch
thus hands in its encoder pass beside the others' step, not a pass of its own they wait for.
Only where the encoder's tensors are the decoder's (`layers_shared`: transformers ties the
weights, not each layer's scalar buffer) do encoder rows ride the decoder's layers; otherwise
encoder passes run alone and the steps still pack.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ...batch import Pass


@dataclass
class Context:
    """The encoder's pass over the text before the canvas: its cache and where the canvas sits."""

    cache: object  # transformers DynamicCache, read (never written) by the decoder
    decoder_mask: dict  # the decoder's attention masks, built once per canvas shape
    positions: torch.Tensor  # [1, C] int32 canvas positions, after the context


@dataclass(eq=False)  # compared by identity, as Pass
class CanvasPass(Pass):
    """One run's decoder pass: its canvas (Pass.ids [B, C]) and what the decoder reads besides it."""

    self_conditioning: torch.Tensor | None = None  # [B, C, V] the run's previous logits; None on its first step
    context: Context | None = None  # its encoder cache, masks and canvas positions


@dataclass(eq=False)
class EncodePass(Pass):
    """One run's encoder pass: its context (Pass.ids [B, L]); what it yields is the run's Context."""

    canvas_length: int = 0  # the canvas the context is built for
    started: tuple | None = None  # (cache, encoder masks) while a forward runs it; a retry starts afresh


def canvas_pass(canvas: torch.Tensor, self_conditioning: torch.Tensor | None, context: Context) -> CanvasPass:
    """A run's step as a pass for the batcher: every canvas row is computed and projected."""
    C = canvas.shape[1]
    return CanvasPass(canvas, context.positions[0], None, torch.arange(C, device=canvas.device),
                      self_conditioning=self_conditioning, context=context)


def encode_pass(ids: torch.Tensor, canvas_length: int) -> EncodePass:
    """A run's encoder pass for the batcher: its context's rows, none projected to the vocabulary."""
    L = ids.shape[1]
    return EncodePass(ids, torch.arange(L, dtype=torch.int32, device=ids.device), None, torch.arange(0, device=ids.device),
                      canvas_length=canvas_length)


def _begin_context(model, ids: torch.Tensor) -> tuple:
    """(a fresh cache, the encoder's masks) for a context [B, L], as transformers' generate builds them."""
    from transformers import DynamicCache

    B, L = ids.shape
    cache = DynamicCache(config=model.config.get_text_config(decoder=True))
    positions = torch.arange(0, L, dtype=torch.int32, device=ids.device).unsqueeze(0)
    shape_only = torch.empty((B, L, 0), dtype=model.dtype, device=ids.device)
    masks = model.model.encoder.create_masks_for_generate(config=model.config, inputs_embeds=shape_only,
                                                         attention_mask=torch.ones((B, L), dtype=torch.bool, device=ids.device),
                                                         cache=cache, position_ids=positions, mm_token_type_ids=None)
    return cache, masks


def _finish_context(model, ids: torch.Tensor, cache, canvas_length: int) -> Context:
    """The Context of a filled cache: the decoder's masks over it and the canvas positions after it."""
    B, L = ids.shape
    decoder_attention = torch.ones((B, L + canvas_length), dtype=torch.bool, device=ids.device)
    decoder_mask = model.model.decoder.create_diffusion_decoder_attention_mask(
        config=model.config, inputs_embeds=torch.empty((B, canvas_length, 1), device=ids.device),
        cache=cache, decoder_attention_mask=decoder_attention)
    positions = torch.arange(L, L + canvas_length, dtype=torch.int32, device=ids.device).unsqueeze(0)
    return Context(cache, decoder_mask, positions)


def layers_shared(model) -> bool:
    """Whether the encoder's embedding and layers hold the decoder's tensors, so a pack may run encoder
    rows through the decoder's layers: transformers ties the weights, not the buffers (each layer's
    scalar), which a checkpoint could set apart; then the encoder's passes run alone."""
    inner = model.model

    def tensors(module, prefix: str) -> dict:
        return {prefix + n: t for n, t in (*module.named_parameters(remove_duplicate=False), *module.named_buffers(remove_duplicate=False))}

    encoder = tensors(inner.encoder.language_model.layers, "layers.") | tensors(inner.encoder.language_model.embed_tokens, "embed.")
    decoder = tensors(inner.decoder.layers, "layers.") | tensors(inner.decoder.embed_tokens, "embed.")
    try:
        return encoder.keys() == decoder.keys() and all(t is decoder[n] or torch.equal(t, decoder[n]) for n, t in encoder.items())
    except (RuntimeError, TypeError, NotImplementedError):  # a tensor subclass that cannot be compared: not shown shared
        return False


@torch.no_grad()  # as transformers' generate; torchao's quantized experts cannot run in inference mode
def run_alone(model, one: Pass):
    """One pass by the model's own call: an EncodePass -> its Context, a CanvasPass -> logits [B, C, V] float32."""
    if isinstance(one, EncodePass):
        cache, masks = _begin_context(model, one.ids)
        model.model.encoder(input_ids=one.ids.contiguous(), attention_mask=masks, cache=cache, position_ids=one.positions[None])
        return _finish_context(model, one.ids, cache, one.canvas_length)
    return model(decoder_input_ids=one.ids, self_conditioning_logits=one.self_conditioning, decoder_attention_mask=one.context.decoder_mask,
                 cache=one.context.cache, decoder_position_ids=one.context.positions).logits


@torch.no_grad()  # as the pass alone
def run_packed(model, passes: list[Pass]) -> list:
    """Every pass's result from one packed forward (see the module's notes): a CanvasPass's logits
    [B, C, V] float32, an EncodePass's Context (its cache written).

    Follows DiffusionGemmaForBlockDiffusion.forward -> DiffusionGemmaDecoderModel.forward ->
    DiffusionGemmaDecoderTextLayer.forward (transformers 5.24) step for step, and for an encoder
    pass DiffusionGemmaEncoderTextModel.forward, whose layers hold the same weights; attention per pass."""
    decoder = model.model.decoder
    text = decoder.text_config
    encoders = model.model.encoder.language_model.layers  # the same weights as decoder.layers; their attention writes the cache
    for p in passes:
        if isinstance(p, EncodePass):
            p.started = _begin_context(model, p.ids)
    sizes = [p.ids.numel() for p in passes]  # B * C or B * L rows each
    canvas = [i for i, p in enumerate(passes) if isinstance(p, CanvasPass)]
    ids = torch.cat([p.ids.reshape(-1) for p in passes])[None]  # [1, N]
    rows = list(decoder.embed_tokens(ids)[0].split(sizes))  # [B*C or B*L, H] each (the encoder's embedding is the same)
    if canvas:  # a canvas row adds its self-conditioning signal; a context row does not
        embeds = torch.cat([rows[i] for i in canvas])[None]  # [1, Nc, H]
        conditioned = decoder.self_conditioning(embeds, _soft_embeddings(decoder, [passes[i] for i in canvas], embeds))
        for i, part in zip(canvas, conditioned[0].split([sizes[i] for i in canvas])):
            rows[i] = part
    x = torch.cat(rows)[None]  # [1, N, H]
    positions = torch.cat([_positions(p).repeat(p.ids.shape[0]) for p in passes])[None]  # [1, N] each row's own position
    rope = {kind: decoder.rotary_emb(x, positions, kind) for kind in decoder.unique_layer_types}  # cos, sin [1, N, D]
    for i, layer in enumerate(decoder.layers[: text.num_hidden_layers]):
        kind = text.layer_types[i]
        residual = x
        h = _attention(layer.self_attn, encoders[i].self_attn, layer.input_layernorm(x), rope[kind], passes, sizes, kind)  # [1, N, H]
        x = residual + layer.post_attention_layernorm(h)
        residual = x
        dense = layer.post_feedforward_layernorm_1(layer.mlp(layer.pre_feedforward_layernorm(x)))  # [1, N, H]
        flat = residual.reshape(-1, residual.shape[-1])  # [N, H] all runs' rows routed together
        _, weights, experts = layer.router(flat)  # [N, K] each
        routed = layer.experts(layer.pre_feedforward_layernorm_2(flat), experts, weights).reshape(residual.shape)
        x = residual + layer.post_feedforward_layernorm(dense + layer.post_feedforward_layernorm_2(routed))
        x *= layer.layer_scalar
    out: list = [None] * len(passes)
    if canvas:  # only canvas rows are projected: an encoder pass leaves its cache, nothing else
        hidden = x[0].split(sizes)
        logits = model.lm_head(decoder.norm(torch.cat([hidden[i] for i in canvas])[None])).to(torch.float32)  # [1, Nc, V]
        cap = model.final_logit_softcapping
        logits = torch.tanh(logits / cap) * cap
        for i, part in zip(canvas, logits[0].split([sizes[i] for i in canvas])):
            out[i] = part.view(*passes[i].ids.shape, -1)  # [B, C, V]
    for i, p in enumerate(passes):
        if isinstance(p, EncodePass):
            out[i] = _finish_context(model, p.ids, p.started[0], p.canvas_length)
            p.started = None
    return out


def _positions(p: Pass) -> torch.Tensor:
    """[S] a pass's row positions: a context's from 0, a canvas's after its context."""
    return p.positions if isinstance(p, EncodePass) else p.context.positions[0]


def _soft_embeddings(decoder, passes: list[CanvasPass], embeds: torch.Tensor) -> torch.Tensor:
    """[1, N, H] each canvas row's self-conditioning signal: its previous logits' expected embedding,
    zero for a run on its first step (as the decoder alone, given no logits)."""
    weight = decoder.embed_tokens.weight  # [V, H]
    given = [p.self_conditioning.reshape(-1, p.self_conditioning.shape[-1]) for p in passes if p.self_conditioning is not None]
    if not given:
        return torch.zeros_like(embeds)
    probs = torch.cat(given).softmax(dim=-1, dtype=torch.float32).to(weight.dtype)  # [M, V]
    soft = iter((probs @ weight * decoder.embed_tokens.embed_scale.to(embeds.dtype)).split(
        [p.ids.numel() for p in passes if p.self_conditioning is not None]))  # [rows, H] per run that has logits
    parts = [next(soft) if p.self_conditioning is not None else embeds.new_zeros(p.ids.numel(), embeds.shape[-1]) for p in passes]
    return torch.cat(parts)[None]


def _attention(attn, encoder_attn, h: torch.Tensor, rope, passes: list[Pass], sizes: list[int], kind: str) -> torch.Tensor:
    """The attention layer over packed rows [1, N, H]: the projections once (the encoder's attention
    holds the same weights), the attention per pass. A canvas attends, bidirectionally, to its run's
    encoder cache and then itself (DiffusionGemmaDecoderTextAttention); a context attends causally to
    itself and writes its keys to its run's cache (DiffusionGemmaEncoderTextAttention). -> [1, N, H]"""
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
        B, S = p.ids.shape
        q_p, k_p, v_p = (t.reshape(B, S, *t.shape[2:]).transpose(1, 2) for t in (q_p, k_p, v_p))  # [B, heads, S, D]
        if isinstance(p, EncodePass):
            cache, masks = p.started
            module, mask = encoder_attn, masks[kind]
            keys, values = cache.update(k_p, v_p, encoder_attn.layer_idx)  # its own context's keys, kept for its decoder
        else:
            module, mask = attn, p.context.decoder_mask[kind]
            keys, values = attn.append_to_cache(p.context.cache, k_p, v_p)  # its own context's keys, then its canvas
        out, _ = interface(module, q_p, keys, values, mask, dropout=0.0, scaling=module.scaling,
                           sliding_window=module.sliding_window, is_causal=module.is_causal)  # [B, S, Hq, D]
        outs.append(out.reshape(B * S, -1))  # [B*S, Hq*D]
    return attn.o_proj(torch.cat(outs)[None])  # [1, N, H]
