"""SDAR-30B-A3B (JetAstra): block diffusion on a Qwen3-MoE backbone, `model_type: sdar_moe`.

Continued from Qwen3-30B-A3B, so its weights carry Qwen3-MoE's names: the dense SDAR attention
(q/k/v/o, per-head q/k RMSNorm; core/models/families/sdar.py) and in every layer a router
`mlp.gate` [E, dim] and one matrix per expert and projection `mlp.experts.{j}.{gate,up,down}_proj`,
packed at load into [E, out, in] (core/models/derived.py). Routing is Qwen3-MoE's (transformers'
Qwen3MoeTopKRouter, JetEngine's SDARMoeSparseMoeBlock): softmax over the experts in float32,
top `num_experts_per_tok`, renormalised when `norm_topk_prob`; no shared expert, no bias.
Blocks of `block_size` (4), mask `<|MASK|>`, chat template and loop as the dense SDAR.
"""
from __future__ import annotations

import dataclasses

from ..derived import Derived, stacked_experts
from ..model import ModelConfig
from ..moe import MoESpec
from . import sdar

_LAYER = "model.layers.{i}."
EXPERTS = _LAYER + "mlp.experts.{part}"  # derived names: the packed experts of layer i

WEIGHT_MAP = {
    **{src: dst for src, dst in sdar.QWEN3_WEIGHT_MAP.items() if ".mlp." not in src},
    _LAYER + "mlp.gate.weight": "layers.{i}.ffn.router",
    EXPERTS.replace("{part}", "gate_up_proj"): "layers.{i}.ffn.gate_up",
    EXPERTS.replace("{part}", "down_proj"): "layers.{i}.ffn.down",
}


def to_config(c: dict) -> ModelConfig:
    dense = sdar._to_config(c)  # attention, norms, block size: as the dense SDAR
    for key in ("num_experts", "num_experts_per_tok", "moe_intermediate_size"):
        if not c.get(key):
            raise ValueError(f"it lacks {key!r}; refusing to guess the experts")
    # Qwen3-MoE makes layer i sparse when (i + 1) % decoder_sparse_step == 0 and i is not in
    # mlp_only_layers; the release has every layer sparse, the one layout built here.
    if c.get("decoder_sparse_step", 1) != 1 or c.get("mlp_only_layers"):
        raise ValueError("dense layers between the MoE layers (decoder_sparse_step / mlp_only_layers) are not supported")
    moe = MoESpec(n_experts=c["num_experts"], top_k=c["num_experts_per_tok"], expert_hidden=c["moe_intermediate_size"],
                  scoring="softmax", norm_topk_prob=bool(c.get("norm_topk_prob", False)))
    return dataclasses.replace(dense, moe=moe)


def derived(cfg: ModelConfig) -> dict[str, Derived]:
    out: dict[str, Derived] = {}
    for i in range(cfg.n_layers):
        template = _LAYER.format(i=i) + "mlp.experts.{j}.{part}.weight"
        gate_up, down = stacked_experts(template, cfg.moe.n_experts, cfg.moe.expert_hidden, cfg.dim)
        out[EXPERTS.format(i=i, part="gate_up_proj")] = gate_up
        out[EXPERTS.format(i=i, part="down_proj")] = down
    return out


SDAR_MOE = dataclasses.replace(sdar.SDAR, name="sdar_moe", model_types=("sdar_moe",), to_config=to_config,
                               weight_map=WEIGHT_MAP, derived=derived)
