"""What the masked loop does to a span's slots besides denoising them: a rewrite span's tokens
re-noised before the first step, an infill span's length decided from one pass over the masked
canvas, and the slots after a committed pad/eos padded at once.

Moved out of core/loops/masked.py, whose loop calls these at the start of a run and after each
step; they read and write the canvas tensors in place and hold no loop state.
"""
from __future__ import annotations

import math

import torch

from ..canvas import Canvas
from ..constraints.steering import Steering
from ..models.denoiser import DenoiserLike


def renoise_rewrites(denoiser: DenoiserLike, canvas: Canvas, order: str, x: torch.Tensor, confidence: torch.Tensor, generator) -> None:
    """Re-mask a share of each rewrite span's own tokens, least confident first (in place on x)."""
    rewrites = [(span, r) for span, r in zip(canvas.spans, canvas.slots) if span.mode == "rewrite" and len(r)]
    if not rewrites:
        return
    if order == "confidence":
        p_now = denoiser.logits(x).softmax(-1).gather(-1, x[..., None]).squeeze(-1)  # [B, T]
        confidence.copy_(p_now)  # the kept tokens show how sure the model was of them
    else:
        p_now = torch.rand(x.shape, generator=generator, device=x.device, dtype=torch.float64).float()
        confidence.fill_(1.0)
    for span, r in rewrites:
        n = math.ceil(span.strength * len(r))  # strength 0 re-masks nothing: the draft comes back
        weakest = p_now[:, r.start:r.stop].argsort(dim=1, stable=True)[:, :n] + r.start  # [B, n]
        x.scatter_(1, weakest, denoiser.spec.mask_id)


def pad_after_end(x, spans: list[range], end_ids, mask_id: int, denoised, guesses) -> None:
    """Trained infills are content then pad: once a slot holds pad/eos, the masked slots
    after it in that span can only be pad. Committing them at once saves steps and keeps
    a confident early pad from leaving holes (in place; filled slots are not scored)."""
    pad = end_ids[0]
    for r in spans:
        region = x[:, r.start:r.stop]  # [B, S]
        ended = torch.isin(region, end_ids).cumsum(1) > 0  # at or after the first pad
        fill = ended & (region == mask_id)
        x[:, r.start:r.stop] = torch.where(fill, pad, region)
        guesses[:, r.start:r.stop] = torch.where(fill, pad, guesses[:, r.start:r.stop])
        denoised[:, r.start:r.stop] &= ~fill


def pad_past_expected_length(denoiser, x, slot_positions, spans: list[range], end_ids, mask_id: int, denoised, banned,
                              cache=None, steer: Steering | None = None) -> torch.Tensor | None:
    """Decide each infill span's length from one pass over the fully masked canvas (in place).

    The model was trained on slots holding the span and then pad, so at slot i it predicts
    P(pad) = P(span shorter than i). The expected span length is then the sum over slots
    of 1 - P(pad/eos); the slots past it are padded before any content is written. Without
    this a weak model, whose pad proposals are deferred (the EOS trap), fills every slot it
    is given. A span whose slots are all content (pad banned there) is left as it is.

    With a `cache` the pass writes the canvas's keys/values into it and scores every slot
    (`slot_positions`): those logits [B, N, V] are returned for the slots' first guesses.
    """
    positions = torch.tensor([p for r in spans for p in r], dtype=torch.long, device=x.device)
    if cache is None:
        all_logits, logits = None, denoiser.logits(x, want=positions)  # [B, n, V]
    else:
        all_logits = denoiser.logits(x, want=slot_positions, cache=cache)  # [B, N, V]
        logits = all_logits[:, index_in(slot_positions, positions)]  # [B, n, V]
    logits = logits.index_fill(-1, banned, float("-inf"))
    if steer is not None:  # a constrained span's pad chance counts only where a match may end
        logits = steer.constrain(logits, x, positions)
    p_end = logits.softmax(-1)[..., end_ids].sum(-1)  # [B, n]
    pad, offset = end_ids[0], 0
    for r in spans:
        p = p_end[:, offset:offset + len(r)]  # [B, S]
        offset += len(r)
        # Expected content slots, rounded; at least one, as in training, where no span is empty
        # (a weak model's pad mass would otherwise empty a span the user asked to fill).
        length = (1 - p).sum(1).add(0.5).floor().clamp_min(1)  # [B]
        past = torch.arange(len(r), device=x.device)[None] >= length[:, None]  # [B, S]
        fill = past & (x[:, r.start:r.stop] == mask_id)
        x[:, r.start:r.stop] = torch.where(fill, pad, x[:, r.start:r.stop])
        denoised[:, r.start:r.stop] &= ~fill
    return all_logits


def index_in(sorted_positions: torch.Tensor, subset: torch.Tensor) -> torch.Tensor:
    return torch.searchsorted(sorted_positions, subset)
