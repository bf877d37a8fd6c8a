"""Classifier-free guidance for the masked loop, as LLaDA's reference generate does it (cfg_scale > 0).

Moved out of core/loops/masked.py: guidance is a wrapper around the denoiser plus the refusal
for families whose reference has none, and neither needs the loop's step machinery.
"""
from __future__ import annotations

import torch

from ..errors import UsageError
from ..models.denoiser import ModelSpec
from ..models.families import has_guidance
from ..settings import Sampling


def refuse_unguided(spec: ModelSpec, settings: Sampling) -> None:
    """--cfg-scale on a model whose reference generate has no classifier-free guidance: one line, exit 2."""
    if settings.cfg_scale > 0 and not has_guidance(spec.family):
        raise UsageError(f"--cfg-scale is classifier-free guidance as LLaDA's reference generate does it; "
                         f"{spec.family} models' reference has none (drop --cfg-scale)")


class Guided:
    """Classifier-free guidance around a denoiser, as LLaDA's generate does it at cfg_scale > 0:
    each pass also runs the unconditional canvas (every prompt position masked) as the second
    half of one batch, and the logits are un + (scale + 1) * (cond - un). A KV cache holds both
    halves (2B rows). Everything else is the wrapped denoiser's."""

    def __init__(self, denoiser, prompt: torch.Tensor, scale: float) -> None:
        self._inner, self._prompt, self._scale = denoiser, prompt, scale  # prompt: [B, T] bool

    def __getattr__(self, name: str):
        return getattr(self._inner, name)

    def new_cache(self, batch: int, length: int):
        return self._inner.new_cache(2 * batch, length)

    def logits(self, x: torch.Tensor, want: torch.Tensor | None = None, run: torch.Tensor | None = None, cache=None) -> torch.Tensor:
        unconditional = x.masked_fill(self._prompt, self._inner.spec.mask_id)  # [B, T]
        both = self._inner.logits(torch.cat([x, unconditional]), want=want, run=run, cache=cache)  # [2B, W, V]
        cond, uncond = both.chunk(2)  # [B, W, V] each
        return uncond + (self._scale + 1) * (cond - uncond)
