"""Behaviours the suite once let go unnoticed (issue 39, "tests that notice"): each test here was
seen failing with its behaviour removed (tests/README.md lists the removals).

- a slot the model wrote over its own commit is drawn as an edit, from the loop's frame through
  the Runner's Progress and the editor's pieces to the preview layer's cells;
- `sharp_per_step` holds the counts the frames show, not just the right number of them;
- stop strings and `n_indent` cut the server's answers (a scripted backend writes known text,
  so the expected answers are written out here, not computed by the server's own functions);
- every key binding has a palette entry (the palette, the help screen and the docs' key tables
  are built from the palette: a binding without one is a command nobody can find).
"""
from __future__ import annotations

import httpx
import pytest
import torch

from sharpen.app.backend import LocalBackend
from sharpen.core.engine import EditResult, SpanResult
from sharpen.core.request import EditRequest
from sharpen.core.run import Done, Progress, Runner, Slot, SpanDraft
from sharpen.core.settings import Editing, Sampling
from sharpen.core.spans import Span


class ScriptedBackend:
    """A loaded backend whose runs write `slots` into the request's first span, one more slot
    decided per step: the events any Backend hands its front ends (a remote server's too), with
    text chosen by the test. Everything else (describe, load, the model's tokenizer) is the real
    backend's."""

    def __init__(self, inner, slots: list[Slot]) -> None:
        self.inner, self.slots = inner, slots

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def progress(self, k: int) -> Progress:
        shown = tuple(self.slots[:k]) + tuple(Slot("masked", "", 0.1) for _ in self.slots[k:])
        return Progress(k, len(self.slots), 0.0, (SpanDraft("".join(s.text for s in self.slots[:k]), shown),))

    def run(self, request: EditRequest, should_stop=lambda: False, every: float | None = 0.0):
        span, n = request.spans[0], len(self.slots)
        for k in range(n):
            if should_stop():
                return
            if every is not None:
                yield self.progress(k)
        text = "".join(s.text for s in self.slots)
        new = request.text[:span.start] + text + request.text[span.end:]
        result = EditResult(new, (SpanResult(span, text, n, (text,)),), n, 0.01, (new,))
        yield Done(result, self.progress(n), self.inner.describe().name, "mask", tuple(range(n + 1)))


def scripted(tiny_denoiser, *pieces: str) -> ScriptedBackend:
    return ScriptedBackend(LocalBackend.of(tiny_denoiser), [Slot("sharp", p, 0.99) for p in pieces])


# -- a self-edited slot drawn as an edit ----------------------------------------------------------


def test_an_edited_slot_in_a_frame_reaches_the_editors_pieces_as_an_edit():
    """core.loops.frame -> core.run.progress_of (the Runner's events) -> model_runner.draft_pieces
    (what the editor draws): the slot the loop wrote over its own commit stays an edit."""
    from sharpen.app.tui.model_runner import draft_pieces
    from sharpen.app.tui.preview import EDITED, MASK_GLYPH, MASKED, SURE, Piece
    from sharpen.core.loops.frame import SLOT_STATES, Frame
    from sharpen.core.run import progress_of

    class Tokens:  # the tokenizer's display pieces: one "<id>" per token
        def pieces(self, ids):
            return [f"<{t}>" for t in ids]

        def decode(self, ids):
            return "".join(self.pieces(ids))

    sharp, edited, masked = (SLOT_STATES.index(s) for s in ("sharp", "edited", "masked"))
    ids = torch.tensor([5, 6, 9, 7])  # [T] position 2 held 8; the loop wrote 9 over it
    state = torch.tensor([sharp, sharp, edited, masked], dtype=torch.uint8)  # [T]
    frame = Frame(3, 8, 0.1, False, "block-causal", ids, torch.full((4,), 0.95), ids, state, (range(0, 4),),
                  _replaced=torch.tensor([-1, -1, 8, -1]))
    progress = progress_of(frame, Tokens(), end_ids=set(), mask_id=7)
    assert [s.state for s in progress.spans[0].slots] == ["sharp", "sharp", "edited", "masked"]
    assert draft_pieces(progress) == [[Piece("<5><6>", SURE), Piece("<9>", EDITED), Piece(MASK_GLYPH, MASKED)]]


