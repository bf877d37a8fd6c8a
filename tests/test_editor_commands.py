"""Pilot tests of the commands a user of another editor reaches for first: prompts that replace
their pre-filled answer, find previous, find and replace, close a tab, path completion; Fill
body from the first column of a method's line (the editor's and `body@L:1`); and the messages
around them: a failed edit's reason in lines and columns, the footer at 80x24, a one-time
notice, control characters drawn as markers.
"""
from __future__ import annotations

import re

from pilot import make_app, notices, wait_for, with_model

from sharpen.app.specs import parse_spec
from sharpen.app.tui.confirm_screen import ConfirmScreen
from sharpen.app.tui.editor_pane import IDLE, PREVIEW
from sharpen.app.tui.prompt_screen import PromptScreen, complete_path

SIZE = (110, 32)
METHODS = '''class Parser:
    """Reads arguments."""

    def parse_args(self, args):
        values = []
        for arg in args:
            values.append(arg)
        return values

    def other(self):
        return 2
'''


async def prompt_up(pilot, app) -> PromptScreen:
    await wait_for(pilot, lambda: isinstance(app.screen, PromptScreen) and app.screen.is_mounted)
    return app.screen


async def test_typing_replaces_a_pre_filled_answer_in_save_as_and_find(tmp_path):
    path = tmp_path / "g.py"
    path.write_text("x = 1\ng2 = 2\n")
    app = make_app([path])
    async with app.run_test(size=SIZE) as pilot:
        editor = app.active_pane().editor
        await pilot.press("alt+s")
        await prompt_up(pilot, app)
        target = tmp_path / "g2.py"
        await pilot.press(*str(target), "enter")  # over the selected "…/g.py": not "…/g.py…/g2.py"
        await wait_for(pilot, lambda: target.exists())
        assert target.read_text() == "x = 1\ng2 = 2\n" and editor.buffer.path == target
        await pilot.press("ctrl+f")
        await prompt_up(pilot, app)
        await pilot.press("x", "enter")
        await pilot.press("ctrl+f")  # the last query ("x") comes back selected
        await prompt_up(pilot, app)
        await pilot.press("g", "2", "enter")
        await pilot.pause()
        assert app.session.last_search == "g2" and editor.selected_offsets() == (6, 8)


async def test_fill_body_from_column_one_of_a_method_fills_that_method(tmp_path, tiny_denoiser):
    path = tmp_path / "parser.py"
    path.write_text(METHODS)
    # Headless: body@L:1 on the method's line is the method's body, not the class's.
    line = METHODS[: METHODS.index("    def parse_args")].count("\n") + 1
    (span,) = parse_spec(f"body@{line}:1", METHODS, path=str(path))
    assert METHODS[span.start:span.end] == "        values = []\n        for arg in args:\n            values.append(arg)\n        return values"
    app = make_app([path])
    async with app.run_test(size=SIZE) as pilot:
        pane = app.active_pane()
        await with_model(app, pilot, tiny_denoiser)
        await pilot.press("ctrl+g")
        await prompt_up(pilot, app)
        await pilot.press(*str(line), "enter")
        assert pane.editor.selection.end == (line - 1, 0)  # Go to line puts the cursor at column 1
        await pilot.press("alt+l")
        await wait_for(pilot, lambda: pane.phase == PREVIEW)
        assert [(s.start, s.end) for s in pane.edit_run.spans] == [(span.start, span.end)]
        await pilot.press("escape")
        await wait_for(pilot, lambda: pane.phase == IDLE)


async def test_find_previous_goes_back_and_wraps(tmp_path):
    path = tmp_path / "f.txt"
    path.write_text("ab ab ab\n")
    app = make_app([path])
    async with app.run_test(size=SIZE) as pilot:
        editor = app.active_pane().editor
        app.session.last_search = "ab"
        editor.move_cursor((0, 4))
        await pilot.press("shift+f3")
        assert editor.selected_offsets() == (3, 5)
        await pilot.press("shift+f3")
        assert editor.selected_offsets() == (0, 2)
        await pilot.press("shift+f3")  # wraps to the last
        assert editor.selected_offsets() == (6, 8) and "wrapped to the bottom" in notices(app)
        await pilot.press("f3")
        assert editor.selected_offsets() == (0, 2)


