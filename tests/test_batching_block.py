"""Continuous batching for the block-causal families (core/batch.py, core/loops/scaffold.py):
concurrent SDAR and LLaDA2 (mixture of experts) runs share each step's open-block pass, every run
against its own cache at its own key length, and each gets exactly what it gets alone."""
from __future__ import annotations

import threading
from dataclasses import replace
from contextlib import contextmanager

import pytest
import torch

from sharpen.core.batch import Pass, batchable, packed_scores
from sharpen.core.models.kv_cache import Attend
from sharpen.core.request import EditRequest
from sharpen.core.run import Done, Runner
from sharpen.core.settings import Sampling
from sharpen.core.spans import Span

TEXT = "def add(a, b):\n    return a + b\n\n\nprint(add(1, 2))\n"
LONG = TEXT + "".join(f"def f{i}(x):\n    return x * {i}\n\n" for i in range(6))


@pytest.fixture(scope="module")
def sdar(tmp_path_factory):
    from block_checkpoints import write_sdar

    from sharpen.core.models.loading import load_denoiser

    return load_denoiser(write_sdar(tmp_path_factory.mktemp("sdar") / "SDAR-8B-Chat-tiny"))


@pytest.fixture(scope="module")
def llada2(tmp_path_factory):
    from moe_checkpoints import write_llada2

    from sharpen.core.models.loading import load_denoiser

    return load_denoiser(write_llada2(tmp_path_factory.mktemp("llada2") / "llada2.0", version="2.0", head_scale=3.0))


@pytest.fixture(scope="module")
def llada2_1(tmp_path_factory):
    """LLaDA2.1: the editing loop (core/loops/editing.py), which replaces committed tokens."""
    from moe_checkpoints import write_llada2

    from sharpen.core.models.loading import load_denoiser

    return load_denoiser(write_llada2(tmp_path_factory.mktemp("llada2") / "llada2.1", version="2.1", head_scale=3.0))


@pytest.fixture(scope="module")
def fast_dllm(tmp_path_factory):
    """Fast-dLLM v2: the sub-block loop (core/loops/subblock.py)."""
    from block_checkpoints import write_fast_dllm_v2

    from sharpen.core.models.loading import load_denoiser

    return load_denoiser(write_fast_dllm_v2(tmp_path_factory.mktemp("fdllm") / "Fast_dLLM_v2_tiny"))


def requests(family: str = "sdar") -> list[EditRequest]:
    """Four runs that differ in what a block-causal pass may differ in: prompt length (so each
    open block's key length k * size differs), span position and length, samples, seed,
    temperature, top-k and block size (Fast-dLLM v2 takes neither of the last two)."""
    if family == "fast_dllm":
        return [replace(r, sampling=replace(r.sampling, top_k=None, block_size=None)) for r in requests()]
    end = len(TEXT) - 1
    at = LONG.index("def f3")
    return [
        EditRequest(TEXT, (Span(end, end, max_tokens=8),), Sampling(seed=1)),
        EditRequest(LONG, (Span(at, at, max_tokens=12),), Sampling(seed=7, temperature=0.8, top_k=40)),
        EditRequest(TEXT, (Span(TEXT.index("return"), TEXT.index("return") + 12, "rewrite", strength=1.0),),
                    Sampling(seed=4, temperature=1.0, samples=2)),
        EditRequest(LONG, (Span(len(LONG) - 1, len(LONG) - 1, max_tokens=10),), Sampling(seed=9, temperature=0.5, block_size=8)),
    ]


def fingerprint(done: Done) -> tuple:
    result = done.result
    return result.text, result.steps, tuple((r.text, r.tokens, r.alternatives) for r in result.spans)


def run_together(runner: Runner, batch: list[EditRequest]) -> list:
    out: list = [None] * len(batch)
    start = threading.Barrier(len(batch))

    def one(i: int) -> None:
        start.wait()
        out[i] = list(runner.run(batch[i], every=0.0))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(batch))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not any(t.is_alive() for t in threads)
    return out


