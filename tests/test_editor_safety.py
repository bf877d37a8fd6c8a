"""Pilot tests of the editor's promises from docs/safety.md, round two."""
from __future__ import annotations

from pathlib import Path

import pytest
from pilot import make_app, wait_for

SIZE = (100, 32)


@pytest.mark.parametrize("suffix", [".py", ".txt"])  # highlighted (tree-sitter document) and plain
async def test_only_real_line_breaks_split_lines(tmp_path, suffix):
    """U+2028, U+2029, NEL, form feed, VT, FS/GS/RS and a lone CR in a CRLF file are text:
    an edited line keeps them, byte for byte."""
    odd = '\u2028\u2029\x85\x0c\x0b\x1c\x1d\x1e'
    original = f'x = "a{odd}b"\r\ny = 1\r\nz = "c\rd"\r\n'.encode()
    path = tmp_path / f"f{suffix}"
    path.write_bytes(original)
    app = make_app([path])
    async with app.run_test(size=SIZE) as pilot:
        editor = app.active_pane().editor
        assert editor.document.lines == [f'x = "a{odd}b"', "y = 1", 'z = "c\rd"', ""]
        editor.move_cursor((0, len(editor.document.lines[0])))
        await pilot.press("!")
        editor.move_cursor((2, len(editor.document.lines[2])))
        await pilot.press("?")
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: not editor.unsaved)
    assert path.read_bytes() == original.replace(b'b"\r\n', b'b"!\r\n', 1).replace(b'd"\r\n', b'd"?\r\n')


# -- recovery across editor starts ------------------------------------------------------------

import os  # noqa: E402

from sharpen.app.recovery import RecoveryStore, new_session  # noqa: E402
from sharpen.app.tui.confirm_screen import ConfirmScreen  # noqa: E402

CRASHED = "2147483646-1-1"  # the session of an editor start that is no longer running


async def test_untitled_work_of_a_crashed_start_is_offered_and_never_overwritten(tmp_path, monkeypatch):
    recovery = Path(os.environ["SHARPEN_RECOVERY_DIR"])
    monkeypatch.chdir(tmp_path)
    RecoveryStore(recovery, session=CRASHED).save(tmp_path / "untitled-1", "lost = 'no more'\n", untitled=True)
    app = make_app([])  # a new start with an untitled buffer of its own: the same pseudo path as the lost one
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        assert "untitled" in app.screen.question and "1 buffer" in app.screen.question
        await pilot.click("#cancel")  # decide later
        await pilot.press("x")
        app.recovery.write_recovery()
        texts = sorted(e.text for e in RecoveryStore(recovery).entries() if e.text is not None)
        assert texts == ["lost = 'no more'\n", "x"]  # the new start wrote beside it, not over it
        await pilot.press("ctrl+q")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.click("#discard")  # "Quit without saving" drops this start's work only
    assert [e.text for e in RecoveryStore(recovery).entries() if e.text is not None] == ["lost = 'no more'\n"]
    app = make_app([])
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.click("#restore")
        await wait_for(pilot, lambda: len(app.panes()) == 2 and app.panes()[1].editor.buffer_text == "lost = 'no more'\n")
        assert app.panes()[1].editor.unsaved


async def test_an_open_file_opens_once_and_another_running_editor_is_named(tmp_path):
    from pathlib import Path as P

    path = tmp_path / "f.py"
    path.write_text("x = 1\n")
    other = RecoveryStore(P(os.environ["SHARPEN_RECOVERY_DIR"]), session=new_session())  # a live editor (this process)
    other.claim(path)
    app = make_app([path])
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: any("also open in another sharpen" in str(n.message) for n in app._notifications))
        app.open_path(path)
        await pilot.pause(0.2)
        assert len(app.panes()) == 1


