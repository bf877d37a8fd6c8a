"""Pilot tests of saving and recovery in the editor.

Saves check the file's content on disk (core.files); unsaved buffers go to the recovery store
(app.recovery) and come back on open.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from pilot import example_in_src as example  # noqa: F401  (a fixture)
from pilot import make_app, notices, wait_for

from sharpen.app.recovery import RecoveryStore
from sharpen.app.tui.confirm_screen import ConfirmScreen
from sharpen.core.files import read_text_file

SIZE = (110, 32)
CRASHED = "2147483646-1-1"  # the session of an editor start that is no longer running


def unsaved(store, path):
    """The newest entry with unsaved text for `path`, whichever start wrote it (None when none)."""
    return next((e for e in store.entries_for(path) if e.text is not None), None)


@pytest.fixture(autouse=True)
def recovery_dir(tmp_path, monkeypatch) -> Path:
    directory = tmp_path / "recovery"
    monkeypatch.setenv("SHARPEN_RECOVERY_DIR", str(directory))
    return directory


# -- saving: content on disk, unwritable files ---------------------------------------------


async def test_save_asks_before_overwriting_a_file_changed_on_disk(example):
    app = make_app([example])
    async with app.run_test(size=SIZE) as pilot:
        editor = app.active_pane().editor
        await pilot.press("x")
        theirs = example.read_bytes().replace(b"FizzBuzz", b"FuzzBuzz")  # same size: only the content tells
        example.write_bytes(theirs)
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        assert "changed on disk" in app.screen.question and "content" in app.screen.question
        await pilot.press("escape")  # cancel: neither side is lost
        await wait_for(pilot, lambda: not isinstance(app.screen, ConfirmScreen))
        assert example.read_bytes() == theirs and editor.unsaved
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.click("#overwrite")
        await wait_for(pilot, lambda: not editor.unsaved)
        assert example.read_bytes().startswith(b"x\"\"\"FizzBuzz")
        # The saved file is the new base: a second save does not ask again.
        await pilot.press("y", "ctrl+s")
        await wait_for(pilot, lambda: not editor.unsaved)
        assert not isinstance(app.screen, ConfirmScreen) and example.read_bytes().startswith(b"xy")


async def test_a_touch_alone_is_not_a_change(example):
    app = make_app([example])
    async with app.run_test(size=SIZE) as pilot:
        editor = app.active_pane().editor
        await pilot.press("x")
        info = example.stat()
        os.utime(example, ns=(info.st_atime_ns, info.st_mtime_ns + 5_000_000_000))
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: not editor.unsaved)
        assert not isinstance(app.screen, ConfirmScreen) and example.read_bytes().startswith(b"x")


async def test_unwritable_files_give_a_message_and_keep_the_buffer(example):
    app = make_app([example])
    before = example.read_bytes()
    async with app.run_test(size=SIZE) as pilot:
        editor = app.active_pane().editor
        await pilot.press("x")
        example.chmod(0o444)
        try:
            await pilot.press("ctrl+s")
            await wait_for(pilot, lambda: "read-only" in notices(app))
            assert editor.unsaved and example.read_bytes() == before
            assert "keeps your changes" in notices(app)
        finally:
            example.chmod(0o644)
        # The folder is gone: a clear message, the buffer still dirty and still there.
        for child in example.parent.iterdir():
            child.unlink()
        example.parent.rmdir()
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: "does not exist" in notices(app) or "deleted" in str(getattr(app.screen, "question", "")))
        if isinstance(app.screen, ConfirmScreen):  # the file vanished: asked first, then the write fails
            await pilot.click("#overwrite")
            await wait_for(pilot, lambda: "does not exist" in notices(app))
        assert editor.unsaved and editor.buffer_text.startswith("x")


# -- recovery ----------------------------------------------------------------------------


async def test_unsaved_buffers_are_written_to_recovery_and_dropped_after_a_save(example, recovery_dir):
    app = make_app([example])
    app.recovery_interval = 0.1
    store = RecoveryStore(recovery_dir)
    async with app.run_test(size=SIZE) as pilot:
        editor = app.active_pane().editor
        await pilot.press("z", "z")
        await wait_for(pilot, lambda: unsaved(store, example) is not None)
        entry = unsaved(store, example)
        assert entry.text.startswith("zz\"\"\"FizzBuzz") and entry.original_digest == read_text_file(example).digest
        assert (os.stat(entry.file).st_mode & 0o777) == 0o600
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: not editor.unsaved)
        assert unsaved(store, example) is None
    # An unhandled exception writes the unsaved buffer before the app ends (no timer involved).
    app = make_app([example])
    app.recovery_interval = 3600
    with pytest.raises(RuntimeError, match="boom"):  # run_test re-raises the crash when the app ends
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("q")
            assert unsaved(store, example) is None
            app._handle_exception(RuntimeError("boom"))
            await pilot.pause()
    assert unsaved(store, example).text.startswith("qzz")


async def test_opening_a_file_with_recovery_offers_restore_with_one_undo_step(example, recovery_dir):
    disk = example.read_text()
    RecoveryStore(recovery_dir, session=CRASHED).save(example, "recovered = 1\n" + disk, original=read_text_file(example))
    app = make_app([example])
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        assert "Restore" in str(app.screen.choices) and "Discard" in str(app.screen.choices)
        await pilot.click("#restore")
        editor = app.active_pane().editor
        await wait_for(pilot, lambda: editor.buffer_text.startswith("recovered = 1"))
        assert editor.unsaved and example.read_text() == disk  # nothing written until a save
        await pilot.press("ctrl+z")
        assert editor.buffer_text == disk.replace("\r\n", "\n")
        await pilot.press("ctrl+y")
        assert editor.buffer_text.startswith("recovered = 1")
    # Declining drops the entry; a clean quit leaves nothing behind.
    RecoveryStore(recovery_dir, session=CRASHED).save(example, "other\n", original=read_text_file(example))
    app = make_app([example])
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.click("#discard")
        await wait_for(pilot, lambda: not isinstance(app.screen, ConfirmScreen))
        assert app.active_pane().editor.buffer_text == disk.replace("\r\n", "\n")
        assert unsaved(RecoveryStore(recovery_dir), example) is None
    # Nothing to offer when the entry equals the file.
    RecoveryStore(recovery_dir, session=CRASHED).save(example, disk, original=read_text_file(example))
    app = make_app([example])
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause(0.1)
        assert not isinstance(app.screen, ConfirmScreen)


# -- syntax: selections and Fill body ------------------------------------------------------




@pytest.mark.parametrize("saved_at", [1e300, float("nan"), -5.0, "soon"])
async def test_a_recovery_entry_with_a_time_no_clock_can_show_is_still_offered(example, recovery_dir, saved_at):
    """A hand-edited or corrupted saved_at crashed every start (time.localtime); the text is what matters."""
    store = RecoveryStore(recovery_dir, session=CRASHED)
    written = store.save(example, "recovered = 1\n" + example.read_text(), original=read_text_file(example))
    payload = json.loads(written.read_text())
    payload["saved_at"] = saved_at
    written.write_text(json.dumps(payload))  # json writes NaN as NaN, which Python reads back
    app = make_app([example])
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        assert "of an unknown time" in app.screen.question
        await pilot.click("#restore")
        editor = app.active_pane().editor
        await wait_for(pilot, lambda: editor.buffer_text.startswith("recovered = 1"))


async def test_restoring_a_lone_surrogate_keeps_the_editor_and_the_file(example, recovery_dir):
    """Recovery keeps a typed lone surrogate on purpose; the syntax document took it to tree-sitter
    with a strict encode and crashed. Restored, it is shown; a save refuses it in one line."""
    disk = example.read_bytes()
    RecoveryStore(recovery_dir, session=CRASHED).save(example, "s = '\udc80'\n" + example.read_text(), original=read_text_file(example))
    app = make_app([example])
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.click("#restore")
        editor = app.active_pane().editor
        await wait_for(pilot, lambda: editor.buffer_text.startswith("s = '\udc80'"))
        await pilot.press("end", "enter", "x")
        await pilot.press("ctrl+s")
        await pilot.pause()
        assert app.is_running and "surrogate" in notices(app)
    assert example.read_bytes() == disk
