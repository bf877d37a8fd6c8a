"""Prompt reuse across requests (core/prefix_cache.py): a block-causal model's runs start from the
longest run of whole prompt blocks an earlier run prefilled, get exactly what they would get without
it, and say how many prompt tokens they took from it (/infill's tokens_cached, OpenAI's usage)."""
from __future__ import annotations

import httpx
import pytest
import torch

from sharpen.core import prefix_cache
from sharpen.core.request import EditRequest
from sharpen.core.settings import Sampling
from sharpen.core.spans import Span

FILE = "def area(w, h):\n    return w * h\n\n" * 6 + "class Shape:\n    def __init__(self, sides):\n        self.sides = sides\n\n"


@pytest.fixture(scope="module")
def sdar(tmp_path_factory):
    from block_checkpoints import write_sdar
    from sharpen.core.models.loading import load_denoiser

    return load_denoiser(write_sdar(tmp_path_factory.mktemp("sdar") / "SDAR-8B-Chat-tiny"))


@pytest.fixture(scope="module")
def fast_dllm(tmp_path_factory):
    from block_checkpoints import write_fast_dllm_v2
    from sharpen.core.models.loading import load_denoiser

    return load_denoiser(write_fast_dllm_v2(tmp_path_factory.mktemp("fdllm") / "Fast_dLLM_v2_7B-tiny"))


@pytest.fixture(scope="module")
def llada2(tmp_path_factory):
    """LLaDA2.1 (a mixture of experts; its editing loop prefills through the same call)."""
    from moe_checkpoints import write_llada2
    from sharpen.core.models.loading import load_denoiser

    return load_denoiser(write_llada2(tmp_path_factory.mktemp("llada2") / "llada2.1", version="2.1", head_scale=3.0))


def _runs(denoiser, texts: list[str], cache_bytes: int, **sampling):
    """Each text infilled at its end, one after another on one model; the results."""
    from sharpen.core.run import Runner

    prefix_cache.attach(denoiser, cache_bytes)
    runner = Runner(denoiser)
    try:
        return [runner.result(EditRequest(t, (Span(len(t), len(t), max_tokens=10),), Sampling(seed=5, **sampling))).result for t in texts]
    finally:
        prefix_cache.attach(denoiser, 0)


@pytest.mark.parametrize("model", ["sdar", "fast_dllm", "llada2"])
def test_a_repeated_prefix_gives_the_tokens_of_a_run_without_the_cache_and_says_what_it_reused(model, request):
    denoiser = request.getfixturevalue(model)
    texts = [FILE, FILE, FILE + "    def perimeter(self):\n        ", FILE]
    alone = _runs(denoiser, texts, 0, samples=2)
    cached = _runs(denoiser, texts, 1 << 26, samples=2)
    for a, c in zip(alone, cached):
        assert c.samples == a.samples and c.spans[0].alternatives == a.spans[0].alternatives and c.steps == a.steps
    assert all(a.cached_tokens == 0 for a in alone)
    assert cached[0].cached_tokens == 0  # nothing before it
    size = denoiser.spec.block.size
    assert 0 < cached[1].cached_tokens <= cached[1].prompt_tokens and cached[1].cached_tokens % size == 0
    assert 0 < cached[2].cached_tokens < cached[2].prompt_tokens  # the file's blocks, not the new tail


def test_a_partly_cached_prefill_writes_bitwise_the_keys_of_a_whole_one(sdar):
    """The keys and values and the returned row of a prefill that starts from another prompt's
    first blocks equal, bit for bit, those of one pass over the whole prompt (CPU, float32)."""
    torch.manual_seed(0)
    size, length = sdar.spec.block.size, 96
    ids = torch.randint(0, 300, (1, length)).expand(2, -1).clone()  # [B, T]: every sample's prompt is the same
    other = ids.clone()
    other[:, 60:] = 7  # shares the first 15 blocks

    def prefilled(x, store_bytes, before=None):
        store = prefix_cache.attach(sdar, store_bytes)
        with torch.inference_mode():
            if before is not None:
                prefix_cache.prefill(sdar, before, sdar.new_cache(2, length), length, size)
            cache = sdar.new_cache(2, length)
            with prefix_cache.counting() as tally:
                row = prefix_cache.prefill(sdar, x, cache, length, size)
        prefix_cache.attach(sdar, 0)
        return cache, row, tally.tokens, store

    whole, whole_row, none, _ = prefilled(ids, 0)
    part, part_row, reused, store = prefilled(ids, 1 << 26, before=other)
    assert none == 0 and reused == 60 and store.hits == 1
    assert all(torch.equal(a, b) for a, b in zip(whole.k + whole.v, part.k + part.v))
    assert torch.equal(whole_row, part_row)


