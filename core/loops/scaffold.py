"""What every block-causal decode rule shares: the canvas on the device, the prefill, the frames.

A block-causal release (SDAR, Stable-DiffCoder, Fast-dLLM v2, LLaDA2) decodes one prompt canvas
(core/prompted.py: the prompt, then the span's slots) in blocks of the release's size from
position 0. Every decode rule (block.py, subblock.py, editing.py) starts the same way and ends
the same way, so that part is here once:

- `BlockRun.open`: the canvas on the device as `samples` rows, padded to whole blocks or not,
  the banned ids, the end ids, the seeded generator, the per-position confidence / guess / written
  tensors, the KV cache and the blocks to decode (those before the slots are prompt only);
- `run.prefill()`: the prompt's full blocks, once, into the cache;
- `run.frame(step, total, ...)`: the Frame front ends draw, and on the last one the results;
- `run.finish()`: what the reference does with the answer at its end (pad after an end token,
  or cut the answer at the first one, per the release's BlockRule).

A rule is then only its own loop over `run.blocks`: how a step picks what to commit. The
settings a user may turn for it are resolved once, before the run (core/loops/block_kind.py
`effective_rule`): `run.rule` is the release's BlockRule with --block-size / --threshold applied.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Callable, Iterator

import torch

from .. import prefix_cache
from ..canvas import Canvas
from ..constraints.steering import Steering
from ..models.denoiser import BlockRule
from ..models.kv_cache import Attend
from ..settings import Sampling
from .frame import Frame, finished_rows, slot_states


def effective_rule(rule: BlockRule, settings: Sampling) -> BlockRule:
    """The release's rule with what the user set: --block-size (the reference's block length) and
    --threshold (its confidence threshold). Unset, the release's own. Which families take which
    knob is core/loops/block_kind.py's (it refuses the others before a run starts)."""
    size = settings.block_size or rule.size
    threshold = settings.threshold if settings.threshold is not None else rule.threshold
    return rule if (size, threshold) == (rule.size, rule.threshold) else replace(rule, size=size, threshold=threshold)


