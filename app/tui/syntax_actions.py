"""Selections by syntax and "Fill body": the editor's side of core.syntax (docs/syntax.md).

Functions of one EditorPane. The language comes from the buffer's file name (core.syntax
detects it with pygments; content decides for untitled buffers); files without a grammar step
cursor -> line -> paragraph -> whole text. Parsing runs on demand: a few milliseconds.

- Expand selection: the enclosing syntax node. Each expansion is remembered per buffer (and
  moves with the text when the buffer changes elsewhere).
- Shrink selection: back down those expansions; for a selection made by hand, the inner
  node that holds the cursor.
- Fill body: the body of the function or block at the cursor (on a `def`/`for` line: that
  one): the span to mask and infill like Infill, with the configured candidates and length.
"""
from __future__ import annotations

from ...core import syntax
from .session import Pane


def syntax_document(pane: Pane) -> syntax.SyntaxDoc:
    path = pane.editor.buffer.path
    return syntax.parse_document(pane.editor.buffer_text, path=str(path) if path is not None else None)


def expand_selection(pane: Pane) -> None:
    editor = pane.editor
    start, end = editor.selected_offsets()
    stack = pane.selection_stack
    if stack and stack[-1][1] != (start, end):
        stack.clear()  # the selection moved since the last expansion: start a new history
    new = syntax.expand(syntax_document(pane), start, end)
    if new == (start, end):
        pane.notify("nothing larger to select", timeout=1.5)
        return
    stack.append(((start, end), new))
    editor.select_offsets(*new)
    editor.scroll_cursor_visible()


def shrink_selection(pane: Pane) -> None:
    editor = pane.editor
    start, end = editor.selected_offsets()
    stack = pane.selection_stack
    if stack and stack[-1][1] == (start, end):
        new = stack.pop()[0]  # exactly undoes the last expansion
    else:
        stack.clear()
        cursor = editor.offset_of(editor.selection.end)
        new = syntax.shrink(syntax_document(pane), start, end, cursor)
    if new == (start, end):
        pane.notify("nothing smaller to select", timeout=1.5)
        return
    editor.select_offsets(*new)
    editor.scroll_cursor_visible()


def body_at_cursor(pane: Pane) -> tuple[int, int] | None:
    """The body of the function or block at the cursor (None, said to the user, when there is none)."""
    editor = pane.editor
    span = syntax.body_range(syntax_document(pane), editor.offset_of(editor.selection.end))
    if span is None:
        pane.notify("no function or block body at the cursor", severity="warning", timeout=3)
    return span
