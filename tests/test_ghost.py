"""As-you-type completion (app/tui/ghost.py) and the first run's pacing, through Textual's pilot.

The model is the tiny random checkpoint: the tests check where ghost text appears and how the
editor behaves (frames, one undo step, dismissal, cancellation), never what the model wrote.
A config that names the checkpoint directory is "a real model"; one that names none is the
embedded demo model, as on the command line.
"""
from __future__ import annotations

import time
from pathlib import Path

import pytest
from pilot import EXAMPLE, make_app, notices, top_command, wait_for

from sharpen.app.backend import LocalBackend
from sharpen.app.cli import build_parser
from sharpen.app.config import Config, parse_config
from sharpen.app.tui.editor_pane import IDLE, PREVIEW, RUNNING
from sharpen.app.tui.ghost import RUNNING as GHOST_RUNNING, SHOWN, fits_cursor, ghost_default
from sharpen.app.tui.preview_view import row_of
from sharpen.app.tui.messages import ModelLoaded
from sharpen.app.tui.preview import GHOST, GHOST_CURSOR, MASK_GLYPH
from sharpen.app.tui.status_bar import run_summary

SIZE = (100, 32)
LINE = 4  # 'def fizzbuzz(n):' in examples/fizzbuzz.py: the tests type at its end


@pytest.fixture
def example(tmp_path) -> Path:
    path = tmp_path / "fizzbuzz.py"
    path.write_bytes(EXAMPLE.read_bytes())
    return path


def real(model_dir, **values) -> Config:
    """A config naming a checkpoint (ghost on by default), paced so frames can be seen; next-edit
    prediction (on by default too) off, so no prediction takes the layer between two ghosts."""
    return Config.of(model=str(model_dir), steps=6, frame_rate=60, ghost_pause_ms=100, **{"next_edit": False, **values})


async def load(app, pilot, denoiser) -> None:
    app.post_message(ModelLoaded(LocalBackend.of(denoiser), "cpu", 0.0))
    await wait_for(pilot, lambda: app.session.backend is not None)


async def type_at_line_end(pilot, pane, row: int, text: str) -> None:
    editor = pane.editor
    editor.move_cursor((row, len(editor.document.lines[row])))
    await pilot.press(*text)


def ghost_rows(pane) -> list[int]:
    """Rows of the preview layer that carry ghost styling."""
    layout = pane.preview.layout_shown
    return sorted(row for row, styles in layout.line_styles.items() if any(kind.startswith("ghost") for *_, kind in styles))


async def test_ghost_appears_after_a_pause_sharpens_and_tab_accepts_as_one_undo_step(example, tiny_model_dir, tiny_denoiser):
    app = make_app([example], real(tiny_model_dir, min_step_ms=80))
    async with app.run_test(size=SIZE) as pilot:
        await load(app, pilot, tiny_denoiser)
        pane = app.active_pane()
        ghost, editor = pane.ghost, pane.editor
        assert ghost.enabled and app.status.ghost  # a named checkpoint: on by default, and the status says so
        original, undo_depth = editor.text, len(editor.history.undo_stack)
        await type_at_line_end(pilot, pane, LINE, " ")
        typed = editor.text
        await wait_for(pilot, lambda: ghost.state in (GHOST_RUNNING, SHOWN))
        run = ghost.run
        assert run.fired_at - run.typed_at >= 0.1  # the pause, as configured
        assert run.offset == editor.offset_of(editor.selection.end)  # infill at the cursor
        await wait_for(pilot, lambda: ghost.state == SHOWN)
        assert len(run.drafts) >= 2 and MASK_GLYPH in run.drafts[0]  # drawn step by step, from blur
        assert len(set(run.drafts)) >= 2  # it sharpened: the drafts differ
        shown = run.result.spans[0].alternatives[0]
        assert shown.strip() and pane.preview.text == typed[:run.offset] + shown + typed[run.offset:]
        layout = pane.preview.layout_shown
        kinds = {kind for styles in layout.line_styles.values() for *_, kind in styles}
        assert GHOST in kinds and GHOST_CURSOR in kinds
        assert ghost_rows(pane)[0] == LINE  # drawn at the cursor's line
        assert editor.text == typed and pane.phase == IDLE  # never in the buffer while shown
        assert "accepts" in app.status.notice
        await pilot.press("tab")
        assert ghost.run is not run  # taken (a new ghost may already wait for the next pause)
        assert editor.buffer_text == typed[:run.offset] + shown + typed[run.offset:]
        assert editor.selection.end == editor.location_of(run.offset + len(shown))
        await pilot.press("ctrl+z")
        assert editor.text == typed  # one undo step removes all of it
        await pilot.pause(0.4)
        assert ghost.run is None and ghost.state is None  # an undo is not typing: no ghost offers it back
        await pilot.press("ctrl+z")
        assert editor.text == original and len(editor.history.undo_stack) == undo_depth


