"""Next-edit prediction (core/next_edit/): the edit history as values, the windows a request
opens, the diff into hunks, quiet answers, and the decoding through a backend: a scripted
deterministic model (tests/next_edit_scripted.py) and the embedded model's real rewrite path."""
from __future__ import annotations

import pytest
from next_edit_scripted import ScriptedBackend, renamer

from sharpen.core.changes import ChangeSet
from sharpen.core.next_edit.history import EditHistory
from sharpen.core.next_edit.predict import NextEditDone, NextEditDraft, hunks_between, predict, predict_to_end
from sharpen.core.next_edit.request import Hunk, NextEditRequest, line_window

FILLER = "".join(f"# line {i}\n" for i in range(30))
SOURCE = ("def area(width, height):\n    return width * height\n\n" + FILLER
          + "def report(width):\n    print(area(width, 2))\n")


def renamed() -> tuple[str, EditHistory]:
    """The user renamed `width` to `w` in the signature only; the history holds that edit."""
    history = EditHistory()
    at = SOURCE.index("width")
    history.record("shapes.py", SOURCE, ChangeSet.of([(at, at + 5, "w")]), at=100.0)
    return SOURCE[:at] + "w" + SOURCE[at + 5:], history


def test_history_merges_typing_into_one_event_and_keeps_files_and_order():
    history = EditHistory()
    text = "x = 1\ny = 2\n"
    for i, ch in enumerate("abc"):  # typing "abc" at the end of line 1, a keystroke at a time
        at = 5 + i
        history.record("a.py", text, ChangeSet.of([(at, at, ch)]), at=10.0 + i * 0.2)
        text = text[:at] + ch + text[at:]
    history.record("b.py", "old\n", ChangeSet.of([(0, 3, "new")]), at=20.0)
    history.record("a.py", text, ChangeSet.of([(0, 1, "z")]), at=60.0)  # much later: its own event
    events = history.events()
    assert [e.path for e in events] == ["a.py", "b.py", "a.py"]
    assert events[0].diff == "@@ -1,2 +1,2 @@\n-x = 1\n+x = 1abc\n y = 2\n"
    assert events[1].unified() == "--- a/b.py\n+++ b/b.py\n@@ -1 +1 @@\n-old\n+new\n"
    assert history.events(limit=1) == events[-1:]


def test_windows_are_the_cursors_lines_and_the_other_uses_of_a_removed_name():
    text, history = renamed()
    cursor = text.index("w,") + 1
    request = NextEditRequest.around("shapes.py", text, cursor, history.events())
    own = line_window(text, cursor, 4, 6)
    assert request.windows[0] == own and own.start == 0 and text[own.start:own.end].count("\n") == 7
    pointed = request.windows[1:]
    assert len(pointed) == 1  # `width` still stands in report(): one window around its two uses on adjacent lines
    assert text[pointed[0].start:pointed[0].end] == "# line 29\ndef report(width):\n    print(area(width, 2))\n"
    assert NextEditRequest.around("shapes.py", text, cursor).windows == (own,)  # no history: the cursor's window only


def test_diff_into_hunks_at_word_granularity():
    old, new = "def f(a, b):\n    return a + b\n", "def f(x, b):\n    return x + b\n"
    assert hunks_between(old, new, 100) == [Hunk(106, 107, "x", 1.0), Hunk(124, 125, "x", 1.0)]
    assert hunks_between(old, old, 0) == []


def test_a_rename_is_followed_in_every_window_in_one_run_and_drafts_come_first():
    text, history = renamed()
    request = NextEditRequest.around("shapes.py", text, text.index("w,") + 1, history.events())
    backend = ScriptedBackend(renamer("width", "w"))
    events = list(predict(backend, request, drafts=False))  # the model's own rename (drafts: test_next_edit_drafts.py)
    assert len(backend.requests) == 1 and [s.mode for s in backend.requests[0].spans] == ["rewrite", "rewrite"]
    assert isinstance(events[0], NextEditDraft) and isinstance(events[-1], NextEditDone)
    answer = events[-1].answer
    assert answer.changes.apply(text) == SOURCE.replace("width", "w")
    assert [h.text for h in answer.hunks] == ["w", "w", "w"] and all(h.confidence == 0.9 for h in answer.hunks)


