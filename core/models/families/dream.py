"""Dream, Dream-Coder and DiffuCoder: Qwen2.5 layout, `model_type: Dream`, shifted logits.

These are Qwen2.5 checkpoints adapted to masked diffusion: Qwen2 weight names (biases
on q/k/v only), full attention, and the autoregressive habit kept in the head: the
logits at position i predict token i+1, so the denoiser shifts them right by one.
Mask id 151666 (`<|mask|>`) is read from config.json or the tokenizer.
"""
from __future__ import annotations

from ..model import ModelConfig
from . import hf
from .family import Family

# Longest canvas we build a rotary table for: Qwen2.5 configs announce 32k-128k positions,
# an editor canvas never needs that many and the table would cost memory for nothing.
MAX_CANVAS = 32768

_LAYER_PREFIX = "model.layers.{i}."
_LAYER = {
    _LAYER_PREFIX + "input_layernorm.weight": "layers.{i}.attn_norm.weight",
    _LAYER_PREFIX + "self_attn.q_proj.weight": "layers.{i}.attn.wq.weight",
    _LAYER_PREFIX + "self_attn.q_proj.bias": "layers.{i}.attn.wq.bias",
    _LAYER_PREFIX + "self_attn.k_proj.weight": "layers.{i}.attn.wk.weight",
    _LAYER_PREFIX + "self_attn.k_proj.bias": "layers.{i}.attn.wk.bias",
    _LAYER_PREFIX + "self_attn.v_proj.weight": "layers.{i}.attn.wv.weight",
    _LAYER_PREFIX + "self_attn.v_proj.bias": "layers.{i}.attn.wv.bias",
    _LAYER_PREFIX + "self_attn.o_proj.weight": "layers.{i}.attn.wo.weight",
    _LAYER_PREFIX + "post_attention_layernorm.weight": "layers.{i}.ffn_norm.weight",
    _LAYER_PREFIX + "mlp.gate_proj.weight": "layers.{i}.ffn.w1.weight",
    _LAYER_PREFIX + "mlp.up_proj.weight": "layers.{i}.ffn.w3.weight",
    _LAYER_PREFIX + "mlp.down_proj.weight": "layers.{i}.ffn.w2.weight",
}
QWEN2_WEIGHT_MAP = {
    "model.embed_tokens.weight": "embed.weight",
    "model.norm.weight": "norm.weight",
    "lm_head.weight": "output.weight",  # absent with tie_word_embeddings
    **_LAYER,
}
QWEN2_SKIP = ("rotary_emb.inv_freq",)  # old exports saved the rotary buffer


def qwen2_config(c: dict) -> ModelConfig:
    """Qwen2-style config.json -> ModelConfig (Dream, DiffuCoder, Open-dCoder).

    An absent field is read with the default of transformers' Qwen2Config (which the releases'
    own config classes keep), except num_key_value_heads: Qwen2Config's default (32) is not
    the head count of a smaller model, so a config without it is refused rather than guessed.
    """
    if "num_key_value_heads" not in c:
        raise ValueError("it lacks 'num_key_value_heads', which changes the computation; refusing to guess")
    hf.refuse_unsupported(c)
    dim, n_heads = c["hidden_size"], c["num_attention_heads"]
    if c.get("head_dim") not in (None, dim // n_heads):
        raise ValueError(f"head_dim={c['head_dim']} differs from hidden_size/num_attention_heads")
    return ModelConfig(
        vocab_size=c["vocab_size"],
        dim=dim,
        n_layers=c["num_hidden_layers"],
        n_heads=n_heads,
        n_kv_heads=c["num_key_value_heads"] or n_heads,
        ffn_hidden=c["intermediate_size"],
        rope_theta=float(c.get("rope_theta", 10000.0)),
        norm_eps=float(c.get("rms_norm_eps", 1e-6)),
        max_seq_len=min(c.get("max_position_embeddings", MAX_CANVAS), MAX_CANVAS),
        qkv_bias=True,  # Qwen2 always has q/k/v biases
        tie_embeddings=bool(c.get("tie_word_embeddings", False)),
    )


def _special_ids(config: dict, tokenizer) -> dict:
    return hf.special_ids(config, tokenizer, mask_names=("<|mask|>",), turn_end_names=("<|im_end|>",))


DREAM = Family(
    name="dream",
    model_types=("Dream", "dream"),
    to_config=qwen2_config,
    weight_map=QWEN2_WEIGHT_MAP,
    shift_logits=True,
    special_ids=_special_ids,
    skip_keys=QWEN2_SKIP,
    tempered_scores=True,  # Dream's sample_tokens: confidence from the tempered, filtered distribution
)