async def test_another_key_dismisses_a_shown_ghost_and_leaves_the_buffer(example, tiny_model_dir, tiny_denoiser):
    app = make_app([example], real(tiny_model_dir))
    async with app.run_test(size=SIZE) as pilot:
        await load(app, pilot, tiny_denoiser)
        pane = app.active_pane()
        ghost, editor = pane.ghost, pane.editor
        await type_at_line_end(pilot, pane, LINE, " ")
        typed, undo_depth = editor.text, len(editor.history.undo_stack)
        await wait_for(pilot, lambda: ghost.state == SHOWN)
        await pilot.press("left")
        assert ghost.state is None and not pane.preview.display
        assert editor.text == typed and len(editor.history.undo_stack) == undo_depth
        await pilot.pause(0.3)
        assert ghost.state is None  # a cursor move does not ask again; typing does
        await pilot.press("escape")  # nothing shown: Esc is the editor's again
        await type_at_line_end(pilot, pane, LINE, "#")
        await wait_for(pilot, lambda: ghost.state == SHOWN)
        await pilot.press("escape")
        assert ghost.state is None and editor.document.lines[LINE] == typed.split("\n")[LINE] + "#"
        await type_at_line_end(pilot, pane, LINE, "#")
        await wait_for(pilot, lambda: ghost.state == SHOWN)
        await pilot.press("f3")  # a key that neither types nor moves (Find next) dismisses it too
        assert ghost.state is None and not pane.preview.display


async def test_typing_the_ghosts_next_characters_keeps_the_rest_and_tab_writes_it(example, tiny_model_dir, tiny_denoiser):
    """Type-through (Copilot, llama.vim): each character typed that the ghost shows next is taken
    off its front and the rest stays shown, with no new run; Tab then writes only the rest, as one
    undo step. A character it does not show dismisses it, as any other key."""
    app = make_app([example], real(tiny_model_dir))
    async with app.run_test(size=SIZE) as pilot:
        await load(app, pilot, tiny_denoiser)
        pane = app.active_pane()
        ghost, editor = pane.ghost, pane.editor
        shown = ""
        for attempt in range(6):  # a ghost of at least three printable characters (the tiny model writes what it writes)
            await type_at_line_end(pilot, pane, LINE, "#")
            await wait_for(pilot, lambda: ghost.state == SHOWN)
            shown = ghost.run.result.spans[0].text
            if len(shown) >= 3 and shown[:2].isprintable() and shown[2:].strip():
                break
            await pilot.press("escape")
        else:
            pytest.skip(f"no ghost of three characters from the tiny model: {shown!r}")
        run, before = ghost.run, editor.buffer_text
        at = run.offset
        await pilot.press(*shown[:2])  # typed through: the ghost follows
        await pilot.pause(0.3)  # past the pause: no new run fired
        assert ghost.state == SHOWN and ghost.run is run and run.offset == at + 2
        assert editor.buffer_text == before[:at] + shown[:2] + before[at:]
        assert run.result.spans[0].text == shown[2:] and pane.preview.text == before[:at] + shown + before[at:]
        assert "accepts" in app.status.notice  # still Tab's to take
        typed, undo_depth = editor.buffer_text, len(editor.history.undo_stack)
        await pilot.press("tab")
        assert editor.buffer_text == before[:at] + shown + before[at:]  # the rest written once
        assert editor.selection.end == editor.location_of(at + len(shown))
        await pilot.press("ctrl+z")
        assert editor.buffer_text == typed and len(editor.history.undo_stack) == undo_depth
        # A character the ghost does not show next dismisses it.
        await type_at_line_end(pilot, pane, LINE, "#")
        await wait_for(pilot, lambda: ghost.state == SHOWN)
        other = next(c for c in "zq~" if not ghost.run.result.spans[0].text.startswith(c))
        await pilot.press(other)
        assert ghost.state != SHOWN and ghost.run is None and not pane.preview.display


class StepsAfterStop:
    """A backend around the local one that counts, per run, the steps it yields once asked to stop."""

    def __init__(self, inner) -> None:
        self.inner, self.after_stop = inner, {}

    def describe(self):
        return self.inner.describe()

    def run(self, request, should_stop, every=0.0):
        stop = should_stop.__self__  # the run's threading.Event
        self.after_stop[stop] = 0
        for event in self.inner.run(request, should_stop, every):
            self.after_stop[stop] += should_stop()
            yield event


