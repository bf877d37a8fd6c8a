"""The denoising loop on a tiny random model: invariants, determinism, cancellation."""
import dataclasses

import pytest
import torch

from sharpen.core.canvas import build_canvas
from sharpen.core.engine import apply_edit, run_edit
from sharpen.core.loops.masked import LoopRules, denoise
from sharpen.core.settings import Sampling
from sharpen.core.spans import Span
from sharpen.kernels import reference as K

TEXT = "def add(a, b):\n    return a + b\n\n\nclass Point:\n    x = 1\r\n    y = 2\n"
SPANS = [Span(4, 7), Span(23, 31, mode="rewrite", strength=0.6), Span(48, 48, max_tokens=6)]

SETTINGS = [
    Sampling(),
    Sampling(cache="none"),
    Sampling(cache="prefix", block_size=5, schedule="fixed", steps=6),
    Sampling(schedule="fixed", steps=3, policy="margin"),
    Sampling(policy="entropy", block_size=4),
    Sampling(policy="random", temperature=0.8, top_k=20, top_p=0.9, samples=3),
    (Sampling(temperature=1.0, block_size=8), LoopRules(remask_below=0.05)),
    (Sampling(schedule="fixed", steps=1), LoopRules(rewrite_order="random")),
    Sampling(block_size=3, refresh="block"),
    Sampling(cache="prefix", block_size=4, refresh="block", samples=2, temperature=0.5),
]


class Scripted:
    """A stand-in denoiser (core.denoiser.DenoiserLike) whose logits a test writes (`scores`);
    the rest is the tiny model's. No KV cache: every step is a full pass."""

    supports_cache = False

    def __init__(self, inner):
        self.spec, self.tokenizer, self.max_len, self.device = inner.spec, inner.tokenizer, inner.max_len, inner.device
        self.banned_ids = inner.banned_ids

    def source_positions(self, want):
        return list(want)

    def new_cache(self, batch, length):
        raise AssertionError("a scripted denoiser has no cache")

    def scores(self, ids):  # [B, T] -> [B, T, V]
        raise NotImplementedError

    def logits(self, ids, want=None, run=None, cache=None):
        out = self.scores(ids)
        return out if want is None else out[:, want]


def outside(text, spans):
    cuts = [0] + [p for s in spans for p in (s.start, s.end)] + [len(text)]
    return [text[a:b] for a, b in zip(cuts[::2], cuts[1::2])]


def _pair(case):  # a SETTINGS entry: Sampling, or (Sampling, LoopRules)
    return case if isinstance(case, tuple) else (case, LoopRules())


@pytest.mark.parametrize("case", SETTINGS, ids=lambda c: "-".join(str(v) for v in (*dataclasses.astuple(_pair(c)[0]), *dataclasses.astuple(_pair(c)[1]))))
def test_every_mask_is_resolved_and_only_spans_change(tiny_denoiser, case):
    settings, rules = _pair(case)
    frames = list(run_edit(tiny_denoiser, TEXT, SPANS, settings, rules=rules))
    assert frames[-1].done and all(not f.done for f in frames[:-1])
    final = frames[-1].frame
    assert final.masked == 0
    mask = tiny_denoiser.spec.mask_id
    assert all(mask not in ids for sample in final.final_ids for ids in sample)
    result = frames[-1].result
    # The text between spans comes back untouched, whatever the model wrote.
    pieces = outside(TEXT, SPANS)
    rebuilt = pieces[0] + "".join(r.text + p for r, p in zip(result.spans, pieces[1:]))
    assert rebuilt == result.text
    assert len(result.samples) == settings.samples
    assert all(len(r.alternatives) == settings.samples for r in result.spans)
    # Steps never exceed the plan (or twice it with error correction).
    cap = final.total_steps * (2 if rules.remask_below else 1)
    assert 1 <= result.steps <= cap


