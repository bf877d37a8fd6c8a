"""Continuous batching at step granularity: concurrent runs share one forward pass per step.

    batcher = StepBatcher(denoiser)          # one per loaded model (core/run.py Runner)
    with batcher.member() as view:           # in each run's own thread
        for frame in run_edit(view, ...):    # the loop is unchanged: it calls view.logits
            ...

Each run keeps its own loop, canvas, block plan, KV cache and commit rule (core/loops/masked.py
runs as it does alone). Only its denoiser is a view: `view.logits(...)` hands the pass to the
batcher and waits. When every run in the batch that can has handed in its step's pass (a run
whose own pass is still running cannot, and is not waited for), or MAX_WAIT has passed since the
first one did, they run as one packed forward pass (several side by side
when their rows pass ROWS_PER_PASS) and each run gets its own logits back; a run that finishes or is cancelled leaves the batch, and a new run
joins at the next step boundary.

The passes are packed, not padded: every run's rows (its canvas, or the few positions a cached
step recomputes) are laid end to end as one sequence for the row-wise work (embedding, norms,
rotary at each row's own position, the q/k/v, output and feed-forward matmuls, the vocabulary
projection), which is where a step's launches and weight reads are, and attention runs per run
over that run's own keys (its canvas, or its own cache). No pad row exists, so nothing can
attend to one, and a run's logits are those of its pass alone (tests/test_batching.py: token
for token). Runs differ freely in canvas length, slot layout, step plan, cache policy, samples
and seed: the step's random draws are hashes of (seed, step, row, token), per run.

Block-causal runs (SDAR, Stable-DiffCoder, Fast-dLLM v2, LLaDA2, core/loops/scaffold.py) pack
the same way: a pass carries its own attention policy (`Attend`), so each step's open-block rows
of every run are packed for the row-wise work and attend, per run, to that run's own read-only
cache up to its own key length (`keys = k * size`, different in every run) followed by its own
block. Nothing is padded, so no key length has to match; prefills and block writes pack too (each
writes its own cache), a whole canvas in a pack of its own. A mixture of experts (LLaDA2) routes
the packed rows together, token by token, and runs each expert once for the union of its rows.

DiffusionGemma's random-token loop packs through its own forward: its model is transformers'
encoder-decoder, not the native backbone, so the family gives the batcher its passes
(`encode_pass`: a run's context, once; `canvas_pass`: a step's canvas, its previous logits, its
encoder cache) and the forward that runs a pack of them (`run_passes`,
core/models/families/diffusion_gemma_packed.py: every pass's rows packed for the row-wise work
and the experts, attention per run, a canvas over its own encoder cache then itself, a context
causally over itself into its own cache).

Only those, on one device, pack; other models (remote code, a model spread over devices) run one
at a time (`batchable`). A compiled native denoiser (`--compile`) packs too: its packs run on
bucketed shapes through one compiled function, CUDA graphs per bucket
(core/models/compiled_pack.py); a pack it does not take runs eagerly.
"""
from __future__ import annotations

import logging
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

import torch

from .models.compiled_pack import CompiledPack
from .models.denoiser import OUT_OF_MEMORY, Denoiser, check_finite
from .errors import ModelError
from .models.kv_cache import FULL, Attend, KVCache
from .models.model import Transformer

log = logging.getLogger(__name__)

# How long handed-in passes wait for the rest of the batch before they run without it. Between
# two passes a run does its step's sampling on the host (a few milliseconds for the embedded
# model on a CPU); a run held up longer (a slow reader of its events) must not stall the others.
MAX_WAIT = 0.02  # seconds

# Rows one packed pass holds at most; the rest of a step's passes go into further packs, each run
# by a thread of its own runs, side by side. Packing pays for a cached step's few rows per run
# (their launches and weight reads are shared: 4 runs' 8-row steps packed cost 2.3x one step in
# CPU time, not 4x, on this 2-core CPU; 8 runs 3.7x) and not for whole canvases, whose matmuls are
# already compute-bound: 4 canvases of 200 rows packed cost 1.15x the four one after another, so
# a whole-canvas pass runs in its own pack, in parallel with the others where a core is free.
ROWS_PER_PASS = 128

# The loop kinds (core/loops/kinds.py) whose passes all go through BatchedDenoiser: Denoiser.logits
# (masked, block-causal) or the random-token loop's canvas_logits (a family's own packed forward).
PACKED_LOOPS = ("masked", "block-causal", "random-token")