async def test_typing_during_a_ghost_run_cancels_it_within_a_step(example, tiny_model_dir, tiny_denoiser):
    step = 0.5
    app = make_app([example], real(tiny_model_dir, min_step_ms=int(step * 1000)).layered({"sampling": {"steps": 8}}))
    backend = StepsAfterStop(LocalBackend.of(tiny_denoiser))
    async with app.run_test(size=SIZE) as pilot:
        app.post_message(ModelLoaded(backend, "cpu", 0.0))
        await wait_for(pilot, lambda: app.session.backend is not None)
        pane = app.active_pane()
        ghost, editor = pane.ghost, pane.editor
        await type_at_line_end(pilot, pane, LINE, " ")
        await wait_for(pilot, lambda: ghost.state == GHOST_RUNNING and ghost.run.drafts)
        run = ghost.run
        before = editor.text
        await pilot.press("x")
        asked = time.perf_counter()
        assert run.stop.is_set() and ghost.run is None and not pane.preview.display
        assert editor.document.lines[LINE] == before.split("\n")[LINE] + "x"  # the key went in, the ghost did not
        assert editor.text.replace("0: x", "0: ", 1) == before
        workers = [w for w in app.workers if w.group == "ghost"]
        await wait_for(pilot, lambda: all(w.is_finished for w in workers), timeout=5)
        assert backend.after_stop[run.stop] <= 1  # at most the step in flight when the key came
        # ... and so it ended within about a step (the pacing between steps answers a stop at once),
        # not 7 steps (3.5 s) later; the bound leaves room for a loaded machine.
        assert time.perf_counter() - asked < 4 * step


async def test_no_ghost_over_a_selection_a_run_or_mid_line(example, tiny_model_dir, tiny_denoiser):
    app = make_app([example], real(tiny_model_dir, min_step_ms=300))
    async with app.run_test(size=SIZE) as pilot:
        await load(app, pilot, tiny_denoiser)
        pane = app.active_pane()
        ghost, editor = pane.ghost, pane.editor
        editor.move_cursor((LINE, 4))  # inside 'def fizzbuzz': mid-word
        await pilot.press("x")
        await pilot.pause(0.4)
        assert ghost.state is None and ghost.run is None and ghost.why_not() == "the cursor is inside a line"
        await type_at_line_end(pilot, pane, LINE, " ")
        editor.selection = ((LINE, 0), (LINE, 3))
        await pilot.pause(0.4)
        assert ghost.run is None and ghost.why_not() == "text is selected"
        editor.move_cursor((LINE, len(editor.document.lines[LINE])))
        editor.read_only = True
        ghost.typed()
        await pilot.pause(0.4)
        assert ghost.run is None and ghost.why_not() == "the buffer is read-only or not focused"
        editor.read_only = False
        editor.move_cursor((LINE + 1, len(editor.document.lines[LINE + 1])))
        await pilot.press("alt+i")  # an explicit run: the ghost waits its turn
        assert pane.phase in (RUNNING, PREVIEW)
        ghost.typed()
        await pilot.pause(0.4)
        assert ghost.run is None and ghost.why_not() == "another run or preview is active"


async def test_off_with_the_embedded_model_and_the_palette_turns_it_on(example, tiny_denoiser):
    app = make_app([example], Config.of(steps=4, frame_rate=60, ghost_pause_ms=100, first_run_step_ms=0))
    async with app.run_test(size=SIZE) as pilot:
        await load(app, pilot, tiny_denoiser)
        pane = app.active_pane()
        ghost = pane.ghost
        assert not ghost.enabled and not app.status.ghost
        await type_at_line_end(pilot, pane, LINE, " ")
        await pilot.pause(0.4)
        assert ghost.state is None and ghost.run is None  # off: nothing fired
        await pilot.press("ctrl+p")
        await pilot.press(*"ghost")
        await wait_for(pilot, lambda: top_command(app) == "Toggle ghost completion")
        await pilot.press("enter")
        await wait_for(pilot, lambda: ghost.enabled)
        assert app.status.ghost and "ghost completion on" in notices(app)
        assert "ghost · " in app.status.render().plain  # beside the model's name
        await type_at_line_end(pilot, pane, LINE, "#")
        await wait_for(pilot, lambda: ghost.state == SHOWN)
        await pilot.press("ctrl+p")
        await pilot.press(*"ghost")
        await wait_for(pilot, lambda: top_command(app) == "Toggle ghost completion")
        await pilot.press("enter")
        await wait_for(pilot, lambda: not ghost.enabled)
        assert ghost.state is None and not app.status.ghost


