"""HighlightedArea: a TextArea whose syntax tree is built once per document and queried only around the view.

Textual's TextArea builds its document again whenever `language` is set and queries the whole
syntax tree on every edit: seconds per keystroke on a 50,000-line file (docs/editor.md). This
base of the editor (EditorArea) builds the document once, with the language resolved as Textual
resolves it, and highlights a window of rows around the view; it also answers, from the same
tree, what each character of a line is (code, string, comment) for auto-indent (indent.py).
"""
from __future__ import annotations

from textual._tree_sitter import TREE_SITTER, get_language
from textual.document._document_navigator import DocumentNavigator
from textual.document._syntax_aware_document import SyntaxAwareDocumentError
from textual.geometry import Offset
from textual.widgets import TextArea

from .document import MeasuredWrappedDocument, StrictDocument, StrictSyntaxDocument, utf8
from .indent import KindAt

# Prepared highlight queries, one per (language, query text). Preparing one compiles the query
# (about 60 ms for Python's), and every document set on a text area prepared it again: each frame
# of a next-edit draft, each ghost and command preview's first frame, each keystroke while hunks
# were shown. A prepared Query holds no state (Textual runs it through a fresh QueryCursor).
_PREPARED: dict[tuple[object, str], object] = {}


class HighlightedArea(TextArea):
    # Highlighting covers the rows on screen and one screen on each side. Textual's TextArea
    # queries the whole syntax tree on every edit, which made a keystroke in a 50,000-line file
    # cost seconds (docs/editor.md); the query's cost follows the rows it covers, so a window
    # of a few screens costs the same in any file longer than it. Scrolling near the window's
    # edge queries around the new view (about a millisecond).
    _highlight_window: tuple[int, int] = (0, 0)

    def _highlight_margin(self) -> int:
        return max(self.size.height, 40)

    def _view_lines(self) -> tuple[int, int]:
        """The buffer lines [top, bottom) the view shows. With soft wrap a line takes several rows:
        rows taken for lines put the window past the end of a long wrapped file (a crash)."""
        top_row = int(self.scroll_y)
        if not self.soft_wrap:
            return top_row, top_row + self.size.height
        wrapped = self.wrapped_document
        return wrapped.offset_to_location(Offset(0, top_row))[0], wrapped.offset_to_location(Offset(0, top_row + self.size.height))[0] + 1

    def _build_highlight_map(self) -> None:
        if not self._highlight_query:
            return super()._build_highlight_map()
        self._line_cache.clear()
        highlights = self._highlights
        highlights.clear()
        (top, bottom), margin = self._view_lines(), self._highlight_margin()
        first = max(0, top - margin)
        last = min(self.document.line_count, bottom + margin)
        self._highlight_window = (first, last)
        captures = self.document.query_syntax_tree(self._highlight_query, (first, 0), (last, 0))
        for name, nodes in captures.items():
            for node in nodes:
                (start_row, start_column), (end_row, end_column) = node.start_point, node.end_point
                if start_row == end_row:
                    highlights[start_row].append((start_column, end_column, name))
                    continue
                highlights[start_row].append((start_column, None, name))
                for row in range(max(start_row + 1, first), min(end_row, last)):  # only rows in the window
                    highlights[row].append((0, None, name))
                highlights[end_row].append((0, end_column, name))

    def _follow_scroll_with_highlights(self) -> None:
        """Scrolled near the edge of the highlighted window: highlight around the new view."""
        if not self._highlight_query:
            return
        first, last = self._highlight_window
        top, bottom = self._view_lines()
        near = self._highlight_margin() // 2
        if (top < first + near and first > 0) or (bottom > last - near and last < self.document.line_count):
            self._build_highlight_map()
            self.refresh()

    def on_mount(self) -> None:
        self.watch(self, "scroll_y", self._follow_scroll_with_highlights, init=False)

    def _set_document(self, text: str, language: str | None) -> None:
        # The editor's documents split lines at real line breaks only (document.py). Textual's
        # own is never built for a language (it would parse the whole file a second time): the
        # language and its highlight query are resolved as Textual resolves them.
        self._highlight_query = None
        document = StrictDocument(text)
        if language and TREE_SITTER:
            registered = self._languages.get(language)
            tree_language = (registered.language if registered else None) or get_language(language)
            query = registered.highlight_query if registered else self._get_builtin_highlight_query(language)
            if tree_language is not None:
                try:
                    document = StrictSyntaxDocument(text, tree_language)
                    key = (tree_language, query)
                    if key not in _PREPARED:
                        _PREPARED[key] = document.prepare_query(query)
                    self._highlight_query = _PREPARED[key]
                except SyntaxAwareDocumentError:
                    document = StrictDocument(text)
        # The rest is Textual's own _set_document (textual/widgets/_text_area.py), done once.
        self.document = document
        self.wrapped_document = MeasuredWrappedDocument(document, tab_width=self.indent_width)
        self.navigator = DocumentNavigator(self.wrapped_document)
        self._build_highlight_map()
        self.move_cursor((0, 0))
        self._rewrap_and_refresh_virtual_size()

    def character_kinds(self, row: int) -> KindAt | None:
        """What each character of line `row` is, from the syntax tree: "comment" or "string" when
        it sits in a node of that kind (the grammars name them so: comment, line_comment,
        string_content, raw_string_literal, char_literal, ...), "code" otherwise. None without a
        tree (no grammar for the language)."""
        tree = getattr(self.document, "_syntax_tree", None)
        if tree is None:
            return None
        line = self.document.lines[row]
        root = tree.root_node

        def kind(column: int) -> str:
            byte = len(utf8(line[:column]))
            node = root.descendant_for_point_range((row, byte), (row, byte + 1))
            while node is not None and node != root:
                name = node.type
                if "comment" in name:
                    return "comment"
                if "string" in name or name in ("char_literal", "rune_literal", "character_literal"):
                    return "string"
                node = node.parent
            return "code"

        return kind
