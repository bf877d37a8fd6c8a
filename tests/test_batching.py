"""Continuous batching (core/batch.py): concurrent runs share one forward pass per step and each
gets exactly what it would get alone, token for token; a stopped run leaves within a step."""
from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch

from sharpen.core.batch import Pass, batchable, packed_scores
from sharpen.core.request import EditRequest
from sharpen.core.run import Done, Runner
from sharpen.core.settings import Sampling
from sharpen.core.spans import Span
from serving import four_runs_second_stopped

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def embedded():
    from sharpen.core.models.load import load_model
    from sharpen.core.settings import ModelRequest

    return load_model(ModelRequest())


def requests() -> list[EditRequest]:
    """Four runs that differ in everything a pass may differ in: canvas length (short and long
    texts), slot layout (one infill, two spans with a rewrite), samples, seed, temperature and
    top-k (random draws per row), cache policy (dual, prefix, none) and block size."""
    code = (ROOT / "examples/fizzbuzz.py").read_text(encoding="utf-8")
    changes = (ROOT / "core/changes.py").read_text(encoding="utf-8")
    short = "def add(a, b):\n    \n\nprint(add(1, 2))\n"
    at = changes.index("\n", 1500) + 1
    return [
        EditRequest(short, (Span(19, 19, max_tokens=12),), Sampling(seed=3)),
        EditRequest(changes, (Span(at, at, max_tokens=24),), Sampling(seed=11, temperature=0.8, top_k=40)),
        EditRequest(code, (Span(40, 40, max_tokens=10), Span(60, 80, "rewrite", strength=0.5)),
                    Sampling(seed=5, temperature=1.0, samples=2, cache="prefix")),
        EditRequest(code, (Span(len(code) // 2, len(code) // 2, max_tokens=16),), Sampling(seed=8, temperature=0.5, cache="none", block_size=4)),
    ]


def fingerprint(done: Done) -> tuple:
    result = done.result
    return result.text, result.steps, tuple((r.text, r.tokens, r.alternatives) for r in result.spans), done.sharp_per_step


def test_a_packed_pass_equals_each_pass_alone_bit_for_bit(embedded):
    """Passes of different lengths, cached and not, one row and two: logits and cache writes."""
    model = embedded.model
    generator = torch.Generator().manual_seed(0)

    def passes(T: int, rows: int, cached: bool) -> tuple[Pass, Pass]:
        ids = torch.randint(0, 4000, (rows, T), generator=generator)  # [b, T]
        if not cached:
            return tuple(Pass(ids, torch.arange(T), None, torch.arange(3, 17)) for _ in range(2))
        pair = []
        for _ in range(2):
            cache = model.new_cache(rows, T)
            with torch.inference_mode():
                model.scores(ids, None, cache, torch.arange(2))  # the whole canvas cached
            run = torch.arange(T // 3, T // 3 + 8)  # a block recomputed against the cache
            pair.append(Pass(ids[:, run], run, cache, torch.arange(8)))
        return tuple(pair)

    pairs = [passes(200, 1, True), passes(57, 1, True), passes(180, 2, False), passes(256, 1, False), passes(90, 2, True)]
    with torch.inference_mode():
        alone = [model.scores(a.ids, a.positions, a.cache, a.rows) for a, _ in pairs]
        packed = packed_scores(model, [b for _, b in pairs])
    for one, together, (a, b) in zip(alone, packed, pairs):
        assert together.shape == one.shape and torch.equal(together, one)
        if a.cache is not None:
            assert all(torch.equal(x, y) for x, y in zip(a.cache.k + a.cache.v, b.cache.k + b.cache.v))


def run_together(runner: Runner, batch: list[EditRequest], stops=None) -> list:
    out: list = [None] * len(batch)
    start = threading.Barrier(len(batch))

    def one(i: int) -> None:
        start.wait()
        events = list(runner.run(batch[i], stops[i] if stops else (lambda: False), every=0.0))
        out[i] = events

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(batch))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not any(t.is_alive() for t in threads)
    return out


def test_four_runs_batched_equal_each_run_alone_token_for_token(embedded):
    alone = [fingerprint(Runner(embedded).result(r)) for r in requests()]
    runner = Runner(embedded, batch=4)
    assert runner.batcher is not None
    runner.batcher.max_wait = 1.0  # each pass waits for all four
    runner.batcher.rows = 10**6  # and packs them all, whole canvases too: every step is shared
    member, gate = runner.batcher.member, threading.Barrier(4)

    @contextmanager
    def joined():  # every run is in the batch before any hands in its first pass
        with member() as view:
            gate.wait(60)
            yield view

    runner.batcher.member = joined
    events = run_together(runner, requests())
    assert [fingerprint(e[-1]) for e in events] == alone
    # Frames per run, as alone: step 0 .. n, then the result.
    assert all([f.step for f in e[:-1]] == list(range(len(e) - 1)) for e in events)
    shared = runner.batcher.runs_per_pass
    assert max(shared) == 4 and runner.batcher.passes < sum(shared)  # passes were shared, each run's pass ran once
    assert runner.waiting == 0


def test_a_stopped_run_leaves_the_batch_within_one_step_and_the_others_are_unchanged(embedded):
    batch = requests()
    alone = [fingerprint(Runner(embedded).result(r)) for r in batch]
    runner = Runner(embedded, batch=4)
    runner.batcher.max_wait = 1.0
    out, after = four_runs_second_stopped(runner, batch)
    assert not isinstance(out[1][-1], Done)  # stopped: no result
    assert [fingerprint(out[i][-1]) for i in (0, 2, 3)] == [alone[i] for i in (0, 2, 3)]
    # Within one step: after the stop was seen, no pass held four runs' rows again.
    assert after and max(after) <= 3
    assert runner.waiting == 0


def test_runs_beyond_the_batch_wait_their_turn_and_join_at_a_step_boundary(embedded):
    runner = Runner(embedded, max_waiting=4, batch=2)
    runner.batcher.max_wait, runner.batcher.rows = 1.0, 10**6  # every step of the two running is shared
    events = run_together(runner, requests()[:3])
    assert all(isinstance(e[-1], Done) for e in events)
    assert max(runner.batcher.runs_per_pass) == 2  # never more than the batch


def test_only_models_whose_passes_pack_are_batched(embedded):
    assert batchable(embedded)
    assert Runner(embedded).batcher is None  # batch 1: one at a time (the editor)
    assert not batchable(object())


@pytest.mark.timeout(60, func_only=True)  # a lock regression waits forever: fail in seconds instead
def test_a_full_batch_and_a_full_line_refuse_the_next_run(embedded):
    from sharpen.core.run import Busy

    runner = Runner(embedded, max_waiting=1, batch=2)
    first, second = (runner.run(r) for r in requests()[:2])
    next(first), next(second)  # both hold the model: a batch of two
    stopped = threading.Event()
    waited: list = []
    worker = threading.Thread(target=lambda: waited.extend(runner.run(requests()[2], stopped.is_set)))
    worker.start()
    try:
        deadline = time.monotonic() + 30
        while runner.waiting < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert runner.waiting == 3 and not waited  # the third waits: the batch is full
        with pytest.raises(Busy, match="busy"):  # the fourth finds the line full
            next(runner.run(requests()[3]))
    finally:
        stopped.set()
        worker.join(30)
        first.close(), second.close()
    assert waited == [] and runner.waiting == 0


def test_a_pass_that_fails_in_a_pack_fails_only_its_own_run(embedded):
    runner = Runner(embedded, batch=2)
    runner.batcher.max_wait = 1.0
    good = torch.tensor([embedded.tokenizer.encode("def add(a, b):\n    return a + b\n")])  # [1, T]
    broken = torch.full((1, 9), 10**6)  # ids past the vocabulary: the embedding raises
    out: dict = {}
    both_in = threading.Barrier(2)  # both runs are members before either hands in its pass

    def one(name: str, x: torch.Tensor) -> None:
        with runner.batcher.member() as view:
            both_in.wait(30)
            try:
                out[name] = view.logits(x)
            except Exception as exc:  # noqa: BLE001 - what the run's own thread sees
                out[name] = exc

    threads = [threading.Thread(target=one, args=(name, x)) for name, x in (("good", good), ("broken", broken))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert runner.batcher.runs_per_pass == [2]  # they were packed together
    assert isinstance(out["broken"], IndexError)
    assert torch.equal(out["good"], embedded.logits(good))


def test_a_step_packs_its_small_passes_and_keeps_whole_canvases_alone(embedded):
    from sharpen.core.batch import StepBatcher

    def work(rows: int) -> Pass:
        return Pass(torch.zeros(1, rows, dtype=torch.long), torch.arange(rows), None, torch.arange(1))

    steps = [work(8) for _ in range(4)]
    canvas = work(250)
    packs = StepBatcher(embedded, rows=128)._packs([canvas, *steps])
    assert packs[0] == [canvas] and [len(p) for p in packs[1:]] == [4]  # the canvas alone, the steps together
    assert sorted(len(p) for p in StepBatcher(embedded, rows=16)._packs(steps)) == [2, 2]  # rows bound a pack, balanced
    every = [w for p in packs for w in p]
    assert sorted(map(id, every)) == sorted(map(id, [canvas, *steps]))  # each pass in exactly one pack


def test_a_run_is_not_held_back_by_a_pass_already_running(embedded):
    """A run whose step is ready does not wait for a run whose long pass is running: that run
    cannot hand in its next pass until its pass ends. The long pass is held until the short one
    has its logits; waiting for it (max_wait is an hour here) would never get there."""
    from sharpen.core.batch import StepBatcher

    release = threading.Event()

    class Slow(StepBatcher):
        def _run(self, batch):
            if any(w.ids.shape[1] > 100 for w in batch):  # the long pass: held until released
                release.wait(60)
            super()._run(batch)

    batcher = Slow(embedded, max_wait=3600.0)
    long_ids = torch.randint(0, 4000, (1, 200))
    short_ids = torch.randint(0, 4000, (1, 20))
    out: dict = {}
    long_member, short_done = threading.Event(), threading.Event()

    def long_run() -> None:
        with batcher.member() as view:
            long_member.set()
            out["long"] = view.logits(long_ids)

    def short_run() -> None:
        with batcher.member() as view:
            out["short"] = view.logits(short_ids)
        short_done.set()

    first = threading.Thread(target=long_run)
    first.start()
    long_member.wait(30)
    while batcher._in_flight == 0:  # the long pass is running (alone: it was the only member)
        time.sleep(0.01)
    second = threading.Thread(target=short_run)
    second.start()
    beside = short_done.wait(30)  # while the long pass is still held
    release.set()
    first.join(60), second.join(60)
    assert beside and batcher.runs_per_pass == [1, 1]  # it ran as its own pack, beside the long one
    assert torch.equal(out["short"], embedded.logits(short_ids)) and torch.equal(out["long"], embedded.logits(long_ids))


def test_the_batcher_keeps_totals_and_only_the_latest_passes(embedded, monkeypatch):
    """A server runs for weeks: the per-pass record is bounded, the totals (/metrics) are not."""
    from sharpen.core import batch
    from sharpen.core.batch import StepBatcher

    monkeypatch.setattr(batch, "RECENT_PASSES", 2)
    batcher = StepBatcher(embedded)
    ids = torch.randint(0, 4000, (1, 12))
    with batcher.member() as view:
        for _ in range(9):
            view.logits(ids)
    assert batcher.passes == batcher.packed_runs == 9 and len(batcher.runs_per_pass) <= 4
