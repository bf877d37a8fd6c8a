"""Model families: how a checkpoint's files map onto the one backbone.

A family is pure data plus two small functions (core/families/family.py): how its
config.json becomes a ModelConfig, how its weight names map onto ours (declarative
templates with `{i}` for the layer index), and how its special ids are found. Detection
reads `model_type` from config.json, never the path. Every family is listed in FAMILIES.
"""
from __future__ import annotations

from ..errors import ModelError
from . import dream, llada, open_dcoder, sharpen_native
from .family import Family, expand_weight_map

__all__ = ["FAMILIES", "Family", "expand_weight_map", "family_for", "known_families"]

FAMILIES: tuple[Family, ...] = (sharpen_native.SHARPEN, llada.LLADA, dream.DREAM, open_dcoder.OPEN_DCODER)
# Families that do not map onto the backbone: they load through transformers' own model class.
TRANSFORMERS_FAMILIES = ("diffusion_gemma",)  # core/gemma.py


def known_families() -> list[str]:
    return sorted([f.name for f in FAMILIES] + list(TRANSFORMERS_FAMILIES))


def family_for(config: dict) -> Family:
    """The family whose `model_type` matches config.json; an unknown one is a ModelError."""
    model_type = config.get("model_type")
    for family in FAMILIES:
        if model_type in family.model_types:
            return family
    raise ModelError(
        f"unknown model family (config.json model_type={model_type!r}); known: {', '.join(known_families())}"
    )
