"""A loop kind is one class and one table entry (core/loops/kind.py, core/loops/kinds.py).

A toy kind registered in the table runs through every front door the real ones use (the
engine's run_request and run_edit, the Runner's events, --json's settings) without any of
them naming it; the settings it does not read are refused in one line, and the settings
report is its own.
"""
from __future__ import annotations

import copy
import dataclasses
from typing import Callable, Iterator

import pytest
import torch

from sharpen.core.errors import UsageError
from sharpen.core.loops import LOOP_PROTOCOLS, KINDS, Frame, LoopRules, Prepared, kind_of
from sharpen.core.loops.frame import slot_states
from sharpen.core.loops.kind import model_name, plain_canvas, refuse_unread
from sharpen.core.models.denoiser import DenoiserLike
from sharpen.core.request import EditRequest
from sharpen.core.settings import Editing, Sampling
from sharpen.core.spans import Span

TEXT = "def f(x):\n    return x\n"


class ToyKind:
    """Writes one token, the model's argmax at the leftmost masked slot, per step, left to right."""

    name = "toy"
    model = DenoiserLike
    noise = "mask"

    def reads(self, denoiser, sampling: Sampling) -> frozenset[str]:
        return frozenset({"seed", "samples", "steps"})

    def settings(self, denoiser, request: EditRequest) -> Sampling:
        refuse_unread(request.sampling, self.reads(denoiser, request.sampling), model_name(denoiser), "a toy that writes left to right")
        return request.sampling

    def prepare(self, denoiser, request: EditRequest, spans, settings: Sampling, plan) -> Prepared:
        return Prepared(denoiser, plain_canvas(denoiser, request, spans), settings)

    def frames(self, prepared: Prepared, should_stop: Callable[[], bool], rules: LoopRules) -> Iterator[Frame]:
        denoiser, canvas = prepared.denoiser, prepared.canvas
        mask = denoiser.spec.mask_id
        x = torch.tensor([canvas.ids], device=denoiser.device)  # [1, T]
        slots = [p for r in canvas.slots for p in r]
        confidence = torch.zeros(x.shape[1])

        def frame(step: int, done: bool = False) -> Frame:
            final = tuple(tuple(tuple(x[0, r.start:r.stop].tolist()) for r in canvas.slots) for _ in range(1)) if done else None
            conf = tuple(tuple(tuple(confidence[r.start:r.stop].tolist()) for r in canvas.slots) for _ in range(1)) if done else None
            return Frame(step, len(slots), 0.0, done, "toy", x[0].clone(), confidence.clone(), x[0].clone(),
                         slot_states(x[0], mask), canvas.slots, final, (0.0,) if done else None, conf)

        yield frame(0)
        for step, position in enumerate(slots[:prepared.settings.steps or len(slots)], 1):
            if should_stop():
                return
            with torch.inference_mode():
                logits = denoiser.logits(x, want=torch.tensor([position])).index_fill(-1, denoiser.banned_ids, float("-inf"))  # [1, 1, V]
                p, token = logits.softmax(-1)[0, 0].max(-1)
            x[0, position] = token
            confidence[position] = p
            yield frame(step)
        yield frame(len(slots), done=True)

    def used(self, prepared: Prepared, done: Frame) -> dict:
        return {"steps": done.step, "order": "left to right"}

    def slot_room(self, denoiser) -> int:
        return 8


@pytest.fixture
def toy(tiny_denoiser, monkeypatch):
    monkeypatch.setitem(KINDS, "toy", ToyKind())  # the one table entry
    denoiser = copy.copy(tiny_denoiser)
    denoiser.spec = dataclasses.replace(tiny_denoiser.spec, loop="toy")  # a family declares its kind
    return denoiser


def test_a_registered_kind_runs_through_the_engine_and_the_runner_without_either_naming_it(toy):
    from sharpen.core.engine import apply_edit, run_request
    from sharpen.core.run import Done, Progress, Runner

    assert isinstance(kind_of(toy), ToyKind)
    span = Span(14, 22, max_tokens=5)  # "return x" -> five slots written by the toy
    request = EditRequest(TEXT, (span,), Sampling(), Editing())
    updates = list(run_request(toy, request))
    frames = [u.frame for u in updates]
    assert [f.step for f in frames] == [0, 1, 2, 3, 4, 5, 5] and all(f.loop == "toy" for f in frames)
    assert [f.masked for f in frames[:-1]] == [5, 4, 3, 2, 1, 0]  # one slot a step, left to right
    result = updates[-1].result
    assert result.text.startswith(TEXT[:14]) and result.text.endswith(TEXT[22:])
    assert result.settings == {"steps": 5, "order": "left to right"}  # the kind's own report
    assert apply_edit(toy, TEXT, [span]).text == result.text  # the arguments' door too
    events = list(Runner(toy).run(request))
    assert isinstance(events[-1], Done) and all(isinstance(e, Progress) for e in events[:-1])
    assert events[-1].result.text == result.text and events[-1].to_json()["settings"] == result.settings


def test_a_kind_reads_only_the_settings_it_declares_and_refuses_the_rest_in_one_line(toy):
    from sharpen.core.engine import apply_edit, run_edit

    frames = [u.frame for u in run_edit(toy, TEXT, [Span(14, 22, max_tokens=5)], Sampling(steps=2))]
    assert [f.masked for f in frames[:-1]] == [5, 4, 3]  # --steps reached the toy's loop
    with pytest.raises(UsageError, match=r"^--temperature has no effect on .* \(a toy that writes left to right\); leave it unset$"):
        apply_edit(toy, TEXT, [Span(14, 22, max_tokens=5)], Sampling(temperature=0.7))


def test_every_kind_in_the_table_says_what_it_reads_from_a_model(tiny_denoiser):
    assert set(LOOP_PROTOCOLS) == set(KINDS) and LOOP_PROTOCOLS["masked"] is DenoiserLike
    for name, kind in KINDS.items():
        assert kind.name == name and kind.noise in ("mask", "random")
        for member in ("reads", "settings", "prepare", "frames", "used", "slot_room"):
            assert callable(getattr(kind, member)), (name, member)
