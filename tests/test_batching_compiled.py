"""Batching under compile (core/models/compiled_pack.py): a compiled denoiser's runs share each
step's pass on bucketed shapes; the graphs are bounded by the buckets, none is compiled after
the warm-up while clients come and go, and every run gets the tokens it gets alone.

The CPU cannot record CUDA graphs. What it shows: dynamo's graphs for the pack (counted by a
counting backend over torch's "eager" backend, which traces exactly what inductor would get and
compiles nothing: the cheapest backend whose graph count is honest), and the distinct input
shapes the compiled function meets, each of which reduce-overhead records as one CUDA graph.
"""
from __future__ import annotations

import random
import threading
from pathlib import Path

import pytest
import torch
from torch._dynamo.testing import CompileCounterWithBackend

from sharpen.core.batch import Pass, batchable, packed_scores
from sharpen.core.models.compiled_pack import MAX_ROWS, CompiledPack, PooledCache
from sharpen.core.models.kv_cache import Attend, block_causal_mask
from sharpen.core.request import EditRequest
from sharpen.core.run import Runner
from sharpen.core.settings import Sampling
from sharpen.core.spans import Span

TEXT = "def add(a, b):\n    return a + b\n\n\nclass Point:\n    x = 1\n    y = 2\n"
SLOTS, TOKENS = 8, 512  # a small pool: keys bucket to 64, 128, 256, 512


def load(path: Path, family: str):
    from sharpen.core.models.loading import load_denoiser

    if family == "sdar":
        from block_checkpoints import write_sdar

        return load_denoiser(write_sdar(path / "SDAR-8B-Chat-tiny"))
    from checkpoints import write_tiny_sharpen

    return load_denoiser(write_tiny_sharpen(path / "model"))


def compiled_pack(denoiser, backend: str = "eager") -> tuple[CompiledPack, CompileCounterWithBackend]:
    """The denoiser compiled (eager backend) and a pack whose graphs a counter counts."""
    denoiser.compile("default", backend="eager")
    counter = CompileCounterWithBackend(backend)
    return CompiledPack(denoiser.model, "default", counter, slots=SLOTS, tokens=TOKENS), counter


# aot_eager: the graph functionalized as inductor gets it (the pool's in-place writes become
# copies back into a mutated input), then run eagerly.
@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_a_compiled_pack_equals_the_eager_pack_for_every_kind_of_pass(tmp_path, backend):
    """Every pass a loop hands in, packed together at different lengths: a masked run's cached
    step and whole canvas (writing its cache), a pass without a cache, a block-causal prefill
    (a block-causal mask over its keys) and open blocks against read-only caches of different key
    lengths, one with two samples. Logits match the eager pack, tokens exactly, caches too."""
    denoiser = load(tmp_path, "sdar")
    model = denoiser.model
    pack, _ = compiled_pack(denoiser, backend)
    generator = torch.Generator().manual_seed(0)
    V = model.cfg.vocab_size

    def ids(b: int, T: int) -> torch.Tensor:
        return torch.randint(0, V, (b, T), generator=generator)

    def both(make_pass):  # the same pass twice: one into an eager cache, one into the pool
        eager_cache, pooled = make_pass(lambda b, T: model.new_cache(b, T)), make_pass(pack.new_cache)
        assert pooled.cache is None or isinstance(pooled.cache, PooledCache)
        return eager_cache, pooled

    def prefilled(new_cache, x, upto):  # a cache holding x's keys up to `upto`, block-causally
        cache = new_cache(x.shape[0], x.shape[1])
        with torch.inference_mode():
            run = torch.arange(upto)
            model.scores(x[:, :upto], run, cache, torch.arange(1), Attend(mask=block_causal_mask(run, upto, 4), keys=upto))
        return cache

    canvas, long, short = ids(1, 40), ids(2, 100), ids(1, 20)
    makers = [
        lambda new: Pass(canvas, torch.arange(40), new(1, 40), torch.arange(3, 30)),  # whole canvas, written
        lambda new: Pass(short, torch.arange(20), None, torch.arange(20)),  # no cache
        lambda new: (lambda c: Pass(long[:, 60:68], torch.arange(60, 68), c, torch.arange(8), Attend(keys=60, write=False)))(
            prefilled(new, long, 60)),  # an open block, two samples, 60 read-only keys
        lambda new: (lambda c: Pass(short[:, 8:12], torch.arange(8, 12), c, torch.arange(2, 4), Attend(keys=8, write=False)))(
            prefilled(new, short, 8)),  # another, 8 keys
        lambda new: (lambda run: Pass(long[:1, 16:48], run, prefilled(new, long[:1], 16), torch.arange(31, 32),
                                      Attend(mask=block_causal_mask(run, 48, 4), keys=48)))(torch.arange(16, 48)),  # a prefill's rest
    ]
    eager, pooled = zip(*(both(m) for m in makers))
    with torch.inference_mode():
        expected = packed_scores(model, list(eager))
    got = pack(list(pooled))
    assert got is not None and len(pack.shapes) == 1  # one pack, one bucket
    for e, g, p, q in zip(expected, got, eager, pooled):
        assert g.shape == e.shape
        torch.testing.assert_close(g, e, atol=1e-5, rtol=1e-5)
        assert torch.equal(g.argmax(-1), e.argmax(-1))
        if p.cache is not None:  # what it wrote (a read-only pass: nothing) is what the eager pass wrote
            for a, b in zip(p.cache.k + p.cache.v, q.cache.k + q.cache.v):
                torch.testing.assert_close(b, a, atol=1e-5, rtol=1e-5)


