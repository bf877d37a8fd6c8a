"""Pilot tests of the editor: every flow a person uses, on a tiny random checkpoint.

The model is random, so the tests check where text changes and how the UI behaves (preview,
one undo step, untouched buffers), never what the model wrote.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from pilot import EXAMPLE, FAST, SLOW, make_app, select_line, top_command, wait_for, with_model

from sharpen.app.config import Config, parse_config
from sharpen.app.tui.palette import PALETTE
from sharpen.app.tui.confirm_screen import ConfirmScreen
from sharpen.app.tui.editor_app import SharpenApp
from sharpen.app.tui.editor_pane import IDLE, PREVIEW, RUNNING
from sharpen.app.tui.themes import load_themes

SIZE = (100, 32)


@pytest.fixture
def example(tmp_path) -> Path:
    path = tmp_path / "fizzbuzz.py"
    path.write_bytes(EXAMPLE.read_bytes())
    return path


async def test_open_files_in_tabs_with_language_and_status(example, tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("plain words\n")
    app = make_app([example, notes])
    async with app.run_test(size=SIZE) as pilot:
        panes = app.panes()
        assert [p.editor.buffer.name for p in panes] == ["fizzbuzz.py", "notes.txt"]
        assert panes[0].editor.language == "python" and panes[1].editor.language is None
        assert app.active_pane() is panes[0]  # the first file named is shown
        await pilot.press("alt+right")
        assert app.active_pane() is panes[1]
        await pilot.press("alt+left")
        assert app.active_pane() is panes[0]
        assert app.status.file_name == "fizzbuzz.py" and app.status.language == "python"
        await pilot.press("x")
        assert app.status.dirty and panes[0].editor.dirty


async def test_infill_preview_then_tab_accepts_as_one_undo_step(example, tiny_denoiser):
    app = make_app([example])
    async with app.run_test(size=SIZE) as pilot:
        await with_model(app, pilot, tiny_denoiser)
        editor = app.active_pane().editor
        original = editor.text
        select_line(editor, 4)
        start, end = editor.selected_offsets()
        await pilot.press("alt+i")
        pane = app.active_pane()
        assert pane.phase in (RUNNING, PREVIEW) and pane.preview.display
        await wait_for(pilot, lambda: pane.phase == PREVIEW)
        assert editor.text == original  # the preview is a layer, not an edit
        assert pane.preview.text == pane.preview.layout_shown.text  # frame by frame edits add up
        assert pane.preview.text != "" and "Tab accepts" in app.status.run
        await pilot.press("tab")
        assert pane.phase == IDLE and not pane.preview.display
        new = editor.buffer_text
        assert new[:start] == original[:start] and new.endswith(original[end:])
        editor.undo()
        assert editor.text == original  # one undo restores everything


async def test_escape_rejects_a_preview_and_the_buffer_is_identical(example, tiny_denoiser):
    app = make_app([example])
    async with app.run_test(size=SIZE) as pilot:
        await with_model(app, pilot, tiny_denoiser)
        pane = app.active_pane()
        original, undo_depth = pane.editor.text, len(pane.editor.history.undo_stack)
        select_line(pane.editor, 6)
        await pilot.press("alt+i")
        await wait_for(pilot, lambda: pane.phase == PREVIEW)
        await pilot.press("escape")
        assert pane.phase == IDLE and pane.editor.text == original
        assert len(pane.editor.history.undo_stack) == undo_depth
        await pilot.press("alt+i")
        await wait_for(pilot, lambda: pane.phase == PREVIEW)
        await pilot.press("ctrl+z")  # over a preview, undo only drops the preview
        assert pane.phase == IDLE and pane.editor.text == original


async def test_escape_cancels_a_running_edit_at_once(example, tiny_denoiser):
    app = make_app([example], SLOW)
    async with app.run_test(size=SIZE) as pilot:
        await with_model(app, pilot, tiny_denoiser)
        pane = app.active_pane()
        original = pane.editor.text
        select_line(pane.editor, 4)
        await pilot.press("alt+i")
        await pilot.pause(0.3)
        run = pane.edit_run
        assert pane.phase == RUNNING
        await pilot.press("escape")
        assert pane.phase == IDLE and run.stop.is_set() and pane.editor.text == original
        await app.workers.wait_for_complete()  # the thread stops between two steps
        assert pane.phase == IDLE and pane.editor.text == original


async def test_quitting_during_a_run_stops_it(example, tiny_denoiser):
    app = make_app([example], Config.of(steps=8, min_step_ms=2000))
    async with app.run_test(size=SIZE) as pilot:
        await with_model(app, pilot, tiny_denoiser)
        pane = app.active_pane()
        await pilot.press("alt+i")
        run = pane.edit_run
        await pilot.press("ctrl+q")
    assert run.stop.is_set()  # the thread stops between two steps instead of running 16 s on


async def test_typing_during_a_run_cancels_it_and_types(example, tiny_denoiser):
    app = make_app([example], SLOW)
    async with app.run_test(size=SIZE) as pilot:
        await with_model(app, pilot, tiny_denoiser)
        pane = app.active_pane()
        pane.editor.move_cursor((1, 0))
        original = pane.editor.buffer_text
        await pilot.press("alt+i")  # no selection: fill a gap at the cursor
        assert pane.edit_run.spans[0].max_tokens == FAST.editing.infill_tokens
        await pilot.press("x")
        assert pane.phase == IDLE
        await app.workers.wait_for_complete()
        assert pane.editor.buffer_text == original[: original.index("\n") + 1] + "x" + original[original.index("\n") + 1:]


async def test_rewrite_uses_the_strength_and_accepts(example, tiny_denoiser):
    app = make_app([example])
    async with app.run_test(size=SIZE) as pilot:
        await with_model(app, pilot, tiny_denoiser)
        pane = app.active_pane()
        select_line(pane.editor, 10)
        await pilot.press("alt+up")  # stronger: 0.5 -> 0.6
        await pilot.press("alt+r")
        span = pane.edit_run.spans[0]
        assert span.mode == "rewrite" and span.strength == pytest.approx(0.6) and span.instruction is None
        await wait_for(pilot, lambda: pane.phase == PREVIEW)
        await pilot.press("tab")
        assert pane.phase == IDLE


async def test_mark_two_regions_and_fill_them_in_one_run(example, tiny_denoiser):
    app = make_app([example])
    async with app.run_test(size=SIZE) as pilot:
        await with_model(app, pilot, tiny_denoiser)
        pane = app.active_pane()
        editor = pane.editor
        original = editor.buffer_text
        select_line(editor, 5)
        first = editor.selected_offsets()
        await pilot.press("alt+m")
        select_line(editor, 9)
        second = editor.selected_offsets()
        await pilot.press("alt+m")
        assert editor.marks == [first, second] and app.status.marks == 2
        await pilot.press("alt+a")
        assert [(s.start, s.end) for s in pane.edit_run.spans] == [first, second]  # one run, both spans
        await wait_for(pilot, lambda: pane.phase == PREVIEW)
        await pilot.press("tab")
        new = editor.buffer_text
        assert new[: first[0]] == original[: first[0]] and new.endswith(original[second[1]:])
        assert original[first[1]: second[0]] in new  # the text between the spans is kept
        assert editor.marks == []
        editor.undo()
        assert editor.buffer_text == original


async def test_save_keeps_bom_and_crlf(tmp_path):
    path = tmp_path / "windows.py"
    path.write_bytes(b"\xef\xbb\xbfa = 1\r\nb = 2\r\n")
    app = make_app([path])
    async with app.run_test(size=SIZE) as pilot:
        editor = app.active_pane().editor
        editor.move_cursor((1, 5))
        await pilot.press("0")
        await pilot.press("ctrl+s")
        assert not editor.dirty and app.status.dirty is False
    assert path.read_bytes() == b"\xef\xbb\xbfa = 1\r\nb = 20\r\n"


async def test_quit_with_unsaved_changes_asks_first(example):
    app = make_app([example])
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("x")
        await pilot.press("ctrl+q")
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("escape")  # cancel: still editing
        assert not isinstance(app.screen, ConfirmScreen) and app.is_running
        await pilot.press("ctrl+q")
        await pilot.click("#discard")
        await pilot.pause()
        assert not app.is_running
    assert example.read_bytes() == EXAMPLE.read_bytes()


async def test_palette_has_every_command_and_runs_infill(example, tiny_denoiser):
    titles = {c.title for c in PALETTE}
    assert {"Infill", "Rewrite", "Mark region", "Fill marked", "Accept", "Reject", "Cancel", "Save"} <= titles
    app = make_app([example])
    async with app.run_test(size=SIZE) as pilot:
        await with_model(app, pilot, tiny_denoiser)
        select_line(app.active_pane().editor, 4)
        await pilot.press("ctrl+p")
        await pilot.press(*"Infill")
        await wait_for(pilot, lambda: top_command(app) == "Infill")
        await pilot.press("enter")
        pane = app.active_pane()
        await wait_for(pilot, lambda: pane.phase == PREVIEW)


async def test_keymap_from_config_rebinds_by_id(example, tiny_denoiser):
    config = parse_config('[sampling]\nsteps = 4\n[keymap]\ninfill = "f5"\n')
    app = make_app([example], config)
    async with app.run_test(size=SIZE) as pilot:
        await with_model(app, pilot, tiny_denoiser)
        pane = app.active_pane()
        select_line(pane.editor, 4)
        await pilot.press("alt+i")
        assert pane.phase == IDLE  # the old key no longer runs Infill
        await pilot.press("f5")
        assert pane.phase in (RUNNING, PREVIEW)
        assert app.keys_for("infill") == "F5"


async def test_model_loads_in_the_background(example, tiny_model_dir, monkeypatch):
    import threading

    from sharpen.app.tui import model_link, model_runner

    gate = threading.Event()

    def slow_load(request, post):  # holds the load until the test has typed
        gate.wait(30)
        model_runner.load_model(request, post)

    monkeypatch.setattr(model_link, "load_model", slow_load)
    app = SharpenApp([example], Config.of(model=str(tiny_model_dir), device="cpu"), load_themes(None))
    async with app.run_test(size=SIZE) as pilot:
        assert app.status.model == "loading model…" and app.backend is None
        await pilot.press("z")  # the editor works while the model loads
        assert app.active_pane().editor.text.startswith("z")
        gate.set()
        await wait_for(pilot, lambda: app.backend is not None, timeout=60)
        assert app.status.model == "tiny-random" and app.status.device == "cpu"


async def test_a_model_that_fails_to_load_leaves_a_working_editor(example, tmp_path):
    app = SharpenApp([example], Config.of(model=str(tmp_path / "missing")), load_themes(None))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.model_error is not None, timeout=60)
        assert app.status.model == "model unavailable" and app.status.model_failed
        await pilot.press("alt+i")
        assert app.active_pane().phase == IDLE
        await pilot.press("y")
        assert app.active_pane().editor.text.startswith("y")


async def test_help_screen_lists_keys(example):
    app = make_app([example])
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f1")
        table = app.screen.query_one("DataTable")
        commands = [str(table.get_row_at(i)[1]) for i in range(table.row_count)]
        assert "Fill marked" in commands and "Infill" in commands
        await pilot.press("escape")


@pytest.mark.parametrize("instruct", [None, False])
async def test_rewrite_asks_for_an_instruction_only_of_instruct_checkpoints(example, tiny_denoiser, instruct):
    """A chat template and instruct None: a released instruct checkpoint, asked. instruct False: the
    embedded model's case (a template for the server's chat endpoints, no instructions), not asked."""
    import copy
    from dataclasses import replace

    model = copy.copy(tiny_denoiser)
    model.spec = replace(tiny_denoiser.spec, chat_template="{{ messages }}", instruct=instruct)
    app = make_app([example])
    async with app.run_test(size=SIZE) as pilot:
        await with_model(app, pilot, model)
        pane = app.active_pane()
        select_line(pane.editor, 4)
        await pilot.press("alt+r")
        if instruct is None:
            await pilot.press(*"shorter", "enter")
        assert pane.edit_run.spans[0].instruction == ("shorter" if instruct is None else None)  # else: ran at once
        await pilot.press("escape")


async def test_marks_follow_edits_and_refuse_overlaps(example):
    app = make_app([example])
    async with app.run_test(size=SIZE) as pilot:
        editor = app.active_pane().editor
        select_line(editor, 5)
        start, end = editor.selected_offsets()
        await pilot.press("alt+m")
        editor.selection = ((5, 6), (5, 9))
        await pilot.press("alt+m")
        assert editor.marks == [(start, end)]  # overlapping selection refused
        editor.move_cursor((0, 0))
        await pilot.press("#", "enter")
        assert editor.marks == [(start + 2, end + 2)]  # typing above moves the mark with its text
        await pilot.press("alt+c")
        assert editor.marks == [] and app.status.marks == 0


async def test_marks_survive_undo_and_redo(example):
    """Undo and redo move marks with their text (core.changes), as typing does."""
    app = make_app([example])
    async with app.run_test(size=SIZE) as pilot:
        editor = app.active_pane().editor
        original = editor.buffer_text
        select_line(editor, 5)
        start, end = editor.selected_offsets()
        marked = original[start:end]
        await pilot.press("alt+m")
        editor.move_cursor((0, 0))
        await pilot.press(*"# a new first line", "enter", *"# and one more", "enter")
        typed = editor.buffer_text
        shifted = [(start + 34, end + 34)]
        assert editor.marks == shifted
        while editor.buffer_text != original:  # every typing batch undone: the mark goes back with its text
            editor.undo()
            (s, e), = editor.marks
            assert editor.buffer_text[s:e] == marked
        assert editor.marks == [(start, end)]
        while editor.buffer_text != typed:
            editor.redo()
        assert editor.marks == shifted
        editor.move_cursor(editor.location_of(shifted[0][0] + 2))
        await pilot.press("x")  # typing inside the mark: its text is no longer what was marked
        assert editor.marks == []


async def test_find_go_to_line_wrap_and_theme(example):
    app = make_app([example])
    async with app.run_test(size=SIZE) as pilot:
        editor = app.active_pane().editor
        await pilot.press("ctrl+f", *"buzz", "enter")
        assert editor.selected_text.lower() == "buzz"
        first = editor.selection
        await pilot.press("f3")
        assert editor.selection != first and editor.selected_text.lower() == "buzz"
        await pilot.press("ctrl+g", *"14:5", "enter")
        assert editor.selection.end == (13, 4)
        await pilot.press("alt+z")
        assert editor.soft_wrap
        await pilot.press("alt+o")
        app.screen.query_one("Input").value = str(EXAMPLE)  # typing a long path key by key is slow
        await pilot.press("enter")
        await wait_for(pilot, lambda: len(app.panes()) == 2)
        assert app.active_pane().editor.buffer.path == EXAMPLE
        app.theme = "sharpen-light"
        await pilot.pause()
        assert editor.theme == "sharpen-light" and app.active_pane().preview.theme == "sharpen-light"


def test_snapshot_file_open(example, snap_compare):
    async def settle(pilot):
        pilot.app.status.model, pilot.app.status.device = "tiny-random", "cpu"
        await pilot.pause()

    assert snap_compare(make_app([EXAMPLE]), terminal_size=SIZE, run_before=settle)


def test_snapshot_marked_regions(snap_compare):
    async def mark(pilot):
        app = pilot.app
        app.status.model, app.status.device = "tiny-random", "cpu"
        editor = app.active_pane().editor
        for row in (5, 9):
            select_line(editor, row)
            await pilot.press("alt+m")
        editor.move_cursor((0, 0))
        await pilot.pause()

    assert snap_compare(make_app([EXAMPLE]), terminal_size=SIZE, run_before=mark)


async def test_a_keymap_that_shares_a_key_warns(example):
    app = make_app([example], Config.of(keymap={"infill": "f5", "rewrite": "f5"}))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause(0.2)
        assert any("one key, two commands" in str(n.message) and "infill, rewrite" in str(n.message) for n in app._notifications)


async def test_an_untitled_buffers_language_follows_what_is_typed():
    app = make_app([])
    async with app.run_test(size=SIZE) as pilot:
        editor = app.active_pane().editor
        assert editor.language is None
        await pilot.press(*"#!/usr/bin/env python3", "enter", *"import os", "enter")
        await wait_for(pilot, lambda: editor.language == "python")
        assert editor.text.startswith("#!/usr/bin/env python3\nimport os\n")


async def test_a_narrow_status_bar_drops_language_and_position_before_the_run_and_model(example):
    app = make_app([example])
    async with app.run_test(size=(44, 12)) as pilot:
        status = app.status
        status.model, status.device = "tiny-random", "cpu"
        status.notice = "12 tokens in 9 steps, 0.10 s (120 tok/s)"
        await pilot.pause()
        line = status.render().plain
        assert "fizzbuzz.py" in line and "tiny-random" in line  # always there
        assert "python" not in line and "Ln " not in line  # dropped first
        assert "12 tokens" in line  # the run's outcome is cut only after those went
        assert len(line) == 44
        status.notice = ""
        await pilot.pause()
        roomy = status.render().plain
        assert "Ln 1, Col 1" in roomy and "python" not in roomy  # room for the position, not yet the language


async def test_rewrite_share_shows_only_once_changed_and_a_finished_run_says_why_it_ended_early(example, tiny_denoiser):
    from sharpen.app.tui.edit_preview import finish_note
    from sharpen.app.tui.messages import EditFinished, RunStats

    app = make_app([example])
    async with app.run_test(size=SIZE) as pilot:
        editor = app.active_pane().editor
        select_line(editor, 4)
        await pilot.pause()
        assert not app.status.show_strength  # the configured share: nothing to say
        await pilot.press("alt+up")
        assert app.status.show_strength and app.status.strength == pytest.approx(0.6)

    class Result:
        steps, tokens, context_cut = 9, 12, False

    note = finish_note(EditFinished(1, Result(), [], RunStats(9, 20, 0, 16, 0.1)), Result())
    assert note == "; done before the 20 planned, 4 empty slots trimmed"


@pytest.mark.parametrize("lines,budget,cut", [(600, 64, True), (6, 4096, False)])
async def test_a_run_that_read_only_part_of_a_long_file_says_so(tmp_path, tiny_denoiser, lines, budget, cut):
    from pilot import notices

    path = tmp_path / "functions.py"
    path.write_text("".join(f"def f{i}(x):\n    return x + {i}\n\n" for i in range(lines // 3)))
    app = make_app([path], FAST.layered({"edit": {"context_tokens": budget}}))
    async with app.run_test(size=SIZE) as pilot:
        await with_model(app, pilot, tiny_denoiser)
        pane = app.active_pane()
        for _ in range(2):
            select_line(pane.editor, lines // 2 + 1)  # a `return` line in the middle of the file
            await pilot.press("alt+i")
            await wait_for(pilot, lambda: pane.phase == PREVIEW)
            said = re.search(r"; read (\d+) tokens around it", app.status.notice)
            assert (said is not None) == cut, app.status.notice
            if cut:  # whole lines within the budget
                assert budget / 2 < int(said.group(1)) <= budget
            await pilot.press("escape")
        # The toast that explains it, once per buffer however many runs.
        assert notices(app).count("reads only the text around a span") == (1 if cut else 0), notices(app)
