"""Next edits on a model that edits its own tokens (LLaDA2.1): the window's answer starts as its
own text, not masks (Span.revise), and the editing rule keeps or replaces each token.

A tiny LLaDA2.1 checkpoint in the release's layout (tests/moe_checkpoints.py) runs the whole
path, predict -> the LocalBackend's Runner -> the engine -> the block-causal kind -> the editing
loop, with its answers decided by a script (`Scripted`): at every answer position the model
prefers one token of a target, its end token past the target, with probability ~0.99, so the
test says what it wants and the loop's own rule decides what it keeps. Checked: the first frame
is the window's own tokens and the mask tail; a model that prefers every current token answers
nothing (and never draws a hunk while it runs); one that prefers another token at one place
gives exactly that hunk, made by one edit; other families keep their paths.
"""
from __future__ import annotations

import pytest
import torch

from moe_checkpoints import write_llada2
from sharpen.core.changes import ChangeSet
from sharpen.core.errors import UsageError
from sharpen.core.next_edit.history import EditHistory
from sharpen.core.next_edit.predict import NextEditDraft, plan, predict, predict_to_end, self_editing
from sharpen.core.next_edit.request import NextEditRequest
from sharpen.core.prompted import REVISE_TAIL
from sharpen.core.run import Done, Progress
from sharpen.core.settings import Sampling

SURE = 12.0  # the scripted logit: softmax over the tiny vocabulary gives the preferred token ~0.99
# The user renamed the parameter `x` to `y` on the definition; the use below still says `x`.
BEFORE = "def scale(x):\n    return x * 2\n"


def renamed() -> tuple[str, NextEditRequest]:
    history = EditHistory()
    at = BEFORE.index("x")
    history.record("scale.py", BEFORE, ChangeSet.of([(at, at + 1, "y")]), at=100.0)
    text = BEFORE[:at] + "y" + BEFORE[at + 1:]
    return text, NextEditRequest.around("scale.py", text, at + 1, history.events())


class Scripted:
    """A loaded LLaDA2.1 denoiser whose logits a script decides. Every pass still runs the real
    model (its cache is written as in any run); its logits are then replaced: at answer position
    i (counted after the assistant's opening `</role>`) the model prefers `answer[i]`, past the
    answer its end token, in the prompt the token there."""

    def __init__(self, real, answer: list[int]) -> None:
        self.real, self.answer = real, answer
        self.opening = real.tokenizer.token_id("</role>")

    def __getattr__(self, name):
        return getattr(self.real, name)

    def logits(self, x, want=None, run=None, cache=None, **kwargs):
        out = self.real.logits(x, want, run, cache, **kwargs)  # [B, W, V]
        positions = (want if want is not None else torch.arange(x.shape[1], device=x.device)).tolist()
        scripted = torch.zeros_like(out)
        for b in range(x.shape[0]):
            start = max(i for i, t in enumerate(x[b].tolist()) if t == self.opening) + 1  # the answer's first position
            for j, p in enumerate(positions):
                i = p - start
                token = int(x[b, p]) if i < 0 else self.answer[i] if i < len(self.answer) else self.real.spec.eos_id
                scripted[b, j, token] = SURE
        return scripted


class Recording:
    """A backend that passes runs through and keeps every event (the frames predict reads)."""

    def __init__(self, backend) -> None:
        self.backend, self.events, self.requests = backend, [], []

    def describe(self):
        return self.backend.describe()

    def run(self, request, should_stop=lambda: False, every=0.0):
        self.requests.append(request)
        for event in self.backend.run(request, should_stop, every):
            self.events.append(event)
            yield event


@pytest.fixture(scope="module")
def llada21_path(tmp_path_factory):
    """A tiny LLaDA2.1 checkpoint; its canvas is the release's max_position_embeddings, cut to
    2048 (the instruction's byte-level tokens do not fit the fixture's default 512)."""
    return write_llada2(tmp_path_factory.mktemp("llada21") / "llada2.1", version="2.1",
                        config_overrides={"max_position_embeddings": 2048})


@pytest.fixture(scope="module")
def llada21(llada21_path):
    from sharpen.core.models.loading import load_denoiser

    return load_denoiser(llada21_path)