def test_the_editors_pieces_show_masks_hide_pad_and_grade_confidence():
    """A span's state -> core.run.draft_of (the Runner's Progress) -> model_runner.draft_pieces:
    a masked slot is the blur glyph, pad/eos is not drawn, committed text fainter the less sure."""
    from types import SimpleNamespace

    from sharpen.app.tui.model_runner import draft_pieces
    from sharpen.app.tui.preview import DOUBTFUL, MASK_GLYPH, MASKED, SURE, UNSURE, Piece
    from sharpen.core.run import draft_of

    tokenizer = SimpleNamespace(pieces=lambda ids: [chr(ord("a") + i) for i in ids], decode=lambda ids: "".join(chr(ord("a") + i) for i in ids))
    span = SimpleNamespace(tokens=(0, None, 9, 1, 2), confidence=(0.95, 0.1, 0.99, 0.6, 0.2), noise=None, guesses=(0, 3, 9, 1, 2))
    draft = draft_of(span, tokenizer, end_ids={9}, mask_id=7)
    assert [s.state for s in draft.slots] == ["sharp", "masked", "end", "sharp", "sharp"] and draft.text == "adbc"
    assert draft_pieces(Progress(1, 4, 0.0, (draft,))) == [[Piece("a", SURE), Piece(MASK_GLYPH, MASKED), Piece("b", UNSURE), Piece("c", DOUBTFUL)]]


async def test_the_preview_layer_draws_an_edited_slot_unlike_a_committed_one(tiny_denoiser, tmp_path):
    """The preview's cells of an edited slot carry the edit's style, which is none of the
    confidence grades a committed token gets."""
    from pilot import make_app, select_line, wait_for

    from sharpen.app.tui.editor_pane import PREVIEW
    from sharpen.app.tui.messages import ModelLoaded
    from sharpen.app.tui.preview import DOUBTFUL, EDITED, SURE, UNSURE

    backend = ScriptedBackend(LocalBackend.of(tiny_denoiser), [Slot("sharp", "keep", 0.99), Slot("edited", "EDIT", 0.97),
                                                               Slot("sharp", "more", 0.99)])
    source = tmp_path / "a.py"
    source.write_text("first = 1\nsecond = 2\nthird = 3\n")
    app = make_app([source])
    async with app.run_test(size=(80, 16)) as pilot:
        app.post_message(ModelLoaded(backend, "cpu", 0.0))
        await wait_for(pilot, lambda: app.backend is not None)
        pane = app.active_pane()
        select_line(pane.editor, 1)
        await pilot.press("alt+i")
        await wait_for(pilot, lambda: pane.phase == PREVIEW)
        view = pane.preview
        assert view.text.split("\n")[1] == "secokeepEDITmore"  # select_line keeps the line's first 4 columns
        line = view.get_line(1)
        style_at = {col: line.get_style_at_offset(app.console, col) for col in range(len(line.plain))}
        edit_style = view.get_component_rich_style(f"preview-view--{EDITED}")
        assert all(style_at[col] == style_at[8] for col in range(8, 12))  # "EDIT": one style
        assert style_at[4] != style_at[8]  # "keep", committed, is drawn otherwise
        grades = {view.get_component_rich_style(f"preview-view--{kind}") for kind in (SURE, UNSURE, DOUBTFUL)}
        assert edit_style not in grades and style_at[8] == style_at[0] + edit_style
        assert edit_style.underline or edit_style.bgcolor != view.rich_style.bgcolor  # marked, not the view's own colours


# -- sharp_per_step ---------------------------------------------------------------------------------


