"""EditorArea: the code editor of one buffer (a TextArea) plus the regions marked for a parallel edit.

TextArea has one selection, so marked regions are this widget's own list of character
offsets, painted by overriding `get_line`. Offsets count characters of the buffer's text
joined with '\\n' (what the engine sees), whatever the file's line endings are.
"""
from __future__ import annotations

from typing import Callable, Sequence

from textual.document._document import Location
from textual.document._edit import Edit
from textual.binding import Binding
from rich.text import Text
from textual.reactive import reactive
from textual.widgets import TextArea
from textual.widgets.text_area import Selection


from ...core.changes import ChangeSet
from .buffer_file import BufferFile, language_for
from .document import drawn_line
from .highlighted_area import HighlightedArea
from .bindings import inherited_bindings
from .indent import closing_dedent, dedent_to, indent_type_of, indent_width_of, newline_indent, splits_pair


def pasted_text(text: str) -> str:
    """A paste with its CRLF and CR line breaks as LF, the break every document splits at."""
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _is_command_key(key: str) -> bool:
    return key.startswith(("alt+", "ctrl+", "super+"))


class EditorArea(HighlightedArea, inherit_bindings=False):
    """The buffer's TextArea: syntax highlighting, line numbers, marks, dirty state."""

    COMPONENT_CLASSES = TextArea.COMPONENT_CLASSES | {"editor-area--marked", "editor-area--control"}

    DEFAULT_CSS = """
    EditorArea {
        border: none;
        padding: 0;
        &:focus { border: none; }
        & > .editor-area--marked { background: $accent 35%; text-style: underline; }
        & > .editor-area--control { color: $warning; text-style: reverse; }
    }
    """

    # TextArea binds F6 to Select line, F7 to Select all and Ctrl+PageUp/PageDown to scrolling
    # sideways; sharpen binds them to Mark region, Fill marked (the pane) and the previous/next
    # tab (the app), and the focused TextArea's binding came first, so those keys never reached
    # the commands the help lists. TextArea's bindings are taken whole, less those keys
    # (tests/test_editor_tables.py holds every key sharpen binds against these).
    BINDINGS = [
        *inherited_bindings(TextArea, without=("f6", "f7", "ctrl+pageup", "ctrl+pagedown")),
        # TextArea binds no key to the start and end of the document; every editor does.
        Binding("ctrl+home", "cursor_document_start", "Document start", show=False),
        Binding("ctrl+end", "cursor_document_end", "Document end", show=False),
        Binding("ctrl+shift+home", "cursor_document_start(True)", "Select to document start", show=False),
        Binding("ctrl+shift+end", "cursor_document_end(True)", "Select to document end", show=False),
    ]

    dirty: reactive[bool] = reactive(False)
    mark_count: reactive[int] = reactive(0)

    def __init__(self, buffer: BufferFile, soft_wrap: bool = False, **kwargs) -> None:
        # TextArea builds a document from its text, and again whenever `language` is set: each
        # a pass over every line, and a parse, seconds on a 50,000-line file. Start it empty,
        # decide the language first, build the document once here (one parse, one wrap) and set
        # `language` without its watcher (which would build it again).
        super().__init__("", soft_wrap=soft_wrap, tab_behavior="indent", show_line_numbers=True, **kwargs)
        self.indent_type = indent_type_of(buffer.original)
        if self.indent_type == "spaces":  # Enter, Tab and Backspace step by the file's own unit
            self.set_reactive(TextArea.indent_width, indent_width_of(buffer.original, self.indent_width))
        language = language_for(buffer.path, buffer.original, self.available_languages)
        self._set_document(buffer.original, language)
        self.set_reactive(EditorArea.language, language)
        self.buffer = buffer
        self.saved_lines = list(self.document.lines)
        self.marks: list[tuple[int, int]] = []  # sorted, non-overlapping [start, end) offsets
        self._mark_rows: dict[int, list[tuple[int, int]]] = {}
        # Called synchronously before the buffer changes, so a run is stopped before its text moves.
        self.before_change: Callable[[], bool] | None = None  # True when it stopped a run or preview
        # Others holding offsets into this buffer (the pane's selection stack): told of every
        # change, as a ChangeSet, when `follows()` says they hold any (offsets cost per keystroke).
        self.after_change: Callable[[ChangeSet], None] | None = None
        self.follows: Callable[[], bool] = lambda: False
        # Called before a typed character goes in: a finished preview steps aside first (the pane).
        self.before_typing: Callable[[], None] | None = None
        self.yield_tab = False  # while a run or preview is up, Tab means Accept (an app binding)

    # -- text and offsets ---------------------------------------------------------------

    @property
    def buffer_text(self) -> str:
        """The text with '\\n' line breaks: what runs, marks and find work on."""
        return "\n".join(self.document.lines)

    def offset_of(self, location: Location) -> int:
        row, column = location
        lines = self.document.lines
        return sum(len(line) + 1 for line in lines[:row]) + column

    def location_of(self, offset: int) -> Location:
        for row, line in enumerate(self.document.lines):
            if offset <= len(line):
                return (row, offset)
            offset -= len(line) + 1
        last = len(self.document.lines) - 1
        return (last, len(self.document.lines[last]))

    def selected_offsets(self) -> tuple[int, int]:
        start, end = sorted(self.selection)
        return self.offset_of(start), self.offset_of(end)

    def select_offsets(self, start: int, end: int) -> None:
        self.selection = Selection(self.location_of(start), self.location_of(end))

    def mark_saved(self) -> None:
        self.saved_lines = list(self.document.lines)
        self.dirty = False

    def check_consume_key(self, key: str, character: str | None = None) -> bool:
        if (key == "tab" and self.yield_tab) or _is_command_key(key):
            return False
        return super().check_consume_key(key, character)

    async def _on_key(self, event) -> None:
        # Terminals send Alt+I as ESC i, which arrives with a printable character: without this
        # the TextArea would type "i" over the selection instead of running the Infill binding.
        if _is_command_key(event.key):
            event.prevent_default()
            return
        # A burst of Alt chords (ESC i ESC i ...) arrives as Alt chords: the editor's driver parses
        # them so (terminal.ChordParser; Textual's own parser typed "^i", docs/textual-upstream-keys.md).
        if self.before_typing is not None and (event.is_printable or event.key == "enter"):
            self.before_typing()
        if event.key == "enter" and not self.read_only:
            # Auto-indent (app/tui/indent.py): one edit, so one undo step.
            event.prevent_default()
            event.stop()
            self._enter_with_indent()
        elif event.character and len(event.character) == 1 and not self.read_only and self.selection.is_empty:
            row, column = self.selection.end
            back_to = closing_dedent(self.document.lines[row][:column], event.character, self.indent_width, self.language)
            if back_to is not None and self.indent_type == "spaces":
                event.prevent_default()
                event.stop()
                self._replace_via_keyboard(event.character, (row, back_to), (row, column))

    async def _on_paste(self, event) -> None:
        # Terminals send a pasted line break as CR (tmux paste-buffer -p, most bracketed pastes)
        # or CRLF: in an LF file a CR is text, so without this a pasted block became one line
        # and was saved with lone CRs. Every break of a paste is the document's line break.
        if self.read_only:
            return
        text = pasted_text(event.text)
        if result := self._replace_via_keyboard(text, *self.selection):
            self.move_cursor(result.end_location)
            self.focus()
        event.prevent_default()

    def _enter_with_indent(self) -> None:
        top, bottom = sorted(self.selection)
        row, column = top
        line = self.document.lines[row]
        before, after = line[:column], self.document.lines[bottom[0]][bottom[1]:]
        kinds = self.character_kinds(row)
        unit = "\t" if self.indent_type == "tabs" else " " * self.indent_width
        indent = newline_indent(before, self.language, unit, kinds)
        if splits_pair(before, after, self.language, kinds):
            # {|} -> the cursor on an indented line of its own, the partner below at the line's indentation
            own = indent[:len(indent) - len(unit)]
            self._replace_via_keyboard("\n" + indent + "\n" + own, top, bottom)
            self.move_cursor((row + 1, len(indent)))
            return
        self._replace_via_keyboard("\n" + indent, top, bottom)

    def action_cursor_document_start(self, select: bool = False) -> None:
        self.move_cursor((0, 0), select=select)

    def action_cursor_document_end(self, select: bool = False) -> None:
        self.move_cursor(self.document.end, select=select)

    def action_delete_left(self) -> None:
        """Backspace: in a line's leading spaces, back one indent level; elsewhere one character."""
        row, column = self.selection.end
        line = self.document.lines[row] if row < len(self.document.lines) else ""
        if self.selection.is_empty and column > 0 and self.indent_type == "spaces" and not line[:column].strip(" "):
            self._delete_via_keyboard((row, dedent_to(column, self.indent_width)), (row, column))
            return
        super().action_delete_left()

    # -- edits --------------------------------------------------------------------------

    def _recompute_cursor_offset(self) -> None:
        # Textual's undo and redo refresh the size (and with it the scrollbars, whose watcher
        # scrolls to the cursor) before they move the cursor back: an undo that removed the
        # cursor's line while a scrollbar came or went asked for a line past the end and crashed.
        # The offset is computed for the cursor clamped into the document; the cursor itself
        # is moved by the undo right after.
        lines = self.document.lines
        row, column = self.cursor_location
        row = min(row, len(lines) - 1)
        column = min(column, len(lines[row]))
        self._cursor_offset = self.wrapped_document.location_to_offset((row, column))

    def edit(self, edit: Edit):
        if self.before_change is not None:
            self.before_change()
        if not self._tracking():  # the common case: no offsets to compute per keystroke
            return super().edit(edit)
        start, end = sorted((edit.from_location, edit.to_location))
        done = []
        self._replace_tracked(start, end, lambda: done.append(super(EditorArea, self).edit(edit)), lambda: done[0].end_location)
        return done[0]

    def undo(self) -> None:
        if self.before_change is not None and self.before_change():
            return  # Ctrl+Z over a preview or a run just drops it: the buffer has nothing to undo yet
        super().undo()

    def redo(self) -> None:
        if self.before_change is not None and self.before_change():
            return
        super().redo()

    # Undo and redo bypass edit(): with marks (or other offsets) to keep, their edits run one at
    # a time so each one's range is known in the text it applies to, and the marks follow.
    # Undoing an edit puts [top, bottom) of the text before it back; redoing it replaces that range again.
    def _undo_batch(self, edits: Sequence[Edit]) -> None:
        if not self._tracking():
            self.wrapped_document.rewrap_whole = len(edits) > 1
            return super()._undo_batch(edits)
        for edit in reversed(edits):
            self._replace_tracked(edit.top, edit._edit_result.end_location, lambda e=edit: super(EditorArea, self)._undo_batch([e]),
                                  lambda e=edit: e.bottom)

    def _redo_batch(self, edits: Sequence[Edit]) -> None:
        if not self._tracking():
            self.wrapped_document.rewrap_whole = len(edits) > 1
            return super()._redo_batch(edits)
        for edit in edits:
            self._replace_tracked(edit.top, edit.bottom, lambda e=edit: super(EditorArea, self)._redo_batch([e]),
                                  lambda e=edit: e._edit_result.end_location)

    def _tracking(self) -> bool:
        return bool(self.marks) or self.follows()

    def _replace_tracked(self, start: Location, end: Location, replace: Callable[[], object], new_end: Callable[[], Location]) -> None:
        """Run `replace`, which turns [start, end) of the document into [start, new_end()), and move
        every tracked offset through that change."""
        start_offset, end_offset = self.offset_of(start), self.offset_of(end)
        replace()
        inserted = self.document.get_text_range(start, new_end())
        if self.document.newline != "\n":  # offsets count the text joined with '\n'
            inserted = inserted.replace(self.document.newline, "\n")
        changes = ChangeSet.of([(start_offset, end_offset, inserted)])
        self._follow_marks(changes)
        if self.after_change is not None:
            self.after_change(changes)

    @property
    def unsaved(self) -> bool:
        """Computed now, not from `dirty`: that one follows a Changed message that may still be queued."""
        return self.document.lines != self.saved_lines

    def _on_text_area_changed(self, event: TextArea.Changed) -> None:
        self.dirty = self.unsaved

    # -- marks --------------------------------------------------------------------------

    def add_mark(self, start: int, end: int) -> str | None:
        """Add [start, end) to the marks; returns why not, or None when added."""
        if start >= end:
            return "select some text to mark first"
        if any(start < e and s < end for s, e in self.marks):
            return "that selection overlaps a marked region"
        self.marks = sorted([*self.marks, (start, end)])
        self._marks_changed()
        return None

    def clear_marks(self) -> None:
        if self.marks:
            self.marks = []
            self._marks_changed()

    def _follow_marks(self, changes: ChangeSet) -> None:
        """Keep marks on their text through a change; a mark the change cuts into is dropped
        (its text is no longer what was marked)."""
        if not self.marks:
            return
        self.marks = [moved for s, e in self.marks if (moved := changes.map_range(s, e)) is not None]
        self._marks_changed()

    def _marks_changed(self) -> None:
        rows: dict[int, list[tuple[int, int]]] = {}
        for start, end in self.marks:
            (r0, c0), (r1, c1) = self.location_of(start), self.location_of(end)
            for row in range(r0, r1 + 1):
                line_length = len(self.document.lines[row])
                rows.setdefault(row, []).append((c0 if row == r0 else 0, c1 if row == r1 else line_length))
        self._mark_rows = rows
        self.mark_count = len(self.marks)
        self._line_cache.clear()  # TextArea caches rendered lines; marks are not in its cache key
        self.refresh()

    def get_line(self, line_index: int):
        # Not TextArea's own: a Text made from the raw line drops a form feed or a lone CR (invisible,
        # and every column after it shifted). A lone surrogate (typed, or restored from recovery) is
        # shown as U+FFFD, three UTF-8 bytes like the surrogate in the syntax document (document.utf8),
        # and a control as a marker of its own size, so every highlight offset still lands. The
        # buffer keeps them; saving refuses a surrogate.
        plain, markers = drawn_line(self.document.get_line(line_index))
        line = Text(plain, end="", no_wrap=True)
        if markers:
            style = self.get_component_rich_style("editor-area--control")
            for column in markers:
                line.stylize(style, column, column + 1)
        ranges = self._mark_rows.get(line_index)
        if ranges:
            style = self.get_component_rich_style("editor-area--marked")
            for start, end in ranges:
                line.stylize(style, start, end)
        return line
