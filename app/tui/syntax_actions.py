"""Selections by syntax and "Fill body": the editor's side of core.syntax (docs/syntax.md).

A mixin for SharpenApp. The language comes from the buffer's file name (core.syntax detects
it with pygments; content decides for untitled buffers); files without a grammar step
cursor -> line -> paragraph -> whole text. Parsing runs on demand: a few milliseconds.

- Expand selection: the enclosing syntax node. Each expansion is remembered per buffer.
- Shrink selection: back down those expansions; for a selection made by hand, the inner
  node that holds the cursor.
- Fill body: the body of the function or block at the cursor (on a `def`/`for` line: that
  one), masked and infilled like Infill, with the configured candidates and length.
"""
from __future__ import annotations

from ...core.spans import Span


class SyntaxActions:
    """Needs from the app: active_pane(), _ready_pane(), notify(), config, denoiser."""

    def _syntax_doc(self, pane):
        from ...core.syntax import parse_document

        path = pane.editor.buffer.path
        return parse_document(pane.editor.buffer_text, path=str(path) if path is not None else None)

    def action_expand_selection(self) -> None:
        pane = self.active_pane()
        if pane is None:
            return
        from ...core.syntax import expand

        editor = pane.editor
        start, end = editor.selected_offsets()
        stack = pane.selection_stack
        if stack and stack[-1][1] != (start, end):
            stack.clear()  # the selection moved since the last expansion: start a new history
        new = expand(self._syntax_doc(pane), start, end)
        if new == (start, end):
            self.notify("nothing larger to select", timeout=1.5)
            return
        stack.append(((start, end), new))
        editor.select_offsets(*new)
        editor.scroll_cursor_visible()

    def action_shrink_selection(self) -> None:
        pane = self.active_pane()
        if pane is None:
            return
        editor = pane.editor
        start, end = editor.selected_offsets()
        stack = pane.selection_stack
        if stack and stack[-1][1] == (start, end):
            new = stack.pop()[0]  # exactly undoes the last expansion
        else:
            stack.clear()
            from ...core.syntax import shrink

            cursor = editor.offset_of(editor.selection.end)
            new = shrink(self._syntax_doc(pane), start, end, cursor)
        if new == (start, end):
            self.notify("nothing smaller to select", timeout=1.5)
            return
        editor.select_offsets(*new)
        editor.scroll_cursor_visible()

    def action_fill_body(self) -> None:
        pane = self.active_pane()
        if pane is None:
            return
        from ...core.syntax import body_range

        editor = pane.editor
        doc = self._syntax_doc(pane)
        span = body_range(doc, editor.offset_of(editor.selection.end))
        if span is None:
            self.notify("no function or block body at the cursor", severity="warning", timeout=3)
            return
        pane = self._ready_pane()
        if pane is None:
            return
        start, end = span
        pane.selection_stack.clear()
        editor.select_offsets(start, end)  # shows what is masked once the preview closes
        budget = self.config.editing.infill_tokens if start == end else None
        pane.start([Span(start, end, "infill", max_tokens=budget)], self.denoiser, self.config)
