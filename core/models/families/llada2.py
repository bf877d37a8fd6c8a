"""LLaDA2.0 / LLaDA2.1 (inclusionAI, mini 16B-A1.4B and flash 100B-A6.1B): Ling 2.0's MoE backbone.

`model_type: "llada2_moe"`, remote code `modeling_llada2_moe.py` (never run here). The
arithmetic, as that file does it:
- attention: one fused `query_key_value` [(H + 2 Hkv) D, dim] (q heads, then k, then v),
  RMSNorm over each head's q and k (`query_layernorm` / `key_layernorm`; `use_qk_norm`, which
  the configuration class defaults to true and LLaDA2.0-mini's config.json leaves unstated),
  rotary over the first head_dim * partial_rotary_factor dims of each head (rotate-half,
  inv_freq over those dims), output `dense`;
- the first `first_k_dense_replace` layers a SwiGLU `mlp` of `intermediate_size`, the rest a
  mixture of experts: sigmoid router in float32 with `expert_bias` for selection only,
  group-limited top-k (`n_group`, `topk_group`), weights renormalised (the code does it for any
  top_k > 1, whatever `norm_topk_prob` says) and scaled by `routed_scaling_factor`, plus
  `num_shared_experts` shared experts as one MLP (core/models/moe.py);
- `word_embeddings`, final `norm`, untied `lm_head`; logits not shifted.
Special tokens come from the tokenizer: `<|mask|>` (156895 in the releases), `<|endoftext|>`
(156892, also config.json's pad_token_id), `<|role_end|>` ending a chat turn.
"""
from __future__ import annotations

from ..denoiser import BlockRule
from ..derived import Derived, stacked_experts
from ..model import ModelConfig
from ..moe import MoESpec
from . import hf
from .family import Family

_LAYER = "model.layers.{i}."
# Derived names (core/models/derived.py): q / k / v rows of the fused matrix, the experts packed [E, out, in].
QKV = _LAYER + "attention.query_key_value.weight"
QKV_BIAS = _LAYER + "attention.query_key_value.bias"
EXPERTS = _LAYER + "mlp.experts.{part}"

WEIGHT_MAP = {
    "model.word_embeddings.weight": "embed.weight",
    "model.norm.weight": "norm.weight",
    "lm_head.weight": "output.weight",
    _LAYER + "input_layernorm.weight": "layers.{i}.attn_norm.weight",
    QKV + "[q]": "layers.{i}.attn.wq.weight",
    QKV + "[k]": "layers.{i}.attn.wk.weight",
    QKV + "[v]": "layers.{i}.attn.wv.weight",
    QKV_BIAS + "[q]": "layers.{i}.attn.wq.bias",  # only with use_qkv_bias
    QKV_BIAS + "[k]": "layers.{i}.attn.wk.bias",
    QKV_BIAS + "[v]": "layers.{i}.attn.wv.bias",
    _LAYER + "attention.query_layernorm.weight": "layers.{i}.attn.q_norm.weight",
    _LAYER + "attention.key_layernorm.weight": "layers.{i}.attn.k_norm.weight",
    _LAYER + "attention.dense.weight": "layers.{i}.attn.wo.weight",
    _LAYER + "post_attention_layernorm.weight": "layers.{i}.ffn_norm.weight",
    # dense layers (before first_k_dense_replace)
    _LAYER + "mlp.gate_proj.weight": "layers.{i}.ffn.w1.weight",
    _LAYER + "mlp.up_proj.weight": "layers.{i}.ffn.w3.weight",
    _LAYER + "mlp.down_proj.weight": "layers.{i}.ffn.w2.weight",
    # mixture-of-experts layers
    _LAYER + "mlp.gate.weight": "layers.{i}.ffn.router",
    _LAYER + "mlp.gate.expert_bias": "layers.{i}.ffn.expert_bias",
    EXPERTS.replace("{part}", "gate_up_proj"): "layers.{i}.ffn.gate_up",
    EXPERTS.replace("{part}", "down_proj"): "layers.{i}.ffn.down",
    _LAYER + "mlp.shared_experts.gate_proj.weight": "layers.{i}.ffn.shared.w1.weight",
    _LAYER + "mlp.shared_experts.up_proj.weight": "layers.{i}.ffn.shared.w3.weight",
    _LAYER + "mlp.shared_experts.down_proj.weight": "layers.{i}.ffn.shared.w2.weight",
}

# Options whose other values change the computation in ways this backbone does not implement.
_REQUIRED = {
    "hidden_act": "silu",
    "use_bias": False,  # a bias on the attention output and MLPs
    "norm_head": False,  # a normalised output head
    "rope_scaling": None,
    "score_function": "sigmoid",  # the release's router is sigmoid whatever this says; refuse a contradiction
    "use_rmsnorm": True,
    "use_sliding_window": False,
}
# Keys without which the configuration class would substitute defaults of a different model.
_MUST_BE_STATED = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "vocab_size",
                   "intermediate_size", "num_experts", "num_experts_per_tok", "moe_intermediate_size")


