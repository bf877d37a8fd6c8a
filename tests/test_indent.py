"""app/tui/indent.py and the editor's Enter / Backspace."""
from __future__ import annotations

from pilot import make_app

from sharpen.app.tui.indent import dedent_to, newline_indent


def test_newline_indent_rules():
    assert newline_indent("def f():", "python", "    ") == "    "
    assert newline_indent("    x = [", None, "    ") == "        "
    assert newline_indent("    return x", "python", "    ") == ""
    assert newline_indent("        pass  # done", "python", "    ") == "    "
    assert newline_indent("    y = 1", "python", "    ") == "    "
    assert newline_indent("    if x:", None, "    ") == "    "  # unknown language: keep the indentation
    assert dedent_to(8, 4) == 4 and dedent_to(6, 4) == 4 and dedent_to(1, 4) == 0


async def test_enter_indents_after_a_block_and_backspace_dedents(tmp_path):
    path = tmp_path / "f.py"
    path.write_text("def f():\n")
    app = make_app([path])
    async with app.run_test(size=(100, 32)) as pilot:
        editor = app.active_pane().editor
        editor.move_cursor((0, 8))
        await pilot.press("enter", *"if x:", "enter", *"return 1", "enter")
        assert editor.buffer_text == "def f():\n    if x:\n        return 1\n    \n"
        editor.move_cursor((3, 4))
        await pilot.press("backspace")
        assert editor.document.lines[3] == ""
        editor.undo()  # one Enter, one undo step
        assert editor.document.lines[3] == "    "
