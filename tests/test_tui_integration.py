"""Pilot tests of the editor's use of the engine's safety and syntax pieces.

Saves check the file's content on disk (core.files), unsaved buffers go to the recovery
store (app.recovery) and come back on open, selections grow and shrink by syntax node and
Fill body masks a function body (core.syntax), and infills rank candidates by parse
(core.candidates). The model is the tiny random checkpoint: tests check where text changes,
never what the model wrote.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from sharpen.app.config import Config
from sharpen.app.tui.palette import PALETTE
from sharpen.app.tui.confirm_screen import ConfirmScreen
from sharpen.app.tui.editor_app import ALL_BINDINGS, BINDINGS, SharpenApp
from sharpen.app.tui.editor_pane import EditorPane
from sharpen.app.tui.editor_pane import IDLE, PREVIEW
from sharpen.app.tui.messages import ModelLoaded
from sharpen.app.tui.themes import load_themes
from sharpen.core.files import read_text_file
from sharpen.app.recovery import RecoveryStore
from sharpen.core.syntax import body_range, parse_document

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "fizzbuzz.py"
FAST = Config.of(steps=4, frame_rate=60)
SIZE = (110, 32)


@pytest.fixture(autouse=True)
def recovery_dir(tmp_path, monkeypatch) -> Path:
    directory = tmp_path / "recovery"
    monkeypatch.setenv("SHARPEN_RECOVERY_DIR", str(directory))
    return directory


@pytest.fixture
def example(tmp_path) -> Path:
    path = tmp_path / "src" / "fizzbuzz.py"
    path.parent.mkdir()
    path.write_bytes(EXAMPLE.read_bytes())
    return path


def make_app(files, config=FAST) -> SharpenApp:
    return SharpenApp([Path(f) for f in files], config, load_themes(None), load_model_on_start=False)


async def wait_for(pilot, predicate, timeout: float = 20.0) -> None:
    for _ in range(int(timeout / 0.02)):
        if predicate():
            await pilot.pause()
            return
        await pilot.pause(0.02)
    raise AssertionError("timed out waiting for the app")


async def with_model(app, pilot, denoiser) -> None:
    app.post_message(ModelLoaded(denoiser, "cpu", 0.0))
    await wait_for(pilot, lambda: app.denoiser is not None)


def notices(app) -> str:
    return " | ".join(str(n.message) for n in app._notifications)


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
        await wait_for(pilot, lambda: store.load(example) is not None)
        entry = store.load(example)
        assert entry.text.startswith("zz\"\"\"FizzBuzz") and entry.original_digest == read_text_file(example).digest
        assert (os.stat(entry.file).st_mode & 0o777) == 0o600
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: not editor.unsaved)
        assert store.load(example) is None
    # An unhandled exception writes the unsaved buffer before the app ends (no timer involved).
    app = make_app([example])
    app.recovery_interval = 3600
    with pytest.raises(RuntimeError, match="boom"):  # run_test re-raises the crash when the app ends
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("q")
            assert store.load(example) is None
            app._handle_exception(RuntimeError("boom"))
            await pilot.pause()
    assert store.load(example).text.startswith("qzz")


async def test_opening_a_file_with_recovery_offers_restore_with_one_undo_step(example, recovery_dir):
    disk = example.read_text()
    RecoveryStore(recovery_dir).save(example, "recovered = 1\n" + disk, original=read_text_file(example))
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
    RecoveryStore(recovery_dir).save(example, "other\n", original=read_text_file(example))
    app = make_app([example])
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.click("#discard")
        await wait_for(pilot, lambda: not isinstance(app.screen, ConfirmScreen))
        assert app.active_pane().editor.buffer_text == disk.replace("\r\n", "\n")
        assert RecoveryStore(recovery_dir).load(example) is None
    # Nothing to offer when the entry equals the file.
    RecoveryStore(recovery_dir).save(example, disk, original=read_text_file(example))
    app = make_app([example])
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause(0.1)
        assert not isinstance(app.screen, ConfirmScreen)


# -- syntax: selections and Fill body ------------------------------------------------------


def test_syntax_keys_are_bound_once_and_listed():
    keys = [key.strip() for binding in ALL_BINDINGS for key in binding.key.split(",")]
    assert len(keys) == len(set(keys)), "two bindings share a key"
    ids = {c.binding_id for c in PALETTE}
    assert {"expand-selection", "shrink-selection", "fill-body"} <= ids
    # No key that terminals or tmux mangle (Alt+F/Alt+B are word motion, Alt+punctuation is ESC+char).
    for binding in ALL_BINDINGS:
        if binding.id in ("expand-selection", "shrink-selection", "fill-body"):
            assert binding.key in ("alt+e", "alt+d", "alt+l")


def test_buffer_commands_are_bound_on_the_pane_and_global_ones_on_the_app():
    """Bindings live on the widget that owns the action: Textual's focus chain finds the active buffer."""
    pane_ids = {b.id for b in EditorPane.BINDINGS}
    assert {"infill", "rewrite", "accept", "cancel", "save", "find", "fill-body"} <= pane_ids
    assert {b.id for b in BINDINGS} == {"open-file", "next-buffer", "previous-buffer", "help", "quit"}
    for binding in EditorPane.BINDINGS:
        assert hasattr(EditorPane, "action_" + binding.action.split("(")[0]), binding.id
    assert SharpenApp.__mro__[1].__module__.startswith("textual")  # no mixins between the app and App