@dataclass
class BlockRun:
    """One prompt canvas being decoded block by block (its one slot range at the end)."""

    denoiser: object
    canvas: Canvas
    settings: Sampling
    rule: BlockRule  # the release's, with the user's block size and threshold applied
    x: torch.Tensor  # [B, T] the canvas, every sample a row, T a whole number of blocks (or n)
    n: int  # the canvas's own length (T may add the last block's tail, denoised and dropped)
    banned: torch.Tensor | None  # ids a slot never takes (None: any id, as the references)
    end_ids: torch.Tensor  # [E]
    generator: torch.Generator
    confidence: torch.Tensor  # [B, T] probability at commit, or of the current guess
    guesses: torch.Tensor  # [B, T] the model's current token everywhere (the blurry preview)
    written: torch.Tensor  # [B, T] bool: what this run committed (the sample score's positions)
    cache: object  # the KV cache the blocks before the open one are written into
    started: float
    # Constrained spans (core/constraints): checked before any pass, then every open block's logits
    # and commits steered; None when no span carries a constraint. No opening-slot rule here (an
    # empty answer is allowed), so pad may come first.
    steer: Steering | None = None

    @classmethod
    def open(cls, denoiser, canvas: Canvas, settings: Sampling, rule: BlockRule, ban: bool = True) -> "BlockRun":
        device, size = denoiser.device, rule.size
        n = len(canvas.ids)
        # Whole blocks (the last one's tail past the slots denoised and dropped), or a short last block.
        total = -(-n // size) * size if rule.pad_last else n
        x = torch.full((settings.samples, total), denoiser.spec.mask_id, dtype=torch.long, device=device)  # [B, T]
        x[:, :n] = torch.tensor(canvas.ids, device=device)
        B = x.shape[0]
        steer = Steering.for_canvas(denoiser, canvas, B, opening_banned=False)
        if steer is not None:
            steer.prepare(x)  # a span no text of its length can match: ConstraintError before any pass
        return cls(denoiser, canvas, settings, rule, x, n,
                   denoiser.banned_ids.to(device) if ban else None,
                   torch.tensor(denoiser.spec.end_ids, dtype=torch.long, device=device),
                   torch.Generator(device=device).manual_seed(settings.seed),
                   torch.zeros(B, total, device=device), x.clone(), torch.zeros(B, total, dtype=torch.bool, device=device),
                   denoiser.new_cache(B, total), time.perf_counter(), steer)

    @property
    def slots(self) -> range:
        return self.canvas.slots[0]

    @property
    def mask_id(self) -> int:
        return self.denoiser.spec.mask_id

    @property
    def blocks(self) -> range:
        """The blocks to decode: from the first that holds a slot (those before are prompt only)."""
        size = self.rule.size
        return range(self.slots.start // size, -(-self.x.shape[1] // size))

    def block(self, k: int) -> torch.Tensor:
        """[P] the positions of block k (the last one may be short)."""
        size = self.rule.size
        return torch.arange(k * size, min((k + 1) * size, self.x.shape[1]), device=self.x.device)

    def prefill(self, want_shift: int = 0) -> torch.Tensor | None:
        """The prompt's full blocks, once, into the cache (bidirectional inside each block, causal
        across them); the logits of the prefill's last row (`want_shift` 1: the row a
        token-shifted model predicts the next position from). None when nothing is prefilled."""
        size = self.rule.size
        prefill = self.blocks.start * size
        if not prefill:
            return None
        with torch.inference_mode():  # from the longest prefix an earlier run prefilled (a server's prefix cache)
            return prefix_cache.prefill(self.denoiser, self.x, self.cache, prefill, size, want_shift)

    def masked_logits(self, block: torch.Tensor, k: int) -> torch.Tensor:
        """[B, P, V] the open block's logits against the read-only cache of the blocks before it,
        banned ids at -inf, and a constrained slot's tokens that would leave its span uncompletable.

        In a server with --max-batch > 1 `denoiser` is the run's view of a StepBatcher
        (core/batch.py): this pass, its Attend with it, is packed with the other runs' step, each
        attending to its own cache up to its own k * size keys."""
        logits = self.denoiser.logits(self.x, want=block, run=block, cache=self.cache,
                                      attend=Attend(keys=k * self.rule.size, write=False))
        logits = logits if self.banned is None else logits.index_fill(-1, self.banned, float("-inf"))
        return logits if self.steer is None else self.steer.constrain(logits, self.x, range(k * self.rule.size, self.block_end(k)))

    def settle(self, k: int, proposal: torch.Tensor, change: torch.Tensor, p_token: torch.Tensor,
               logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The step's proposals [B, P], with commits that clash under a constraint taken one at a
        time (core/constraints/steering.py settle); unchanged without constraints."""
        if self.steer is None:
            return proposal, p_token
        return self.steer.settle(self.x, range(k * self.rule.size, self.block_end(k)), proposal, change, p_token, logits)

    def block_end(self, k: int) -> int:
        """The position after block k (computed on the host: no device read)."""
        return min((k + 1) * self.rule.size, self.x.shape[1])

    def write_block(self, block: torch.Tensor, k: int, want: torch.Tensor | None = None) -> torch.Tensor:
        """One more pass over finished block k that writes its keys and values for the next one;
        the logits of `want` (default: its last row)."""
        return self.denoiser.logits(self.x, want=block[-1:] if want is None else want, run=block, cache=self.cache,
                                    attend=Attend(keys=self.block_end(k)))

    def ended(self, upto: int) -> bool:
        """Whether every sample holds an end token in its slots before `upto`: the rest is padding."""
        if not self.end_ids.numel():
            return False
        slots = self.slots
        return bool(torch.isin(self.x[:, slots.start:min(upto, slots.stop)], self.end_ids).any(1).all())

    def finish(self, cut: bool | None = None) -> None:
        """The answer's end, as the release's reference leaves it: masks after an end token become
        padding; with `cut` (default `rule.cut_at_end`: LLaDA2's and Stable-DiffCoder's generate,
        which return the answer up to its first end token) everything after the first end token
        does. The end token itself stays the one committed (a front end reports that one)."""
        if not self.end_ids.numel():
            return
        cut = self.rule.cut_at_end if cut is None else cut
        slots = self.slots
        rest = self.x[:, slots.start:slots.stop]  # [B, N]
        is_end = torch.isin(rest, self.end_ids)
        after = (is_end.cumsum(1) - is_end.long()) > 0  # strictly after the first end token
        drop = after if cut else after & (rest == self.mask_id)
        self.x[:, slots.start:slots.stop] = torch.where(drop, self.end_ids[0], rest)

    def frame(self, step: int, total: int, done: bool = False, state: torch.Tensor | None = None,
              replaced: torch.Tensor | None = None, counts=None, written: torch.Tensor | None = None) -> Frame:
        """The Frame of `step` (the first sample's canvas); on the done one, every sample's results,
        scored over `written` (default: every position this run committed)."""
        n, slots = self.n, self.slots
        scored = self.written if written is None else written
        final, final_conf, scores = finished_rows(self.x, self.confidence, scored, slots) if done else (None, None, None)
        if state is None:
            state = slot_states(self.x[0, :n], self.mask_id)
        return Frame(step, total, time.perf_counter() - self.started, done, "block-causal", self.x[0, :n].clone(),
                     self.confidence[0, :n].clone(), self.guesses[0, :n].clone(), state, self.canvas.slots,
                     final, scores, final_conf, _replaced=replaced, edit_counts=counts)


@dataclass(frozen=True)
class DecodeRule:
    """One block-causal decode rule: the file that runs it (block.py, subblock.py, editing.py) and
    what it reads. core/loops/block_causal_kind.py picks one per run from the release's BlockRule."""

    name: str
    run: Callable[..., Iterator[Frame]]  # (denoiser, canvas, settings, should_stop, ban) -> Frames
    reads: Callable[[BlockRule], frozenset[str]]  # the Sampling settings it reads for this release
    what: str  # what the rule is, for a refusal: "Fast-dLLM v2's sub-block decode"
    steps_per_block: Callable[[BlockRule, Sampling, int], int]  # (rule, settings, answer length) -> at most
    used: Callable[[BlockRule, Sampling], dict]  # the thresholds it ran with, for --json
