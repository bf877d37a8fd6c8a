"""app/tui/indent.py and the editor's Enter / Backspace."""
from __future__ import annotations

import contextlib

from pilot import make_app

from sharpen.app.tui.indent import closing_dedent, dedent_to, newline_indent, splits_pair


def test_newline_indent_rules():
    assert newline_indent("def f():", "python", "    ") == "    "
    assert newline_indent("    x = [", None, "    ") == "        "
    assert newline_indent("    return x", "python", "    ") == ""
    assert newline_indent("        pass  # done", "python", "    ") == "    "
    assert newline_indent("    y = 1", "python", "    ") == "    "
    assert newline_indent("    if x:", None, "    ") == "    "  # unknown language: keep the indentation
    assert dedent_to(8, 4) == 4 and dedent_to(6, 4) == 4 and dedent_to(1, 4) == 0


@contextlib.asynccontextmanager
async def editing(tmp_path, name: str, text: str):
    """The editor on a file holding `text`: (pilot, its EditorArea)."""
    path = tmp_path / name
    path.write_text(text)
    app = make_app([path])
    async with app.run_test(size=(100, 32)) as pilot:
        yield pilot, app.active_pane().editor


async def test_enter_indents_after_a_block_and_backspace_dedents(tmp_path):
    async with editing(tmp_path, "f.py", "def f():\n") as (pilot, editor):
        editor.move_cursor((0, 8))
        await pilot.press("enter", *"if x:", "enter", *"return 1", "enter")
        assert editor.buffer_text == "def f():\n    if x:\n        return 1\n    \n"
        editor.move_cursor((3, 4))
        await pilot.press("backspace")
        assert editor.document.lines[3] == ""
        editor.undo()  # one Enter, one undo step
        assert editor.document.lines[3] == "    "


def test_without_a_tree_a_python_comment_is_not_code():
    assert newline_indent("    x = 1  # why:", "python", "    ") == "    "
    assert newline_indent("    if x:  # why", "python", "    ") == "        "
    assert newline_indent("    # todo: (", "python", "    ") == "    "
    assert newline_indent("x = '#'; y = [", "python", "    ") == "    "  # the # is in a string


def test_prose_keeps_the_indentation_and_pairs_split():
    assert newline_indent("  see [", "markdown", "    ") == "  "
    assert splits_pair("function f() {", "}", "javascript") and splits_pair("  call(", ")", None)
    assert not splits_pair("  call(", "x)", None) and not splits_pair("x = 1", ")", None)
    assert closing_dedent("        ", "}", 4, "javascript") == 4
    assert closing_dedent("    x", "}", 4, "javascript") is None and closing_dedent("    ", "a", 4, "rust") is None
    assert closing_dedent("    ", ")", 4, None) is None and closing_dedent("    ", ")", 4, "markdown") is None


async def test_the_syntax_tree_decides_what_is_code(tmp_path):
    """Colons and brackets inside strings and comments do not indent; a trailing comment does not
    hide the colon before it; "return" inside a string is text, not a block's end."""
    text = 'x = "a:"\ny = "f("\nif x:  # note: (\n    z = 1  # see [\ns = """\n    return 1\n"""\n'
    async with editing(tmp_path, "f.py", text) as (pilot, editor):
        kinds = editor.character_kinds(0)
        assert kinds(6) == "string" and kinds(0) == "code"
        assert editor.character_kinds(2)(10) == "comment"
        for row, expected in ((0, ""), (1, ""), (2, "    "), (3, "    "), (5, "    ")):
            line = editor.document.lines[row]
            assert newline_indent(line, "python", "    ", editor.character_kinds(row)) == expected, row
        assert newline_indent("    return 1", "python", "    ") == ""  # the same line as code does dedent
        editor.move_cursor((3, len(editor.document.lines[3])))
        await pilot.press("enter", *"w")
        assert editor.document.lines[4] == "    w"


async def test_enter_between_braces_and_a_closing_brace_dedents(tmp_path):
    async with editing(tmp_path, "f.js", "function f() {}\n") as (pilot, editor):
        editor.move_cursor((0, 14))
        await pilot.press("enter", *"if (x) {", "enter", *"y();", "enter", "}")
        assert editor.buffer_text == "function f() {\n    if (x) {\n        y();\n    }\n}\n"
        editor.undo()  # the dedented brace is one edit
        assert editor.document.lines[3] == "        "
