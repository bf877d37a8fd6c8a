"""Triton step kernels against the plain-torch reference (CPU via TRITON_INTERPRET=1)."""
import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported: run kernels on the CPU

import pytest
import torch

pytest.importorskip("triton")


def _interpreter_breaks_on_this_numpy() -> bool:
    """Triton's interpreter before the fix of triton-lang/triton#9171 turns a loop bound into an
    int with int(array), which NumPy 2.4 refuses for a 1-element array: every kernel with a
    runtime loop bound fails in the interpreter (torch 2.11 pins such a triton, 3.6.0). A GPU
    compiles the kernels and never meets it."""
    import inspect

    import numpy
    from triton.runtime import interpreter

    patch = getattr(interpreter, "_patch_lang_tensor", None)
    source = inspect.getsource(patch) if patch is not None else ""
    return tuple(int(n) for n in numpy.__version__.split(".")[:2]) >= (2, 4) and "int(self.handle.data))" in source


pytestmark = pytest.mark.skipif(_interpreter_breaks_on_this_numpy(),
                                reason="this triton's interpreter fails on NumPy >= 2.4 (triton-lang/triton#9171): numpy < 2.4 runs these tests with it")

from sharpen.core.engine import apply_edit
from sharpen.core.settings import Sampling
from sharpen.core.spans import Span
from sharpen.kernels import reference as R
from sharpen.kernels import step, triton_step

SHAPES = [(1, 7), (5, 50), (8, 1000), (3, 5000), (2, 8193)]