def test_quiet_when_nothing_changes_or_the_model_is_unsure():
    text, history = renamed()
    request = NextEditRequest.around("shapes.py", text, 3, history.events())
    assert predict_to_end(ScriptedBackend(lambda t, s: t), request).answer.quiet
    unsure = ScriptedBackend(renamer("width", "w"), confidence=lambda word: 0.2 if word == "w" else 0.95)
    assert predict_to_end(unsure, request, drafts=False).answer.quiet  # (a draft is judged against the original: test_next_edit_drafts.py)
    rewritten_whole = ScriptedBackend(lambda t, s: "garbage " * (len(t) // 8))
    assert predict_to_end(rewritten_whole, request).answer.quiet


def test_an_instruct_model_gets_each_window_as_an_instruction_with_the_history():
    text, history = renamed()
    request = NextEditRequest.around("shapes.py", text, text.index("w,") + 1, history.events())
    backend = ScriptedBackend(renamer("width", "w"), instruct=True)
    done = predict_to_end(backend, request)
    assert len(backend.requests) == 2  # one run per window: an instruction applies to one span
    for edit in backend.requests:
        (span,) = edit.spans
        assert span.instruction.startswith("File: shapes.py\nRecent edits:\n--- a/shapes.py\n+++ b/shapes.py\n")
        assert "-def area(width, height):\n+def area(w, height):\n" in span.instruction
    assert done.answer.changes.apply(text) == SOURCE.replace("width", "w")


def test_a_stop_ends_the_prediction_without_an_answer():
    text, history = renamed()
    request = NextEditRequest.around("shapes.py", text, 3, history.events())
    assert not any(isinstance(e, NextEditDone) for e in predict(ScriptedBackend(renamer("width", "w")), request, should_stop=lambda: True))


@pytest.fixture(scope="module")
def embedded():
    from sharpen.app.backend import LocalBackend
    from sharpen.core.settings import ModelRequest

    backend = LocalBackend(ModelRequest())
    backend.load()
    return backend


def test_the_embedded_model_rewrites_every_window_through_the_engines_rewrite_path(embedded):
    from sharpen.core.settings import Sampling

    text, history = renamed()
    request = NextEditRequest.around("shapes.py", text, text.index("w,") + 1, history.events(), sampling=Sampling(steps=6, seed=3))
    first = predict_to_end(embedded, request)
    again = predict_to_end(embedded, request)
    assert [w for w, _ in first.windows] == list(request.windows)
    assert first.answer == again.answer  # seeded: the same answer twice
    for hunk in first.answer.hunks:  # every hunk inside a window, each sure enough
        assert any(w.start <= hunk.start and hunk.end <= w.end for w in request.windows)
        assert hunk.confidence >= request.min_confidence
    assert first.tokens > 0 and first.first_draft is None  # predict_to_end asks for no drafts
    assert all(isinstance(e, (NextEditDraft, NextEditDone)) for e in predict(embedded, request))


# -- bench/next_edit.py and its scenarios -----------------------------------------------------


def test_the_scenarios_cover_what_the_benchmark_promises():
    import json

    import next_edit as bench

    scenarios = [json.loads(p.read_text(encoding="utf-8")) for p in sorted(bench.SCENARIOS.glob("*.json"))]
    assert len(scenarios) >= 40
    assert sum(s["expected"] is None for s in scenarios) >= len(scenarios) / 4  # a quarter stay quiet
    assert sum(s["language"] != "python" for s in scenarios) >= len(scenarios) / 2
    assert {"rename", "signature", "repeated", "pattern", "import", "tests", "quiet"} <= {s["kind"] for s in scenarios}
    for s in scenarios:
        assert s["text"].count(bench.CURSOR) == 1, s["name"]
        assert s["history"][-1]["after"] == s["text"].replace(bench.CURSOR, ""), s["name"]
        assert s["expected"] != s["text"].replace(bench.CURSOR, ""), s["name"]


def test_delta_chrf_scores_only_the_changed_lines():
    import next_edit as bench

    before = "a = 1\nb = 2\nc = 3\n"
    right = "a = 1\nb = 20\nc = 3\n"
    assert bench.delta_chrf(before, right, right) == 100.0
    assert bench.delta_chrf(before, before, right) == 0.0  # quiet where an edit was expected
    assert 0 < bench.delta_chrf(before, "a = 1\nb = 21\nc = 3\n", right) < 100


def test_the_benchmark_prints_its_table_on_the_embedded_model(capsys):
    import next_edit as bench

    assert bench.main(["--only", "rust-", "--steps", "4"]) == 0
    out = capsys.readouterr().out
    assert "deltaChrF" in out and "quiet" in out and out.strip().splitlines()[-1].startswith("all")


# -- the offer: Tab jumps, a second Tab applies one hunk (one undo step), typing moves or withdraws --


def test_tab_jumps_then_applies_one_hunk_at_a_time_and_undo_restores():
    from sharpen.core.next_edit.offer import Apply, Jump, Offer
    from sharpen.core.next_edit.request import NextEditAnswer

    text = "def f(w):\n    return width + width\n"
    first, second = text.index("width"), text.rindex("width")
    offer = Offer.of(NextEditAnswer((Hunk(first, first + 5, "w", 0.9), Hunk(second, second + 5, "w", 0.9))))
    offer, step = offer.tab(0)
    assert step == Jump(first)
    offer, step = offer.tab(step.offset)
    assert isinstance(step, Apply) and step.cursor == first + 1
    after_one = step.changes.apply(text)
    assert after_one == "def f(w):\n    return w + width\n"
    assert step.changes.inverted(text).apply(after_one) == text  # undo takes back that hunk only
    assert [(h.start, h.end) for h in offer.hunks] == [(second - 4, second + 1)]  # the rest moved with the text
    offer, step = offer.tab(step.cursor)
    offer, step = offer.tab(step.offset)
    assert step.changes.apply(after_one) == "def f(w):\n    return w + w\n" and offer is None


def test_typing_moves_the_hunks_and_withdraws_one_typed_into():
    from sharpen.core.next_edit.offer import Offer
    from sharpen.core.next_edit.request import NextEditAnswer

    offer = Offer.of(NextEditAnswer((Hunk(10, 15, "a", 0.9), Hunk(20, 25, "b", 0.9))))
    moved = offer.after_edit(ChangeSet.of([(0, 0, "xy")]))  # typed before both
    assert [(h.start, h.end) for h in moved.hunks] == [(12, 17), (22, 27)]
    left = offer.after_edit(ChangeSet.of([(12, 13, "Q")]))  # typed inside the first
    assert [(h.start, h.text) for h in left.hunks] == [(20, "b")]
    assert offer.apply_all().apply("0123456789abcdefghijklmnopqrstuvwxyz") == "0123456789afghijbpqrstuvwxyz"