def scripted_backend(den, answer_text: str) -> Recording:
    from sharpen.app.backend import LocalBackend

    return Recording(LocalBackend.of(Scripted(den, den.tokenizer.encode(answer_text))))


def test_the_first_frame_is_the_windows_own_tokens_then_the_mask_tail(llada21):
    text, request = renamed()
    (window,) = request.windows
    old = text[window.start:window.end]
    backend = scripted_backend(llada21, old)
    list(predict(backend, request, drafts=False))
    (edit,) = backend.requests  # one run per window, through the engine's normal path
    (span,) = edit.spans
    assert span.revise and span.mode == "rewrite" and (span.start, span.end) == (window.start, window.end)
    assert "-def scale(x):\n+def scale(y):\n" in span.instruction  # the prompt still carries the edit history
    first = next(e for e in backend.events if isinstance(e, Progress))
    assert first.step == 0
    (draft,) = first.spans
    own = llada21.tokenizer.encode(old)
    assert [s.state for s in draft.slots] == ["sharp"] * len(own) + ["masked"] * REVISE_TAIL
    assert "".join(s.text for s in draft.slots) == old and draft.text == old


def test_a_model_that_keeps_every_token_answers_no_edit_and_never_draws_one(llada21):
    text, request = renamed()
    (window,) = request.windows
    backend = scripted_backend(llada21, text[window.start:window.end])
    events = list(predict(backend, request, drafts=False))
    assert events[-1].answer.quiet and events[-1].answer.hunks == ()
    assert all(e.answer.quiet for e in events if isinstance(e, NextEditDraft))  # nothing drawn while it runs either
    (done,) = [e for e in backend.events if isinstance(e, Done)]
    (result,) = done.result.spans
    # Every window token was kept, none rewritten: the run only ended the answer in the mask tail.
    assert result.edits == 0 and result.commits == REVISE_TAIL


def test_a_model_that_prefers_another_token_at_one_place_gives_exactly_that_hunk(llada21):
    text, request = renamed()
    (window,) = request.windows
    old = text[window.start:window.end]
    new = old.replace("return x", "return y")
    own, wanted = llada21.tokenizer.encode(old), llada21.tokenizer.encode(new)
    assert len(own) == len(wanted) and sum(a != b for a, b in zip(own, wanted)) == 1  # one token differs
    backend = scripted_backend(llada21, new)
    done = predict_to_end(backend, request, drafts=False)
    (hunk,) = done.answer.hunks
    at = text.index("return x") + len("return ")
    assert (hunk.start, hunk.end, hunk.text) == (at, at + 1, "y") and hunk.confidence > 0.9
    assert done.answer.changes.apply(text) == BEFORE.replace("x", "y")
    (result,) = next(e for e in backend.events if isinstance(e, Done)).result.spans
    assert result.edits == 1  # the editing rule replaced that one token; the others were kept


def test_a_hunk_over_kept_tokens_is_rated_by_them_too(llada21):
    """A fix inside a word (`lenght` -> `length`: two of its six tokens edited, four kept) is one
    hunk over the whole word; its kept tokens carry the model's probability of them, so the
    hunk is as sure as they are, not dropped as unrated."""
    before = "n = lenght(a)\nm = lenght(b)\n"
    history = EditHistory()
    history.record("fix.py", before, ChangeSet.of([(4, 10, "length")]), at=100.0)
    text = before.replace("lenght", "length", 1)
    request = NextEditRequest.around("fix.py", text, 10, history.events())
    (window,) = request.windows
    old = text[window.start:window.end]
    backend = scripted_backend(llada21, old.replace("lenght", "length"))
    (hunk,) = predict_to_end(backend, request, drafts=False).answer.hunks
    at = text.index("lenght")
    assert (hunk.start, hunk.end, hunk.text) == (at, at + 6, "length") and hunk.confidence > 0.9
    (result,) = next(e for e in backend.events if isinstance(e, Done)).result.spans
    assert result.edits == 2


