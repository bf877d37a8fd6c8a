"""torch.compile of the backbone (`--compile`): same results as eager, through the cache too.

The GPU path's CUDA graphs ("reduce-overhead") need a GPU; inductor's default mode runs
here on the CPU, so the compiled code itself is checked, not just the plumbing.
"""
import pytest
import torch

from checkpoints import write_tiny_sharpen
from sharpen.core.engine import apply_edit
from sharpen.core.models.loading import load_denoiser
from sharpen.core.settings import Sampling
from sharpen.core.spans import Span

TEXT = "def add(a, b):\n    return a + b\n\n\nclass Point:\n    x = 1\n    y = 2\n"
SPANS = [Span(4, 7), Span(48, 48, max_tokens=6)]


@pytest.fixture
def fresh_denoiser(tmp_path):
    # Compiling replaces the model's methods: never on the session-wide fixture.
    return load_denoiser(write_tiny_sharpen(tmp_path / "model"))


@pytest.mark.parametrize("backend", ["eager", "inductor"])
def test_compiled_edit_equals_eager(fresh_denoiser, backend):
    settings = [Sampling(), Sampling(cache="none", schedule="fixed", steps=4)]
    eager = [apply_edit(fresh_denoiser, TEXT, SPANS, s).text for s in settings]
    fresh_denoiser.compile("default", backend=backend)
    assert [apply_edit(fresh_denoiser, TEXT, SPANS, s).text for s in settings] == eager


def test_compiled_cached_logits_match_eager(fresh_denoiser):
    x = torch.randint(3, 300, (1, 24))
    want = torch.arange(8, 16)
    cache = fresh_denoiser.new_cache(1, 24)
    fresh_denoiser.logits(x, cache=cache)
    expected = fresh_denoiser.logits(x, want=want, run=want, cache=cache)
    fresh_denoiser.compile("default")
    cache = fresh_denoiser.new_cache(1, 24)
    fresh_denoiser.logits(x, cache=cache)
    torch.testing.assert_close(fresh_denoiser.logits(x, want=want, run=want, cache=cache), expected, atol=1e-5, rtol=1e-5)


def test_unknown_mode_is_refused(fresh_denoiser):
    with pytest.raises(ValueError, match="unknown compile mode"):
        fresh_denoiser.compile("turbo")


def test_off_leaves_the_model_alone(fresh_denoiser):
    scores = fresh_denoiser._scores
    fresh_denoiser.compile("off")
    assert fresh_denoiser._scores == fresh_denoiser.model.scores == scores
    assert fresh_denoiser.new_cache(1, 8) is not fresh_denoiser.new_cache(1, 8)  # eager: a fresh cache per run


def test_compiled_runs_write_into_static_cache_buffers(fresh_denoiser):
    # A CUDA graph may write in place only into inputs marked static (torch.compile skips the
    # graph otherwise), and reusing the buffers lets a run replay an earlier run's graphs.
    fresh_denoiser.compile("default", backend="eager")
    # One compiled function per step (the pass with its projection), held by the denoiser: the
    # backbone's own methods stay as they are.
    assert fresh_denoiser._scores != fresh_denoiser.model.scores
    assert not {"scores", "hidden", "project"} & set(vars(fresh_denoiser.model))
    cache = fresh_denoiser.new_cache(2, 24)
    assert all(getattr(b, "_dynamo_static_input_type", None) for b in (*cache.k, *cache.v))
    assert fresh_denoiser.new_cache(2, 24) is cache
    # A bucketed length (core/models/compiled.py): 30 positions get a 32-position cache.
    assert fresh_denoiser.new_cache(1, 24) is not cache and fresh_denoiser.new_cache(1, 30).length == 32


def test_compiled_edits_in_a_row_reuse_the_cache_and_equal_eager(fresh_denoiser):
    # The kept cache still holds the previous run's keys: every run must overwrite it first.
    texts = [TEXT, TEXT.replace("a + b", "b + a"), TEXT]  # the same canvas length, other tokens
    eager = [apply_edit(fresh_denoiser, t, SPANS, Sampling()).text for t in texts]
    fresh_denoiser.compile("default")
    handed_out = []
    keep = fresh_denoiser.new_cache
    fresh_denoiser.new_cache = lambda batch, length: handed_out.append(keep(batch, length)) or handed_out[-1]
    assert [apply_edit(fresh_denoiser, t, SPANS, Sampling()).text for t in texts] == eager
    assert len(handed_out) == 3 and handed_out[0] is handed_out[1] is handed_out[2]


def test_buckets_are_few_and_at_most_one_and_a_half_times_the_size():
    from sharpen.core.models.compiled import bucket

    sizes = {bucket(n) for n in range(1, 2049)}
    assert sorted(sizes)[:8] == [8, 12, 16, 24, 32, 48, 64, 96] and len(sizes) == 17
    assert all(n <= bucket(n) <= max(8, 1.5 * n) for n in range(1, 5000))
    assert bucket(1000, cap=1024) == 1024 and bucket(1030, cap=1024) == 1030  # never past the model's length, never below n