def test_frames_show_progress_step_by_step(tiny_denoiser):
    frames = [f.frame for f in run_edit(tiny_denoiser, TEXT, [Span(4, 7, max_tokens=10)], Sampling(schedule="fixed"))]
    masked = [f.masked for f in frames]
    assert masked[0] == 10 and masked[-1] == 0
    assert masked == sorted(masked, reverse=True)
    assert [f.step for f in frames[:-1]] == list(range(len(frames) - 1))
    state = frames[1].spans[0]
    assert len(state.tokens) == len(state.confidence) == len(state.guesses) == 10
    assert sum(t is not None for t in state.tokens) == 1  # fixed schedule over 10 steps: one per step
    assert all(0.0 <= c <= 1.0 for c in state.confidence)


def test_fixed_schedule_uses_the_step_budget(tiny_denoiser):
    result = apply_edit(tiny_denoiser, TEXT, [Span(4, 7, max_tokens=12)], Sampling(schedule="fixed", steps=4))
    assert result.steps == 4


def test_threshold_commits_in_parallel(tiny_denoiser):
    # A threshold every proposal clears commits a whole block in one step.
    result = apply_edit(tiny_denoiser, TEXT, [Span(4, 7, max_tokens=12)], Sampling(threshold=1e-9, block_size=0))
    assert result.steps == 1
    blocks = apply_edit(tiny_denoiser, TEXT, [Span(4, 7, max_tokens=12)], Sampling(threshold=1e-9, block_size=5))
    assert blocks.steps == 3


def test_pad_and_eos_are_deleted_from_infill(tiny_denoiser):
    # The span starts right after "def", not after a blank: no token healing moves its slots.
    spec = tiny_denoiser.spec
    tok = tiny_denoiser.tokenizer
    canvas = build_canvas(TEXT, [Span(3, 7, max_tokens=6)], tok, spec.mask_id, 1024, tiny_denoiser.max_len)

    class PadEveryOther(Scripted):
        """Wraps the denoiser so it proposes 'x', pad, eos, ... : the span must come out as 'xx'."""

        def __init__(self, inner):
            super().__init__(inner)
            self.banned_ids = torch.tensor([spec.mask_id])  # only the mask: this test scripts pad and eos itself

        def logits(self, ids, want=None, run=None, cache=None):
            out = torch.full((*ids.shape, tok.vocab_size), -10.0)
            x = tok.encode("x")[0]
            for n, pos in enumerate(canvas.slots[0]):
                out[:, pos, (x, spec.pad_id, spec.eos_id)[n % 3]] = 10.0
            return out if want is None else out[:, want]

    from sharpen.core import engine

    keep_all_slots = LoopRules(expected_length=False)  # see test_infill_length_is_the_expected_length
    result = engine.apply_edit(PadEveryOther(tiny_denoiser), TEXT, [Span(3, 7, max_tokens=6)], rules=keep_all_slots)
    assert result.spans[0].text == "xx"
    assert result.text == TEXT[:3] + "xx" + TEXT[7:]
    assert result.spans[0].tokens == 2


