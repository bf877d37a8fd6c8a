"""The random-token kind (DiffusionGemma): the request as one canvas, core/loops/random_token.py's loop.

An encoder-decoder: the text before the first span goes to the encoder, the rest is the
decoder's canvas (random_token.py split_canvas). Its schedule (temperatures, entropy bound,
stopping rule) is the release's generation_config.json; a user turns only the step budget, the
seed and the samples, and every other sampling setting is refused.

Concurrent runs share passes (core/batch.py): a server run's denoiser is then its view of the
batcher, whose `encode` and `canvas_logits` hand the run's pass to the step's pack
(core/models/families/diffusion_gemma_packed.py); the loop runs unchanged.
"""
from __future__ import annotations

from typing import Callable, Iterator, Protocol, runtime_checkable

import torch

from ..errors import UsageError
from ..models.denoiser import ModelSpec
from ..request import EditRequest
from ..settings import Sampling
from ..spans import Span
from ..tokenizer import Tokenizer
from .frame import Frame
from .kind import Prepared, model_name, plain_canvas, refuse_prompt_form, refuse_revise, refuse_unread
from .masked import LoopRules
from .random_token import renoise, split_canvas

READS = frozenset({"steps", "seed", "samples"})


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


class RandomTokenKind:
    name = "random-token"
    model = NoiseDenoiserLike
    noise = "random"

    def reads(self, denoiser, sampling: Sampling) -> frozenset[str]:
        return READS

    def settings(self, denoiser, request: EditRequest) -> Sampling:
        name = model_name(denoiser)
        if request.editing.candidates > 1:
            raise UsageError("--candidates needs a masked-diffusion model; this one starts from random tokens (use --samples for alternatives)")
        refuse_unread(request.sampling, READS, name, "its sampling schedule is the release's generation_config.json")
        refuse_prompt_form(request, name)
        refuse_revise(request, name, "its loop re-noises every slot it has not accepted")
        return request.sampling

    def prepare(self, denoiser, request: EditRequest, spans: list[Span], settings: Sampling, plan) -> Prepared:
        if plan is not None:
            raise UsageError("--candidates needs a masked-diffusion model; this one starts from random tokens (use --samples for alternatives)")
        return Prepared(denoiser, plain_canvas(denoiser, request, spans), settings)

    def frames(self, prepared: Prepared, should_stop: Callable[[], bool], rules: LoopRules) -> Iterator[Frame]:
        denoiser = prepared.denoiser
        layout = split_canvas(prepared.canvas, denoiser.bos_id, denoiser.canvas_length)
        return renoise(denoiser, layout, prepared.settings, should_stop, denoiser.spec.end_ids)

    def used(self, prepared: Prepared, done: Frame) -> dict:
        return {"steps": prepared.settings.steps or prepared.denoiser.schedule.max_steps}

    def slot_room(self, denoiser) -> int:
        return denoiser.canvas_length // 2  # its canvas is the decoder's block; the context lives in the encoder
