"""LLaDA (GSAI-ML/LLaDA-8B-Base, -Instruct, LLaDA-1.5): OLMo-style config and weight names.

The released modeling_llada.py runs a Llama block (`block_type: llama`) with full
attention: RMSNorm, rotate-half RoPE, SwiGLU where `ff_proj` is the gate (the activation
is applied to it) and `up_proj` the linear branch, `ff_out` the down projection, and
the output head also called `ff_out` at the transformer level. Mask id 126336
(`<|mdm_mask|>`) is read from config.json or the tokenizer; logits are not shifted.
"""
from __future__ import annotations

from ..model import ModelConfig
from . import hf
from .family import Family

_BLOCK = "model.transformer.blocks.{i}."
_LAYER = {
    _BLOCK + "attn_norm.weight": "layers.{i}.attn_norm.weight",
    _BLOCK + "q_proj.weight": "layers.{i}.attn.wq.weight",
    _BLOCK + "k_proj.weight": "layers.{i}.attn.wk.weight",
    _BLOCK + "v_proj.weight": "layers.{i}.attn.wv.weight",
    _BLOCK + "q_proj.bias": "layers.{i}.attn.wq.bias",  # only with include_qkv_bias
    _BLOCK + "k_proj.bias": "layers.{i}.attn.wk.bias",
    _BLOCK + "v_proj.bias": "layers.{i}.attn.wv.bias",
    _BLOCK + "attn_out.weight": "layers.{i}.attn.wo.weight",
    _BLOCK + "ff_norm.weight": "layers.{i}.ffn_norm.weight",
    _BLOCK + "ff_proj.weight": "layers.{i}.ffn.w1.weight",  # gate: act(ff_proj(x)) * up_proj(x)
    _BLOCK + "up_proj.weight": "layers.{i}.ffn.w3.weight",  # up
    _BLOCK + "ff_out.weight": "layers.{i}.ffn.w2.weight",  # down
}
WEIGHT_MAP = {
    "model.transformer.wte.weight": "embed.weight",
    "model.transformer.ln_f.weight": "norm.weight",
    "model.transformer.ff_out.weight": "output.weight",  # absent with weight_tying
    **_LAYER,
}

# Options of the OLMo config that change the computation; the backbone implements one value each.
_REQUIRED = {
    "block_type": "llama",
    "activation_type": "silu",
    "layer_norm_type": "rms",
    "include_bias": False,  # biases on every linear layer
    "attention_layer_norm": False,  # q/k norms
    "alibi": False,
    "rope": True,
    "scale_logits": False,
    "input_emb_norm": False,
}


# Fields whose absence LLaDA's own configuration class fills with a default that computes something
# else than the released models (and than this backbone): LayerNorm for layer_norm_type, a plain
# sequential block, no RoPE, biases everywhere, tied weights. A config without one is refused, not guessed.
_MUST_BE_STATED = ("block_type", "activation_type", "layer_norm_type", "rope", "include_bias", "weight_tying")


def to_config(c: dict) -> ModelConfig:
    missing = [key for key in _MUST_BE_STATED if key not in c]
    if missing:
        raise ValueError(f"it lacks {missing[0]!r}, which changes the computation (LLaDA's own code would default it "
                         "to something else than the released models); refusing to guess")
    for key, wanted in _REQUIRED.items():
        if key in c and c[key] != wanted:
            raise ValueError(f"{key}={c[key]!r} is not supported (only {wanted!r})")
    n_heads = c["n_heads"]
    n_kv_heads = c.get("n_kv_heads") or (1 if c.get("multi_query_attention") else n_heads)
    return ModelConfig(
        vocab_size=c.get("embedding_size") or c["vocab_size"],  # the embedding may be padded past the tokenizer
        dim=c["d_model"],
        n_layers=c["n_layers"],
        n_heads=n_heads,
        n_kv_heads=n_kv_heads,
        ffn_hidden=c.get("mlp_hidden_size") or c.get("mlp_ratio", 4) * c["d_model"],
        rope_theta=float(c.get("rope_theta", 10000.0)),
        norm_eps=float(c.get("rms_norm_eps", 1e-5)),
        max_seq_len=c.get("max_sequence_length", 4096),
        qkv_bias=bool(c.get("include_qkv_bias", False)),
        tie_embeddings=bool(c.get("weight_tying", False)),
    )


def _special_ids(config: dict, tokenizer) -> dict:
    return hf.special_ids(config, tokenizer, mask_names=("<|mdm_mask|>",), turn_end_names=("<|eot_id|>",))


LLADA = Family(
    name="llada",
    model_types=("llada", "LLaDA"),
    to_config=to_config,
    weight_map=WEIGHT_MAP,
    shift_logits=False,
    special_ids=_special_ids,
    guidance=True,  # generate.py's cfg_scale (core/loops/guidance.py Guided)
)