async def replace(pilot, app, query: str, replacement: str, choice: str) -> None:
    await pilot.press("ctrl+r")
    await prompt_up(pilot, app)
    await pilot.press(*query, "enter")  # over the pre-filled query, selected
    await prompt_up(pilot, app)
    await pilot.press(*replacement, "enter")
    await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
    await pilot.click(f"#{choice}")
    await wait_for(pilot, lambda: not isinstance(app.screen, (ConfirmScreen, PromptScreen)))


async def test_replace_all_literal_and_regex_in_one_undo_step_with_a_count(tmp_path):
    path = tmp_path / "r.py"
    text = "foo(1)\nFoo(2)\nbar = foo\n"
    path.write_text(text)
    app = make_app([path])
    async with app.run_test(size=SIZE) as pilot:
        editor = app.active_pane().editor
        await replace(pilot, app, "Foo", "baz", "all")  # upper case: only that case
        assert editor.buffer_text == "foo(1)\nbaz(2)\nbar = foo\n" and "replaced 1 match" in notices(app)
        await pilot.press("ctrl+z")
        assert editor.buffer_text == text
        await replace(pilot, app, "foo", "qux", "all")  # lower case: any case
        assert editor.buffer_text == "qux(1)\nqux(2)\nbar = qux\n" and "replaced 3 matches" in notices(app)
        await pilot.press("ctrl+z")  # one undo step for all three
        assert editor.buffer_text == text
        await replace(pilot, app, r"/(\w+)\((\d)\)/", r"\2_\1", "all")
        assert editor.buffer_text == "1_foo\n2_Foo\nbar = foo\n"
        await pilot.press("ctrl+z")
        assert editor.buffer_text == text


async def test_replace_next_replaces_one_match_from_the_cursor(tmp_path):
    path = tmp_path / "r.py"
    path.write_text("a a a\n")
    app = make_app([path])
    async with app.run_test(size=SIZE) as pilot:
        editor = app.active_pane().editor
        editor.move_cursor((0, 1))
        await replace(pilot, app, "a", "b", "next")
        assert editor.buffer_text == "a b a\n" and editor.selection.end == (0, 3)
        await replace(pilot, app, "", "c", "next")  # the same query comes back pre-filled
        assert editor.buffer_text == "a b c\n"
        await pilot.press("ctrl+z")
        assert editor.buffer_text == "a b a\n"


async def test_close_tab_asks_when_unsaved_and_the_last_leaves_an_untitled_buffer(tmp_path):
    first, second = tmp_path / "a.py", tmp_path / "b.py"
    first.write_text("a\n")
    second.write_text("b\n")
    app = make_app([first, second])
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("alt+w")  # clean: closes at once
        await wait_for(pilot, lambda: len(app.panes()) == 1)
        assert app.active_pane().editor.buffer.path == second
        await pilot.press("x", "alt+w")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.click("#cancel")
        await wait_for(pilot, lambda: not isinstance(app.screen, ConfirmScreen))
        assert len(app.panes()) == 1 and app.active_pane().editor.unsaved
        await pilot.press("alt+w")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.click("#discard")
        await wait_for(pilot, lambda: len(app.panes()) == 1 and app.active_pane().editor.buffer.path is None)
        assert second.read_text() == "b\n"  # discarded: the file as it was


def test_path_completion_completes_the_common_start_and_lists_the_rest(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "setup.py").write_text("")
    (tmp_path / "sharpen.toml").write_text("")
    assert complete_path(f"{tmp_path}/sr") == (f"{tmp_path}/src/", [])
    assert complete_path(f"{tmp_path}/s") == (f"{tmp_path}/s", ["setup.py", "sharpen.toml", "src/"])
    assert complete_path(f"{tmp_path}/sh") == (f"{tmp_path}/sharpen.toml", [])
    assert complete_path(f"{tmp_path}/nothing") == (f"{tmp_path}/nothing", [])


async def test_tab_completes_a_path_in_the_open_prompt(tmp_path):
    (tmp_path / "module_one.py").write_text("one\n")
    app = make_app([])
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("alt+o")
        await prompt_up(pilot, app)
        await pilot.press(*f"{tmp_path}/mod", "tab", "enter")
        await wait_for(pilot, lambda: app.active_pane() is not None and app.active_pane().editor.buffer.path is not None)
        assert app.active_pane().editor.buffer.path.name == "module_one.py"


