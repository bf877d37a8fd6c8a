"""The smaller editor items of the editor issue (27.6), each as a person meets it."""
from __future__ import annotations

import os
from pathlib import Path

from textual import events

from pilot import EXAMPLE, make_app, notices, wait_for, with_model

from sharpen.app.recovery import RecoveryEntry
from sharpen.app.specs import LineIndex
from sharpen.app.syntax_specs import syntax_range
from sharpen.app.tui.confirm_screen import ConfirmScreen
from sharpen.app.tui.indent import indent_width_of
from sharpen.app.tui.editor_pane import IDLE, PREVIEW
from sharpen.app.tui.recovery_actions import shown_path
from sharpen.app.tui.status_bar import StatusBar

SIZE = (100, 30)
FIZZBUZZ = EXAMPLE.read_text()


def spec_text(spec: str, text: str = FIZZBUZZ) -> str:
    start, end = syntax_range(spec, text, LineIndex.of(text), "fizzbuzz.py")
    return text[start:end]


def test_expr_on_a_string_selects_the_whole_string():
    """Line 6 is `        return "FizzBuzz"`; column 16 is its opening quote."""
    assert spec_text("expr@6:16") == '"FizzBuzz"'  # was the quote alone (Python's string_start node)
    assert spec_text("expr@6:20") == '"FizzBuzz"'  # inside the string: the string, not its content


def test_expr_without_a_column_looks_past_the_first_word_of_the_line():
    assert spec_text("expr@6") == '"FizzBuzz"'  # "return" is no expression: was "no expr at line 6"
    assert spec_text("stmt@6") == 'return "FizzBuzz"'  # a form the first word has is still found there


async def test_an_overwrite_clears_changed_on_disk_from_the_status_bar(tmp_path):
    path = tmp_path / "f.py"
    path.write_text("x = 1\n")
    app = make_app([path])
    async with app.run_test(size=SIZE) as pilot:
        pane = app.active_pane()
        pane.editor.insert("y = 2\n")
        path.write_text("changed elsewhere\n")
        os.utime(path, ns=(1, 1))
        app.recovery.watch_files()
        await pilot.pause()
        assert "changed on disk" in app.status.notice
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        app.screen.dismiss("overwrite")
        await wait_for(pilot, lambda: path.read_text() == "y = 2\nx = 1\n")
        app.recovery.watch_files()
        await pilot.pause()
        assert "changed on disk" not in app.status.notice


async def test_toasts_sit_above_the_status_bar(tmp_path):
    app = make_app([EXAMPLE])
    async with app.run_test(size=SIZE, notifications=True) as pilot:  # the pilot hides toasts by default
        app.notify("a message that stays a while", timeout=30)
        await pilot.pause(0.3)
        from textual.widgets._toast import Toast

        toast = app.screen.query_one(Toast).region
        status = app.query_one(StatusBar).region
        assert toast.bottom <= status.y, (toast, status)


async def test_after_esc_rejects_a_fill_body_the_cursor_is_back_and_a_second_fill_body_runs(tmp_path, tiny_denoiser):
    path = tmp_path / "fizzbuzz.py"
    path.write_text(FIZZBUZZ)
    app = make_app([path])
    async with app.run_test(size=SIZE) as pilot:
        await with_model(app, pilot, tiny_denoiser)
        pane = app.active_pane()
        editor = pane.editor
        editor.move_cursor((2, 6))  # on "def fizzbuzz"
        for _ in range(2):
            await pilot.press("alt+l")
            await wait_for(pilot, lambda: pane.phase == PREVIEW)
            await pilot.press("escape")
            await wait_for(pilot, lambda: pane.phase == IDLE)
            assert editor.selection == ((2, 6), (2, 6))
            assert "no function or block body" not in notices(app)
        assert editor.buffer_text == FIZZBUZZ


def test_the_indent_unit_is_read_from_the_file():
    assert indent_width_of("function f() {\n  if (x) {\n    y();\n  }\n}\n") == 2
    assert indent_width_of(FIZZBUZZ) == 4
    assert indent_width_of("no indentation\n") == 4


async def test_enter_in_a_two_space_javascript_file_indents_by_two(tmp_path):
    path = tmp_path / "f.js"
    path.write_text("function f() {\n  if (x) {\n    y();\n  }\n}\n")
    app = make_app([path])
    async with app.run_test(size=SIZE) as pilot:
        editor = app.active_pane().editor
        editor.move_cursor((1, len(editor.document.lines[1])))  # after "if (x) {"
        await pilot.press("enter")
        assert editor.document.lines[2] == "    "  # one level in: 2 more than the if's 2 (was 2 + 4)


async def test_an_untitled_buffer_knows_its_language_before_the_first_enter(tmp_path):
    os.chdir(tmp_path)
    app = make_app([])
    async with app.run_test(size=SIZE) as pilot:
        editor = app.active_pane().editor
        for event in [events.Key(c if c != " " else "space", c) for c in "def main():"] + [events.Key("enter", "\r")]:
            app.post_message(event)  # typed in one burst, as fast as a paste of keys
        await wait_for(pilot, lambda: editor.document.line_count == 2)
        assert editor.language == "python"
        assert editor.document.lines == ["def main():", "    "]


def test_the_start_dialog_names_a_recovered_file_with_its_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    entry = RecoveryEntry(tmp_path / "src" / "a.py", "x\n", False, 0.0, None, None, None)
    assert shown_path(entry) == str(Path("src") / "a.py")
    elsewhere = RecoveryEntry(Path("/opt/project/a.py"), "x\n", False, 0.0, None, None, None)
    assert shown_path(elsewhere) == "/opt/project/a.py"
    untitled = RecoveryEntry(tmp_path / "untitled-3", "x\n", False, 0.0, None, None, None, untitled=True)
    assert shown_path(untitled) == "untitled (started in .)"


async def test_the_start_dialog_shows_the_directories(tmp_path, monkeypatch):
    from sharpen.app.recovery import RecoveryStore

    monkeypatch.chdir(tmp_path)
    for folder in ("src", "tests"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "a.py").write_text("x = 1\n")
    store = RecoveryStore(tmp_path / "recovery", session="999999-2-3")  # a session whose process is gone
    for folder in ("src", "tests"):
        store.save(tmp_path / folder / "a.py", "unsaved\n")
    app = make_app([])
    app.recovery._recovery_store = RecoveryStore(tmp_path / "recovery")
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        question = str(app.screen.question)
        assert "src/a.py" in question and "tests/a.py" in question, question
        assert "in 2 buffers" in question and "(1 line)" in question and "lines)" not in question, question  # not "(1 lines)"


async def test_a_tab_whose_pane_is_not_mounted_yet_is_no_active_pane(tmp_path):
    """Restoring recovered buffers at start activates each new tab as it is added; the status
    update that follows met a tab with no pane in it yet and crashed (NoMatches)."""
    from textual.widgets import TabbedContent, TabPane

    app = make_app([EXAMPLE])
    async with app.run_test(size=SIZE) as pilot:
        tabs = app.query_one(TabbedContent)
        await tabs.add_pane(TabPane("empty", id="tab-empty"))
        tabs.active = "tab-empty"
        await pilot.pause()
        assert app.active_pane() is None
        app.update_status()  # no crash
