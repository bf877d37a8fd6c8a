"""The step batcher's scheduling (core/batch.py StepBatcher.submit, _packs): runs that started out
of phase re-align and share passes, whole canvases of several runs pack into one pass, each run
still gets what it gets alone, a lone run never waits, and a run that stops handing in passes
holds the others up no longer than the bounds. Ordered by events and counts, never by time."""
from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import torch

from sharpen.core.batch import StepBatcher
from sharpen.core.request import EditRequest
from sharpen.core.run import Done, Runner
from sharpen.core.settings import Sampling
from sharpen.core.spans import Span

ROOT = Path(__file__).resolve().parent.parent
FOREVER = 3600.0  # a bound no test reaches: the run waits until the others hand in (or it hangs: the test fails)


@pytest.fixture(scope="module")
def embedded():
    from sharpen.core.models.load import load_model
    from sharpen.core.settings import ModelRequest

    return load_model(ModelRequest())


def canvas(length: int, seed: int) -> torch.Tensor:
    return torch.randint(0, 4000, (1, length), generator=torch.Generator().manual_seed(seed))  # [1, T]


def until(condition, seconds: float = 60.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.005)
    return condition()


class HeldFirst(StepBatcher):
    """Holds the first pack it runs until `release` is set: that run's pass stays in flight."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.release = threading.Event()
        self._first = True

    def _run(self, batch):
        if self._first:
            self._first = False
            self.release.wait(60)
        super()._run(batch)


@pytest.mark.timeout(120, func_only=True)
def test_runs_started_out_of_phase_realign_and_then_share_every_pass(embedded):
    """A's first pass is in flight when B hands in its first: B waits for A's next pass instead of
    going alone, and from then on every step holds both. (Without re-alignment B's first pass
    forms alone while A's runs, and the two alternate.)"""
    batcher = HeldFirst(embedded, max_wait=FOREVER, align_wait=FOREVER)
    ids = {"a": canvas(40, 1), "b": canvas(70, 2)}
    out: dict[str, list] = {"a": [], "b": []}

    def run(name: str) -> None:
        with batcher.member() as view:
            for _ in range(4):
                out[name].append(view.logits(ids[name]))

    a = threading.Thread(target=run, args=("a",))
    a.start()
    assert until(lambda: batcher._in_flight == 1)  # A's first pass is running (held)
    b = threading.Thread(target=run, args=("b",))
    b.start()
    assert until(lambda: len(batcher._pending) + batcher._in_flight == 2)  # B's first pass is handed in meanwhile
    batcher.release.set()
    a.join(60), b.join(60)
    assert not a.is_alive() and not b.is_alive()
    assert batcher.runs_per_pass == [1, 2, 2, 2, 1]  # A alone, then every step shared, then B alone
    assert batcher.held >= 1
    for name in out:
        alone = embedded.logits(ids[name])
        assert len(out[name]) == 4 and all(torch.equal(x, alone) for x in out[name])


@pytest.mark.timeout(120, func_only=True)
def test_whole_canvases_of_several_runs_pack_into_one_pass(embedded):
    """Three runs' whole canvases (80, 70 and 60 rows: more than a cached step's pack ever held,
    within the model's 256-row longest canvas) run as one packed pass, each equal to its pass alone."""
    batcher = StepBatcher(embedded, max_wait=FOREVER)
    assert batcher.rows == embedded.max_len  # the default bound: the model's longest canvas
    ids = [canvas(80, 3), canvas(70, 4), canvas(60, 5)]
    out: dict[int, torch.Tensor] = {}
    joined = threading.Barrier(len(ids))

    def run(i: int) -> None:
        with batcher.member() as view:
            joined.wait(60)
            out[i] = view.logits(ids[i])

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(ids))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert batcher.runs_per_pass == [3]
    counts = batcher.counts()
    assert (counts.passes, counts.packed_runs, counts.whole_passes, counts.whole_runs) == (1, 3, 1, 3)
    assert all(torch.equal(out[i], embedded.logits(x)) for i, x in enumerate(ids))


def test_packs_hold_at_most_their_rows_and_every_pass_once(embedded):
    def work(rows: int):
        from sharpen.core.batch import Pass

        return Pass(torch.zeros(1, rows, dtype=torch.long), torch.arange(rows), None, torch.arange(1))

    batcher = StepBatcher(embedded, rows=256)
    passes = [work(n) for n in (150, 150, 150, 8, 8, 300)]
    packs = batcher._packs(passes)
    assert sorted(sum(w.ids.numel() for w in p) for p in packs) == [150, 158, 158, 300]  # none over 256 but the 300 alone
    assert sorted(map(id, (w for p in packs for w in p))) == sorted(map(id, passes))