def test_the_switch_and_the_pause_are_settings(tiny_model_dir):
    assert ghost_default(Config()) is False  # the embedded demo model
    assert ghost_default(Config.of(model=str(tiny_model_dir))) is True
    assert ghost_default(Config.of(model=str(tiny_model_dir), ghost=False)) is False
    assert ghost_default(Config.of(ghost=True)) is True
    assert ghost_default(Config.of(backend="http://127.0.0.1:8080")) is True  # a server runs a model you chose
    config = parse_config("ghost = true\nghost_pause_ms = 450\nfirst_run_step_ms = 0\n")
    assert (config.editor.ghost, config.editor.ghost_pause_ms, config.editor.first_run_step_ms) == (True, 450, 0)
    with pytest.raises(Exception, match="ghost_pause_ms must be between 50 and 10000"):
        parse_config("ghost_pause_ms = 10\n")
    help_text = build_parser().format_help()
    assert "--ghost" in help_text and "--no-ghost" in help_text and "--ghost-pause-ms" in help_text
    assert fits_cursor("") and fits_cursor("  ") and fits_cursor("):") and not fits_cursor("zz(n):")


async def test_the_first_run_on_the_embedded_model_is_paced_and_reports_wall_time(example, tiny_denoiser):
    step_ms = 150
    app = make_app([example], Config.of(steps=4, frame_rate=60, first_run_step_ms=step_ms))
    async with app.run_test(size=SIZE) as pilot:
        await load(app, pilot, tiny_denoiser)
        pane = app.active_pane()
        pane.editor.selection = ((LINE + 1, 4), (LINE + 1, len(pane.editor.document.lines[LINE + 1])))
        await pilot.press("alt+i")
        run = pane.edit_run
        assert run.paced
        await wait_for(pilot, lambda: pane.phase == PREVIEW)
        wall = time.perf_counter() - run.started
        steps = run.result.steps
        assert wall >= steps * step_ms / 1000 * 0.9  # every step was held on screen
        note = app.status.notice or pane.notice
        assert "paced" in pane.notice and f"{steps} steps" in pane.notice
        shown_wall = float(pane.notice.split("steps, ")[1].split(" s")[0])
        model = float(pane.notice.split("model ")[1].split(" s")[0])
        assert shown_wall >= steps * step_ms / 1000 * 0.9 and model < shown_wall  # the real time, beside the model's
        assert note
        await pilot.press("escape")
        await pilot.press("alt+i")
        second = pane.edit_run
        assert not second.paced  # only the session's first run
        await wait_for(pilot, lambda: pane.phase == PREVIEW)
        assert "paced" not in pane.notice


async def test_no_first_run_pacing_when_turned_off_or_with_a_named_checkpoint(example, tiny_model_dir, tiny_denoiser):
    for config in (Config.of(steps=4, first_run_step_ms=0), Config.of(model=str(tiny_model_dir), steps=4, ghost=False)):
        app = make_app([example], config)
        async with app.run_test(size=SIZE) as pilot:
            await load(app, pilot, tiny_denoiser)
            pane = app.active_pane()
            pane.editor.selection = ((LINE + 1, 4), (LINE + 1, 9))
            await pilot.press("alt+i")
            assert not pane.edit_run.paced
            await wait_for(pilot, lambda: pane.phase == PREVIEW)


def test_latency_bench_prints_a_row_per_file_size(capsys):
    import ghost_latency  # bench/ghost_latency.py (pytest's pythonpath); the embedded model

    assert ghost_latency.main(["--lines", "120", "--keys", "2", "--pause-ms", "100"]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("| 120 |"))
    ghosts, steps, _, pause, model, first, final, _ = (float(c.replace(",", "")) for c in row.strip("|").split("|")[1:])
    assert ghosts >= 1 and steps >= 1 and pause >= 100 and model > 0 and pause <= first <= final


def test_run_summary_puts_wall_time_beside_model_time():
    assert run_summary(19, 8, 0.32, 15.1, True) == "19 tokens in 8 steps, 15.10 s (paced, model 0.32 s, 59 tok/s)"
    assert run_summary(1, 1, 0.5, 0.52, False) == "1 token in 1 step, 0.52 s (model 0.50 s, 2.0 tok/s)"