async def test_expand_and_shrink_selection_by_syntax_node(example):
    app = make_app([example])
    async with app.run_test(size=SIZE) as pilot:
        editor = app.active_pane().editor
        text = editor.buffer_text
        at = text.index("number % 15")
        editor.select_offsets(at + 2, at + 2)  # inside `number`
        await pilot.press("alt+e")
        first = editor.selected_offsets()
        assert text[first[0]:first[1]] == "number"
        await pilot.press("alt+e")
        second = editor.selected_offsets()
        assert second[0] <= first[0] and first[1] <= second[1] and second != first
        await pilot.press("alt+e")
        await pilot.press("alt+d", "alt+d")
        assert editor.selected_offsets() == first  # back down the history exactly
        await pilot.press("alt+d")
        assert editor.selected_offsets() == (at + 2, at + 2)
        # A selection made by hand shrinks to the inner node at the cursor.
        start = text.index("if number % 15")
        end = text.index('"FizzBuzz"') + len('"FizzBuzz"')
        editor.select_offsets(start, end)
        await pilot.press("alt+d")
        inner = editor.selected_offsets()
        assert start <= inner[0] and inner[1] <= end and inner != (start, end)
        # Plain text: line, then paragraph.
        await app.add_buffer(type(editor.buffer)(None, "one two\nthree\n\nfour\n"))
        plain = app.active_pane().editor
        plain.select_offsets(1, 1)
        await pilot.press("alt+e")
        assert plain.selected_offsets() == (0, 7)


async def test_expand_history_moves_with_edits_elsewhere(example):
    """An edit outside the expanded selections moves their history with the text (core.changes);
    before, any change forgot it."""
    app = make_app([example])
    async with app.run_test(size=SIZE) as pilot:
        editor = app.active_pane().editor
        at = editor.buffer_text.index("number % 15")
        editor.select_offsets(at + 2, at + 2)
        await pilot.press("alt+e")
        first = editor.selected_offsets()
        await pilot.press("alt+e")
        editor.insert("# a comment line\n", (0, 0))  # TextArea moves the selection along with it
        await pilot.press("alt+d")
        assert editor.selected_offsets() == (first[0] + 17, first[1] + 17)


async def test_fill_body_masks_the_function_body_and_accepts_in_one_undo_step(example, tiny_denoiser):
    app = make_app([example])
    async with app.run_test(size=SIZE) as pilot:
        pane = app.active_pane()
        editor = pane.editor
        text = editor.buffer_text
        await pilot.press("alt+l")  # no model yet: says so, buffer untouched
        assert editor.buffer_text == text
        await with_model(app, pilot, tiny_denoiser)
        def_line = text[: text.index("def fizzbuzz")].count("\n")
        editor.move_cursor((def_line, 2))
        expected = body_range(parse_document(text, path=str(example)), editor.offset_of((def_line, 2)))
        assert text[expected[0]:expected[1]].lstrip().startswith("if number % 15")  # the docstring stays as context
        await pilot.press("alt+l")
        await wait_for(pilot, lambda: pane.phase == PREVIEW)
        assert [(s.start, s.end, s.mode) for s in pane.edit_run.spans] == [(*expected, "infill")]
        await pilot.press("tab")
        await wait_for(pilot, lambda: pane.phase == IDLE)
        new = editor.buffer_text
        assert new.startswith(text[: expected[0]]) and new.endswith(text[expected[1]:])
        await pilot.press("ctrl+z")
        assert editor.buffer_text == text
        # On an import line there is no body: a message, no run.
        editor.move_cursor((0, 0))
        (example.parent / "imports.py").write_text("import os\n")
        await app.add_buffer(type(editor.buffer).open(example.parent / "imports.py"))
        await pilot.press("alt+l")
        assert app.active_pane().phase == IDLE and "no function or block body" in notices(app)


async def test_candidates_rank_parsing_infills_first_and_cycle(example, tiny_denoiser):
    config = Config.of(steps=4, candidates=3, frame_rate=60)
    app = make_app([example], config)
    async with app.run_test(size=SIZE) as pilot:
        await with_model(app, pilot, tiny_denoiser)
        pane = app.active_pane()
        editor = pane.editor
        text = editor.buffer_text
        start = text.index('"FizzBuzz"')
        editor.select_offsets(start, start + len('"FizzBuzz"'))
        await pilot.press("alt+i")
        await wait_for(pilot, lambda: pane.phase == PREVIEW)
        result = pane.edit_run.result
        assert result.candidates and len(result.samples) == len(result.candidates) == pane.edit_run.alternatives
        parses = [c.parses for c in result.candidates]
        assert parses == sorted(parses, reverse=True)  # a parsing candidate is never behind a broken one
        assert ("parses" in app.status.run) or ("breaks the parse" in app.status.run)
        assert pane.edit_run.alternatives > 1  # distinct lengths give distinct texts
        await pilot.press("alt+n")
        assert pane.edit_run.choice == 1
        await pilot.press("alt+p")
        assert pane.edit_run.choice == 0
        await pilot.press("escape")
        await wait_for(pilot, lambda: pane.phase == IDLE)
        assert editor.buffer_text == text
