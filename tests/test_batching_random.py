"""Continuous batching for DiffusionGemma's random-token loop (core/batch.py with the family's own
packed forward, core/models/families/diffusion_gemma_packed.py): concurrent runs share each step's
decoder pass, each keeps its own canvas, encoder cache, schedule, seed and random stream, and each
gets exactly what it gets alone, token for token.

The tiny checkpoint is transformers' real architecture (tests/gemma_checkpoint.py): a sliding and a
full attention layer, experts, self-conditioning. A run's temperatures come from the release's
linear schedule over its own step budget, so runs of different budgets sample at different
temperatures at every step (a user sets no temperature on this loop).
"""
from __future__ import annotations

import re
import threading
from contextlib import contextmanager

import pytest
import torch

from sharpen.core.batch import batchable
from sharpen.core.constraints import Constraint
from sharpen.core.request import EditRequest
from sharpen.core.run import Done, Runner
from sharpen.core.settings import Sampling
from sharpen.core.spans import Span
from serving import four_runs_second_stopped

pytest.importorskip("transformers.models.diffusion_gemma")

TEXT = "def add(a, b):\n    return a + b\n\n\nprint(add(1, 2))\n"
LONG = TEXT + "".join(f"def f{i}(x):\n    return x * {i}\n\n" for i in range(6))
WHEN = 'when = ""\n'
DATE = r"[0-9]{4}-[0-9]{2}-[0-9]{2}"


@pytest.fixture(scope="module")
def gemma_dir(tmp_path_factory):
    from gemma_checkpoint import write_diffusion_gemma

    return write_diffusion_gemma(tmp_path_factory.mktemp("gemma-batch") / "diffusiongemma-tiny", canvas_length=48)


@pytest.fixture(scope="module")
def gemma(gemma_dir):
    from sharpen.core.models.families.diffusion_gemma import load_gemma

    return load_gemma(gemma_dir)


def requests() -> list[EditRequest]:
    """Runs that differ in everything a random-token run may: context length (the encoder cache, past
    the sliding window or not), canvas length (a short tail after the span, or a canvas cut to the
    model's 48), slot layout (an infill; a rewrite beside a second infill), samples, seed, step budget
    (so the temperature schedule), and a constrained span beside unconstrained ones."""
    middle = LONG.index("def f3")
    return [
        EditRequest(TEXT, (Span(15, 31),), Sampling(seed=1, steps=6)),
        EditRequest(LONG, (Span(middle, middle, max_tokens=12),), Sampling(seed=7, steps=11)),
        EditRequest(TEXT, (Span(15, 31, "rewrite", strength=0.5), Span(len(TEXT) - 1, len(TEXT) - 1, max_tokens=4)),
                    Sampling(seed=4, steps=9, samples=2)),
        EditRequest(WHEN, (Span(8, 8, max_tokens=14, constraint=Constraint(regex=DATE)),), Sampling(seed=0, steps=8)),
    ]


def fingerprint(done: Done) -> tuple:
    result = done.result
    return result.text, result.steps, tuple((r.text, r.tokens, r.alternatives) for r in result.spans), done.sharp_per_step


def run_together(runner: Runner, batch: list[EditRequest], stops=None) -> list:
    out: list = [None] * len(batch)
    start = threading.Barrier(len(batch))

    def one(i: int) -> None:
        start.wait()
        out[i] = list(runner.run(batch[i], stops[i] if stops else (lambda: False), every=0.0))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(batch))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not any(t.is_alive() for t in threads)
    return out


def gathered(runner: Runner, runs: int) -> None:
    """Every pass waits for every run and packs them all: each step is shared by all runs still in."""
    runner.batcher.max_wait = 1.0
    runner.batcher.rows = 10**6
    member, gate = runner.batcher.member, threading.Barrier(runs)

    @contextmanager
    def joined():  # every run is in the batch before any hands in its first pass
        with member() as view:
            gate.wait(60)
            yield view

    runner.batcher.member = joined


def recorded_packs(denoiser, monkeypatch) -> list[list]:
    """Each pack of passes the batcher runs (kept: no two runs' contexts ever share an id)."""
    packs: list = []
    forward = denoiser.run_passes

    def recording(passes):
        packs.append(list(passes))
        return forward(passes)

    monkeypatch.setattr(denoiser, "run_passes", recording)
    return packs


def run_of(work) -> int:
    """The run a recorded pass belongs to: its encoder Context (an encoder pass's result, once run)."""
    from sharpen.core.models.families.diffusion_gemma_packed import EncodePass

    return id(work.logits if isinstance(work, EncodePass) else work.context)


@pytest.fixture(scope="module")
def gemma_int8(gemma_dir):
    pytest.importorskip("torchao")
    from sharpen.core.models.families.diffusion_gemma import load_gemma

    return load_gemma(gemma_dir, quantize="int8")


