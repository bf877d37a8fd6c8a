"""The editor's documents: Textual's, with only real line breaks splitting lines.

Textual's Document splits text with `str.splitlines()`, which also breaks at U+2028, U+2029,
NEL, form feed, VT and FS/GS/RS. An edited line holding one of them was saved with `\\n` in
its place: `x = "a\\u2028b"` plus one typed character became a broken string. Here only
`\\n` and `\\r\\n` are line breaks, and `\\r` only in a file whose line ending it is (no `\\n`
anywhere), as in the headless path: the other characters, a lone CR in an LF or CRLF file
included, stay in their line as text.
"""
from __future__ import annotations

import re
from collections.abc import Sequence

from rich.cells import cell_len
from textual.geometry import Size

from textual.document._document import Document, EditResult, Location
from textual.document._syntax_aware_document import SyntaxAwareDocument
from tree_sitter import Parser
from textual.document._wrapped_document import WrappedDocument
from textual.expand_tabs import get_tab_widths

LINE_BREAK = re.compile(r"\r\n|\n")
CR_LINE_BREAK = re.compile(r"\r\n|\r|\n")  # a file with CR line endings (classic Mac)


def utf8(text: str) -> bytes:
    """The bytes tree-sitter parses. A lone surrogate (typed, or restored from recovery, which
    keeps one on purpose) encodes as its three bytes instead of raising: the parser reads it as
    invalid UTF-8, and saving still refuses it with a plain line (core/files.py)."""
    return text.encode("utf-8", "surrogatepass")


LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def displayable(text: str) -> str:
    """`text` with each lone surrogate as U+FFFD: one character for one (offsets and columns stay)
    and three UTF-8 bytes for three (highlight byte offsets stay), where a surrogate itself can
    be neither drawn nor encoded by Textual's own documents."""
    return LONE_SURROGATE.sub("\ufffd", text)


# What a line may hold that a terminal cannot draw as itself: the C0 controls but tab (Rich drops
# BEL, BS, VT, FF and CR from a Text, so a form feed or a lone CR was invisible and every column
# after it shifted one to the left; the others would reach the terminal raw), DEL, and the
# Unicode line and paragraph separators (kept inside their line, above). Each is drawn as one
# marker of as many UTF-8 bytes (Textual places highlights by byte offsets in the drawn text):
# a control as its caret-notation letter (^L's L), styled as a marker by the widget; U+2028 and
# U+2029 as the symbols for newline and paragraph.
INVISIBLE = re.compile("[\x00-\x08\x0a-\x1f\x7f\u2028\u2029]")
MARKERS = {**{chr(c): chr(c + 64) for c in range(32)}, "\x7f": "?", "\u2028": "\u2424", "\u2029": "\u204b"}


def drawn_line(line: str) -> tuple[str, list[int]]:
    """`line` as the screen draws it (displayable, and each invisible character as its marker,
    one character for one), and the columns of those markers."""
    line = displayable(line)
    if INVISIBLE.search(line) is None:
        return line, []
    columns = [m.start() for m in INVISIBLE.finditer(line)]
    return INVISIBLE.sub(lambda m: MARKERS[m.group()], line), columns


def cell_width(line: str, tab_width: int) -> int:
    """The cells `line` takes on screen (its markers one each: Rich counts a control as none)."""
    return cell_len(drawn_line(line)[0].expandtabs(tab_width))


def line_break(text: str, cr_file: bool | None = None) -> re.Pattern:
    """The breaks of `text`; `cr_file` None decides from the text itself (CR, and no LF)."""
    if cr_file is None:
        cr_file = "\r" in text and "\n" not in text
    return CR_LINE_BREAK if cr_file else LINE_BREAK


def split_lines(text: str, cr_file: bool | None = None) -> list[str]:
    """Lines without their breaks; a text ending in a break (or empty) ends in an empty line,
    as Textual's Document keeps it."""
    return line_break(text, cr_file).split(text)


