"""Every key kept, in order (app/tui/key_order.py, app/tui/terminal.py's ChordParser).

Each burst is sent as one terminal read would arrive: its bytes go through the driver's
decoder and parser, and every event is posted to the app before any is handled.
"""
from __future__ import annotations

from textual import events

from pilot import make_app, notices, wait_for

from sharpen.app.tui.prompt_screen import PromptScreen
from sharpen.app.tui.terminal import ChordParser, replacing_decoder

SIZE = (100, 30)
LINES = "".join(f"line{i}\n" for i in range(1, 30))


def parsed(data: bytes) -> list[events.Event]:
    """The events the editor's driver posts for `data` arriving in one read."""
    parser = ChordParser()
    return [*parser.feed(replacing_decoder()(data)), *parser.feed("")]


async def burst(app, pilot, data: bytes, settle: float = 0.3) -> None:
    await wait_for(pilot, lambda: app.key_order.ready)  # typed into a running editor (type-ahead: its own test)
    for event in parsed(data):
        app.post_message(event)
    await pilot.pause(settle)
    await wait_for(pilot, lambda: not app._message_queue.qsize())


def opened(tmp_path, text: str = LINES):
    path = tmp_path / "f.py"
    path.write_text(text)
    return make_app([path])


async def test_a_prompts_enter_takes_effect_before_the_keys_after_it(tmp_path):
    app = opened(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        editor = app.active_pane().editor
        await burst(app, pilot, b"\x0712\rx")  # Ctrl+G 1 2 Enter x
        assert not isinstance(app.screen, PromptScreen)
        assert editor.document.lines[11] == "xline12" and editor.document.lines[0] == "line1"
        assert "not a line number" not in notices(app)


async def test_a_paste_into_a_prompt_keeps_its_place_among_the_keys(tmp_path):
    app = opened(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        editor = app.active_pane().editor
        await burst(app, pilot, b"\x071\x1b[200~5\x1b[201~\rx")  # Ctrl+G 1, paste "5", Enter x
        assert editor.document.lines[14] == "xline15"


async def test_shift_right_right_after_a_prompts_enter_selects(tmp_path):
    app = opened(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        editor = app.active_pane().editor
        await burst(app, pilot, b"\x075\r\x1b[1;2C\x1b[1;2C\x1b[1;2C")  # Ctrl+G 5 Enter, Shift+Right x3
        assert editor.selection == ((4, 0), (4, 3))
        assert editor.selected_text == "lin"


async def test_find_and_save_as_prompts_keep_the_keys_after_enter(tmp_path):
    app = opened(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        editor = app.active_pane().editor
        await burst(app, pilot, b"\x06line7\r\x1b[CZ")  # Ctrl+F line7 Enter, Right, Z
        assert editor.document.lines[6] == "line7Z"
        target = tmp_path / "copy.py"
        await burst(app, pilot, b"\x1bs" + b"\x7f" * 200 + str(target).encode() + b"\rQ")  # Alt+S, clear, path, Enter, Q
        assert target.read_text() == LINES.replace("line7\n", "line7Z\n")
        assert "line7ZQ" in editor.document.lines[6]  # Q typed after the save, into the buffer


async def test_a_ctrl_g_right_after_an_alt_chord_opens_its_prompt_before_the_next_keys(tmp_path):
    app = opened(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        editor = app.active_pane().editor
        editor.move_cursor((2, 2))
        await burst(app, pilot, b"\x1be\x078\ry")  # Alt+E (expand selection), Ctrl+G 8 Enter y
        assert editor.document.lines[7] == "yline8"
        assert editor.document.lines[2] == "line3"  # nothing typed where the chord was


async def test_a_held_alt_chord_never_types_into_the_buffer(tmp_path):
    app = opened(tmp_path, "hello\n")
    async with app.run_test(size=SIZE) as pilot:
        editor = app.active_pane().editor
        editor.move_cursor((0, 5))
        await burst(app, pilot, b"\x1bi" * 15)  # a held Alt+I: infill, 15 times
        assert editor.buffer_text == "hello\n"
        assert "still loading" in notices(app)  # they reached the Infill command
        await burst(app, pilot, b"^i")  # a "^" typed by hand is text
        assert editor.buffer_text == "hello^i\n"


async def test_keys_typed_while_the_editor_starts_are_replayed_in_order(tmp_path):
    app = opened(tmp_path, "x = 1\n")
    original = app.add_buffer

    async def slow_start(*args, **kwargs):
        # Keys that arrive while the editor is being built; a Ctrl+J is an Enter typed before
        # the terminal left cooked mode (its ICRNL turned the CR into LF).
        for event in parsed(b"abc\ndef\n"):
            app.post_message(event)
        return await original(*args, **kwargs)

    app.add_buffer = slow_start
    async with app.run_test(size=SIZE) as pilot:
        editor = app.active_pane().editor
        await wait_for(pilot, lambda: editor.buffer_text == "abc\ndef\nx = 1\n")
        await burst(app, pilot, b"!")
        assert editor.buffer_text == "abc\ndef\n!x = 1\n"


def test_the_key_tables_in_the_docs_are_generated_from_the_bindings():
    """README.md and docs/editor.md carry key_table()'s text; a binding or palette entry added,
    removed or rebound by default without `python -m sharpen.app.tui.key_table --write` fails here."""
    from pathlib import Path

    from sharpen.app.tui.key_table import DOCS, key_table, with_table

    root = Path(__file__).resolve().parent.parent
    table = key_table()
    for name in DOCS:
        document = (root / name).read_text(encoding="utf-8")
        assert with_table(document, table) == document, f"{name}: run python -m sharpen.app.tui.key_table --write"
    for keys in ("Alt+E", "Alt+D", "Alt+L or F8", "F1"):  # keys the tables used to leave out
        assert f"\n| {keys} |" in table


async def test_the_palettes_keys_entry_shows_f1(tmp_path):
    from pilot import top_command

    app = opened(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+p")
        for character in "keys":
            await pilot.press(character)
        await wait_for(pilot, lambda: top_command(app) == "Keys")
        from textual.command import CommandList

        prompt = str(app.screen.query_one(CommandList).get_option_at_index(0).prompt)
        assert prompt.endswith("[F1]"), prompt  # "[F1]" was read as markup and vanished


async def test_keys_typed_at_start_never_answer_a_dialog_they_were_not_meant_for(tmp_path, monkeypatch):
    """A recovery offer that comes up while sharpen starts: the keys typed before it (an Enter
    among them) once answered "Restore all". They wait until the dialog is gone, then land in
    the buffer in order; the dialog is answered only by what is typed once it shows."""
    from sharpen.app.tui.confirm_screen import ConfirmScreen

    app = opened(tmp_path, "x = 1\n")
    answers = []
    original = app.add_buffer

    async def slow_start(*args, **kwargs):
        pane = await original(*args, **kwargs)
        for event in parsed(b"ab\ncd"):  # typed while the editor was being built
            app.post_message(event)
        app.push_screen(ConfirmScreen("Restore?", [("restore", "Restore all", "primary"), ("discard", "Discard", "default")]),
                        answers.append)
        return pane

    app.add_buffer = slow_start
    async with app.run_test(size=SIZE) as pilot:
        editor = app.active_pane().editor
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen) and app.key_order.ready)
        await pilot.pause(0.3)
        assert answers == [] and isinstance(app.screen, ConfirmScreen) and editor.buffer_text == "x = 1\n"
        await pilot.press("escape")  # the person answers the question they can now see
        await wait_for(pilot, lambda: editor.buffer_text == "ab\ncdx = 1\n")
        assert answers == ["cancel"]  # Esc, typed once the dialog showed, is its only answer
