"""The denoising loops, one kind per way a model turns noise into text, chosen from the kind it declares.

    frames = run_loop(denoiser, canvas, settings, should_stop, rules)

A model's `spec.loop` names its kind, a row of the table in kinds.py. Each kind (kind.py's
`Kind`) owns its path from an edit request to frames: the settings it reads, the canvases it
builds, its loop. Every loop yields core.loops.frame.Frame values, so front ends draw all
kinds the same way.

- masked_kind.py + masked.py: masked diffusion over a bidirectional canvas (LLaDA, Dream, the embedded model).
- random_token_kind.py + random_token.py: random-token refinement by an encoder-decoder (DiffusionGemma).
- block_causal_kind.py: block diffusion, a prompt per span, one decode rule per release, each on
  scaffold.py's shared set-up: block.py (SDAR, Stable-DiffCoder, LLaDA2.0), subblock.py
  (Fast-dLLM v2), editing.py (LLaDA2.1 edits its own tokens).
"""
from __future__ import annotations

from typing import Callable, Iterator

from ..canvas import Canvas
from ..settings import Sampling
from .block_causal_kind import BlockDenoiserLike
from .frame import SLOT_STATES, Frame, SpanState
from .kind import Kind, Prepared
from .kinds import KINDS, kind_of
from .masked import LoopRules
from .random_token_kind import NoiseDenoiserLike

__all__ = ["KINDS", "LOOPS", "LOOP_PROTOCOLS", "SLOT_STATES", "BlockDenoiserLike", "Frame", "Kind", "LoopRules",
           "NoiseDenoiserLike", "Prepared", "SpanState", "kind_of", "run_loop", "slot_room"]

LOOPS = tuple(KINDS)  # the kinds' names
# What each kind's loop reads from a model (tests/test_families.py holds every loaded model to it).
LOOP_PROTOCOLS: dict[str, type] = {name: kind.model for name, kind in KINDS.items()}


def run_loop(denoiser, canvas: Canvas | tuple[Canvas, ...], settings: Sampling = Sampling(),
             should_stop: Callable[[], bool] = lambda: False, rules: LoopRules = LoopRules()) -> Iterator[Frame]:
    """The frames of the loop of the model's kind over canvases already built (a block-causal
    model takes a tuple of prompt canvases, one per span: core/prompted.py; the others one)."""
    kind = kind_of(denoiser)
    return kind.frames(Prepared(denoiser, canvas, settings), should_stop, rules)


def slot_room(denoiser) -> int:
    """The most slots one span may grow to: half of what the loop denoises at once, so slots
    never crowd out all context."""
    return kind_of(denoiser).slot_room(denoiser)