def batched_runner(denoiser, runs: int) -> Runner:
    """A Runner whose batcher waits for every run's pass and packs them all (every step shared)."""
    runner = Runner(denoiser, batch=runs)
    assert runner.batcher is not None, "block-causal runs should share passes (core.batch.batchable)"
    runner.batcher.max_wait = 1.0
    runner.batcher.rows = 10**6
    member, gate = runner.batcher.member, threading.Barrier(runs)

    @contextmanager
    def joined():  # every run is in the batch before any hands in its first pass
        with member() as view:
            gate.wait(60)
            yield view

    runner.batcher.member = joined
    return runner


@pytest.mark.parametrize("family", ["sdar", "llada2", "llada2_1", "fast_dllm"])
def test_concurrent_block_causal_runs_share_passes_and_equal_each_run_alone(family, request):
    denoiser = request.getfixturevalue(family)
    batch = requests(family)
    alone = [fingerprint(Runner(denoiser).result(r)) for r in batch]
    assert len(set(alone)) == len(alone)  # the runs differ: equality below is not one answer four times
    runner = batched_runner(denoiser, len(batch))
    events = run_together(runner, batch)
    assert all(isinstance(e[-1], Done) for e in events)
    assert [fingerprint(e[-1]) for e in events] == alone
    batcher = runner.batcher
    assert batcher.packed_runs > batcher.passes  # passes were shared
    assert max(batcher.runs_per_pass) >= 3


def test_open_block_passes_at_different_key_lengths_pack_bit_for_bit(sdar):
    """Each run's open block attends to its own read-only cache up to its own k * size keys: no
    padding, and the packed logits equal each pass alone, bit for bit, the caches untouched."""
    model, size = sdar.model, sdar.spec.block.size
    generator = torch.Generator().manual_seed(0)
    passes = []
    for blocks, samples in ((1, 1), (3, 2), (2, 1)):
        T = (blocks + 1) * size
        ids = torch.randint(0, model.cfg.vocab_size, (samples, T), generator=generator)  # [b, T]
        cache = model.new_cache(samples, T)
        with torch.inference_mode():
            model.hidden(ids[:, :blocks * size], torch.arange(blocks * size), cache)  # the blocks before, written
        block = torch.arange(blocks * size, T)
        passes.append(Pass(ids[:, block], block, cache, torch.arange(size), Attend(keys=blocks * size, write=False)))
    before = [[k.clone() for k in p.cache.k] for p in passes]
    with torch.inference_mode():
        alone = [model.scores(p.ids, p.positions, p.cache, p.rows, p.attend) for p in passes]
        packed = packed_scores(model, passes)
    for one, together in zip(alone, packed):
        assert torch.equal(one, together)
    assert all(torch.equal(a, b) for p, kept in zip(passes, before) for a, b in zip(p.cache.k, kept))


def test_block_causal_and_mixture_of_experts_models_are_batchable(sdar, llada2):
    assert batchable(sdar) and batchable(llada2)
    assert Runner(sdar).batcher is None  # batch 1 (the editor): one at a time


def test_batched_runs_through_a_servers_prefix_cache_equal_each_run_alone(sdar):
    """As a server runs them: the model has a prefix cache (core/prefix_cache.py), so a batched
    run's prefill starts from keys an earlier (batched) run wrote; every result still equals the
    run alone without any cache, and the second round takes its prompts from the cache."""
    from sharpen.core import prefix_cache

    batch = requests()
    alone = [fingerprint(Runner(sdar).result(r)) for r in batch]
    store = prefix_cache.attach(sdar)
    try:
        for _ in range(2):
            runner = batched_runner(sdar, len(batch))
            events = run_together(runner, batch)
            assert [fingerprint(e[-1]) for e in events] == alone
            assert runner.batcher.packed_runs > runner.batcher.passes
        assert store.hits > 0
    finally:
        prefix_cache.attach(sdar, 0)
