"""Model families: how a checkpoint's files map onto the one backbone.

A family is pure data plus two small functions: how its config.json becomes a
ModelConfig, how its weight names map onto ours (declarative templates with `{i}` for the
layer index), and how its special ids are found. Detection reads `model_type` from
config.json, never the path.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from ..errors import ModelError
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


_REGISTRY: dict[str, Family] = {}


def register(family: Family) -> Family:
    _REGISTRY[family.name] = family
    return family


def known_families() -> list[str]:
    _load_builtin()
    return sorted(_REGISTRY)


def family_for(config: dict) -> Family:
    """The family whose `model_type` matches config.json; an unknown one is a ModelError."""
    _load_builtin()
    model_type = config.get("model_type")
    for family in _REGISTRY.values():
        if model_type in family.model_types:
            return family
    raise ModelError(
        f"unknown model family (config.json model_type={model_type!r}); known: {', '.join(known_families())}"
    )


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


def _load_builtin() -> None:
    # Importing the modules registers them; kept lazy so the registry has no import cycle.
    from . import dream, llada, open_dcoder, sharpen_native  # noqa: F401