def test_a_pack_it_does_not_take_is_left_to_the_eager_pack(tmp_path):
    denoiser = load(tmp_path, "sharpen")
    pack, _ = compiled_pack(denoiser)
    model = denoiser.model
    foreign = Pass(torch.zeros(1, 8, dtype=torch.long), torch.arange(8), model.new_cache(1, 40), torch.arange(8))
    long = Pass(torch.zeros(1, MAX_ROWS + 1, dtype=torch.long), torch.arange(MAX_ROWS + 1), None, torch.arange(4))
    assert pack([foreign]) is None and pack([long]) is None and not pack.shapes
    assert not isinstance(pack.new_cache(1, TOKENS + 1), PooledCache)  # past the pool: an ordinary cache
    held = [pack.new_cache(2, 40) for _ in range(SLOTS // 2)]
    assert all(isinstance(c, PooledCache) for c in held) and not isinstance(pack.new_cache(1, 40), PooledCache)  # full
    del held
    assert isinstance(pack.new_cache(1, 40), PooledCache)  # a dropped cache gives its slots back


def test_every_bucket_is_one_shape_and_the_graphs_are_few(tmp_path):
    """The warm-up meets each bucket (n sequences, S rows, K keys) once: as many CUDA graphs as
    buckets under reduce-overhead, and dynamo compiles a handful of graphs for all of them."""
    denoiser = load(tmp_path, "sharpen")
    pack, counter = compiled_pack(denoiser)
    buckets = pack.buckets()
    assert len(buckets) == 4 * 5 * 4  # n 1, 2, 4, 8; S 8 .. 128; K 64 .. 512
    pack.warm_up(calls=1)
    assert pack.shapes == set(buckets) and pack.failure is None
    assert 1 <= counter.frame_count <= 4, counter.frame_count


def mixed_requests(family: str, count: int, seed: int) -> list[EditRequest]:
    """`count` runs differing in canvas length (masked 20-250 tokens; block-causal, in a chat
    prompt, 200-530: the longest past the pool), span position and length, steps, seed,
    temperature, block size and (masked) cache policy."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        text = TEXT * rng.randint(1, 5 if family == "sdar" else 6)
        at = rng.randrange(0, len(text) - 1)
        at = text.index("\n", at) + 1 if "\n" in text[at:-1] else len(text) - 1
        tokens = rng.randint(3, 14)
        if family == "sdar":
            sampling = Sampling(seed=rng.randrange(1000), temperature=rng.choice([0.0, 0.7]), block_size=rng.choice([None, 8]))
        else:
            sampling = Sampling(seed=rng.randrange(1000), temperature=rng.choice([0.0, 0.8]), block_size=rng.choice([4, 8, 16]),
                                steps=rng.choice([None, max(1, tokens // 2)]), cache=rng.choice(["dual", "dual", "prefix", "none"]))
        out.append(EditRequest(text, (Span(at, at, max_tokens=tokens),), sampling))
    return out


def fingerprint(done) -> tuple:
    result = done.result
    return result.text, result.steps, tuple((r.text, r.tokens) for r in result.spans)


def serve(runner: Runner, batch: list[EditRequest], clients: int, seed: int) -> list:
    """`clients` threads take the requests in turn, each pausing a little now and then: runs
    join and leave the batch at every step boundary, from one to `clients` at once."""
    rng = random.Random(seed)
    pauses = [rng.choice([0.0, 0.0, 0.01, 0.05]) for _ in batch]
    out: list = [None] * len(batch)
    lock = threading.Lock()
    todo = list(range(len(batch)))

    def client() -> None:
        while True:
            with lock:
                if not todo:
                    return
                i = todo.pop(0)
            threading.Event().wait(pauses[i])
            out[i] = runner.result(batch[i])

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    assert not any(t.is_alive() for t in threads)
    return out


@pytest.mark.parametrize("family", ["sharpen", "sdar"])
def test_fifty_clients_coming_and_going_compile_nothing_after_the_warm_up(tmp_path, family):
    """Half of the 100-request mixed run per family (masked; block-causal). After the warm-up no
    graph is compiled and no new shape met (no CUDA graph recorded); every run equals itself
    alone, token for token (the eager pack equals each run alone: tests/test_batching.py)."""
    denoiser = load(tmp_path, family)
    batch = mixed_requests(family, 50, seed=5)
    alone = [fingerprint(Runner(denoiser).result(r)) for r in batch]
    pack, counter = compiled_pack(denoiser)
    assert batchable(denoiser)
    runner = Runner(denoiser, max_waiting=64, batch=8)
    runner.batcher.compiled = pack
    pack.warm_up(calls=1)
    warmed, graphs = set(pack.shapes), counter.frame_count
    assert warmed == set(pack.buckets()) and graphs <= 4  # one shape (CUDA graph) per bucket; dynamo graphs for all of them
    done = serve(runner, batch, clients=8, seed=5)
    assert [fingerprint(d) for d in done] == alone
    assert counter.frame_count == graphs, "a graph was compiled after the warm-up"
    assert pack.shapes == warmed, f"shapes met after the warm-up: {sorted(pack.shapes - warmed)}"
    assert pack.failure is None
    shared = runner.batcher.runs_per_pass
    assert max(shared) >= 3 and min(shared) == 1  # clients came and went
    assert pack.packs > pack.declined > 0, (pack.packs, pack.declined)  # long whole canvases, and canvases past the pool, ran eagerly


def test_the_pool_takes_at_most_its_share_of_the_free_device_memory(monkeypatch):
    """16 slots of 2048 tokens are 18 GB for LLaDA-8B: on a card with little left after the
    weights the pool shrinks to the slots that fit its share, and never below one."""
    from sharpen.core.models import compiled_pack
    from sharpen.core.models.model import ModelConfig, Transformer

    model = Transformer(ModelConfig(vocab_size=64, dim=32, n_layers=2, n_heads=4, max_seq_len=4096))
    per_slot = 2 * 2 * 4 * 2048 * 8 * 4  # k and v, layers, kv heads, tokens, head width, float32 bytes
    cuda = torch.device("cuda")
    assert compiled_pack.pool_slots(model, torch.device("cpu")) == compiled_pack.POOL_SLOTS
    for free, slots in ((10**12, compiled_pack.POOL_SLOTS), (4 * 6 * per_slot, 5), (per_slot, 1)):
        monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None, free=free: (free, 2 * free))
        assert compiled_pack.pool_slots(model, cuda) == slots, free
