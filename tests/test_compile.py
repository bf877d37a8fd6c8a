"""torch.compile of the backbone (`--compile`): same results as eager, through the cache too.

The GPU path's CUDA graphs ("reduce-overhead") need a GPU; inductor's default mode runs
here on the CPU, so the compiled code itself is checked, not just the plumbing.
"""
import pytest
import torch

from checkpoints import write_tiny_sharpen
from sharpen.core.engine import apply_edit
from sharpen.core.loading import load_denoiser
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
    assert fresh_denoiser.new_cache(1, 24) is not cache and fresh_denoiser.new_cache(1, 30).length == 30


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