def _entry(ids: list[int], size: int = 4, width: int = 8) -> prefix_cache.Entry:
    n = len(ids)
    return prefix_cache.Entry(size, tuple(ids), [torch.zeros(1, 1, n, width)], [torch.zeros(1, 1, n, width)])


def test_entries_are_bounded_in_bytes_and_the_least_recently_used_goes_first():
    one = _entry(list(range(8))).bytes  # 8 tokens' keys and values
    store = prefix_cache.PrefixCache(max_bytes=2 * one)
    a, b, c = ([base + i for i in range(8)] for base in (0, 100, 200))
    store.put(_entry(a))
    store.put(_entry(b))
    assert store.longest(a, 4, 2)[1] == 2  # a used last: b is now the least recently used
    store.put(_entry(c))
    assert len(store) == 2 and store.bytes <= store.max_bytes and store.evictions == 1
    assert store.longest(b, 4, 2) == (None, 0)
    assert store.longest(a, 4, 2)[1] == 2 and store.longest(c, 4, 2)[1] == 2
    store.put(_entry(list(range(1000, 1100))))  # larger than the whole bound: not kept, nothing evicted for it
    assert len(store) == 2


def test_different_prefixes_share_nothing_and_a_shared_one_only_its_whole_blocks():
    store = prefix_cache.PrefixCache()
    store.put(_entry([1, 2, 3, 4, 5, 6, 7, 8]))
    assert store.longest([9, 2, 3, 4, 5, 6, 7, 8], 4, 2) == (None, 0)  # differs in the first block
    assert store.longest([1, 2, 3, 4, 5, 6, 7, 9], 4, 2)[1] == 1  # the first block only
    assert store.longest([1, 2, 3, 4, 5, 6, 7, 8], 8, 1) == (None, 0)  # another block size: other keys
    store.put(_entry([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]))  # covers the first entry, which goes
    assert len(store) == 1 and store.longest([1, 2, 3, 4, 5, 6, 7, 8], 4, 2)[1] == 2


async def test_infill_and_openai_usage_report_the_cached_prompt_tokens(sdar):
    from sharpen.app.backend import LocalBackend
    from sharpen.app.serve.app import build_app
    from sharpen.app.serve.common import Server
    from sharpen.app.serve.common import keep_prefixes

    backend = LocalBackend.of(sdar)
    assert "prompt prefixes reused" in keep_prefixes(backend, 64)
    try:
        app = build_app(Server(backend, backend.describe()))
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://sharpen", timeout=120) as client:
            body = {"input_prefix": FILE, "input_suffix": "\n", "n_predict": 8, "seed": 1, "cache_prompt": True}
            first = (await client.post("/infill", json=body)).json()
            second = (await client.post("/infill", json=body)).json()
            assert first["tokens_cached"] == first["timings"]["cache_n"] == 0
            assert second["content"] == first["content"]
            assert 0 < second["tokens_cached"] == second["timings"]["cache_n"] <= second["tokens_evaluated"]
            assert second["timings"]["prompt_n"] == second["tokens_evaluated"] - second["tokens_cached"]
            answer = (await client.post("/v1/completions", json={"prompt": FILE, "suffix": "\n", "max_tokens": 8, "seed": 1})).json()
            assert answer["usage"]["prompt_tokens_details"]["cached_tokens"] > 0
    finally:
        prefix_cache.attach(sdar, 0)