def test_sharp_per_step_counts_what_each_frame_shows(tiny_denoiser):
    """Done.sharp_per_step[k] is the count of decided slots in step k's frame (0: the start):
    the Progress events show it slot by slot, and the run starts with none and ends with all."""
    text = "def add(a, b):\n    \n\nprint(add(1, 2))\n"
    for sampling in (Sampling(steps=6, block_size=8), Sampling(steps=12, block_size=4, schedule="fixed")):
        request = EditRequest(text, (Span(19, 19, max_tokens=24),), sampling, Editing(length="fixed"))
        events = list(Runner(tiny_denoiser).run(request, every=0.0))
        frames, done = events[:-1], events[-1]
        shown = [sum(slot.state not in ("masked", "noise") for span in f.spans for slot in span.slots) for f in frames]
        assert [f.step for f in frames] == list(range(len(frames)))
        assert list(done.sharp_per_step) == shown, (done.sharp_per_step, shown)
        assert shown[0] == 0 and shown[-1] == 24 and shown == sorted(shown)
        assert done.to_json()["sharp_per_step"] == shown  # the headless --json and the server carry it as is


# -- stop strings and n_indent on the server ------------------------------------------------------


def _http(backend) -> httpx.AsyncClient:
    """The server's application in process (tests/test_serve_fields.py does the same)."""
    from sharpen.app.serve.app import build_app
    from sharpen.app.serve.common import Limits, Server

    app = build_app(Server(backend, backend.describe(), Limits()))
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://sharpen", timeout=60)


def _events(stream: str) -> list[dict]:
    import json

    return [json.loads(line[6:]) for line in stream.splitlines() if line.startswith("data: ") and line != "data: [DONE]"]


ANSWER = ("x = compute(", "a)", " # DONE", " here", "\n", "y = 2\n")  # the slots the scripted model writes


async def test_a_stop_string_cuts_the_answer_on_every_endpoint(tiny_denoiser):
    """The answer ends before the first stop string found (of several, the earliest), streamed or
    not; llama.cpp's endpoints name it (stop_type "word"), OpenAI's finish with "stop"."""
    backend = scripted(tiny_denoiser, *ANSWER)
    stops = ["= 2", " # DONE", "unwritten"]  # "= 2" comes later in the answer than " # DONE"
    cut = "x = compute(a)"
    async with _http(backend) as http:
        for path, body in (("/infill", {"input_prefix": "v = 1\n", "input_suffix": "\n"}), ("/completion", {"prompt": "v = 1\n"})):
            whole = (await http.post(path, json={**body, "n_predict": 32})).json()
            assert whole["content"] == "".join(ANSWER) and whole["stop_type"] != "word"  # no stop: all of it
            data = (await http.post(path, json={**body, "n_predict": 32, "stop": stops})).json()
            assert (data["content"], data["stop_type"], data["stopping_word"]) == (cut, "word", " # DONE"), data
            chunks = _events((await http.post(path, json={**body, "n_predict": 32, "stop": stops, "stream": True})).text)
            assert "".join(c["content"] for c in chunks) == cut and chunks[-1]["stop_type"] == "word"
        ask = {"model": backend.describe().name, "prompt": "v = 1\n", "max_tokens": 32}
        data = (await http.post("/v1/completions", json={**ask, "stop": stops})).json()
        assert (data["choices"][0]["text"], data["choices"][0]["finish_reason"]) == (cut, "stop")
        data = (await http.post("/v1/completions", json={**ask, "stop": " # DONE"})).json()  # a single string
        assert data["choices"][0]["text"] == cut
        chunks = _events((await http.post("/v1/completions", json={**ask, "stop": stops, "stream": True})).text)
        assert "".join(c["choices"][0]["text"] for c in chunks) == cut and chunks[-1]["choices"][0]["finish_reason"] == "stop"


