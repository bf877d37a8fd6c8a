"""What a model family is: pure data that says how a checkpoint maps onto the one backbone.

Each member module of core/families defines one Family value; core/models/families/__init__.py
lists them in one tuple. Detection reads `model_type` from config.json, never the path.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from ..model import ModelConfig


@dataclass(frozen=True)
class Family:
    name: str  # registry key, also the `model_type` values that select it
    model_types: tuple[str, ...]  # config.json `model_type` values that mean this family
    to_config: Callable[[dict], ModelConfig]  # config.json -> our ModelConfig
    weight_map: dict[str, str]  # checkpoint key template -> backbone key template
    shift_logits: bool = False  # Dream-style shifted logits
    special_ids: Callable[[dict, object], dict] = field(default=lambda cfg, tok: {})  # -> mask/pad/eos ids
    skip_keys: tuple[str, ...] = ()  # checkpoint keys with no counterpart (rotary caches, ...)
    tempered_scores: bool = False  # the reference ranks commits by the tempered probability (see ModelSpec)
    default_refresh: str = "canvas"  # Fast-dLLM's published refresh; the embedded model measured block as well
    # Backbone tensors no single checkpoint tensor holds (fused q|k|v, per-expert matrices): core/models/derived.py
    derived: Callable[[ModelConfig], dict] | None = None
    loop: str = "masked"  # the denoising loop its models run (core/models/denoiser.py LOOPS)
    block_rule: Callable[[dict], object] | None = None  # block-causal: config.json -> core.denoiser.BlockRule
    # The reference generate takes cfg_scale (classifier-free guidance, the prompt masked as the
    # unconditional pass): LLaDA's generate.py. Dream's diffusion_generate, SDAR's, ... have none.
    guidance: bool = False
    # Where model_type alone is not enough (Stable-DiffCoder says "llama"): config.json -> is it this family?
    matches: Callable[[dict], bool] | None = None


def expand_weight_map(family: Family, n_layers: int) -> dict[str, str]:
    """Templates with {i} become one entry per layer: checkpoint key -> backbone key."""
    out: dict[str, str] = {}
    for src, dst in family.weight_map.items():
        if "{i}" in src:
            for i in range(n_layers):
                out[src.format(i=i)] = dst.format(i=i)
        else:
            out[src] = dst
    return out