RECENT_PASSES = 4096  # passes whose run counts StepBatcher keeps (tests read them; /metrics reads the totals)


def batchable(denoiser) -> bool:
    """Whether runs on `denoiser` can share passes: sharpen's own backbone (eager, or compiled:
    CompiledPack), on one device, on a loop whose every pass goes through
    `Denoiser.logits` (the masked loop, and the block-causal ones through core/loops/scaffold.py).
    Experts route each token on its own (no capacity limit), so a mixture of experts packs too.
    A family with its own packed forward (`run_passes`: DiffusionGemma) says when it packs."""
    if callable(getattr(type(denoiser), "run_passes", None)):
        return bool(denoiser.packs) and denoiser.spec.loop in PACKED_LOOPS
    if type(denoiser) is not Denoiser:
        return False
    model = denoiser.model
    return (isinstance(model, Transformer) and model.layer_devices is None
            and denoiser.spec.loop in PACKED_LOOPS)


@dataclass(eq=False)  # compared by identity: a pass is one run's, once
class Pass:
    """One run's forward pass of one step, as Transformer.scores takes it."""

    ids: torch.Tensor  # [b, S] the rows it computes
    positions: torch.Tensor  # [S] their canvas positions
    cache: KVCache | None  # the run's own keys/values: written at `positions`, attended per `attend`
    rows: torch.Tensor  # [W] rows of the S projected to the vocabulary
    attend: Attend = FULL  # the run's attention policy for this pass (a block's read-only keys, a mask)
    logits: torch.Tensor | None = None  # [b, W, V] once run
    error: BaseException | None = None
    done: bool = False  # set under the batcher's lock once the pack has run (logits or error set)
    pack: list["Pass"] | None = None  # set on a pack's first pass: its thread runs the pack


def packed_scores(model: Transformer, passes: list[Pass]) -> list[torch.Tensor]:
    """Every pass's logits [b, W, V] from one packed forward (see the module's notes).

    Row-wise work runs once over all passes' rows laid end to end, [1, N, dim]; attention runs
    per pass, over its own keys, exactly as Transformer.hidden runs it for that pass alone."""
    device = model.embed.weight.device
    longest = max(max(p.ids.shape[1], p.cache.length if p.cache is not None else 0) for p in passes)
    if longest > model.cfg.max_seq_len:
        raise ValueError(f"canvas of {longest} tokens exceeds max_seq_len {model.cfg.max_seq_len}")
    sizes = [p.ids.numel() for p in passes]  # b * S rows each
    ids = torch.cat([p.ids.reshape(-1) for p in passes])[None]  # [1, N]
    positions = torch.cat([p.positions.repeat(p.ids.shape[0]) for p in passes])  # [N] each row's own position
    x = model.embed(ids)  # [1, N, dim]
    rope = model.rope(device, longest, x.dtype)[positions]  # [N, 2, 2, D/2]
    for i, layer in enumerate(model.layers):
        attn = layer.attn
        q, k, v = attn.project(layer.attn_norm(x), rope)  # [1, H, N, D], [1, Hkv, N, D] x2
        outs = []
        for p, q_p, k_p, v_p in zip(passes, q.split(sizes, 2), k.split(sizes, 2), v.split(sizes, 2)):
            b, S = p.ids.shape
            per_run = [t.reshape(t.shape[1], b, S, t.shape[3]).transpose(0, 1) for t in (q_p, k_p, v_p)]  # [b, H or Hkv, S, D]
            layer_cache = None if p.cache is None else (p.cache.k[i], p.cache.v[i])
            # Its own keys: FULL over its canvas or cache, or a block-causal run's cache[:k*size]
            # then its open block (p.attend.keys differs per run: nothing to pad).
            outs.append(attn.attend(*per_run, p.positions, layer_cache, p.attend).reshape(b * S, -1))  # [b*S, H D]
        x = layer.feed_forward(x + attn.output(torch.cat(outs)[None]))  # [1, N, dim]
    hidden = [h.view(p.ids.shape[0], p.ids.shape[1], -1)[:, p.rows] for p, h in zip(passes, x[0].split(sizes))]  # [b, W, dim] each
    wanted = [h.shape[0] * h.shape[1] for h in hidden]
    logits = model.project(torch.cat([h.reshape(-1, h.shape[-1]) for h in hidden])[None])[0]  # [sum b*W, V]
    return [part.view(h.shape[0], h.shape[1], -1) for part, h in zip(logits.split(wanted), hidden)]


