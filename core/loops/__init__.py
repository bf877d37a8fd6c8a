"""The denoising loops, one per kind of model, chosen from the kind the model declares.

    frames = run_loop(denoiser, canvas, settings, should_stop, rules)

A model's `spec.loop` (core/models/denoiser.py LOOPS) names its kind; `LOOP_PROTOCOLS` says what
each kind's loop reads from a model (tests/test_families.py holds every loaded model to the
protocol of its kind), and `run_loop` starts the loop for the kind. Every loop yields
core.loops.frame.Frame values, so front ends draw all kinds the same way.

- masked.py: masked diffusion over a bidirectional canvas (LLaDA, Dream, the embedded model).
- random_token.py: random-token refinement by an encoder-decoder (DiffusionGemma).
- block.py: block diffusion, each block against a read-only cache of the ones before it (SDAR).
- editing.py: block diffusion that also edits its own committed tokens (LLaDA2.1).
- subblock.py: block diffusion in sub-blocks with a token shift (Fast-dLLM v2).
"""
from __future__ import annotations

from functools import partial
from typing import Callable, Iterator, Protocol, runtime_checkable

import torch

from ..canvas import Canvas
from ..models.denoiser import LOOPS, DenoiserLike, ModelSpec
from ..errors import ModelError
from ..models.model import Attend, KVCache
from ..settings import Sampling
from ..tokenizer import Tokenizer
from .block import chained
from .editing import edit_denoise, edit_steps_per_block
from .subblock import subblock_denoise
from .frame import SLOT_STATES, Frame, SpanState
from .masked import LoopRules, denoise
from .random_token import renoise, split_canvas

__all__ = ["LOOPS", "LOOP_PROTOCOLS", "SLOT_STATES", "BlockDenoiserLike", "Frame", "LoopRules", "NoiseDenoiserLike",
           "SpanState", "run_loop", "slot_room"]


@runtime_checkable
class BlockDenoiserLike(Protocol):
    """What the block-causal loop (block.py) reads from a model: chunked passes under an
    attention policy (block-causal prefill, read-only open block, committing pass)."""

    spec: ModelSpec  # spec.block: block size, commit threshold, prompt form
    tokenizer: Tokenizer

    @property
    def device(self) -> torch.device: ...

    @property
    def max_len(self) -> int: ...

    @property
    def banned_ids(self) -> torch.Tensor: ...

    def logits(self, x: torch.Tensor, want: torch.Tensor | None = None, run: torch.Tensor | None = None,
               cache: KVCache | None = None, attend: Attend = ...) -> torch.Tensor: ...

    def new_cache(self, batch: int, length: int) -> KVCache: ...


@runtime_checkable
class NoiseDenoiserLike(Protocol):
    """What the random-token loop (random_token.py) reads from an encoder-decoder model."""

    spec: ModelSpec
    tokenizer: Tokenizer
    schedule: object  # core.gemma.Schedule: step budget, temperatures, entropy bound, stopping rule
    vocab_size: int
    canvas_length: int  # the decoder's canvas: slots plus the held text after them
    bos_id: int | None  # put before the encoder's context

    @property
    def device(self) -> torch.device: ...

    @property
    def max_len(self) -> int: ...

    @property
    def embedding_dtype(self) -> torch.dtype: ...  # self-conditioning logits are fed back in it

    def encode(self, ids: torch.Tensor, canvas_length: int) -> object: ...  # [B, L] -> the decoder's read-only context

    def canvas_logits(self, canvas: torch.Tensor, self_conditioning: torch.Tensor | None, context: object) -> torch.Tensor: ...


# What each kind's loop reads from a model.
LOOP_PROTOCOLS: dict[str, type] = {"masked": DenoiserLike, "random-token": NoiseDenoiserLike, "block-causal": BlockDenoiserLike}


def _masked(denoiser, canvas: Canvas, settings: Sampling, should_stop, rules: LoopRules) -> Iterator[Frame]:
    return denoise(denoiser, canvas, settings, should_stop, rules)


def _random_token(denoiser, canvas: Canvas, settings: Sampling, should_stop, rules: LoopRules) -> Iterator[Frame]:
    # An encoder-decoder: the text before the first span goes to the encoder, the rest is the canvas.
    layout = split_canvas(canvas, denoiser.bos_id, denoiser.canvas_length)
    return renoise(denoiser, layout, settings, should_stop, denoiser.spec.end_ids)


def _block_causal(denoiser, canvases: tuple[Canvas, ...], settings: Sampling, should_stop, rules: LoopRules) -> Iterator[Frame]:
    # One prompt canvas per span (core/prompted.py), run one after another; a release that edits
    # its own tokens (LLaDA2.1) runs its editing decode unless the user turned editing off.
    if denoiser.spec.block.edits and settings.editing != "off":
        return chained(denoiser, canvases, settings, should_stop, one=partial(edit_denoise, mode=settings.editing),
                       per_block=edit_steps_per_block(denoiser.spec.block.size))
    if denoiser.spec.block.sub_block:  # Fast-dLLM v2: sub-blocks and its token shift (subblock.py)
        return chained(denoiser, canvases, settings, should_stop, one=subblock_denoise)
    return chained(denoiser, canvases, settings, should_stop)


_RUNNERS: dict[str, Callable[..., Iterator[Frame]]] = {"masked": _masked, "random-token": _random_token, "block-causal": _block_causal}


def run_loop(denoiser, canvas: Canvas, settings: Sampling = Sampling(), should_stop: Callable[[], bool] = lambda: False,
             rules: LoopRules = LoopRules()) -> Iterator[Frame]:
    """The frames of the loop the model's kind declares (spec.loop). A block-causal model takes a
    tuple of prompt canvases, one per span (core/prompted.py); the others one canvas."""
    kind = denoiser.spec.loop
    if kind not in _RUNNERS:
        raise ModelError(f"no denoising loop for models of kind {kind!r} yet; known: {', '.join(_RUNNERS)}")
    return _RUNNERS[kind](denoiser, canvas, settings, should_stop, rules)


def slot_room(denoiser) -> int:
    """The most slots one span may grow to: half of what the loop denoises at once, so slots
    never crowd out all context (an encoder-decoder's canvas is its decoder's block; the
    context lives in the encoder)."""
    if denoiser.spec.loop == "random-token":
        return denoiser.canvas_length // 2
    return denoiser.max_len // 2
