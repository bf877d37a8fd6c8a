"""Drafts from the edit history (core/next_edit/drafts.py) and how a run starts from them
(core/next_edit/predict.py): the derivation byte for byte (a rename's other uses, never inside a
string or comment of a parsed language nor inside a longer name; a repeated fix; nothing for an
unrelated edit), the verification with a scripted deterministic model (a draft the model prefers
comes out rated by it, one it does not is dropped), the masked path's drafted tokens never
re-noised (scripted, and the embedded model's real run), and the self-editing path's canvas
starting from the draft (a tiny LLaDA2.1 checkpoint whose logits a script decides)."""
from __future__ import annotations

import pytest
from next_edit_scripted import ScriptedBackend
from test_next_edit_editing import llada21, llada21_path, scripted_backend  # noqa: F401 (fixtures)

from sharpen.core.changes import ChangeSet
from sharpen.core.next_edit.drafts import draft_hunks, drafted_text
from sharpen.core.next_edit.history import EditHistory
from sharpen.core.next_edit.predict import REWRITE_STRENGTH, NextEditDone, NextEditDraft, predict, predict_to_end
from sharpen.core.next_edit.request import Hunk, NextEditRequest
from sharpen.core.run import Progress
from sharpen.core.settings import Sampling


def request_after(path: str, before: str, old: str, new: str, nth: int = 0, **settings) -> NextEditRequest:
    """The user replaced the `nth` occurrence of `old` in `before` by `new`; the cursor after it."""
    at = -1
    for _ in range(nth + 1):
        at = before.index(old, at + 1)
    history = EditHistory()
    history.record(path, before, ChangeSet.of([(at, at + len(old), new)]), at=100.0)
    text = before[:at] + new + before[at + len(old):]
    return NextEditRequest.around(path, text, at + len(new), history.events(), **settings)


def drafted(request: NextEditRequest) -> str:
    return drafted_text(request.text, draft_hunks(request))


COUNTER = ('def tally(items, count):\n'
           '    """Add count to each item; count_all and recount stay."""\n'
           '    out = [i + count for i in items]  # count is the step\n'
           '    label = "count"\n'
           '    return out, count, count_all(recount)\n')


def test_a_rename_drafts_every_other_use_in_code_only_and_never_part_of_a_longer_name():
    request = request_after("tally.py", COUNTER, "count", "total")
    assert drafted(request) == ('def tally(items, total):\n'
                                '    """Add count to each item; count_all and recount stay."""\n'
                                '    out = [i + total for i in items]  # count is the step\n'
                                '    label = "count"\n'
                                '    return out, total, count_all(recount)\n')
    assert {d.kind for d in draft_hunks(request)} == {"rename"}


def test_without_a_grammar_every_whole_word_use_is_drafted():
    request = request_after("tally.txt", COUNTER, "count", "total")  # plain text: no grammar
    assert drafted(request) == COUNTER.replace("count", "total").replace("total_all", "count_all").replace("retotal", "recount")


def test_a_parameter_rename_stays_in_its_function_and_an_attribute_rename_after_dots():
    source = "def area(width, height):\n    return width * height\n\n\ndef describe(width):\n    return str(width)\n"
    assert drafted(request_after("s.py", source, "width", "w")) == source.replace("width, height", "w, height").replace("width * height", "w * height")
    source = "class User:\n    def __init__(self, name):\n        self.name = name\n\n    def hi(self):\n        return self.name\n"
    assert drafted(request_after("u.py", source, "name", "full_name", nth=1)) == source.replace(
        "self.name = name", "self.full_name = name").replace("return self.name", "return self.full_name")


def test_a_repeated_fix_drafts_the_same_tokens_elsewhere():
    source = 'fn main() {\n    let a = read(p).unwrap();\n    let b = read(q).unwrap();\n    let c = a.unwrapped;\n}\n'
    request = request_after("main.rs", source, ".unwrap()", "?")
    assert drafted(request) == 'fn main() {\n    let a = read(p)?;\n    let b = read(q)?;\n    let c = a.unwrapped;\n}\n'
    assert {d.kind for d in draft_hunks(request)} == {"repeat"}


@pytest.mark.parametrize("path, before, old, new", [
    ("a.py", "x = 1\ny = 2\n", "1", "1  # one"),                       # an insertion: nothing to repeat
    ("a.py", "def f(a):\n    return a\n", "(a)", "(a, b)"),            # a new parameter: no fragment became another
    ("a.go", "if err != nil {\n\treturn err\n}\n", "return err", 'return wrap(err)'),  # a wrap holds what it replaced
    ("a.py", "x = 1\nprint(x)\n", "x = 1", "x = 2"),                   # a value changed once: nowhere else
])
def test_an_unrelated_edit_drafts_nothing(path, before, old, new):
    assert draft_hunks(request_after(path, before, old, new)) == ()


def test_an_edit_of_another_file_drafts_nothing():
    history = EditHistory()
    history.record("other.py", "count = 1\n", ChangeSet.of([(0, 5, "total")]), at=1.0)
    assert draft_hunks(NextEditRequest.around("tally.py", COUNTER, 0, history.events())) == ()


RENAMED = ("def scale(total, k):\n"
           "    return count * k + count\n")


