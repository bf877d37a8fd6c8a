"""Steering for the random-token loop (DiffusionGemma): every slot holds a token at every step.

Exact steering (steering.py) reads a masked slot as "still free". Here no slot is ever masked: a
slot holds either an accepted (sharp) token or noise to be re-drawn. So the steering reads a
view of the canvas where a span's accepted tokens stand and every other slot is free (the mask
id), and each step:

1. every span slot's proposal distribution is constrained against that view (the tokens the
   slot may take with the accepted ones kept): what is drawn, and what acceptance ranks, is
   steered, while the noise that replaces what is not accepted stays unconstrained noise;
2. the step's accepted draws are settled together against the view (steering.py settle: a
   clash is taken most confident first, a later token that no longer fits replaced by its best
   allowed one), so the accepted tokens always leave every span completable;
3. at the end the answer is not the raw argmax canvas but the accepted tokens, each other span
   slot filled by its best allowed token under the last logits, most confident first.

A slot accepted earlier and not accepted again becomes free: freeing a slot never makes a span
uncompletable, so the invariant holds across steps.
"""
from __future__ import annotations

import torch

from ..canvas import Canvas
from .steering import Steering


class NoiseSteering:
    """The constrained spans of a random-token canvas (positions in the decoder's canvas)."""

    def __init__(self, steer: Steering, slots: torch.Tensor, mask_id: int) -> None:
        self.steer, self.mask_id = steer, mask_id
        self.slots = slots  # [N] canvas positions of the constrained spans' slots

    @classmethod
    def for_layout(cls, denoiser, layout, rows: int) -> "NoiseSteering | None":
        """None when no span carries a constraint. `layout` is random_token.NoiseCanvas."""
        source = layout.source
        canvas = Canvas(ids=layout.ids, slots=layout.slots, spans=source.spans, window=source.window, mask_id=denoiser.spec.mask_id)
        steer = Steering.for_canvas(denoiser, canvas, rows, opening_banned=False)
        if steer is None:
            return None
        slots = torch.as_tensor(steer.positions, device=denoiser.device)
        return cls(steer, slots, denoiser.spec.mask_id)

    def view(self, x: torch.Tensor, sharp: torch.Tensor) -> torch.Tensor:
        """[B, C] the canvas as the steering reads it: a constrained slot's token where accepted, else free."""
        out = x.clone()
        free = ~sharp[:, self.slots]  # [B, N]
        out[:, self.slots] = torch.where(free, torch.full_like(out[:, self.slots], self.mask_id), x[:, self.slots])
        return out

    def prepare(self, x: torch.Tensor, sharp: torch.Tensor) -> torch.Tensor:
        """The starting accepted set made completable (a rewrite's kept draft that the constraint
        rules out is dropped whole) or ConstraintError; returns the new `sharp` [B, C]."""
        view = self.view(x, sharp)
        self.steer.prepare(view)
        return sharp & (view == x)

    def constrain(self, scores: torch.Tensor, x: torch.Tensor, sharp: torch.Tensor) -> torch.Tensor:
        """`scores` [B, C, V] with every constrained slot's tokens that would leave its span
        uncompletable (against the others' accepted tokens, the slot itself free) at -inf."""
        return self.steer.constrain(scores, self.view(x, sharp), range(scores.shape[1]), every_slot=True)

    def settle(self, x: torch.Tensor, sharp: torch.Tensor, drawn: torch.Tensor, accepted: torch.Tensor,
               scores: torch.Tensor) -> torch.Tensor:
        """`drawn` [B, C] with the accepted constrained slots' tokens settled so that, all accepted
        together (the earlier accepted ones that stay free dropped), every span stays completable."""
        empty = self.view(x, torch.zeros_like(sharp))  # every constrained slot free: the step decides afresh
        p = torch.softmax(scores[:, self.slots].float(), -1).gather(-1, drawn[:, self.slots, None]).squeeze(-1)  # [B, N]
        settled, _ = self.steer.settle(empty, self.slots, drawn[:, self.slots], accepted[:, self.slots], p, scores[:, self.slots])
        out = drawn.clone()
        out[:, self.slots] = settled
        return out

    def finish(self, x: torch.Tensor, sharp: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        """[B, C] the answer canvas: accepted tokens kept, every other constrained slot its best
        allowed token under `scores` [B, C, V], the most confident free slot first (one per row a round)."""
        out = self.view(x, sharp)
        rows = torch.arange(out.shape[0], device=out.device)
        while True:
            free = out[:, self.slots] == self.mask_id  # [B, N]
            if not bool(free.any()):
                return out
            allowed = self.steer.constrain(scores[:, self.slots], out, self.slots)  # [B, N, V]
            best_p, best_t = allowed.float().softmax(-1).max(-1)  # [B, N]
            best_p = best_p.masked_fill(~free, -1.0)
            k = best_p.argmax(-1)  # [B]
            pick = free[rows, k]  # rows with a free slot left
            out[rows[pick], self.slots[k[pick]]] = best_t[rows, k][pick]
