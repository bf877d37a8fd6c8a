"""Constrained spans in the sub-block loop (Fast-dLLM v2, token-shifted commits) and the
random-token loop (DiffusionGemma, every slot a token at every step), on tiny random checkpoints:
a date pattern matches, the same seed without it does not, and every frame stays completable."""
from __future__ import annotations

import re

import pytest

from sharpen.core.canvas import Canvas
from sharpen.core.constraints import Constraint
from sharpen.core.constraints.steering import Steering
from sharpen.core.spans import Span
from sharpen.core.settings import Sampling

DATE = r"[0-9]{4}-[0-9]{2}-[0-9]{2}"
TEXT = 'when = ""\n'


@pytest.fixture(scope="module")
def fdllm(tmp_path_factory):
    from block_checkpoints import write_fast_dllm_v2
    from sharpen.core.models.loading import load_denoiser

    return load_denoiser(write_fast_dllm_v2(tmp_path_factory.mktemp("fdllm-steer") / "Fast_dLLM_v2_7B-tiny"))


def _frame_steering(denoiser, frame, span) -> Steering:
    canvas = Canvas(ids=tuple(frame._ids.tolist()), slots=(frame._slots[0],), spans=(span,), window=(0, 0), mask_id=denoiser.spec.mask_id)
    return Steering.for_canvas(denoiser, canvas, rows=1)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_subblock_loop_steers_a_date_and_every_frame_stays_completable(fdllm, seed):
    from sharpen.core.engine import apply_edit, run_edit

    span = Span(8, 8, max_tokens=16, constraint=Constraint(regex=DATE))
    steer, last, frames = None, None, 0
    for update in run_edit(fdllm, TEXT, [span], Sampling(seed=seed)):
        steer = steer or _frame_steering(fdllm, update.frame, span)
        assert steer.completable(update.frame._ids[None]) == [[True]], update.frame.step
        last, frames = update, frames + 1
    assert frames > 2
    assert re.fullmatch(DATE, last.result.spans[0].text), last.result.spans[0].text
    free = apply_edit(fdllm, TEXT, [Span(8, 8, max_tokens=16)], Sampling(seed=seed))
    assert not re.fullmatch(DATE, free.spans[0].text), free.spans[0].text


GEMMA_TEXT = 'when = ""\nprint(when)\n'


@pytest.fixture(scope="module")
def gemma(tmp_path_factory):
    pytest.importorskip("transformers.models.diffusion_gemma")
    from gemma_checkpoint import write_diffusion_gemma
    from sharpen.core.models.families.diffusion_gemma import load_gemma

    return load_gemma(write_diffusion_gemma(tmp_path_factory.mktemp("gemma-steer") / "diffusiongemma-tiny", canvas_length=48))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_random_token_loop_accepts_only_tokens_that_keep_a_date_completable(gemma, seed):
    import torch

    from sharpen.core.canvas import build_canvas
    from sharpen.core.constraints.noise_steering import NoiseSteering
    from sharpen.core.engine import apply_edit
    from sharpen.core.loops.frame import SHARP
    from sharpen.core.loops.random_token import renoise, split_canvas

    span = Span(8, 8, max_tokens=14, constraint=Constraint(regex=DATE))
    canvas = build_canvas(GEMMA_TEXT, [span], gemma.tokenizer, gemma.spec.mask_id, 1024, gemma.max_len)
    layout = split_canvas(canvas, gemma.bos_id, gemma.canvas_length)
    check = NoiseSteering.for_layout(gemma, layout, rows=1)
    frames = list(renoise(gemma, layout, Sampling(seed=seed, steps=8)))
    accepted_seen = 0
    for frame in frames[:-1]:
        sharp = (frame._state == SHARP)[None]  # [1, C]
        accepted_seen += int(sharp[0, check.slots].sum())
        assert check.steer.completable(check.view(frame._ids[None], sharp)) == [[True]], frame.step
    assert accepted_seen > 0  # the check saw accepted tokens, not only noise
    ids = torch.tensor(layout.ids)[None]
    done = frames[-1]
    ids[0, layout.slots[0]] = torch.tensor(done.final_ids[0][0])
    assert check.steer.completable(ids) == [[True]]
    result = apply_edit(gemma, GEMMA_TEXT, [span], Sampling(seed=seed, steps=8))
    assert re.fullmatch(DATE, result.spans[0].text), result.spans[0].text
    free = apply_edit(gemma, GEMMA_TEXT, [Span(8, 8, max_tokens=14)], Sampling(seed=seed, steps=8))
    assert not re.fullmatch(DATE, free.spans[0].text), free.spans[0].text