@pytest.mark.parametrize("soft_wrap", [False, True])
async def test_in_a_long_file_the_layer_holds_the_rows_around_the_view(tmp_path, tiny_model_dir, tiny_denoiser, soft_wrap, monkeypatch):
    from sharpen.app.tui.preview_view import PreviewView

    path = tmp_path / "long.py"
    long_comment = "  # " + "wrapped " * 20  # every third line wraps when soft wrap is on
    path.write_text("".join(f"value_{i} = {i}{long_comment if i % 3 == 0 else ''}\n" for i in range(3000)), encoding="utf-8")
    app = make_app([path], real(tiny_model_dir, soft_wrap=soft_wrap))
    painted = []  # (the layer's scroll, the editor's rows) at every frame it drew with a ghost
    draw = PreviewView.render_lines

    def recorded(view, crop):
        strips = draw(view, crop)
        pane = view.parent
        if pane.ghost.run is not None:
            painted.append((view.scroll_y, pane.editor.scroll_y - row_of(pane.editor, pane.ghost.run.window[0])))
        return strips

    monkeypatch.setattr(PreviewView, "render_lines", recorded)
    async with app.run_test(size=SIZE) as pilot:
        await load(app, pilot, tiny_denoiser)
        pane = app.active_pane()
        ghost, editor = pane.ghost, pane.editor
        row = 2501  # no comment on it: the cursor is at the end of the code
        editor.move_cursor((row, len(editor.document.lines[row])), center=True)
        await pilot.pause()
        await pilot.press("space")
        await wait_for(pilot, lambda: ghost.state == SHOWN)
        run, preview = ghost.run, pane.preview
        first, last, start, _ = run.window
        assert first <= row < last and last - first < 400  # a few screens, not 3,000 lines
        assert preview.line_number_start == first + 1 and preview.gutter_width == editor.gutter_width
        assert preview.text.startswith(editor.document.lines[first] + "\n")
        shown = run.result.spans[0].alternatives[0]
        assert preview.document.lines[row - first] == (editor.document.lines[row] + shown).split("\n")[0]
        assert ghost_rows(pane)[0] == row - first
        assert preview.soft_wrap is soft_wrap and preview.scroll_y == editor.scroll_y - row_of(editor, first)  # drawn where the editor shows it
        # ... from its first frame: every frame the layer drew was at the editor's rows (a layer just
        # shown has no size, and a scroll then stopped at 0: the lines a hundred rows above, for a frame).
        assert painted and all(at == wanted for at, wanted in painted), painted
        if soft_wrap:
            assert row_of(editor, first) > first  # the lines above wrap: rows and lines differ, and the scroll follows rows
        await pilot.click(preview.__class__, offset=(10, 3))  # a click on the layer: the ghost goes
        assert ghost.state is None and not preview.display


async def test_tab_while_a_ghost_still_runs_indents_and_cancels_it(example, tiny_model_dir, tiny_denoiser):
    app = make_app([example], real(tiny_model_dir, min_step_ms=400))
    async with app.run_test(size=SIZE) as pilot:
        await load(app, pilot, tiny_denoiser)
        pane = app.active_pane()
        ghost, editor = pane.ghost, pane.editor
        editor.move_cursor((LINE, len(editor.document.lines[LINE])))
        await pilot.press("enter")  # auto-indent: the cursor on a new, indented line
        row, column = editor.selection.end
        await wait_for(pilot, lambda: ghost.state == GHOST_RUNNING)
        run = ghost.run
        await pilot.press("tab")  # nothing to accept yet: Tab is the editor's
        assert run.stop.is_set() and ghost.run is not run
        assert editor.document.lines[row] == " " * (column + editor.indent_width)


async def test_soft_wrap_near_the_end_of_a_long_wrapped_file_keeps_the_editor_and_its_highlighting(tmp_path):
    """Found by the ghost's soft-wrap window: the editor's highlight window took view rows for
    buffer lines, so with wrapped lines it lay past the file's end near the bottom and the
    syntax query raised (ValueError: Invalid point range), ending the editor."""
    path = tmp_path / "wrapped.py"
    path.write_text("".join(f"value_{i} = {i}{'  # ' + 'wrapped ' * 20 if i % 3 == 0 else ''}\n" for i in range(3000)), encoding="utf-8")
    app = make_app([path], Config.of(soft_wrap=True))
    async with app.run_test(size=SIZE) as pilot:
        editor = app.active_pane().editor
        editor.move_cursor((2990, 0), center=True)
        await pilot.pause()
        assert app.is_running and int(editor.scroll_y) > editor.document.line_count  # rows outnumber lines here
        first, last = editor._highlight_window
        assert first <= 2990 < last and editor._highlights[2990]  # the lines on screen are highlighted