@pytest.mark.parametrize("weights", ["plain", "int8"])
def test_a_packed_pass_equals_each_pass_alone_bit_for_bit(request, weights):
    """Decoder passes (contexts shorter and longer than the sliding window, one row and three,
    canvases of 48, 20 and 7, with and without the previous step's logits) and encoder passes
    (contexts of 3 to 33 tokens) in one pack: each step's logits equal the model's own call, each
    context's cache (every layer's keys and values) equals the encoder's own; with plain weights
    and with torchao's int8 experts (--quantize int8)."""
    from sharpen.core.models.families.diffusion_gemma_packed import EncodePass, canvas_pass, encode_pass, run_packed

    gemma = request.getfixturevalue("gemma" if weights == "plain" else "gemma_int8")
    assert batchable(gemma)
    generator = torch.Generator().manual_seed(0)
    passes = []
    for context, rows, canvas, conditioned in ((5, 1, 48, False), (30, 2, 20, True), (9, 1, 48, True), (40, 3, 7, False)):
        encoded = gemma.encode(torch.randint(0, gemma.vocab_size, (rows, context), generator=generator), canvas)
        ids = torch.randint(0, gemma.vocab_size, (rows, canvas), generator=generator)  # [B, C]
        previous = torch.randn(rows, canvas, gemma.vocab_size, generator=generator) if conditioned else None  # [B, C, V]
        passes.append(canvas_pass(ids, previous, encoded))
    for context, rows in ((33, 1), (3, 2), (17, 1)):  # encoder passes between and after the steps
        passes.insert(len(passes) // 2, encode_pass(torch.randint(0, gemma.vocab_size, (rows, context), generator=generator), 24))
    alone = [gemma.encode(p.ids, p.canvas_length) if isinstance(p, EncodePass) else gemma.canvas_logits(p.ids, p.self_conditioning, p.context)
             for p in passes]
    packed = run_packed(gemma.model, passes)
    for p, one, together in zip(passes, alone, packed):
        if isinstance(p, EncodePass):
            layers = [(a.keys, b.keys, a.values, b.values) for a, b in zip(one.cache.layers, together.cache.layers)]
            assert layers and all(torch.equal(x, y) and torch.equal(u, w) for x, y, u, w in layers)
            assert torch.equal(together.positions, one.positions) and together.decoder_mask == one.decoder_mask
        else:
            assert together.shape == one.shape and torch.equal(together, one)


def test_four_runs_batched_equal_each_run_alone_token_for_token(gemma):
    alone = [fingerprint(Runner(gemma).result(r)) for r in requests()]
    runner = Runner(gemma, batch=4)
    assert runner.batcher is not None
    gathered(runner, 4)
    heads: list[int] = []  # rows of each vocabulary projection: one per pack, its runs' rows together
    hook = gemma.model.lm_head.register_forward_hook(lambda module, args, out: heads.append(out.shape[-2]))
    try:
        events = run_together(runner, requests())
    finally:
        hook.remove()
    assert [fingerprint(e[-1]) for e in events] == alone
    assert re.fullmatch(DATE, events[3][-1].result.spans[0].text)  # the constrained run, steered beside the others
    assert all([f.step for f in e[:-1]] == list(range(len(e) - 1)) for e in events)  # frames as alone: step 0 .. n
    shared = runner.batcher.runs_per_pass
    # Every pass shared: the four encoder passes, then four runs' steps while all four run, then fewer
    # as the 6-step run and the others leave.
    assert shared[0] == 4 and max(shared) == 4 and runner.batcher.passes == 1 + 11 and sum(shared) == 4 + 6 + 11 + 9 + 8
    assert shared == sorted(shared, reverse=True) and 2 in shared and 3 in shared
    assert len(heads) == 11 and max(heads) > 48  # one vocabulary projection per step's pack, not one per run
    assert runner.waiting == 0


def test_runs_join_and_leave_at_step_boundaries_and_each_gets_what_it_gets_alone(gemma, monkeypatch):
    """Five runs, three at a time: the fourth and fifth join while others are mid-way, at their own
    first step beside runs many steps in."""
    batch = [*requests(), EditRequest(LONG, (Span(len(LONG) - 1, len(LONG) - 1, max_tokens=8),), Sampling(seed=9, steps=5))]
    alone = [fingerprint(Runner(gemma).result(r)) for r in batch]
    runner = Runner(gemma, max_waiting=8, batch=3)
    runner.batcher.max_wait, runner.batcher.rows = 1.0, 10**6  # every step of the runs in the batch is shared
    packs = recorded_packs(gemma, monkeypatch)
    events = run_together(runner, batch)
    assert [fingerprint(e[-1]) for e in events] == alone
    assert max(runner.batcher.runs_per_pass) == 3  # never more than the batch
    from sharpen.core.models.families.diffusion_gemma_packed import CanvasPass, EncodePass

    assert len({run_of(w) for pack in packs for w in pack}) == 5
    under_way = lambda w: isinstance(w, CanvasPass) and w.self_conditioning is not None  # noqa: E731 - a run past its first step
    first_step = lambda w: isinstance(w, CanvasPass) and w.self_conditioning is None  # noqa: E731
    # A joining run's encoder pass, then its first step, packed beside runs already under way.
    assert any(any(isinstance(w, EncodePass) for w in pack) and any(map(under_way, pack)) for pack in packs)
    assert any(any(map(first_step, pack)) and any(map(under_way, pack)) for pack in packs)


def test_a_cancelled_run_leaves_the_batch_within_one_step_and_the_others_are_unchanged(gemma):
    batch = requests()
    alone = [fingerprint(Runner(gemma).result(r)) for r in batch]
    runner = Runner(gemma, batch=4)
    runner.batcher.max_wait = 1.0
    out, after = four_runs_second_stopped(runner, batch)
    assert not isinstance(out[1][-1], Done)  # cancelled: no result
    assert [fingerprint(out[i][-1]) for i in (0, 2, 3)] == [alone[i] for i in (0, 2, 3)]
    assert after and max(after) <= 3  # after the stop was seen, no pass held four runs again
    assert runner.waiting == 0


def test_a_pass_that_fails_in_a_pack_fails_only_its_own_run(gemma):
    from sharpen.core.models.families.diffusion_gemma_packed import canvas_pass

    runner = Runner(gemma, batch=2)
    runner.batcher.max_wait = 1.0
    context = torch.tensor([[gemma.bos_id, *gemma.tokenizer.encode("def add(a, b):\n")]])  # [1, L]
    good = torch.randint(0, gemma.vocab_size, (1, 12), generator=torch.Generator().manual_seed(3))  # [1, C]
    broken = torch.full((1, 12), 10**6)  # ids past the vocabulary: the embedding raises
    out: dict = {}
    both_in = threading.Barrier(2)

    def one(name: str, canvas: torch.Tensor) -> None:
        with runner.batcher.member() as view:
            both_in.wait(30)
            encoded = view.encode(context, canvas.shape[1])
            try:
                out[name] = view.canvas_logits(canvas, None, encoded)
            except Exception as exc:  # noqa: BLE001 - what the run's own thread sees
                out[name] = exc

    threads = [threading.Thread(target=one, args=(name, x)) for name, x in (("good", good), ("broken", broken))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert runner.batcher.runs_per_pass == [2, 2]  # the encoder passes packed, then the steps
    assert isinstance(out["broken"], IndexError)
    alone = gemma.run_passes([canvas_pass(good, None, gemma.encode(context, 12))])[0]
    assert torch.equal(out["good"], alone)


def test_diffusion_gemma_packs_on_one_device(gemma, monkeypatch):
    from sharpen.app.backend import LocalBackend

    assert batchable(gemma)
    assert LocalBackend.of(gemma, batch=8).load_report() == "up to 8 runs share each forward pass"  # the server's startup line
    runner = Runner(gemma, batch=4)
    assert runner.batcher is not None and runner.batcher.rows == 4 * gemma.canvas_length  # whole canvases pack
    assert Runner(gemma).batcher is None  # batch 1: one at a time (the editor)
    monkeypatch.setattr(gemma.model, "hf_device_map", {"model.encoder": 0, "model.decoder": 1}, raising=False)
    assert not batchable(gemma)  # spread over devices


def test_an_encoder_whose_layers_differ_from_the_decoder_runs_its_passes_alone(gemma_dir):
    """transformers ties the encoder's weights to the decoder's but not the layers' scalars: a
    checkpoint that sets one apart cannot run encoder rows through the decoder's layers. Its encoder
    passes then run alone, its steps still pack, and each equals the model's own call."""
    from sharpen.core.models.families.diffusion_gemma import load_gemma
    from sharpen.core.models.families.diffusion_gemma_packed import EncodePass, canvas_pass, encode_pass

    gemma = load_gemma(gemma_dir)
    assert gemma.layers_shared
    gemma = load_gemma(gemma_dir)
    with torch.no_grad():
        gemma.model.model.encoder.language_model.layers[0].layer_scalar.fill_(0.5)  # changes what layer 1 caches
    assert not gemma.layers_shared
    generator = torch.Generator().manual_seed(1)
    contexts = [torch.randint(0, gemma.vocab_size, (1, n), generator=generator) for n in (21, 6)]
    steps = [canvas_pass(torch.randint(0, gemma.vocab_size, (1, 16), generator=generator), None, gemma.encode(c, 16)) for c in contexts]
    passes = [steps[0], encode_pass(contexts[1], 16), steps[1], encode_pass(contexts[0], 16)]
    together = gemma.run_passes(passes)
    for p, result in zip(passes, together):
        if isinstance(p, EncodePass):
            alone = gemma.encode(p.ids, p.canvas_length)
            assert all(torch.equal(a.keys, b.keys) and torch.equal(a.values, b.values) for a, b in zip(alone.cache.layers, result.cache.layers))
        else:
            assert torch.equal(result, gemma.canvas_logits(p.ids, None, p.context))