async def test_the_status_bar_names_the_constraint_while_a_constrained_run_draws(tmp_path):
    from pilot import SLOW, make_app, top_command, wait_for, with_model

    from sharpen.app.tui.editor_pane import PREVIEW, RUNNING
    from sharpen.app.tui.status_bar import StatusBar
    from sharpen.core.models.load import load_model
    from sharpen.core.settings import ModelRequest

    path = tmp_path / "release.py"
    path.write_text('released = ""\n')
    app = make_app([path], SLOW)  # paced steps: the running line is on screen long enough to read
    async with app.run_test(size=(120, 24)) as pilot:
        await with_model(app, pilot, load_model(ModelRequest()))
        pane = app.active_pane()
        pane.editor.selection = ((0, 12), (0, 12))
        await pilot.press("ctrl+p")
        await pilot.press(*"Infill with pattern")
        await wait_for(pilot, lambda: top_command(app) == "Infill with pattern")
        await pilot.press("enter")
        await pilot.pause()
        await pilot.press(*DATE)
        await pilot.press("enter")
        status = app.query_one(StatusBar)
        await wait_for(pilot, lambda: pane.phase == RUNNING and "step" in status.run)
        assert "pattern [0-9]{4}-" in status.run, status.run
        await wait_for(pilot, lambda: pane.phase == PREVIEW)
        assert "pattern" not in status.run  # the preview's line is about accepting, not the run


def test_accepted_draws_that_clash_are_settled_so_the_span_stays_completable(gemma):
    """Two slots both accepted with `a` under `ab|ba`: each alone is allowed, together they clash."""
    import torch

    from sharpen.core.canvas import build_canvas
    from sharpen.core.constraints.noise_steering import NoiseSteering
    from sharpen.core.loops.random_token import split_canvas

    span = Span(8, 8, max_tokens=4, constraint=Constraint(regex="ab|ba"))
    layout = split_canvas(build_canvas(GEMMA_TEXT, [span], gemma.tokenizer, gemma.spec.mask_id, 1024, gemma.max_len), gemma.bos_id, gemma.canvas_length)
    steer = NoiseSteering.for_layout(gemma, layout, rows=1)
    a = list(gemma.tokenizer.encode("a"))
    assert len(a) == 1
    C, V = len(layout.ids), gemma.vocab_size
    x = torch.tensor(layout.ids)[None]
    sharp = torch.zeros(1, C, dtype=torch.bool)
    scores = steer.constrain(torch.zeros(1, C, V), x, sharp)
    p0, p1 = int(steer.slots[0]), int(steer.slots[1])
    assert torch.isfinite(scores[0, p0, a[0]]) and torch.isfinite(scores[0, p1, a[0]])  # each alone allowed
    drawn = x.clone()
    drawn[0, p0] = drawn[0, p1] = a[0]
    accepted = torch.zeros(1, C, dtype=torch.bool)
    accepted[0, p0] = accepted[0, p1] = True
    settled = steer.settle(x, sharp, drawn, accepted, scores)
    assert steer.steer.completable(steer.view(settled, accepted)) == [[True]]
    assert settled[0, p0] == a[0] or settled[0, p1] == a[0]  # one of the two kept


@pytest.mark.parametrize("seed", [0, 1])
def test_classifier_free_guidance_and_a_constraint_compose(tmp_path, seed):
    """--cfg-scale (LLaDA's guidance, core/loops/guidance.py) and a pattern in one run: the guided
    logits are steered, so the span matches; the guidance changes the decode (the same run
    unguided writes other text under the same pattern)."""
    from family_checkpoints import write_llada

    from sharpen.core.engine import apply_edit
    from sharpen.core.models.loading import load_denoiser

    llada = load_denoiser(write_llada(tmp_path / "llada"))
    span = Span(8, 8, max_tokens=16, constraint=Constraint(regex=DATE))
    guided = apply_edit(llada, TEXT, [span], Sampling(seed=seed, cfg_scale=2.0)).spans[0].text
    plain = apply_edit(llada, TEXT, [span], Sampling(seed=seed)).spans[0].text
    assert re.fullmatch(DATE, guided) and re.fullmatch(DATE, plain), (guided, plain)
    assert guided != plain
