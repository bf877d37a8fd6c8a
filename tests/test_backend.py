"""The seam between front ends and the engine: requests as values, one Runner per model,
plain-data events with one JSON form, the local Backend, and the editor's adapter."""
from __future__ import annotations

import json
import threading
import time

import pytest

from sharpen.app.backend import LocalBackend
from sharpen.core.errors import Cancelled, SpanError, UsageError
from sharpen.core.request import EditRequest
from sharpen.core.run import Busy, Done, Progress, Runner
from sharpen.core.settings import Editing, Sampling
from sharpen.core.spans import Span

TEXT = "def add(a, b):\n    \n\nprint(add(1, 2))\n"
POINT = TEXT.index("\n    \n") + 5


@pytest.fixture(scope="module")
def embedded():
    from sharpen.core.models.load import load_model
    from sharpen.core.settings import ModelRequest

    return load_model(ModelRequest())


def request(**sampling) -> EditRequest:
    return EditRequest(TEXT, (Span(POINT, POINT, max_tokens=12),), Sampling(steps=6, **sampling))


def test_a_request_round_trips_through_json_and_refuses_bad_fields():
    req = EditRequest(TEXT, (Span(POINT, POINT, max_tokens=12), Span(0, 3, "rewrite", strength=0.25)), Sampling(steps=3, seed=7), Editing(candidates=2))
    back = EditRequest.from_json(json.loads(json.dumps(req.to_json())))
    assert back.to_json() == req.to_json() and back.sampling == req.sampling and back.editing == req.editing
    assert [s.start for s in back.spans] == [0, POINT]  # sorted on construction
    bad = [
        ([], "the body must be a JSON object"),
        ({"text": 3, "spans": []}, "text must be a string"),
        ({"text": "ab", "spans": []}, "spans must be a non-empty list"),
        ({"text": "ab", "spans": [{"start": "0"}]}, "spans[0].start must be a whole number"),
        ({"text": "ab", "spans": [{"start": 0, "mode": "delete"}]}, "spans[0].mode must be one of: infill, rewrite"),
        ({"text": "ab", "spans": [{"start": 0}], "sampling": {"steps": 0}}, "sampling.steps must be at least 1"),
        ({"text": "ab", "spans": [{"start": 0}], "sampling": {"stepz": 3}}, "sampling: unknown field 'stepz'"),
        ({"text": "ab", "spans": [{"start": 0}], "colour": 1}, "request: unknown field 'colour'"),
    ]
    for body, message in bad:
        with pytest.raises(UsageError) as exc:
            EditRequest.from_json(body)
        assert str(exc.value).startswith(message), str(exc.value)
    with pytest.raises(SpanError, match="outside the text"):
        EditRequest.from_json({"text": "ab", "spans": [{"start": 5}]})


def test_runner_events_are_plain_data_and_end_in_the_engines_result(embedded):
    from sharpen.core.engine import apply_edit

    runner = Runner(embedded)
    events = list(runner.run(request()))
    frames, done = events[:-1], events[-1]
    assert all(isinstance(e, Progress) for e in frames) and isinstance(done, Done)
    assert [f.step for f in frames] == list(range(len(frames)))  # every step with every=0
    assert frames[0].unsharp > 0 and all(s.state == "masked" for s in frames[0].spans[0].slots if s.state != "end")
    alone = apply_edit(embedded, TEXT, list(request().spans), request().sampling)
    assert done.result.text == alone.text and done.result.changes() == alone.changes()
    # The final frame shows exactly the result's text (pad/eos slots hidden).
    assert "".join(s.text for s in done.last.spans[0].slots) == done.result.spans[0].text
    # One JSON form, and it travels: a client rebuilds the same result from it.
    wire = json.loads(json.dumps(done.to_json()))
    again = Done.from_json(wire, request())
    assert again.result.text == done.result.text and again.last == done.last
    assert Progress.from_json(json.loads(json.dumps(frames[1].to_json()))) == frames[1]


def test_coalesced_and_frameless_runs_give_the_same_result(embedded):
    runner = Runner(embedded)
    everything = list(runner.run(request()))
    only_result = list(runner.run(request(), every=None))
    assert len(only_result) == 1 and only_result[0].result.text == everything[-1].result.text


# A run that never gets its turn (the Busy check gone, a lost notify) waits forever: fail in seconds instead.
@pytest.mark.timeout(30, func_only=True)
def test_runs_take_turns_and_a_stop_while_waiting_never_touches_the_model(embedded):
    runner = Runner(embedded, max_waiting=1)
    first = runner.run(request())
    next(first)  # the first run holds the model
    stopped = threading.Event()
    second_events = []

    def second():
        second_events.extend(runner.run(request(), stopped.is_set))

    worker = threading.Thread(target=second)
    worker.start()
    time.sleep(0.2)
    assert runner.waiting == 2 and not second_events  # waiting its turn
    with pytest.raises(Busy, match="busy"):  # a third is refused at once: the line is full
        next(runner.run(request()))
    stopped.set()
    worker.join(5)
    assert not worker.is_alive() and second_events == []  # left the line without running
    assert isinstance(list(first)[-1], Done)
    assert runner.waiting == 0
    with pytest.raises(Cancelled):
        runner.result(request(), should_stop=lambda: True)


def test_local_backend_loads_once_and_describes_the_model(embedded):
    backend = LocalBackend.of(embedded)
    info = backend.describe()
    assert info.name == "sharpen-embedded" and info.noise == "mask"
    # A chat template for the chat endpoints (a comment transcript), and no instructions: never tuned on them.
    assert info.chat_template.startswith("{#-") and info.instruct is False
    assert backend.load() is info
    assert isinstance(list(backend.run(request()))[-1], Done)