def renamed_request(**settings) -> NextEditRequest:
    return request_after("scale.py", RENAMED.replace("(total", "(count"), "count", "total", **settings)


def keeps_text(text, span):  # the scripted model proposes no change of its own
    return text


def test_a_draft_the_model_prefers_comes_out_rated_by_its_verification():
    request = renamed_request()
    backend = ScriptedBackend(keeps_text, confidence=lambda word: 0.8 if word == "total" else 0.4)
    events = list(predict(backend, request))
    done = events[-1]
    share = 0.8 / (0.8 + 0.4)  # the draft's share of the model's choice between "total" and "count"
    first = RENAMED.index("count")
    second = RENAMED.index("count", first + 1)
    assert done.answer.hunks == (Hunk(first, first + 5, "total", pytest.approx(share)), Hunk(second, second + 5, "total", pytest.approx(share)))
    assert done.answer.changes.apply(request.text) == RENAMED.replace("count", "total")
    assert (done.drafts, done.drafts_kept) == (2, 2)
    # The first frame drawn already carries the verified draft, rated as at the end.
    assert isinstance(events[0], NextEditDraft) and events[0].answer.hunks == done.answer.hunks
    # Without the draft the model proposes nothing (it keeps its text): the hunks are the draft's.
    assert predict_to_end(ScriptedBackend(keeps_text), request, drafts=False).answer.quiet


def test_a_draft_the_model_finds_less_likely_than_the_original_is_dropped():
    # A bar this low would let its share (0.4 / 1.2) through: the verification, not the bar, drops it.
    request = renamed_request(min_confidence=0.1)
    backend = ScriptedBackend(keeps_text, confidence=lambda word: 0.8 if word == "count" else 0.4)
    events = list(predict(backend, request))
    done = events[-1]
    assert isinstance(done, NextEditDone) and done.answer.quiet  # the model preferred "count"
    assert (done.drafts, done.drafts_kept) == (2, 0)
    # Never shown at all: a draft that flashed up before its verification and vanished is the flicker users complain of.
    assert len(events) > 1 and all(e.answer.quiet for e in events[:-1])


def test_the_masked_path_holds_the_drafted_tokens_and_renoises_the_rest():
    request = renamed_request()
    backend = ScriptedBackend(keeps_text)
    predict_to_end(backend, request)
    check, run = backend.requests  # one pass over the current text, then the run over the drafted canvas
    assert check.text == request.text and [(check.text[s.start:s.end], s.strength) for s in check.spans] == [(" count", 0.0), (" count", 0.0)]
    assert run.text == RENAMED.replace("count", "total")
    assert [(run.text[s.start:s.end], s.strength) for s in run.spans] == [
        ("def scale(total, k):\n    return", REWRITE_STRENGTH), (" total", 0.0), (" * k +", REWRITE_STRENGTH),
        (" total", 0.0), ("\n", 0.0)]  # the text between drafts re-noised as without a draft (a bare newline has nothing to write)


@pytest.fixture(scope="module")
def embedded():
    from sharpen.app.backend import LocalBackend
    from sharpen.core.settings import ModelRequest

    backend = LocalBackend(ModelRequest())
    backend.load()
    return backend


def test_the_embedded_models_run_never_masks_a_drafted_token(embedded):
    from test_next_edit_editing import Recording

    request = renamed_request(sampling=Sampling(steps=6, seed=1))
    backend = Recording(embedded)
    done = predict_to_end(backend, request)
    run = backend.requests[1]
    held = [i for i, s in enumerate(run.spans) if s.strength == 0.0 and run.text[s.start:s.end] == " total"]
    frames = [e for e in backend.events if isinstance(e, Progress)][1:]  # the run's own frames (after the check's)
    assert frames and frames[0].step == 0 and len(held) == 2
    for frame in frames:  # every frame, the first pass's included: the draft's tokens sharp, as drafted
        for i in held:
            assert frame.spans[i].text == " total" and all(s.state == "sharp" for s in frame.spans[i].slots)
    assert done.drafts == 2  # whether the tiny model keeps them is its verification's call


def test_the_self_editing_path_starts_from_the_draft(llada21):  # noqa: F811 (the fixture)
    history = EditHistory()
    before = "def scale(x):\n    return x * 2\n"
    history.record("scale.py", before, ChangeSet.of([(10, 11, "y")]), at=100.0)
    text = before.replace("(x)", "(y)")
    request = NextEditRequest.around("scale.py", text, 11, history.events())
    (window,) = request.windows
    draft = text.replace("x *", "y *")
    backend = scripted_backend(llada21, draft)  # the model prefers every token it starts from
    events = list(predict(backend, request))
    (edit,) = backend.requests
    (span,) = edit.spans
    assert span.revise and edit.text == draft and (span.start, span.end) == (window.start, window.end)
    assert "-def scale(x):\n+def scale(y):\n" in span.instruction  # the prompt still says what the user did
    first = next(e for e in backend.events if isinstance(e, Progress))
    assert first.step == 0 and first.spans[0].text == draft  # the canvas starts as the draft's tokens
    at = text.index("x *")
    assert events[-1].answer.hunks == (Hunk(at, at + 1, "y", pytest.approx(events[-1].answer.hunks[0].confidence)),)
    assert events[-1].answer.hunks[0].confidence > 0.9
