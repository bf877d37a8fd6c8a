"""core/engine.py: text and spans in, frames out, the edit (a ChangeSet) at the end."""
from __future__ import annotations

import pytest

from sharpen.core.engine import apply_edit, run_edit
from sharpen.core.errors import Cancelled, UsageError
from sharpen.core.settings import Editing, Sampling
from sharpen.core.spans import Span

TEXT = "def add(a, b):\n    return a + b\n\n\nclass Point:\n    x = 1\r\n    y = 2\n"
SPANS = [Span(4, 7), Span(23, 31, mode="rewrite", strength=0.6), Span(48, 48, max_tokens=6)]


def test_the_result_is_a_change_set_every_front_end_applies(tiny_denoiser):
    """EditResult.changes(choice) is the edit itself: applied to the original it gives each
    alternative's whole text, and it touches nothing outside the spans."""
    result = apply_edit(tiny_denoiser, TEXT, SPANS, Sampling(temperature=1.0, samples=3, seed=5))
    for choice, whole in enumerate(result.samples):
        changes = result.changes(choice)
        assert changes.apply(TEXT) == whole
        assert [(c.start, c.end) for c in changes.changes] == [(s.start, s.end) for s in SPANS]
    assert result.changes().apply(TEXT) == result.text


def test_the_request_reaches_the_engine_whole_and_its_editing_settings_are_read(tiny_denoiser):
    from sharpen.core.engine import candidate_plan, run_request
    from sharpen.core.request import EditRequest

    assert candidate_plan(Editing()) is None
    plan = candidate_plan(Editing(candidates=3), path="x.py")
    assert plan is not None and plan.path == "x.py" and len(plan.scales) == 3
    request = EditRequest(TEXT, tuple(SPANS), Sampling(steps=4), Editing(context_tokens=64))
    by_request = [u.result for u in run_request(tiny_denoiser, request) if u.result][0]
    by_arguments = apply_edit(tiny_denoiser, TEXT, SPANS, Sampling(steps=4), context_tokens=64)
    assert by_request.text == by_arguments.text and by_request.prompt_tokens == by_arguments.prompt_tokens
    wider = [u.result for u in run_request(tiny_denoiser, EditRequest(TEXT, tuple(SPANS), Sampling(steps=4), Editing(context_tokens=2)))
             if u.result][0]
    assert wider.prompt_tokens < by_request.prompt_tokens  # context_tokens reached the canvas
    with pytest.raises(UsageError, match="unknown length policy"):
        list(run_edit(tiny_denoiser, TEXT, SPANS, length="sideways"))


def test_same_seed_same_result_other_seed_differs(tiny_denoiser):
    settings = Sampling(temperature=1.5, seed=7, samples=2)
    a = apply_edit(tiny_denoiser, TEXT, SPANS, settings)
    b = apply_edit(tiny_denoiser, TEXT, SPANS, settings)
    assert a.samples == b.samples
    others = {apply_edit(tiny_denoiser, TEXT, SPANS, Sampling(temperature=1.5, seed=s)).text for s in range(1, 5)}
    assert len(others | {a.text}) > 1


def test_cancelled_before_the_first_step_raises_in_apply_edit(tiny_denoiser):
    with pytest.raises(Cancelled):
        apply_edit(tiny_denoiser, TEXT, [Span(4, 7, max_tokens=16)], should_stop=lambda: True)


def test_cancel_flag_stops_a_running_iterator(tiny_denoiser):
    stop = []
    frames = []
    for f in run_edit(tiny_denoiser, TEXT, [Span(4, 7, max_tokens=16)], Sampling(schedule="fixed"), should_stop=lambda: bool(stop)):
        frames.append(f)
        if len(frames) == 2:
            stop.append(True)
    assert len(frames) == 2 and not frames[-1].done


def test_crlf_documents_get_crlf_infills(tiny_denoiser):
    text = "a = 1\r\nb = 2\r\nc = 3\r\n"
    result = apply_edit(tiny_denoiser, text, [Span(7, 12, max_tokens=12)], Sampling(temperature=2.0, seed=3))
    body = result.spans[0].text
    assert "\n" not in body.replace("\r\n", "")


