"""The table of loop kinds: a model's `spec.loop` names its row.

    KINDS["masked"].frames(...)      # or kind_of(denoiser)

A new kind is one file with a class that has the members of core/loops/kind.py's `Kind` and
one entry here; a family then declares `loop="<name>"` (tests/test_kinds.py adds a toy one).
"""
from __future__ import annotations

from ..errors import ModelError
from .block_causal_kind import BlockCausalKind
from .kind import Kind
from .masked_kind import MaskedKind
from .random_token_kind import RandomTokenKind

KINDS: dict[str, Kind] = {
    "masked": MaskedKind(),
    "random-token": RandomTokenKind(),
    "block-causal": BlockCausalKind(),
}


def kind_of(denoiser) -> Kind:
    """The Kind a model declares (spec.loop); ModelError for a kind this table does not hold."""
    name = denoiser.spec.loop
    if name not in KINDS:
        raise ModelError(f"no denoising loop for models of kind {name!r}; known: {', '.join(KINDS)}")
    return KINDS[name]
