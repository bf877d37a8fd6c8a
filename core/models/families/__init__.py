"""Model families: how a checkpoint's files map onto the one backbone.

A family is pure data plus two small functions (core/models/families/family.py): how its
config.json becomes a ModelConfig, how its weight names map onto ours (declarative
templates with `{i}` for the layer index), and how its special ids are found. Detection
reads `model_type` from config.json, never the path. Every family is listed in FAMILIES.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...errors import ModelError
from . import dream, fast_dllm, llada, llada2, open_dcoder, sdar, sdar_moe, seed_diffcoder, sharpen_native
from .family import Family, expand_weight_map

__all__ = ["FAMILIES", "Family", "Route", "expand_weight_map", "family_for", "has_guidance", "known_families", "route"]

FAMILIES: tuple[Family, ...] = (sharpen_native.SHARPEN, llada.LLADA, dream.DREAM, open_dcoder.OPEN_DCODER, llada2.LLADA2, sdar.SDAR,
                                sdar_moe.SDAR_MOE, seed_diffcoder.STABLE_DIFFCODER,
                                fast_dllm.FAST_DLLM_V2)
# Releases recognised from config.json that sharpen cannot run yet: one line, exit 4, never a guess.
NOT_YET: dict[str, str] = {}  # (SDAR-30B-A3B, sdar_moe, runs since core/models/moe.py)
# Families that do not map onto the backbone: they load through transformers' own model class.
# model_type -> (family, loop kind)
TRANSFORMERS_FAMILIES = {"diffusion_gemma": ("diffusion_gemma", "random-token")}  # core/models/families/diffusion_gemma.py
# How a checkpoint is loaded: mapped onto core/models/model.py (core/models/loading.py), through transformers'
# own class (core/models/families/diffusion_gemma.py), or through the checkpoint's own code on the user's opt-in (core/models/remote_code.py).
LOADERS = ("backbone", "transformers", "remote")


@dataclass(frozen=True)
class Route:
    """Where a checkpoint goes, decided from its config.json alone, before anything is loaded."""

    loader: str  # one of LOADERS
    loop: str  # the denoising loop its model runs (core/models/denoiser.py LOOPS)
    family: str  # registry name, or the config's model_type for remote code


def has_guidance(family: str) -> bool:
    """Whether the family's reference generate takes classifier-free guidance (cfg_scale)."""
    return any(f.name == family and f.guidance for f in FAMILIES)


def known_families() -> list[str]:
    return sorted([f.name for f in FAMILIES] + list(TRANSFORMERS_FAMILIES))


def route(config: dict, trust_remote_code: bool = False) -> Route:
    """The loader and loop of a checkpoint from its config.json; an unknown family is a ModelError
    unless the user trusts the checkpoint's own code (then it runs as a masked model)."""
    model_type = config.get("model_type")
    if model_type in TRANSFORMERS_FAMILIES:
        family, loop = TRANSFORMERS_FAMILIES[model_type]
        return Route("transformers", loop, family)
    try:
        family = family_for(config)
    except ModelError as exc:
        if not trust_remote_code:
            hint = "; it ships its own modeling code: pass --trust-remote-code if you trust it" if config.get("auto_map") else ""
            raise ModelError(f"{exc}{hint}") from None
        return Route("remote", "masked", str(model_type))
    return Route("backbone", family.loop, family.name)


def family_for(config: dict) -> Family:
    """The family whose `model_type` matches config.json; an unknown one is a ModelError."""
    model_type = config.get("model_type")
    for family in FAMILIES:
        if model_type in family.model_types and (family.matches is None or family.matches(config)):
            return family
    if model_type in NOT_YET:
        raise ModelError(f"{NOT_YET[model_type]} (config.json model_type={model_type!r})")
    raise ModelError(
        f"unknown model family (config.json model_type={model_type!r}); known: {', '.join(known_families())}"
    )