def test_a_span_after_blanks_does_not_repeat_them(tiny_denoiser):
    """A prefix ending in blanks: the model writes its own leading blank (BPE glues it to the
    word), which came out as `     return` or `if  x`. The blanks before the span stay exactly
    as they were, and the span's text starts at the word."""
    from sharpen.core.engine import leading_blank, narrowed

    text = "def f(n):\n    return str(n)\nx = 1\n"
    span = Span(text.index("return"), text.index("return") + len("return str(n)"), mode="rewrite", strength=1.0)
    assert leading_blank(text, span, 0) == 4 and leading_blank(text, Span(0, 3), 0) == 0
    result = apply_edit(tiny_denoiser, text, [span], Sampling(steps=4, samples=2, temperature=1.0, seed=1))
    for alternative in result.spans[0].alternatives:
        assert not alternative.startswith((" ", "\t"))
    for whole in result.samples:
        assert whole.startswith("def f(n):\n    ") and not whole.startswith("def f(n):\n     ") and whole.endswith("\nx = 1\n")
    # narrowed on a made-up result: the widened text's blanks are dropped, the outside kept.
    from sharpen.core.engine import EditResult, SpanResult

    fake = EditResult(text, (SpanResult(span, " return 1", 2, (" return 1", "\treturn 2")),), 1, 0.0, (text, text))
    back = narrowed(fake, text, [span], [4])
    assert back.spans[0].span == span and back.spans[0].alternatives == ("return 1", "return 2")
    assert back.samples == ("def f(n):\n    return 1\nx = 1\n", "def f(n):\n    return 2\nx = 1\n")


def test_generated_text_gets_the_documents_line_breaks_and_no_undecodable_bytes():
    """A broken model wrote lone CRs and U+FFFD into LF files: every break it writes becomes the
    document's, and U+FFFD (bytes that form no UTF-8) is dropped unless the file holds one."""
    from sharpen.core.newlines import drop_undecodable, match_newlines

    assert match_newlines("a\rb\r\nc\nd", "\n") == "a\nb\nc\nd"
    assert match_newlines("a\rb\r\nc\nd", "\r\n") == "a\r\nb\r\nc\r\nd"
    assert drop_undecodable("x\ufffdy", "plain text") == "xy"
    assert drop_undecodable("x\ufffdy", "a file that holds \ufffd already") == "x\ufffdy"


def test_an_edit_never_writes_a_lone_cr_or_u_fffd_into_an_lf_file(tiny_denoiser, monkeypatch):
    from sharpen.core import engine

    text = "def f(x):\n    return x\n"
    monkeypatch.setattr(engine, "span_text", lambda ids, tok, drop: "a\rb\ufffd\r\n")  # what a broken model decodes to
    result = engine.apply_edit(tiny_denoiser, text, [Span(14, 22)], Sampling(steps=2))
    assert result.spans[0].text == "a\nb\n" and "\r" not in result.text and "\ufffd" not in result.text


def test_a_configured_rewrite_strength_reaches_edit_lists_and_server_spans():
    """A span that does not carry its own strength takes the configured one (Editing.strength),
    from an @edits.json item and from a /v1/edits body alike; its own strength still wins."""
    from sharpen.app.specs import parse_edit_list
    from sharpen.core.request import EditRequest

    text = "x = 1\ny = 2\n"
    body = {"text": text, "spans": [{"start": 0, "end": 5, "mode": "rewrite"}, {"start": 6, "end": 11, "mode": "rewrite", "strength": 0.2}]}
    served = EditRequest.from_json(body, defaults_editing=Editing(strength=0.9))
    assert [s.strength for s in served.spans] == [0.9, 0.2]
    items = '[{"range": "1:1-1:6", "mode": "rewrite"}, {"range": "2:1-2:6", "mode": "rewrite", "strength": 0.2}, {"range": "2:1-2:2", "mode": "rewrite"}]'
    assert [s.strength for s in parse_edit_list(items, text, default_strength=0.9)] == [0.9, 0.2, 0.9]