class StrictDocument(Document):
    """Lines split at real line breaks only; and the whole text and the widest line kept between
    edits. TextArea reads `text` once per rendered line (its placeholder check) and the widest
    line once per edit (its virtual size): each a pass over every line, which made a keystroke
    in a 50,000-line file cost tens of milliseconds more than in a small one."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self._lines = split_lines(text)
        self._text: str | None = None
        self._cell_widths: tuple[int, list[int]] | None = None  # (tab width, cell width per line)
        self._widest: int | None = None  # max of those widths; None: measure again
        # Counts edits, so a wrapped view can tell whether its tables still describe these lines.
        self.revision = 0

    @property
    def text(self) -> str:
        if self._text is None:
            self._text = super().text
        return self._text

    def get_size(self, tab_width: int) -> Size:
        if self._cell_widths is None or self._cell_widths[0] != tab_width:
            self._cell_widths = (tab_width, [cell_width(line, tab_width) for line in self._lines])
            self._widest = None
        if self._widest is None:
            self._widest = max(self._cell_widths[1], default=0)
        return Size(self._widest, len(self._lines))

    @property
    def _cr_file(self) -> bool:
        return self.newline == "\r"

    def replace_range(self, start: Location, end: Location, text: str) -> EditResult:
        # Textual's own replace_range, with split_lines for str.splitlines.
        top, bottom = sorted((start, end))
        top_row, top_column = top
        bottom_row, bottom_column = bottom
        insert_lines = split_lines(text, self._cr_file)
        lines = self._lines
        replaced_text = self.get_text_range(top, bottom)
        after_selection = lines[bottom_row][bottom_column:] if bottom_row < len(lines) else ""
        before_selection = lines[top_row][:top_column] if top_row < len(lines) else ""
        insert_lines[0] = before_selection + insert_lines[0]
        destination_column = len(insert_lines[-1])
        insert_lines[-1] = insert_lines[-1] + after_selection
        lines[top_row:bottom_row + 1] = insert_lines
        self._text = None
        self.revision += 1
        if self._cell_widths is not None:  # only the rows the edit touched are measured again
            tab_width, widths = self._cell_widths
            removed = max(widths[top_row:bottom_row + 1], default=0)
            added = [cell_width(line, tab_width) for line in insert_lines]
            widths[top_row:bottom_row + 1] = added
            if self._widest is not None:  # the widest line is measured again only when it shrank
                widest = max(added, default=0)
                self._widest = max(self._widest, widest) if widest >= self._widest or removed < self._widest else None
        return EditResult((top_row + len(insert_lines) - 1, destination_column), replaced_text)


class StrictSyntaxDocument(SyntaxAwareDocument, StrictDocument):
    """SyntaxAwareDocument's tree-sitter bookkeeping over StrictDocument's lines, with the
    source bytes kept between edits.

    Textual re-parses after every edit through a Python callback that tree-sitter calls once per
    line it reads (thousands of calls a keystroke at 50,000 lines, since reusing each top-level
    node costs a read), and finds an edit's byte offset by encoding every line above it. Here
    the document keeps its UTF-8 bytes (every line followed by the newline, as the callback
    served them) and each line's byte length: an edit splices the bytes, the offset is a sum
    over ints, and tree-sitter parses from the buffer without calling back into Python. The
    tree also keeps its source, so text predicates in highlight queries read real text.
    """

    def __init__(self, text: str, language) -> None:
        StrictDocument.__init__(self, text)
        self.language = language
        self._parser = Parser(language)
        newline = self.newline
        self._line_bytes = [len(utf8(line)) for line in self._lines]  # without the newline
        self._source = bytearray(utf8(newline.join(self._lines) + newline))
        self._syntax_tree = self._parser.parse(bytes(self._source))

    def _location_to_byte_offset(self, location: Location) -> int:
        row, column = location
        lines = self._lines
        above = sum(self._line_bytes[:row]) + row * len(self.newline)
        return above + (len(utf8(lines[row][:column])) if row < len(lines) else 0)

    def _location_to_point(self, location: Location) -> tuple[int, int]:
        row, column = location  # Textual's, with the encoding that keeps a lone surrogate
        return row, (len(utf8(self._lines[row][:column])) if row < len(self._lines) else 0)

    def replace_range(self, start: Location, end: Location, text: str) -> EditResult:
        top, bottom = sorted((start, end))
        start_byte, old_end_byte = self._location_to_byte_offset(top), self._location_to_byte_offset(bottom)
        start_point, old_end_point = self._location_to_point(top), self._location_to_point(bottom)
        result = StrictDocument.replace_range(self, start, end, text)
        end_location = result.end_location
        self._line_bytes[top[0]:bottom[0] + 1] = [len(utf8(line)) for line in self._lines[top[0]:end_location[0] + 1]]
        # The inserted text as the document holds it (its line breaks are the document's newline).
        inserted = utf8(self.get_text_range(top, end_location))
        self._source[start_byte:old_end_byte] = inserted
        self._syntax_tree.edit(
            start_byte=start_byte, old_end_byte=old_end_byte, new_end_byte=start_byte + len(inserted),
            start_point=start_point, old_end_point=old_end_point, new_end_point=self._location_to_point(end_location),
        )
        # An immutable copy (a fraction of a millisecond at 50,000 lines): the tree keeps the
        # buffer it was parsed from, and the bytearray is spliced by the next edit.
        self._syntax_tree = self._parser.parse(bytes(self._source), self._syntax_tree)
        return result


class RowTable(Sequence):
    """A per-line table of an unwrapped document, computed when read: with soft wrap off row y is
    line y, so WrappedDocument's lists (the wrap offsets [], the line of each row (y, 0), the
    rows of each line [y]) are functions of the index. Kept as lists they were three Python
    objects per line, rebuilt for every line below an Enter (tens of ms at 50,000 lines) and
    walked by every full garbage collection."""

    def __init__(self, count: int, item) -> None:
        self.count, self.item = count, item

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self.item(i) for i in range(*index.indices(self.count))]
        if index < 0:
            index += self.count
        if not 0 <= index < self.count:
            raise IndexError(index)
        return self.item(index)


def _no_wrap(row: int) -> list[int]:
    return []


def _line_of_row(row: int) -> tuple[int, int]:
    return (row, 0)


def _rows_of_line(row: int) -> list[int]:
    return [row]


class MeasuredWrappedDocument(WrappedDocument):
    """Textual's WrappedDocument with its height kept instead of summed over every line each
    time it is read: TextArea reads it once per rendered line, which made every repaint of a
    50,000-line file cost seconds (docs/textual-upstream.md). Recomputed once per (re)wrap.

    A wrap at the width and tab width it already has is skipped while no edit has happened since
    the tables were last brought up to date: TextArea asks for one at every layout pass (16 times
    while a file opens), each a pass over every line's tabs. Most edits keep the tables current
    through wrap_range, but an edit that widens or narrows the gutter (9 -> 10 lines) calls
    wrap() instead, at an unchanged width: skipping that one left the tables a line short and
    crashed the editor. So the skip also compares the document's edit count. With soft wrap off
    (the editor's default) rows are lines: the per-line tables are RowTables and an edit updates
    only the tab widths of the lines it touched.
    """

    _height: int | None = None
    _wrapped_for: tuple[int, int | None, int] | None = None  # (width, tab width, document revision)
    # Set before an undo or redo of several edits: Textual re-wraps such a batch over one range
    # (the smallest top, the largest bottoms) that the edits' line shifts can put off by a
    # line, which left the tables a line short. The next wrap_range re-wraps everything instead.
    rewrap_whole: bool = False

    @property
    def height(self) -> int:
        if self._width == 0:  # soft wrap off: one row per line, no sum over every line after each edit
            return len(self._wrap_offsets)
        if self._height is None:
            self._height = sum(len(offsets) + 1 for offsets in self._wrap_offsets)
        return self._height

    def wrap(self, width: int, tab_width: int | None = None) -> None:
        if self._wrapped_for == (width, tab_width, self.document.revision):
            return
        self.rewrap_whole = False
        self._height = None
        if width == 0:
            self._unwrapped(tab_width)
        else:
            super().wrap(width, tab_width)
        self._wrapped_for = (width, tab_width, self.document.revision)
        self._height = None

    def _tab_widths(self, line: str):
        """A line's tab widths as WrappedDocument measures them; lines without a tab (most) share
        one immutable answer instead of a list each."""
        if "\t" in line:
            return tuple(w for _, w in get_tab_widths(line, self._tab_width))
        return (0,) if line else ()

    def _unwrapped(self, tab_width: int | None) -> None:
        """What WrappedDocument.wrap(0) computes, without its per-line regex pass and lists."""
        self._width = 0
        if tab_width:
            self._tab_width = tab_width
        lines = self.document.lines
        self._set_row_tables(len(lines))
        self._tab_width_cache = [self._tab_widths(line) for line in lines]

    def _set_row_tables(self, count: int) -> None:
        self._wrap_offsets = RowTable(count, _no_wrap)
        self._offset_to_line_info = RowTable(count, _line_of_row)
        self._line_index_to_offsets = RowTable(count, _rows_of_line)

    def wrap_range(self, start: Location, old_end: Location, new_end: Location) -> None:
        self._height = None
        if self.rewrap_whole:
            return self.wrap(self._width, self._tab_width)
        if self._wrapped_for is not None:  # the tables follow this edit: a same-width wrap may skip again
            self._wrapped_for = (*self._wrapped_for[:2], self.document.revision)
        if self._width != 0:
            return super().wrap_range(start, old_end, new_end)
        # The rows WrappedDocument.wrap_range recomputes, clamped as it clamps them.
        lines = self.document.lines
        old_last, new_last = len(self._tab_width_cache) - 1, len(lines) - 1
        first = max(0, min(start[0], old_last, new_last))
        top, old_bottom = sorted((first, max(0, min(old_end[0], old_last))))
        new_bottom = max(first, max(0, min(new_end[0], new_last)))
        self._set_row_tables(len(lines))
        self._tab_width_cache[top:old_bottom + 1] = [self._tab_widths(line) for line in lines[top:new_bottom + 1]]