def test_rewrite_remasks_the_least_confident_share(tiny_denoiser):
    tok = tiny_denoiser.tokenizer
    span = Span(23, 31, mode="rewrite", strength=0.5)
    canvas = build_canvas(TEXT, [span], tok, tiny_denoiser.spec.mask_id, 1024, tiny_denoiser.max_len)
    first = next(denoise(tiny_denoiser, canvas, Sampling()))
    n = len(canvas.slots[0])
    assert first.masked == -(-n // 2)  # ceil(strength * n) re-noised, the rest kept as the draft
    kept = [t for t in first.spans[0].tokens if t is not None]
    original = list(canvas.ids[canvas.slots[0].start:canvas.slots[0].stop])
    assert all(t in original for t in kept)
    conf = first.spans[0].confidence
    masked_conf = [c for c, t in zip(conf, first.spans[0].tokens) if t is None]
    kept_conf = [c for c, t in zip(conf, first.spans[0].tokens) if t is not None]
    assert max(masked_conf) <= min(kept_conf)


@pytest.mark.parametrize("policy", K.POLICIES)
def test_reference_kernels_rank_and_select(policy):
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(5, 50, generator=g)
    tokens = K.propose(logits, 0.0, None, None, g)
    assert torch.equal(tokens, logits.argmax(-1))
    ranking, p = K.score(logits, tokens, policy, g)
    assert ranking.shape == p.shape == (5,)
    active = torch.tensor([[True, False, True, True, False]])
    chosen = K.select_commits(ranking[None], active, torch.tensor([2]))
    assert chosen.sum() == 2 and not (chosen & ~active).any()


def test_top_k_and_top_p_filter():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    assert torch.isinf(K.filter_logits(logits, 2, None)[0, 2:]).all()
    kept = ~torch.isinf(K.filter_logits(logits, None, 0.7))
    assert kept.tolist() == [[True, True, False, False]]


@pytest.mark.parametrize("shift", [False, True])
def test_cached_chunks_match_a_full_pass_on_an_unchanged_canvas(tiny_denoiser, shift):
    import dataclasses

    from sharpen.core.models.denoiser import Denoiser

    den = Denoiser(tiny_denoiser.model, tiny_denoiser.tokenizer, dataclasses.replace(tiny_denoiser.spec, shift_logits=shift))
    x = torch.randint(3, 300, (2, 24))
    full = den.logits(x)  # [2, 24, V]
    cache = den.new_cache(2, 24)
    den.logits(x, cache=cache)
    for want in (torch.tensor([0, 1, 2]), torch.tensor([5, 6, 7, 15, 16]), torch.arange(10, 24)):
        run = torch.tensor(sorted(set(want.tolist()) | set(den.source_positions(want.tolist()))))  # the caller's part
        torch.testing.assert_close(den.logits(x, want=want, run=run, cache=cache), full[:, want], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(den.logits(x, want=want), full[:, want])
    if shift:
        torch.testing.assert_close(full[:, 1:], den.model(x)[:, :-1])


def test_one_block_single_step_is_identical_with_and_without_cache(tiny_denoiser):
    # The first step of a block runs the whole canvas either way: results must agree exactly.
    spans = [Span(4, 7, max_tokens=8), Span(48, 48, max_tokens=4)]
    a = apply_edit(tiny_denoiser, TEXT, spans, Sampling(cache="none", steps=1, schedule="fixed"))
    b = apply_edit(tiny_denoiser, TEXT, spans, Sampling(cache="dual", steps=1, schedule="fixed"))
    assert a.text == b.text


def test_mask_and_control_bytes_are_never_proposed(tiny_denoiser):
    """A model that loves the mask token and NUL still writes neither into the text."""
    tok, spec = tiny_denoiser.tokenizer, tiny_denoiser.spec
    nul = tok.encode("\x00")[0]
    letter = tok.encode("q")[0]

    class Stubborn(Scripted):
        def scores(self, ids):
            out = torch.full((*ids.shape, tok.vocab_size), -5.0)
            out[..., spec.mask_id] = 9.0
            out[..., nul] = 8.0
            out[..., letter] = 1.0
            return out

    assert spec.mask_id in tiny_denoiser.banned_ids.tolist() and nul in tiny_denoiser.banned_ids.tolist()
    result = apply_edit(Stubborn(tiny_denoiser), TEXT, [Span(4, 7, max_tokens=5)])
    assert result.spans[0].text == "qqqqq"


def test_a_committed_pad_ends_the_infill_span(tiny_denoiser):
    tok, spec = tiny_denoiser.tokenizer, tiny_denoiser.spec
    letter = tok.encode("q")[0]

    class EarlyPad(Scripted):
        """Sure of a pad at the third slot, lukewarm about 'q' everywhere else."""

        def scores(self, ids):
            out = torch.full((*ids.shape, tok.vocab_size), -5.0)
            out[..., letter] = 1.0
            out[:, first_slot + 2, spec.pad_id] = 20.0
            return out

    text = "abc(def)ghi"  # no blank before the span: token healing leaves its slots where they are
    span = Span(4, 7, max_tokens=8)
    first_slot = build_canvas(text, [span], tok, spec.mask_id, 1024, tiny_denoiser.max_len).slots[0].start
    fixed = Sampling(schedule="fixed", cache="none")
    result = apply_edit(EarlyPad(tiny_denoiser), text, [span], fixed, rules=LoopRules(defer_end=False, expected_length=False))
    assert result.spans[0].text == "qq"
    assert result.steps == 3  # pad first (fills the 5 slots after it), then one 'q' per step
    holes = apply_edit(EarlyPad(tiny_denoiser), text, [span], fixed, rules=LoopRules(pad_ends_span=False, defer_end=False, expected_length=False))
    assert holes.spans[0].text == "q" * 7 and holes.steps == 8
    # Deferring pads: content is written first, the confident pad commits last.
    deferred = apply_edit(EarlyPad(tiny_denoiser), text, [span], fixed, rules=LoopRules(expected_length=False))
    assert deferred.spans[0].text == "q" * 7 and deferred.steps == 8


def test_infill_length_is_the_expected_length(tiny_denoiser):
    """Slot i's pad probability is P(span shorter than i): the span keeps sum(1 - P(pad)) slots."""
    tok, spec = tiny_denoiser.tokenizer, tiny_denoiser.spec
    letter = tok.encode("q")[0]
    # A hesitant model: 'q' is the best guess at every slot, but the pad mass adds up to 3.0
    # slots, so the expected length is 8 - 3.0 = 5 slots.
    p_pad = [0.0, 0.3, 0.45, 0.45, 0.45, 0.45, 0.45, 0.45]

    class Graded(Scripted):
        def scores(self, ids):
            out = torch.full((*ids.shape, tok.vocab_size), -1e4)
            for i, p in enumerate(p_pad):  # two-way split between pad and 'q' (a tiny floor keeps logs finite)
                out[:, first_slot + i, spec.pad_id] = torch.tensor(max(p, 1e-6)).log()
                out[:, first_slot + i, letter] = torch.tensor(max(1 - p, 1e-6)).log()
            return out

    text = "abc(def)ghi"  # no blank before the span: token healing leaves its slots where they are
    span = Span(4, 7, max_tokens=8)
    first_slot = build_canvas(text, [span], tok, spec.mask_id, 1024, tiny_denoiser.max_len).slots[0].start
    frames = list(run_edit(Graded(tiny_denoiser), text, [span], Sampling(cache="none")))
    start = frames[0].frame.spans[0].tokens
    assert start[:5] == (None,) * 5 and start[5:] == (spec.pad_id,) * 3  # decided before any content
    assert frames[-1].result.spans[0].text == "q" * 5
    # Off: pads are deferred behind content, so the slots where pad was likely still get 'q'.
    off = apply_edit(Graded(tiny_denoiser), text, [span], Sampling(cache="none"), rules=LoopRules(expected_length=False))
    assert off.spans[0].text == "q" * 8


def test_an_infill_is_never_empty_even_when_the_model_wants_pad_everywhere(tiny_denoiser):
    """Training never has an empty span: the first slot takes content, the expected length is >= 1."""
    tok, spec = tiny_denoiser.tokenizer, tiny_denoiser.spec
    letter = tok.encode("q")[0]

    class PadLover(Scripted):
        def scores(self, ids):
            out = torch.full((*ids.shape, tok.vocab_size), -5.0)
            out[..., letter] = 0.0
            out[..., spec.pad_id] = 10.0  # pad is by far the best guess at every slot
            return out

    variants = [(Sampling(), LoopRules()), (Sampling(), LoopRules(expected_length=False)), (Sampling(cache="none"), LoopRules(defer_end=False))]
    for settings, rules in variants:
        assert apply_edit(PadLover(tiny_denoiser), "abc def ghi", [Span(4, 7, max_tokens=8)], settings, rules=rules).spans[0].text == "q"


class PassSpy:
    """The tiny model, noting each pass: (the positions a partial run recomputes, or None for the
    whole canvas; whether it writes or reads a cache)."""

    def __init__(self, inner):
        self.inner, self.calls = inner, []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def logits(self, ids, want=None, run=None, cache=None):
        self.calls.append((None if run is None else run.tolist(), cache is not None))
        return self.inner.logits(ids, want=want, run=run, cache=cache)


@pytest.mark.parametrize("cache", ["dual", "prefix"])
def test_block_refresh_recomputes_only_the_finished_and_the_new_block(tiny_denoiser, cache):
    """refresh="canvas" runs the whole canvas at every block; "block" once, then the finished block
    (whose keys/values went stale) with the new one (dual) or from the finished block on (prefix)."""
    span = Span(48, 48, max_tokens=9)
    settings = Sampling(block_size=3, cache=cache, schedule="fixed", refresh="canvas")
    canvas_spy, block_spy = PassSpy(tiny_denoiser), PassSpy(tiny_denoiser)
    same_length = LoopRules(expected_length=False)
    a = apply_edit(canvas_spy, TEXT, [span], settings, rules=same_length)
    b = apply_edit(block_spy, TEXT, [span], dataclasses.replace(settings, refresh="block"), rules=same_length)
    assert a.text and b.text
    assert sum(run is None for run, _ in canvas_spy.calls) == 3  # one whole-canvas pass per block
    assert sum(run is None for run, _ in block_spy.calls) == 1
    T = None  # canvas end: prefix runs go to it
    cached = [run for run, _ in canvas_spy.calls if run is not None]
    first = cached[0][0]  # block 0's first slot (its step 1 runs from it)
    block_runs = [run for run, _ in block_spy.calls if run is not None]
    if cache == "dual":
        # steps 1-2 of block 0 run its 3 slots; block 1 starts with blocks 0+1 together; and so on.
        assert block_runs[2] == list(range(first, first + 6)) and block_runs[5] == list(range(first + 3, first + 9))
    else:
        T = cached[0][-1] + 1
        assert block_runs[2] == list(range(first, T)) and block_runs[5] == list(range(first + 3, T))


def test_with_block_refresh_the_infill_length_pass_is_the_one_whole_canvas_pass(tiny_denoiser):
    """refresh="block": the length pass writes the cache, and the first block recomputes every
    infill slot it may have padded with itself, instead of a second whole-canvas pass; with
    "canvas" the length pass stays cacheless and each block still starts with a whole canvas."""
    span = Span(48, 48, max_tokens=9)
    block, canvas = PassSpy(tiny_denoiser), PassSpy(tiny_denoiser)
    settings = Sampling(block_size=3, schedule="fixed", refresh="block")
    apply_edit(block, TEXT, [span], settings)
    apply_edit(canvas, TEXT, [span], dataclasses.replace(settings, refresh="canvas"))
    whole = [(run, cached) for run, cached in block.calls if run is None]
    assert whole == [(None, True)]  # the length pass, writing the cache; nothing else is whole
    first_block = block.calls[1][0]
    slots = build_canvas(TEXT, [span], tiny_denoiser.tokenizer, tiny_denoiser.spec.mask_id, 1024, tiny_denoiser.max_len).slots[0]
    assert first_block == list(slots)  # every infill slot: the pads the length pass wrote are stale
    assert block.calls[2][0] == list(slots)[:3]  # then the block alone
    assert canvas.calls[0] == (None, False) and sum(run is None for run, _ in canvas.calls) == 4  # length + 3 blocks


@pytest.mark.parametrize("lengths", [(1,), (5,), (12,), (20,), (64,), (3, 10), (9, 0, 17, 2)])
@pytest.mark.parametrize("block_size", [0, 1, 3, 8])
@pytest.mark.parametrize("steps", [None, 1, 4, 7, 100])
def test_step_budget_is_split_over_blocks_exactly(lengths, block_size, steps):
    from sharpen.core.loops.masked import _plan

    spans, start = [], 5
    for n in lengths:  # slot ranges with gaps between them, as on a canvas
        spans.append(range(start, start + n))
        start += n + 4
    plan = _plan(spans, Sampling(block_size=block_size, steps=steps), "cpu")
    positions = [p for _, _, block in plan for p in block]
    assert sorted(positions) == [p for r in spans for p in r]  # every slot once
    assert all(block == sorted(block) for _, _, block in plan)
    assert all(1 <= budget <= len(block) for _, budget, block in plan)
    total = sum(lengths)
    expected = total if steps is None else min(total, max(steps, len(plan)))  # one step per block at least
    assert sum(budget for _, budget, _ in plan) == expected
    if block_size:  # block k: the k-th run of block_size slots of every span (parallel edits)
        for k, (_, _, block) in enumerate(plan):
            assert block == [p for r in spans for p in r[k * block_size:(k + 1) * block_size]]


HOST_SYNCS = {"__bool__", "item", "tolist", "__int__", "__float__", "__index__", "nonzero", "unique", "cpu", "numpy"}


@pytest.mark.parametrize("shift", [False, True])
@pytest.mark.parametrize("settings", [Sampling(), Sampling(refresh="canvas", cache="prefix"), Sampling(cache="none")])
def test_a_step_reads_the_device_once(tiny_denoiser, settings, shift):
    # On a GPU every host read of a tensor stalls the launch queue; on this CPU the loop reads
    # one flag per step ("block finished?"; CUDA's planned reads are tests/test_step_cost.py's):
    # what a cached step recomputes is decided on the host once per block, and frames stay device
    # tensors until a consumer reads them (this one does not). A pass into a new cache (the run's
    # first, and each block's with refresh="canvas") is also checked for non-finite logits once
    # (Denoiser._finite): such a block's first step reads twice.
    from torch.overrides import TorchFunctionMode

    from sharpen.core.models.denoiser import Denoiser

    calls: list[str] = []

    class CountHostReads(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            if getattr(func, "__name__", "") in HOST_SYNCS:
                calls.append(func.__name__)
            return func(*args, **(kwargs or {}))

    den = Denoiser(tiny_denoiser.model, tiny_denoiser.tokenizer, dataclasses.replace(tiny_denoiser.spec, shift_logits=shift))
    text = "def add(a, b):\n    return a + b\n"
    canvas = build_canvas(text, [Span(19, 31, max_tokens=20)], den.tokenizer, den.spec.mask_id, 64, den.max_len)
    marks = []
    with CountHostReads():
        for frame in denoise(den, canvas, dataclasses.replace(settings, block_size=8), rules=LoopRules(expected_length=False)):
            if frame.done:
                break
            marks.append(len(calls))
    per_step = [b - a for a, b in zip(marks, marks[1:])]
    inside = [n for i, n in enumerate(per_step) if i % 8]  # blocks of 8 slots, a step per slot
    assert len(per_step) >= 10 and per_step[0] == 2 and set(inside) == {1} and set(per_step) <= {1, 2}, (per_step, calls)


def test_logits_that_turn_nan_after_the_first_pass_stop_the_run_with_one_line(tiny_denoiser):
    """Only a run's first pass is checked on the device; a model whose logits overflow later (a
    float16 residual stream deep in a run) is caught at the end: no text from argmax over NaN."""
    from sharpen.core.errors import ModelError

    class Overflows(Scripted):
        passes, finite = 0, 1  # passes so far; how many stay finite

        def scores(self, ids):
            Overflows.passes += 1
            out = torch.zeros(*ids.shape, tiny_denoiser.tokenizer.vocab_size)
            out[..., tiny_denoiser.tokenizer.encode("q")[0]] = 5.0
            return out if Overflows.passes <= Overflows.finite else out * float("nan")

    with pytest.raises(ModelError, match="turned non-finite .* nothing was written"):
        apply_edit(Overflows(tiny_denoiser), "abc def ghi", [Span(4, 7, max_tokens=6)], Sampling(cache="none"))
    assert Overflows.passes > 1
    # A model that stays finite is untouched by the check.
    Overflows.finite = 10**9
    assert apply_edit(Overflows(tiny_denoiser), "abc def ghi", [Span(4, 7, max_tokens=6)], Sampling(cache="none")).spans[0].text
