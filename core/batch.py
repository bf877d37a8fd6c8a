"""Continuous batching at step granularity: concurrent runs share one forward pass per step.

    batcher = StepBatcher(denoiser)          # one per loaded model (core/run.py Runner)
    with batcher.member() as view:           # in each run's own thread
        for frame in run_edit(view, ...):    # the loop is unchanged: it calls view.logits
            ...

Each run keeps its own loop, canvas, block plan, KV cache and commit rule (core/loops/masked.py
runs as it does alone). Only its denoiser is a view: `view.logits(...)` hands the pass to the
batcher and waits. When every run in the batch has handed in its step's pass, or the bounds below
have passed, they run as one packed forward pass (several side by side when their rows pass the
batcher's `rows`, the model's longest canvas) and each run gets its own logits back; a run that
finishes or is cancelled leaves the batch, and a new run joins at the next step boundary. Whole
canvases (prefills, block refreshes, the masked loop's uncached passes) pack like cached steps
(a request under a release's defaults is mostly such passes): see the bound on `rows` below.

Scheduling (`StepBatcher.submit`): a run between two passes is waited for MAX_WAIT or its
measured host time (HOST_WAITS); a run whose pass is still running, until that pass is expected
to land (ALIGN_PASSES), for it to hand in its next one:
so runs that started out of phase re-align at a step boundary and share passes from then on
(without it they alternate alone for good). A lone run never waits.

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
writes its own cache). A mixture of experts (LLaDA2) routes
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
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator, NamedTuple

import torch

from .models.compiled_pack import CompiledPack
from .models.denoiser import OUT_OF_MEMORY, Denoiser, check_finite
from .errors import ModelError
from .models.kv_cache import FULL, Attend, KVCache
from .models.model import Transformer
from .models.packed import packed_scores  # the native backbone's packed forward (and this module's name for it)

log = logging.getLogger(__name__)

# How long handed-in passes wait for a run between two passes (its step's sampling on the host:
# a few milliseconds for the embedded model on a CPU, tens on the 0.5B shape, whose vocabulary is
# 37x larger) before they run without it: MAX_WAIT, or twice the batcher's running average of the
# time runs spend between two passes where that is longer (HOST_WAITS), but never longer than an
# average pass of the longer kind (waiting longer than the pass it would share costs more than
# it saves); counted from when they were handed in or that run's last pass landed, whichever is
# later. A run held up longer (a slow reader of its events) must not stall the others.
MAX_WAIT = 0.02  # seconds
HOST_WAITS = 2.0

# Re-alignment: a pass handed in while another run's pass is running waits for that run to hand in
# its next pass too, so runs that started out of phase come back into one pass instead of
# alternating alone for good; it waits until the running pack is expected to land, at most
# ALIGN_PASSES times the running average of a pack of its kind (whole canvas or cached step)
# after that pack started. Measured passes: embedded model 1.8 ms a cached step, 11.8 ms a whole
# canvas; the Qwen2-0.5B shape 0.3-0.5 s and 1-2 s on this CPU alone, 5-10 s with four clients on
# a loaded machine (bench/pack_cost.py; four clients in one process). Waiting costs the waiting run
# latency only: the running pass already uses every core (on a GPU, the device), so a second pass
# beside it would have run slower, not sooner; packed, the two cost 0.55-0.88x the two alone. Two
# expected passes: a pack slowed by load (passes vary 2x on a shared machine) still lands within
# the bound, a stuck one is given up. A lone run never waits (no other run can hand in); a run that
# stops handing in passes (cancelled, finished, a slow reader) costs the others at most this bound
# plus MAX_WAIT per pass. With one average pass as the bound (and from the hand-in) four clients
# on the 0.5B shape still ran 27 of 36 passes alone: the bound ran out just before the pass landed.
ALIGN_PASSES = 2.0
PASS_SECONDS_WEIGHT = 0.2  # the newest pack's share of those running averages

# Rows one packed pass holds at most, by default (a StepBatcher's `rows`): the longest canvas the
# model takes (its max_seq_len). Memory: a pack's row-wise activations (embedding, norms, q/k/v,
# feed-forward, about (4 dim + 3 ffn_hidden) values a row) are then never more than one run may
# already ask for with its longest canvas alone, and attention runs per run over its own keys, so
# a pack never needs more memory than one run may need alone (a bound in rows, not bytes: the
# bytes a row takes are the model's, the same in a pack as alone). Whole canvases (prefills,
# block refreshes, the masked loop's uncached passes) pack too, up to that bound. Measured
# (bench/pack_cost.py, best of 2, loaded 2-core CPU): on the Qwen2-0.5B shape, float32, two or four
# canvases of 100-300 rows packed cost 0.62-0.88x their CPU time one after another (8-row cached
# steps 0.14-0.64x): its 2 GB of weights are read once per pack, not once per canvas. On the
# embedded model (7 MB, read from cache) four 100-row canvases packed cost 0.3-0.7x, two or four
# 200-row ones 1.4-1.7x: those exceed its 256-row bound, so they run in packs of their own, as
# measured. On a GPU a step is bound by reading the weights at any canvas length a server sees,
# so there a pack of canvases costs about one canvas.

# The loop kinds (core/loops/kinds.py) whose passes all go through BatchedDenoiser: Denoiser.logits
# (masked, block-causal) or the random-token loop's canvas_logits (a family's own packed forward).
PACKED_LOOPS = ("masked", "block-causal", "random-token")

RECENT_PASSES = 4096  # passes whose run counts StepBatcher keeps (tests read them; /metrics reads the totals)


class BatchCounts(NamedTuple):
    """What /metrics reports of a batcher: totals since it started (app/serve/metrics.py)."""

    passes: int  # packed forward passes run
    packed_runs: int  # runs' passes they held, summed (over passes: runs per pass)
    by_runs: tuple[tuple[int, int], ...]  # (runs in a pass, passes that held that many), by runs
    whole_passes: int  # passes that held a whole canvas (a prefill, a refresh, an uncached pass)
    whole_runs: int  # whole canvases they held, summed
    held: int  # passes that waited for another run's pass before running
    held_seconds: float  # the time they waited, summed


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
    whole: bool = False  # every row of its canvas, or a prompt's prefill: not a cached step (/metrics)
    formed: float = 0.0  # when it went into a pack (perf_counter; /metrics sums the waits)
    logits: torch.Tensor | None = None  # [b, W, V] once run
    error: BaseException | None = None
    done: bool = False  # set under the batcher's lock once the pack has run (logits or error set)
    pack: list["Pass"] | None = None  # set on a pack's first pass: its thread runs the pack


class StepBatcher:
    """Gathers the passes of the runs on one model into one forward pass per step."""

    def __init__(self, denoiser: Denoiser, max_wait: float = MAX_WAIT, rows: int | None = None,
                 align_wait: float | None = None) -> None:
        self.denoiser = denoiser
        self.max_wait = max_wait
        # Most rows in one packed pass (see the module's constants): the model's longest canvas, or
        # the family's own bound (DiffusionGemma's `rows_per_pass`: four canvases).
        self.rows = rows or getattr(denoiser, "rows_per_pass", None) or denoiser.max_len
        self.align_wait = align_wait  # the re-alignment bound in seconds from the hand-in; None: ALIGN_PASSES expected passes
        self.pass_seconds = {True: 0.0, False: 0.0}  # running average of a pack's wall time, holding a whole canvas or not (0: none yet)
        self._flights: dict[int, tuple[float, bool]] = {}  # running packs: id -> (when formed, holds a whole canvas)
        self.host_seconds = 0.0  # running average of the time a run spends between two of its passes
        self._changed = threading.Condition()
        self._members = 0  # runs inside member(): each hands in one pass per step
        self._pending: list[Pass] = []
        self._in_flight = 0  # passes in packs that are running (one per run at most: its run waits for it)
        self._since = 0.0  # when the oldest pending pass was handed in
        self._landed = 0.0  # when the latest pack finished
        self.passes = 0  # packed forward passes run (/metrics)
        self.packed_runs = 0  # runs' passes they held, summed: packed_runs / passes is the batching (/metrics)
        self.by_runs: Counter[int] = Counter()  # runs in a pass -> passes that held that many (/metrics)
        self.whole_passes = self.whole_runs = 0  # the same for passes holding whole canvases (/metrics)
        self.held = 0  # passes that waited for another run's pass (a lone run's never do: tests, /metrics)
        self.held_seconds = 0.0
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

    def counts(self) -> BatchCounts:
        with self._changed:
            return BatchCounts(self.passes, self.packed_runs, tuple(sorted(self.by_runs.items())), self.whole_passes,
                               self.whole_runs, self.held, self.held_seconds)

    def submit(self, work: Pass, between: float | None = None) -> torch.Tensor:
        """Hand in one run's pass; returns its logits once a packed pass has run it. `between`:
        the seconds since the run's previous pass returned (None: its first)."""
        with self._changed:
            handed_in = time.perf_counter()
            if between is not None:
                self.host_seconds = between if not self.host_seconds else (
                    PASS_SECONDS_WEIGHT * between + (1 - PASS_SECONDS_WEIGHT) * self.host_seconds)
            if not self._pending:
                self._since = handed_in
            self._pending.append(work)
            self._changed.notify_all()
            held = False  # this pass waited for another run's pass (counted once)
            while not work.done:
                if work.pack is not None:  # a pack whose first pass is this run's: run it here
                    pack, work.pack = work.pack, None
                    self._changed.release()
                    started = time.perf_counter()
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
                        self._landed = time.perf_counter()
                        _, whole = self._flights.pop(id(pack))
                        seconds, average = self._landed - started, self.pass_seconds[whole]
                        self.pass_seconds[whole] = seconds if not average else (
                            PASS_SECONDS_WEIGHT * seconds + (1 - PASS_SECONDS_WEIGHT) * average)
                        self._changed.notify_all()
                    continue
                if work not in self._pending:  # in a pack another run's thread runs
                    self._changed.wait()
                    continue
                left = self._wait_left()
                if left > 0:
                    if not held:
                        held = True
                        self.held += 1
                    self._changed.wait(left)
                    continue
                self._form()
            if held:
                self.held_seconds += work.formed - handed_in
        if work.error is not None:
            raise work.error
        return work.logits

    def _wait_left(self) -> float:
        """Seconds the pending passes may still wait for the runs that have not handed theirs in
        (0 or less: run now). Called under the lock.

        Every run in the batch has handed one in: now (so a lone run never waits). A run between
        two passes is waited for MAX_WAIT (or HOST_WAITS measured host times) from the later of the
        oldest pending pass and the last pack's landing; a run whose pass is running, until its pack is expected to land
        (ALIGN_PASSES): it lands, that run hands in its next pass, and the two share it."""
        missing = self._members - len(self._pending)
        if missing <= 0:
            return 0.0
        now = time.perf_counter()
        left = 0.0
        if self._in_flight:
            if self.align_wait is not None:
                left = self._since + self.align_wait - now
            else:  # until the last running pack is expected to land (nothing measured yet: no wait)
                known = max(self.pass_seconds.values())
                left = max(formed + ALIGN_PASSES * (self.pass_seconds[whole] or known) for formed, whole in self._flights.values()) - now
        if missing > self._in_flight:  # some run is between passes
            grace = max(self.max_wait, min(HOST_WAITS * self.host_seconds, max(self.pass_seconds.values())))
            left = max(left, max(self._since, self._landed) + grace - now)
        return left

    def _form(self) -> None:
        """The pending passes into packs, each to run in the thread of its first run. Under the lock."""
        now = time.perf_counter()
        for work in self._pending:
            work.formed = now
        for pack in self._packs(self._pending):
            pack[0].pack = pack
            self._flights[id(pack)] = (now, any(w.whole for w in pack))
            self.passes += 1
            self.packed_runs += len(pack)
            self.by_runs[len(pack)] += 1
            whole = sum(w.whole for w in pack)
            if whole:
                self.whole_passes += 1
                self.whole_runs += whole
            self.runs_per_pass.append(len(pack))
        if len(self.runs_per_pass) > 2 * RECENT_PASSES:  # a server runs for weeks: keep the latest only
            del self.runs_per_pass[:-RECENT_PASSES]
        self._in_flight += len(self._pending)
        self._pending = []
        self._changed.notify_all()

    def _packs(self, passes: list[Pass]) -> list[list[Pass]]:
        """The step's passes in packs (`_fill`). Under compile, the passes the compiled pack takes
        are packed apart from those it does not (a long whole canvas, a cache outside its pool):
        one such pass in a pack would send the whole pack, cached steps and all, down the eager path."""
        if self.compiled is None:
            return self._fill(passes)
        graphed = [w for w in passes if self.compiled.takes([w])]
        return self._fill(graphed) + self._fill([w for w in passes if not any(w is g for g in graphed)])

    def _fill(self, passes: list[Pass]) -> list[list[Pass]]:
        """Passes in packs of at most `rows` rows: whole canvases and cached steps alike, in as few
        packs as hold them, balanced by rows (the largest first, each into the emptiest pack it
        fits); a pass over `rows` rows is a pack of its own."""
        big = [[w] for w in passes if w.ids.numel() > self.rows]
        small = sorted((w for w in passes if w.ids.numel() <= self.rows), key=lambda w: -w.ids.numel())
        count = -(-sum(w.ids.numel() for w in small) // self.rows)
        packs: list[list[Pass]] = [[] for _ in range(count)]
        rows = [0] * count
        for work in small:
            n = work.ids.numel()
            fits = [i for i in range(len(packs)) if rows[i] + n <= self.rows]
            if not fits:
                packs.append([])
                rows.append(0)
                fits = [len(packs) - 1]
            i = min(fits, key=rows.__getitem__)
            packs[i].append(work)
            rows[i] += n
        return big + [p for p in packs if p]

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
        self._returned: float | None = None  # when its previous pass's logits came back (the batcher learns the host time)

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
        if run is None:  # every row of the canvas: a whole-canvas pass
            work = Pass(x, torch.arange(T, device=x.device), cache, source, attend, whole=True)
        else:  # a block-causal prefill (its blocks under a mask) counts as whole too; a cached step does not
            work = Pass(x[:, run], run, cache, torch.searchsorted(run, source), attend, whole=attend.mask is not None)
        between = None if self._returned is None else time.perf_counter() - self._returned
        logits = self._batcher.submit(work, between)  # [B, W, V]
        self._returned = time.perf_counter()
        if self._check:
            self._check = False
            check_finite(logits)
        return logits