async def test_a_file_changed_on_disk_is_shown_and_a_clean_buffer_reloads(tmp_path, monkeypatch):
    from sharpen.app.tui import recovery_actions

    monkeypatch.setattr(recovery_actions, "WATCH_SECONDS", 0.1)
    path = tmp_path / "f.py"
    path.write_text("x = 1\n")
    app = make_app([path])
    async with app.run_test(size=SIZE) as pilot:
        editor = app.active_pane().editor
        path.write_text("x = 2\ny = 3\n")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        assert "changed on disk" in app.status.notice
        await pilot.click("#reload")
        await wait_for(pilot, lambda: editor.buffer_text == "x = 2\ny = 3\n")
        assert not editor.unsaved
        await pilot.press("z")  # now dirty: a change on disk is said, never reloaded over the edit
        path.write_text("other\n")
        await wait_for(pilot, lambda: any("saving will ask" in str(n.message) for n in app._notifications))
        assert editor.buffer_text.startswith("z") and not isinstance(app.screen, ConfirmScreen)


async def test_recovery_is_written_when_typing_pauses(tmp_path, monkeypatch):
    from sharpen.app.tui import recovery_actions

    monkeypatch.setattr(recovery_actions, "IDLE_SECONDS", 0.2)
    path = tmp_path / "f.py"
    path.write_text("x = 1\n")
    app = make_app([path])
    app.recovery_interval = 3600  # only the idle write can do it
    store = RecoveryStore(Path(os.environ["SHARPEN_RECOVERY_DIR"]))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("q")
        await wait_for(pilot, lambda: any(e.text and e.text.startswith("q") for e in store.entries_for(path)), timeout=5)


async def test_typing_over_a_finished_preview_keeps_the_text_and_types_at_the_cursor(tmp_path, tiny_denoiser):
    from pilot import with_model

    from sharpen.app.tui.editor_pane import IDLE, PREVIEW

    path = tmp_path / "f.py"
    path.write_text("def add(a, b):\n    return a + b\n")
    app = make_app([path])
    async with app.run_test(size=SIZE) as pilot:
        await with_model(app, pilot, tiny_denoiser)
        pane = app.active_pane()
        pane.editor.selection = ((1, 11), (1, 16))
        await pilot.press("alt+i")
        await wait_for(pilot, lambda: pane.phase == PREVIEW, timeout=60)
        await pilot.press("x")
        assert pane.phase == IDLE and pane.editor.buffer_text == "def add(a, b):\n    return a + bx\n"


async def test_a_model_command_during_loading_is_queued_and_esc_cancels_it(tmp_path, tiny_denoiser):
    from pilot import with_model

    from sharpen.app.tui.editor_pane import IDLE

    path = tmp_path / "f.py"
    path.write_text("x = 1\n")
    app = make_app([path])
    async with app.run_test(size=SIZE) as pilot:
        pane = app.active_pane()
        await pilot.press("alt+i")
        assert app.session.queued == (pane, "infill")
        await pilot.press("escape")
        assert app.session.queued is None
        await pilot.press("alt+i")
        await with_model(app, pilot, tiny_denoiser)
        await wait_for(pilot, lambda: pane.phase != IDLE or pane.edit_run is not None, timeout=30)


async def test_save_and_quit_leaves_no_recovery_for_the_next_start(tmp_path):
    """Its recovery entry was kept, and the next start said sharpen had not closed cleanly."""
    path = tmp_path / "f.py"
    path.write_text("x = 1\n")
    store = RecoveryStore(Path(os.environ["SHARPEN_RECOVERY_DIR"]))
    app = make_app([path])
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("q")
        app.recovery.write_recovery()  # as the idle write does 4 s after typing stops
        assert any(e.text == "qx = 1\n" for e in store.entries_for(path))
        await pilot.press("ctrl+q")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.click("#save")
        await wait_for(pilot, lambda: not app.is_running)
    assert path.read_text() == "qx = 1\n"
    assert not [e for e in store.entries() if e.text is not None]