async def test_a_stop_string_split_across_steps_never_reaches_a_stream(tiny_denoiser):
    backend = scripted(tiny_denoiser, "x = 1", " #", " DO", "NE", "\n")
    async with _http(backend) as http:
        chunks = _events((await http.post("/infill", json={"input_prefix": "v\n", "n_predict": 32, "stop": ["# DONE"], "stream": True})).text)
        assert "".join(c["content"] for c in chunks) == "x = 1 "


def indent_oracle(text: str, n_indent: int) -> str:
    """llama.cpp's n_indent as docs/server.md states it, written apart from the server's: scan
    character by character; at the start of each line after the first, count its leading spaces
    and tabs, and when the line holds something else (a blank line does not count) and the count
    is under n_indent, the answer ends at that line's start."""
    if n_indent <= 0:
        return text
    at = text.find("\n") + 1
    while at > 0:
        column = at
        while column < len(text) and text[column] in " \t":
            column += 1
        line_end = text.find("\n", at)
        rest = text[column:line_end if line_end != -1 else len(text)]
        if rest.strip() and column - at < n_indent:
            return text[:at]
        at = line_end + 1
    return text


# (the answer's lines, n_indent, what the server answers): written out by hand
INDENT_CASES = [
    (["if x:\n", "    a()\n", "        b()\n", "c()\n", "    d()\n"], 4, "if x:\n    a()\n        b()\n"),
    (["if x:\n", "    a()\n", "\n", "   \n", "    b()\n"], 4, "if x:\n    a()\n\n   \n    b()\n"),  # blank lines do not count
    (["a\n", "\tb\n", "c"], 1, "a\n\tb\n"),  # a tab is one column
    (["a\n", "\tb\n"], 2, "a\n"),
    (["  a\n", "  b\n"], 3, "  a\n"),  # the first line is never measured
    (["a\n", "   b"], 3, "a\n   b"),  # exactly n_indent columns: kept
    (["a\n", "  b\n"], 0, "a\n  b\n"),  # 0: no cut
]


@pytest.mark.parametrize("pieces,n_indent,expected", INDENT_CASES)
def test_the_indent_oracle_agrees_with_the_cases_by_hand(pieces, n_indent, expected):
    assert indent_oracle("".join(pieces), n_indent) == expected


async def test_n_indent_ends_the_infill_before_a_line_indented_less(tiny_denoiser):
    for pieces, n_indent, expected in INDENT_CASES:
        async with _http(scripted(tiny_denoiser, *pieces)) as http:
            body = {"input_prefix": "def f(x):\n", "input_suffix": "\n", "n_predict": 64, "n_indent": n_indent}
            data = (await http.post("/infill", json=body)).json()
            assert data["content"] == expected == indent_oracle("".join(pieces), n_indent), (pieces, n_indent, data)


# -- bindings and the palette ---------------------------------------------------------------------


def test_every_binding_has_a_palette_entry_and_every_entry_a_binding():
    """The palette (Ctrl+P), the help screen (F1) and the docs' key tables list PALETTE: a
    binding missing from it is a command nobody can find or read about."""
    from sharpen.app.tui.editor_app import ALL_BINDINGS
    from sharpen.app.tui.palette import PALETTE

    bound = {b.id for b in ALL_BINDINGS}
    listed = {c.binding_id for c in PALETTE if c.binding_id}
    assert None not in {b.id for b in ALL_BINDINGS}, "a binding without an id cannot be rebound nor listed"
    assert bound - listed == set(), f"bindings without a palette entry: {sorted(bound - listed)}"
    assert listed - bound == set(), f"palette entries naming no binding: {sorted(listed - bound)}"


def test_the_readme_lists_every_test_file():
    """tests/README.md says where each test file's tests are: a new file gets its line."""
    from pathlib import Path

    here = Path(__file__).resolve().parent
    readme = (here / "README.md").read_text(encoding="utf-8")
    missing = [p.name for p in sorted(here.glob("test_*.py")) if p.name not in readme]
    assert not missing, f"tests/README.md has no line for {missing}"