def to_config(c: dict) -> ModelConfig:
    missing = [key for key in _MUST_BE_STATED if c.get(key) in (None, 0)]
    if missing:
        raise ValueError(f"it lacks {missing[0]!r}; LLaDA2's configuration class would put another model's default there")
    for key, wanted in _REQUIRED.items():
        if key in c and c[key] != wanted:
            raise ValueError(f"{key}={c[key]!r} is not supported (only {wanted!r})")
    heads = c["num_attention_heads"]
    head_dim = c.get("head_dim") or c["hidden_size"] // heads
    # The code rotates head_dim * partial_rotary_factor dims (its `rotary_dim` key is not read).
    rotary_dim = int(head_dim * c.get("partial_rotary_factor", 0.5))
    moe = MoESpec(
        n_experts=c["num_experts"],
        top_k=c["num_experts_per_tok"],
        expert_hidden=c["moe_intermediate_size"],
        scoring="sigmoid",
        selection_bias=True,  # the gate always registers expert_bias (moe_router_enable_expert_bias is not read)
        n_group=c.get("n_group", 8),
        topk_group=c.get("topk_group", 4),
        norm_topk_prob=True,  # renormalised for any top_k > 1: the code does not read norm_topk_prob
        scaling=float(c.get("routed_scaling_factor", 2.5)),
        n_shared=c.get("num_shared_experts") or 0,
        first_dense=c.get("first_k_dense_replace", 0),
        router_float32=True,
    )
    return ModelConfig(
        vocab_size=c["vocab_size"],
        dim=c["hidden_size"],
        n_layers=c["num_hidden_layers"],
        n_heads=heads,
        n_kv_heads=c["num_key_value_heads"],
        ffn_hidden=c["intermediate_size"],
        rope_theta=float(c.get("rope_theta", 10000.0)),
        norm_eps=float(c.get("rms_norm_eps", 1e-5)),
        max_seq_len=c.get("max_position_embeddings", 16384),
        qkv_bias=bool(c.get("use_qkv_bias", False)),
        tie_embeddings=bool(c.get("tie_word_embeddings", False)),
        head_dim=head_dim,
        qk_norm=bool(c.get("use_qk_norm", True)),
        rotary_dim=rotary_dim,
        moe=moe,
    )


def derived(cfg: ModelConfig) -> dict[str, Derived]:
    """q / k / v out of the fused matrix; per-expert matrices packed [E, out, in] per MoE layer."""
    out: dict[str, Derived] = {}
    H, Hkv, D, dim = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, cfg.dim
    bounds = {"q": (0, H * D), "k": (H * D, (H + Hkv) * D), "v": ((H + Hkv) * D, (H + 2 * Hkv) * D)}
    for i in range(cfg.n_layers):
        for part, (a, b) in bounds.items():
            out[QKV.format(i=i) + f"[{part}]"] = Derived(((QKV.format(i=i), a, b),), (b - a, dim))
            if cfg.qkv_bias:
                out[QKV_BIAS.format(i=i) + f"[{part}]"] = Derived(((QKV_BIAS.format(i=i), a, b),), (b - a,))
        moe = cfg.moe
        if moe is None or not moe.is_moe_layer(i):
            continue
        gate_up, down = stacked_experts(_LAYER.format(i=i) + "mlp.experts.{j}.{part}.weight", moe.n_experts, moe.expert_hidden, dim)
        out[EXPERTS.format(i=i, part="gate_up_proj")] = gate_up
        out[EXPERTS.format(i=i, part="down_proj")] = down
    return out


# The releases' generate defaults: blocks of 32; LLaDA2.0 commits every masked token above 0.95
# (at least one a step); LLaDA2.1 also edits committed tokens (core/loops/editing.py, its own
# thresholds per mode). Both are chat models. Their config.json files are alike, so the editing
# decode is a setting (Sampling.editing, default quality) rather than read from the files.
BLOCK_SIZE = 32
THRESHOLD = 0.95


def block_rule(c: dict) -> BlockRule:
    # Both generates return the answer up to its first eos; 2.0's clamps its steps to the answer's length.
    return BlockRule(size=BLOCK_SIZE, threshold=THRESHOLD, prompt="chat", edits=True, cut_at_end=True, steps_within_answer=True)


def _special_ids(config: dict, tokenizer) -> dict:
    return hf.special_ids(config, tokenizer, mask_names=("<|mask|>",), turn_end_names=("<|role_end|>",))


LLADA2 = Family(
    name="llada2",
    model_types=("llada2_moe",),
    to_config=to_config,
    weight_map=WEIGHT_MAP,
    shift_logits=False,
    special_ids=_special_ids,
    derived=derived,
    loop="block-causal",
    block_rule=block_rule,
)