async def test_a_failed_edit_names_lines_and_columns_and_its_whole_reason_stays_reachable(tmp_path, tiny_denoiser):
    path = tmp_path / "long.py"
    path.write_text("".join(f"value_{i} = {i} * {i}\n" for i in range(600)))
    app = make_app([path])
    async with app.run_test(size=SIZE) as pilot:
        pane = app.active_pane()
        await with_model(app, pilot, tiny_denoiser)
        pane.editor.select_offsets(0, len(pane.editor.buffer_text))
        await pilot.press("alt+r")  # a rewrite of 600 lines: more than the tiny model's canvas
        await wait_for(pilot, lambda: pane.notice.startswith("edit failed"))
        toast = next(n for n in app._notifications if n.title == "Edit failed")
        assert toast.message.startswith("span 1:1-601:1: ") and "characters" in toast.message, toast.message
        assert pane.notice == f"edit failed: {toast.message}" and toast.timeout >= 20  # the whole reason, long enough to read


async def test_at_80x24_the_footer_keeps_quit_and_keys_also_while_a_preview_is_up(tmp_path, tiny_denoiser):
    from textual.widgets._footer import FooterKey

    path = tmp_path / "f.py"
    path.write_text("def f(x):\n    return x\n")
    app = make_app([path])
    async with app.run_test(size=(80, 24)) as pilot:
        pane = app.active_pane()

        def footer_keys() -> dict:
            return {key.action: key.region for key in app.screen.query(FooterKey)}

        async def footer_shows(*actions):
            # The footer recomposes when the bindings change: wait until its keys are laid out.
            await wait_for(pilot, lambda: all(footer_keys().get(action, (0, 0, 0, 0))[2] > 0 for action in actions))
            keys = footer_keys()
            for action in actions:
                region = keys[action]
                assert region.right <= 80 and region.width > 0, (action, region)
                assert not any(other.overlaps(region) for name, other in keys.items() if name != action), action

        await footer_shows("quit", "help")
        await with_model(app, pilot, tiny_denoiser)
        pane.editor.move_cursor((1, 12))
        await pilot.press("alt+i")
        await wait_for(pilot, lambda: pane.phase == PREVIEW)
        await footer_shows("quit", "help", "accept")


async def test_accepted_n_characters_goes_with_the_next_key(tmp_path, tiny_denoiser):
    path = tmp_path / "f.py"
    path.write_text("def f(x):\n    return x\n")
    app = make_app([path])
    async with app.run_test(size=SIZE) as pilot:
        pane = app.active_pane()
        await with_model(app, pilot, tiny_denoiser)
        pane.editor.move_cursor((1, 12))
        await pilot.press("alt+i")
        await wait_for(pilot, lambda: pane.phase == PREVIEW)
        await pilot.press("tab")
        await wait_for(pilot, lambda: pane.phase == IDLE)
        assert re.match(r"accepted \d+ characters? \(undo restores\)", app.status.notice), app.status.notice
        await pilot.press("left")  # not an edit: before, the note stayed until the buffer changed
        await pilot.pause()
        assert pane.notice == "" and app.status.notice == ""


async def test_form_feed_line_separator_and_lone_cr_are_drawn_as_markers(tmp_path):
    path = tmp_path / "c.py"
    path.write_bytes("a\x0cb = 1\nx = 'p\u2028q'\ny\rz\n".encode())
    app = make_app([path])
    async with app.run_test(size=SIZE) as pilot:
        editor = app.active_pane().editor
        assert editor.document.lines[:3] == ["a\x0cb = 1", "x = 'p\u2028q'", "y\rz"]  # the buffer keeps them
        shown = [editor.get_line(row) for row in range(3)]
        assert [line.plain for line in shown] == ["aLb = 1", "x = 'p\u2424q'", "yMz"]  # one marker per character: columns stay
        for line, column in zip(shown, (1, 6, 1)):
            assert any(span.start <= column < span.end and "reverse" in str(span.style) for span in line.spans), line.spans
        await pilot.pause()
        assert "aLb = 1" in editor.render_line(0).text and "yMz" in editor.render_line(2).text  # on screen, not dropped