def test_ten_edits_of_different_lengths_compile_a_handful_of_graphs(fresh_denoiser):
    # A CUDA graph is recorded per set of input shapes, and each edit has its own canvas and
    # slot count: without buckets, ten edits met 49 shape sets and hit dynamo's recompile limit
    # (after which new shapes silently ran eagerly); ten more edits of other lengths met new ones.
    import torch._dynamo
    from torch._dynamo.utils import counters

    text = TEXT * 6
    first = [[Span(40, 40, max_tokens=n)] for n in (3, 9, 17, 26, 40, 55, 70, 88, 107, 130)]
    second = [[Span(40, 40, max_tokens=n)] for n in (5, 12, 20, 33, 47, 60, 77, 95, 115, 125)]

    def edit(spans):  # about 4 tokens a step: the shapes are the blocks', the same at one token a step, in a third of the time
        return apply_edit(fresh_denoiser, text, spans, Sampling(block_size=8, steps=max(1, spans[0].max_tokens // 4))).text

    eager = [edit(spans) for spans in first + second]
    torch._dynamo.reset()
    counters.clear()
    fresh_denoiser.compile("default", backend="eager")
    step, shapes = fresh_denoiser._scores, set()
    inner = step.compiled

    def seen(ids, positions, cache, rows, attend):  # every set of shapes the compiled function meets
        shapes.add((tuple(ids.shape), positions is None or tuple(positions.shape), cache and cache.length, tuple(rows.shape)))
        return inner(ids, positions, cache, rows, attend)

    step.compiled = seen
    texts = [edit(spans) for spans in first]
    after_first = (len(shapes), counters["stats"]["unique_graphs"])
    texts += [edit(spans) for spans in second]
    assert texts == eager
    assert sum(counters["graph_break"].values()) == 0
    # Measured: 22-23 shape sets; 11-15 graphs (of the step, and of the sampling math compiled beside it).
    assert after_first[0] <= 24 and after_first[1] <= 16, after_first
    assert len(shapes) == after_first[0]  # bounded: the next ten edits meet no new step shapes
    assert counters["stats"]["unique_graphs"] <= after_first[1] + 1  # (a one-row last block is a sampling graph of its own)


def test_a_step_that_fails_to_compile_runs_eagerly_with_one_line(fresh_denoiser):
    eager = apply_edit(fresh_denoiser, TEXT, SPANS, Sampling()).text
    lines = []

    def broken_backend(graph, example_inputs):
        raise RuntimeError("CUDA graph capture failed\nsecond line")

    import torch._dynamo

    torch._dynamo.reset()  # no graph kept from another test's model: this one must compile
    fresh_denoiser.compile("default", backend=broken_backend, notify=lines.append)
    assert apply_edit(fresh_denoiser, TEXT, SPANS, Sampling()).text == eager
    assert apply_edit(fresh_denoiser, TEXT, SPANS, Sampling()).text == eager  # and stays eager, quietly
    assert len(lines) == 1 and "compiled step failed" in lines[0] and "running eagerly" in lines[0] and "\n" not in lines[0]


def test_auto_compiles_nothing_on_a_cpu(fresh_denoiser):
    scores = fresh_denoiser._scores
    fresh_denoiser.compile("auto")
    assert fresh_denoiser._scores is scores and fresh_denoiser.new_cache(1, 8) is not fresh_denoiser.new_cache(1, 8)


def test_out_of_gpu_memory_in_a_step_is_one_model_error_line(fresh_denoiser, monkeypatch):
    from sharpen.core.errors import ModelError

    def out_of_memory(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB (GPU 0; 23.65 GiB total capacity)")

    monkeypatch.setattr(fresh_denoiser, "_scores", out_of_memory)
    with pytest.raises(ModelError, match="out of GPU memory in a denoising step; try a smaller --context-tokens") as caught:
        apply_edit(fresh_denoiser, TEXT, SPANS, Sampling())
    assert "\n" not in str(caught.value) and "Tried to allocate" not in str(caught.value)


def test_the_random_draw_compiles_without_a_break_and_draws_what_eager_draws(fresh_denoiser):
    # The draw is a hash of (seed, step, row, token), not a generator: compiled with the step's
    # sampling math it breaks no graph, and the same seed gives the same text as eager.
    import torch._dynamo
    from torch._dynamo.utils import counters

    settings = [Sampling(temperature=1.0, seed=4, samples=2), Sampling(temperature=0.8, policy="random", top_k=20, seed=9)]
    eager = [apply_edit(fresh_denoiser, TEXT, SPANS, s).samples for s in settings]
    torch._dynamo.reset()
    counters.clear()
    fresh_denoiser.compile("default", backend="eager")
    assert [apply_edit(fresh_denoiser, TEXT, SPANS, s).samples for s in settings] == eager
    assert sum(counters["graph_break"].values()) == 0, dict(counters["graph_break"])
    assert fresh_denoiser._samplers and all(s.compiled is not None for s in fresh_denoiser._samplers.values())


def test_the_warm_up_compiles_ahead_in_the_kept_cache_and_says_so(fresh_denoiser):
    # What --compile auto does on CUDA before the first edit: a whole-canvas pass and a cached
    # step compiled (and, with CUDA graphs, recorded) in the cache the runs will be handed.
    import torch._dynamo
    from torch._dynamo.utils import counters

    eager = apply_edit(fresh_denoiser, TEXT, SPANS, Sampling(block_size=8)).text
    torch._dynamo.reset()
    counters.clear()
    fresh_denoiser.compile("default", backend="eager")
    lines = []
    fresh_denoiser._step.warm_up(fresh_denoiser.new_cache, lines.append, canvas=40, block=8)
    assert len(lines) == 2 and lines[0].startswith("sharpen: compiling") and "ready" in lines[1]
    warmed = counters["stats"]["unique_graphs"]
    assert warmed >= 2 and fresh_denoiser.new_cache(1, 40) is fresh_denoiser._kept_cache
    assert apply_edit(fresh_denoiser, TEXT, SPANS, Sampling(block_size=8)).text == eager