@pytest.mark.parametrize("M, V", SHAPES)
@pytest.mark.parametrize("scale", [0.5, 4.0])
def test_fused_confidence_matches_reference_greedy(M, V, scale):
    g = torch.Generator().manual_seed(M * V)
    logits = torch.randn(M, V, generator=g) * scale
    tokens, p, margin, neg_entropy = triton_step.fused_confidence(logits, None, 0.0)
    ref_tokens = R.propose(logits, 0.0, None, None, g)
    assert torch.equal(tokens, ref_tokens)
    for policy, got in (("confidence", p), ("margin", margin), ("entropy", neg_entropy)):
        want, ref_p = R.score(logits, ref_tokens, policy, g)
        torch.testing.assert_close(got, want.float(), atol=2e-5, rtol=1e-4)
    torch.testing.assert_close(p, ref_p, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("M, V", SHAPES)
def test_fused_confidence_matches_reference_gumbel(M, V):
    g = torch.Generator().manual_seed(V)
    logits = torch.randn(M, V, generator=g)
    noise = R.gumbel_noise(logits.shape, g, "cpu")
    tokens, p, _, _ = triton_step.fused_confidence(logits, noise, 0.7)
    want = (logits.double() / 0.7 + noise).argmax(-1)
    assert torch.equal(tokens, want)
    torch.testing.assert_close(p, logits.softmax(-1).gather(-1, want[:, None]).squeeze(-1))


def test_fused_confidence_with_banned_ids():
    logits = torch.randn(6, 700)
    logits[:, [0, 5, 699]] = float("-inf")  # the sampler bans ids this way
    tokens, p, margin, neg_entropy = triton_step.fused_confidence(logits, None, 0.0)
    g = torch.Generator().manual_seed(0)
    assert torch.isfinite(neg_entropy).all() and torch.isfinite(margin).all()
    torch.testing.assert_close(neg_entropy, R.score(logits, tokens, "entropy", g)[0].float(), atol=2e-5, rtol=1e-4)


def test_fused_confidence_bf16_input():
    logits = torch.randn(4, 300).to(torch.bfloat16)
    tokens, p, _, _ = triton_step.fused_confidence(logits, None, 0.0)
    assert torch.equal(tokens, logits.float().argmax(-1))
    torch.testing.assert_close(p, logits.float().softmax(-1).max(-1).values, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("M, V", [(1, 7), (8, 1000), (6, 5000)])
def test_fused_confidence_reads_masked_rows_only(M, V):
    g = torch.Generator().manual_seed(M + V)
    logits = torch.randn(M, V, generator=g)
    active = torch.arange(M) % 2 == 0
    logits[~active] = float("nan")  # a committed position's row: reading it would poison its outputs
    tokens, p, margin, neg_entropy = triton_step.fused_confidence(logits, None, 0.0, active)
    ref_tokens = R.propose(logits[active], 0.0, None, None, g)
    assert torch.equal(tokens[active], ref_tokens)
    torch.testing.assert_close(p[active], R.score(logits[active], ref_tokens, "confidence", g)[0].float())
    for out in (tokens, p, margin, neg_entropy):
        assert not out[~active].isnan().any() and (out[~active] == 0).all()


@pytest.mark.parametrize("V", [4097, 5000, 9000])
def test_fused_confidence_when_a_whole_first_chunk_is_banned(V):
    # The kernel streams the vocabulary in chunks of 4,096: a row whose first chunk is all -inf
    # (banned ids, or a vocabulary whose low ids are all special) started its running max at
    # -inf and computed exp(-inf - -inf) = NaN, poisoning p, margin and entropy.
    g = torch.Generator().manual_seed(V)
    logits = torch.randn(3, V, generator=g)
    logits[0, :4096] = float("-inf")
    logits[1, : V - 1] = float("-inf")  # one finite logit, in the last chunk
    tokens, p, margin, neg_entropy = triton_step.fused_confidence(logits, None, 0.0)
    assert torch.equal(tokens, logits.argmax(-1))
    for policy, got in (("confidence", p), ("margin", margin), ("entropy", neg_entropy)):
        assert torch.isfinite(got).all(), policy
        torch.testing.assert_close(got, R.score(logits, tokens, policy, g)[0].float(), atol=2e-5, rtol=1e-4)
    assert p[1] == 1.0


def test_fused_confidence_never_picks_nan():
    # A float16 model that overflowed hands the step NaN logits; a NaN must not become the
    # proposal (torch.argmax would pick it) nor turn the row's statistics into NaN.
    logits = torch.randn(2, 300)
    logits[:, 17] = float("nan")
    tokens, p, margin, neg_entropy = triton_step.fused_confidence(logits, None, 0.0)
    clean = logits.nan_to_num(nan=float("-inf"))
    assert torch.equal(tokens, clean.argmax(-1))
    torch.testing.assert_close(p, clean.softmax(-1).max(-1).values)
    assert torch.isfinite(margin).all() and torch.isfinite(neg_entropy).all()


@pytest.mark.parametrize("B, P", [(1, 1), (2, 7), (3, 32), (2, 100), (1, 257)])
def test_select_commits_matches_reference(B, P):
    g = torch.Generator().manual_seed(B * 1000 + P)
    for trial in range(4):
        ranking = torch.randn(B, P, generator=g)
        if trial == 1:
            ranking = ranking.round()  # many ties: lower positions win, as the stable sort
        active = torch.rand(B, P, generator=g) > 0.3
        quota = torch.randint(0, P + 2, (B,), generator=g)
        assert torch.equal(triton_step.select_commits(ranking, active, quota), R.select_commits(ranking, active, quota))


def test_sampler_with_triton_kernels_matches_reference(tiny_denoiser):
    text = "def add(a, b):\n    return a + b\n"
    spans = [Span(4, 7, max_tokens=6), Span(19, 31, mode="rewrite")]
    for settings in (Sampling(), Sampling(policy="margin", schedule="fixed", steps=3, block_size=4)):
        ref = apply_edit(tiny_denoiser, text, spans, Sampling(**{**settings.__dict__, "kernels": "reference"}))
        fused = apply_edit(tiny_denoiser, text, spans, Sampling(**{**settings.__dict__, "kernels": "triton"}))
        assert fused.text == ref.text and fused.steps == ref.steps


def test_kernel_choice_is_explicit():
    assert step.choose("auto", torch.device("cpu")) == "reference"
    assert step.choose("auto", torch.device("cuda")) == "triton"
    assert step.choose("triton", torch.device("cpu")) == "triton"
    with pytest.raises(ValueError, match="unknown kernel"):
        step.choose("cuda-magic", torch.device("cpu"))


def test_triton_on_a_cpu_without_the_interpreter_is_a_usage_error(monkeypatch, tiny_denoiser):
    from sharpen.core.errors import UsageError

    monkeypatch.delenv("TRITON_INTERPRET")
    with pytest.raises(ValueError, match="run on CUDA, not cpu"):
        step.choose("triton", torch.device("cpu"))
    with pytest.raises(UsageError, match="--kernels auto or reference"):
        apply_edit(tiny_denoiser, "x = 1\n", [Span(4, 5)], Sampling(kernels="triton"))


def test_auto_falls_back_to_the_reference_when_triton_does_not_import(monkeypatch):
    # A triton that is installed but fails at import (a wheel for another CUDA) must not be
    # picked by "auto" on CUDA, and asking for it by name is one plain error.
    import sys

    monkeypatch.setitem(sys.modules, "triton.language", None)  # "import triton.language" now raises ImportError
    step.triton_problem.cache_clear()
    try:
        assert "does not import" in step.triton_problem()
        assert step.choose("auto", torch.device("cuda")) == "reference"
        with pytest.raises(ValueError, match="triton kernels cannot run: triton does not import"):
            step.choose("triton", torch.device("cpu"))
    finally:
        step.triton_problem.cache_clear()
