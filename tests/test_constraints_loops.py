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