def requests() -> list[EditRequest]:
    """Two short infills (whole canvases under 128 rows each) that differ in seed, temperature,
    top-k, slots and cache policy."""
    code = "def add(a, b):\n    \n\nprint(add(1, 2))\n"
    more = "import os\n\ndef main():\n    \n    return 0\n"
    return [
        EditRequest(code, (Span(19, 19, max_tokens=12),), Sampling(seed=3, temperature=0.8, top_k=40)),
        EditRequest(more, (Span(more.index("    \n") + 4, more.index("    \n") + 4, max_tokens=10),), Sampling(seed=6, cache="none")),
    ]


def fingerprint(done: Done) -> tuple:
    result = done.result
    return result.text, result.steps, tuple((r.text, r.tokens, r.alternatives) for r in result.spans), done.sharp_per_step


@pytest.mark.timeout(300, func_only=True)
def test_a_run_that_joins_mid_run_shares_the_passes_after_and_both_equal_their_runs_alone(embedded):
    """B starts after A's third step; from B's first pass on, every pass holds both until one
    ends (1s, then 2s, then 1s), and each result equals its run alone token for token."""
    batch = requests()
    alone = [fingerprint(Runner(embedded).result(r)) for r in batch]
    runner = Runner(embedded, batch=2)
    runner.batcher.max_wait = runner.batcher.align_wait = FOREVER  # every pass waits for both runs
    third = threading.Event()
    out: list = [None, None]

    def one(i: int) -> None:
        events = []
        for event in runner.run(batch[i], every=0.0):
            events.append(event)
            if i == 0 and len(events) == 3:
                third.set()
        out[i] = events

    a = threading.Thread(target=one, args=(0,))
    a.start()
    assert third.wait(120)
    b = threading.Thread(target=one, args=(1,))
    b.start()
    a.join(240), b.join(240)
    assert [fingerprint(e[-1]) for e in out] == alone
    shared = runner.batcher.runs_per_pass
    first, last = shared.index(2), len(shared) - shared[::-1].index(2)
    assert set(shared[:first]) == {1} and set(shared[first:last]) == {2} and set(shared[last:]) <= {1}
    assert runner.batcher.counts().whole_runs >= 2  # each run's length pass (a whole canvas) went through it


@pytest.mark.timeout(120, func_only=True)
def test_a_lone_run_never_waits(embedded):
    """Default bounds: a run alone in the batch hands in every pass and it runs at once (counted:
    no pass was held), also after another run has come and gone."""
    runner = Runner(embedded, batch=4)
    runner.result(requests()[0])
    assert runner.batcher.held == 0 and set(runner.batcher.runs_per_pass) == {1}
    passes = runner.batcher.passes
    runner.result(requests()[1])
    assert runner.batcher.held == 0 and runner.batcher.passes > passes


@pytest.mark.timeout(120, func_only=True)
@pytest.mark.parametrize("stops", ["between passes", "in a running pass"])
def test_a_run_that_stops_handing_in_passes_holds_the_others_only_to_the_bound(embedded, stops):
    """C is in the batch first and then hands in nothing (its reader stalled), or its pass runs
    and does not end: A and B still finish all their passes while C is stuck; C then goes on."""
    class HeldC(StepBatcher):
        def _run(self, batch):
            if any(w.ids.shape[1] == 30 for w in batch):  # C's pass: held until A and B are done
                resume.wait(60)
            super()._run(batch)

    resume, c_in = threading.Event(), threading.Event()
    batcher = HeldC(embedded, max_wait=0.05, align_wait=0.05)  # the bounds, small: the test ends soon
    ids = {"a": canvas(40, 7), "b": canvas(50, 8), "c": canvas(30, 9)}
    out: dict[str, list] = {"a": [], "b": [], "c": []}
    pair = threading.Barrier(2)

    def run(name: str) -> None:
        with batcher.member() as view:
            if name == "c":
                c_in.set()
                if stops == "between passes":
                    resume.wait(60)  # a stalled reader: C hands in nothing until resumed
                out[name].append(view.logits(ids[name]))
                return
            pair.wait(60)
            for _ in range(5):
                out[name].append(view.logits(ids[name]))

    threads = {name: threading.Thread(target=run, args=(name,)) for name in ids}
    threads["c"].start()
    assert c_in.wait(60)
    if stops == "in a running pass":
        assert until(lambda: batcher._in_flight == 1)  # C's pass runs, alone, and is held
    threads["a"].start(), threads["b"].start()
    threads["a"].join(60), threads["b"].join(60)
    finished = not threads["a"].is_alive() and not threads["b"].is_alive()
    resume.set()
    threads["c"].join(60)
    assert finished  # A and B ended while C was stuck
    assert len(out["a"]) == len(out["b"]) == 5 and len(out["c"]) == 1
    for name in ids:
        assert all(torch.equal(x, embedded.logits(ids[name])) for x in out[name])
    assert batcher.held > 0  # they did wait for C, each time up to the bound