class StepBatcher:
    """Gathers the passes of the runs on one model into one forward pass per step."""

    def __init__(self, denoiser: Denoiser, max_wait: float = MAX_WAIT, rows: int | None = None) -> None:
        self.denoiser = denoiser
        self.max_wait = max_wait
        # Most rows in one packed pass: ROWS_PER_PASS, or the family's own (DiffusionGemma's `rows_per_pass`).
        self.rows = rows if rows is not None else getattr(denoiser, "rows_per_pass", ROWS_PER_PASS)
        self._changed = threading.Condition()
        self._members = 0  # runs inside member(): each hands in one pass per step
        self._pending: list[Pass] = []
        self._in_flight = 0  # passes in packs that are running
        self._since = 0.0  # when the oldest pending pass was handed in
        self.passes = 0  # packed forward passes run (/metrics)
        self.packed_runs = 0  # runs' passes they held, summed: packed_runs / passes is the batching (/metrics)
        self.runs_per_pass: list[int] = []  # the latest RECENT_PASSES passes' run counts, in the order they formed (tests)
        self.compiled = CompiledPack.of(denoiser)  # a compiled denoiser's packs: bucketed shapes, CUDA graphs (None: eager)

    @contextmanager
    def member(self) -> Iterator["BatchedDenoiser"]:
        """A run's view of the model for as long as it runs (it leaves the batch on exit)."""
        with self._changed:
            self._members += 1
        try:
            yield BatchedDenoiser(self.denoiser, self)
        finally:
            with self._changed:
                self._members -= 1
                self._changed.notify_all()  # the others no longer wait for this run's pass

    def submit(self, work: Pass) -> torch.Tensor:
        """Hand in one run's pass; returns its logits once a packed pass has run it."""
        with self._changed:
            if not self._pending:
                self._since = time.perf_counter()
            self._pending.append(work)
            self._changed.notify_all()
            while not work.done:
                if work.pack is not None:  # a pack whose first pass is this run's: run it here
                    pack, work.pack = work.pack, None
                    self._changed.release()
                    try:
                        self._run(pack)
                    finally:
                        self._changed.acquire()
                        # Done and no longer in flight in one step under the lock: a run that saw
                        # its pass done while the pack still counted as in flight could hand in its
                        # next pass and have it packed alone, the others counted as running.
                        for member in pack:
                            member.done = True
                        self._in_flight -= len(pack)
                        self._changed.notify_all()
                    continue
                waited = time.perf_counter() - self._since
                # Every run that can hand in a pass now has: a run whose pass is running cannot,
                # and waiting for it would idle the others for the length of its pass (a whole
                # canvas costs six or seven cached steps of the embedded model).
                ready = len(self._pending) >= self._members - self._in_flight
                if self._pending and work in self._pending and (ready or waited >= self.max_wait):
                    for pack in self._packs(self._pending):
                        pack[0].pack = pack  # each pack runs in the thread of its first run
                        self.passes += 1
                        self.packed_runs += len(pack)
                        self.runs_per_pass.append(len(pack))
                    if len(self.runs_per_pass) > 2 * RECENT_PASSES:  # a server runs for weeks: keep the latest only
                        del self.runs_per_pass[:-RECENT_PASSES]
                    self._in_flight += len(self._pending)
                    self._pending = []
                    self._changed.notify_all()
                else:
                    self._changed.wait(max(self.max_wait - waited, 0.001) if self._pending else None)
        if work.error is not None:
            raise work.error
        return work.logits

    def _packs(self, passes: list[Pass]) -> list[list[Pass]]:
        """The step's passes in packs: a pass over more than `rows` rows is a pack of its own; the
        small ones share as few packs as hold them in `rows` each, balanced by rows."""
        big = [[w] for w in passes if w.ids.numel() > self.rows]
        small = sorted((w for w in passes if w.ids.numel() <= self.rows), key=lambda w: -w.ids.numel())
        if not small:
            return big
        count = -(-sum(w.ids.numel() for w in small) // self.rows)
        packs: list[list[Pass]] = [[] for _ in range(count)]
        rows = [0] * count
        for work in small:  # the largest first, each into the pack with the fewest rows so far
            i = rows.index(min(rows))
            packs[i].append(work)
            rows[i] += work.ids.numel()
        return big + packs

    def _run(self, batch: list[Pass]) -> None:
        """One packed pass for `batch`; if it fails, each pass alone, so only a broken run fails."""
        try:
            results = self._forward(batch)
        except Exception:  # noqa: BLE001 - each pass is retried alone below and fails on its own
            log.debug("a packed pass of %d runs failed; running them one by one", len(batch), exc_info=True)
            results = None
        for i, work in enumerate(batch):
            try:
                work.logits = results[i] if results is not None else self._forward([work], compiled=False)[0]
            except torch.OutOfMemoryError:
                work.error = ModelError(OUT_OF_MEMORY)
            except Exception as exc:  # noqa: BLE001 - handed to the run it belongs to, in its own thread
                work.error = exc

    def _forward(self, batch: list[Pass], compiled: bool = True) -> list[torch.Tensor]:
        """Each pass's logits from one forward: a family's own (`run_passes`: DiffusionGemma's,
        core/models/families/diffusion_gemma_packed.py), the compiled pack's (CompiledPack, unless
        it declines the pack: a long pass, a cache outside its pool) or the native backbone's."""
        family = getattr(self.denoiser, "run_passes", None)
        if family is not None:
            return family(batch)
        model = self.denoiser.model
        with torch.inference_mode():
            results = self.compiled(batch) if compiled and self.compiled is not None else None
            if results is not None:  # None: a pack the compiled step does not take
                return results
            if len(batch) == 1:  # nothing to pack with: the plain pass (packing one costs 20% more)
                one = batch[0]
                return [model.scores(one.ids, one.positions, one.cache, one.rows, one.attend)]
            return packed_scores(model, batch)


class BatchedDenoiser:
    """One run's view of a shared Denoiser: everything is the denoiser's own except `logits`,
    which goes through the batcher, and the first-pass finiteness check, kept per run."""

    def __init__(self, denoiser: Denoiser, batcher: StepBatcher) -> None:
        self._denoiser = denoiser
        self._batcher = batcher
        self._check = True  # this run's next pass is checked (its first, and the first of each cache)

    def __getattr__(self, name: str):
        return getattr(self._denoiser, name)

    def new_cache(self, batch: int, length: int) -> KVCache:
        self._check = True
        pack = self._batcher.compiled  # compiled: the run's own slots of the pack's pool (never the single run's kept cache)
        return pack.new_cache(batch, length) if pack is not None else self._denoiser.new_cache(batch, length)

    def encode(self, ids: torch.Tensor, canvas_length: int):
        """The random-token loop's context (DiffusionGemma's encoder pass), handed to the batcher: a new cache."""
        self._check = True
        return self._batcher.submit(self._denoiser.encode_pass(ids, canvas_length))  # the run's Context

    def canvas_logits(self, canvas: torch.Tensor, self_conditioning: torch.Tensor | None, context) -> torch.Tensor:
        """As the family's canvas_logits (the random-token loop's step), the pass handed to the batcher."""
        logits = self._batcher.submit(self._denoiser.canvas_pass(canvas, self_conditioning, context))  # [B, C, V]
        if self._check:
            self._check = False
            check_finite(logits)
        return logits

    def logits(self, x: torch.Tensor, want: torch.Tensor | None = None, run: torch.Tensor | None = None,
               cache: KVCache | None = None, attend: Attend = FULL) -> torch.Tensor:
        """As Denoiser.logits, the pass handed to the batcher with its attention policy."""
        T = x.shape[1]
        want = torch.arange(T, device=x.device) if want is None else want
        source = (want - 1).clamp_min(0) if self._denoiser.spec.shift_logits else want  # [W] rows that predict `want`
        if run is not None and cache is None:
            raise ValueError("a partial run needs a cache holding the rest of the canvas")
        if run is None:
            work = Pass(x, torch.arange(T, device=x.device), cache, source, attend)
        else:
            work = Pass(x[:, run], run, cache, torch.searchsorted(run, source), attend)
        logits = self._batcher.submit(work)  # [B, W, V]
        if self._check:
            self._check = False
            check_finite(logits)
        return logits