def test_an_answer_that_shrinks_ends_early_and_one_that_grows_fills_the_tail(llada21):
    """A longer or shorter answer than the window: the model ends the answer with its end token
    earlier (the rest of the draft is cut, as LLaDA2's generate cuts at the end token) or writes
    into the mask tail."""
    text, request = renamed()
    (window,) = request.windows
    old = text[window.start:window.end]
    for new in (old.replace("x * 2", "x"), old.replace("x * 2", "x * 2 + 1")):
        done = predict_to_end(scripted_backend(llada21, new), request)
        assert done.answer.changes.apply(text) == text.replace(old, new)


def test_other_families_keep_their_paths():
    """A masked model re-noises its windows in one run; an instruct model without the editing
    decode (or LLaDA2 with --editing off) gets the instruction path, all-mask answers; no span
    revises unless the model's loop edits its own tokens."""
    from next_edit_scripted import ScriptedBackend

    _, request = renamed()
    masked = plan(request, instruct=False)
    assert [(s.mode, s.strength, s.instruction, s.revise) for e, _ in masked for s in e.spans] == [("rewrite", 0.35, None, False)]
    instructed = plan(request, instruct=True)
    assert all(s.instruction and not s.revise for e, _ in instructed for s in e.spans)
    for backend in (ScriptedBackend(lambda t, s: t), ScriptedBackend(lambda t, s: t, instruct=True)):
        list(predict(backend, request))
        assert not any(s.revise for e in backend.requests for s in e.spans)
    editing = ScriptedBackend(lambda t, s: t, instruct=True)
    editing.info = type(editing.info)(**{**editing.info.__dict__, "edits": True})
    assert self_editing(editing.info, request)
    off = NextEditRequest(request.path, request.text, request.cursor, request.windows, request.history,
                          sampling=Sampling(editing="off"))
    assert not self_editing(editing.info, off)  # --editing off: LLaDA2.0's decode, which never replaces a token
    list(predict(editing, off))
    assert not any(s.revise for e in editing.requests for s in e.spans)


def test_a_revise_span_is_refused_in_one_line_by_a_loop_that_never_replaces_a_token(llada21):
    from sharpen.core.engine import run_request
    from sharpen.core.request import EditRequest
    from sharpen.core.spans import Span

    text, _ = renamed()
    request = EditRequest(text, (Span(0, 14, "rewrite", revise=True),), Sampling(editing="off"))
    with pytest.raises(UsageError, match=r"revise needs a model that edits its own tokens.*block diffusion") as caught:
        next(run_request(llada21, request))
    assert "\n" not in str(caught.value)


def test_the_embedded_masked_model_refuses_a_revise_span():
    from sharpen.app.backend import LocalBackend
    from sharpen.core.request import EditRequest
    from sharpen.core.settings import ModelRequest
    from sharpen.core.spans import Span

    backend = LocalBackend(ModelRequest())
    assert not backend.load().edits
    with pytest.raises(UsageError, match="revise needs a model that edits its own tokens.*masked-diffusion"):
        list(backend.run(EditRequest("x = 1\n", (Span(0, 5, "rewrite", revise=True),))))


def test_a_revise_span_goes_over_the_wire_and_needs_a_rewrite():
    from sharpen.core.errors import SpanError
    from sharpen.core.request import EditRequest
    from sharpen.core.spans import Span

    request = EditRequest("x = 1\n", (Span(0, 5, "rewrite", revise=True),))
    assert request.to_json()["spans"][0]["revise"] is True
    assert EditRequest.from_json(request.to_json()).spans[0].revise
    with pytest.raises(SpanError, match="revise .* needs mode rewrite"):
        EditRequest("x = 1\n", (Span(0, 5, "infill", revise=True),))


def test_the_benchmark_runs_on_a_llada21_checkpoint(llada21_path, capsys):
    """bench/next_edit.py --model on the self-editing path: its loop takes no --steps (the editing
    decode ends a block when it settles), so the benchmark leaves the step count to it."""
    import next_edit as bench

    assert bench.main(["--model", str(llada21_path), "--only", "rust-"]) == 0
    out = capsys.readouterr().out
    assert "self-editing from the window's text" in out and "steps the loop's own" in out
    assert out.strip().splitlines()[-1].startswith("all")
