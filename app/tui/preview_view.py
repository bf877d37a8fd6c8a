"""PreviewView: a read-only layer over the editor that draws a run's text as it sharpens.

The buffer is never written step by step (every TextArea edit is an undo step); instead this
TextArea shows the buffer with each span replaced by the latest frame: masked slots as
blur (a random-token model's noise as its faint random tokens), committed tokens fainter the
less sure the model is. `get_line` paints the styles the
pure `preview.compose` computed; the TextArea's own line cache must be cleared on each frame.

`show_over` places the layer over its editor: the editor's language, theme, wrap and marks,
its rows (all of the text, or a window of lines around the view: the ghost's), its scroll.
"""
from __future__ import annotations

from textual import events
from textual.geometry import Offset
from textual.widgets import TextArea

from rich.segment import Segment
from rich.text import Text
from textual.strip import Strip

from .document import displayable, drawn_line
from .highlighted_area import HighlightedArea
from .preview import KINDS, Layout, Piece, compose, location


def top_line(editor) -> int:
    """The buffer line at the top of the editor's view (with soft wrap a line takes several rows)."""
    if editor.soft_wrap:
        return editor.wrapped_document.offset_to_location(Offset(0, int(editor.scroll_y)))[0]
    return int(editor.scroll_y)


def row_of(editor, line: int) -> int:
    """The view row where buffer line `line` starts."""
    return editor.wrapped_document.location_to_offset((line, 0)).y if editor.soft_wrap else line


# A layer showing a window of a long buffer holds the lines on screen and this many on each side:
# enough above the view that a string or docstring opened there is highlighted as in the editor.
MARGIN_ROWS = 100


def lines_around(editor, line: int, length: int, margin: int = MARGIN_ROWS) -> tuple[int, int, int, int]:
    """A window (first line, last line, start, end) for the layer: the editor's view and buffer
    line `line`, `margin` lines each side; [start, end) its characters in the editor's text of
    `length` characters. A view of `height` rows shows at most `height` lines, however they wrap."""
    top, count = top_line(editor), editor.document.line_count
    first = max(0, min(top, line) - margin)
    last = min(count, max(top + editor.size.height, line + 1) + margin)
    start = editor.offset_of((first, 0))
    end = start + sum(len(row) + 1 for row in editor.document.lines[first:last]) - 1 if last < count else length
    return first, last, start, end


def shows_view(editor, window: tuple[int, int, int, int]) -> bool:
    """Whether the editor's view lies inside `window`'s lines (else the layer has nothing there)."""
    first, last = window[:2]
    top = top_line(editor)
    return top >= first and (top + editor.size.height <= last or last >= editor.document.line_count)


def window_of(text: str, spans: list[tuple[int, int]], marks: list[tuple[int, int]], window: tuple[int, int, int, int] | None):
    """(first line, text, spans, marks) cut to `window` (first line, last line, start, end), the
    offsets moved to the cut text and the marks clipped to it; no window: all of it."""
    if window is None:
        return 0, text, spans, marks
    first, _, start, end = window
    spans = [(s - start, e - start) for s, e in spans]
    marks = [(max(s, start) - start, min(e, end) - start) for s, e in marks if s < end and e > start]
    return first, text[start:end], spans, marks


MAX_REPLACES = 8  # more runs of changed lines than this in a frame: one replace of them all
JOIN_GAP = 2  # runs of changed lines this few lines apart are one replace (each replace has its own fixed cost)


def changed_rows(old: Layout, new: Layout) -> list[tuple[int, int, int, int]]:
    """Where two layouts of the same text differ, as (start, end) in the old text and (start,
    end) in the new of whole lines, top to bottom. Outside the spans both are that text, so only
    the lines from either's first span to either's last can differ; when those are as many lines
    in both (next edits keep rows: a deleted line break stays, struck; an inserted one is a
    glyph), each run of lines that differs is its own range, and the lines between are left be."""
    spanned = [layout for layout in (old, new) if layout.span_ranges]
    if not spanned:
        return []
    first = min(layout.span_ranges[0][0] for layout in spanned)
    tail = min(len(layout.text) - layout.span_ranges[-1][1] for layout in spanned)  # the text after every span
    start = old.text.rfind("\n", 0, first) + 1  # whole lines: from the start of the first span's line
    ahead = old.text.find("\n", len(old.text) - tail)  # to the end of the last span's line (in the shared tail)
    tail = 0 if ahead < 0 else len(old.text) - ahead
    old_end, new_end = len(old.text) - tail, len(new.text) - tail
    old_part, new_part = old.text[start:old_end], new.text[start:new_end]
    if old_part == new_part:
        return []
    old_lines, new_lines = old_part.split("\n"), new_part.split("\n")
    if len(old_lines) != len(new_lines):
        return [(start, old_end, start, new_end)]
    runs: list[tuple[int, int, int, int]] = []
    old_at = new_at = start
    run, alike = None, 0  # [old start, old end, new start, new end] of the run being gathered; lines alike since it
    for a, b in zip(old_lines, new_lines):
        if a != b:
            if run is not None and alike > JOIN_GAP:
                runs.append(tuple(run))
                run = None
            run = run or [old_at, 0, new_at, 0]
            run[1], run[3], alike = old_at + len(a), new_at + len(b), 0
        else:
            alike += 1
        old_at, new_at = old_at + len(a) + 1, new_at + len(b) + 1
    if run is not None:
        runs.append(tuple(run))
    return runs if len(runs) <= MAX_REPLACES else [(start, old_end, start, new_end)]


class PreviewView(HighlightedArea, can_focus=False):
    """Mirrors its editor's language, theme, wrap and scroll; never takes focus or input. Its
    documents split lines as the editor's do (HighlightedArea), so a form feed or U+2028 in a
    line keeps the layer's rows on the editor's."""

    COMPONENT_CLASSES = TextArea.COMPONENT_CLASSES | {f"preview-view--{kind}" for kind in KINDS}

    DEFAULT_CSS = """
    PreviewView {
        border: none;
        padding: 0;
        & > .preview-view--masked { color: $foreground 35%; background: $accent 12%; }
        & > .preview-view--noise { color: $foreground 30%; background: $accent 12%; text-style: italic; }
        & > .preview-view--doubtful { background: $accent 12%; text-style: dim italic; }
        & > .preview-view--unsure { background: $accent 12%; text-style: dim; }
        & > .preview-view--sure { background: $accent 12%; }
        & > .preview-view--edited { background: $warning 25%; text-style: underline; }
        & > .preview-view--final { background: $accent 20%; }
        & > .preview-view--marked { background: $accent 35%; text-style: underline; }
        & > .preview-view--ghost { color: $foreground 45%; text-style: italic; }
        & > .preview-view--ghost-masked { color: $foreground 30%; }
        & > .preview-view--ghost-cursor { text-style: reverse; }
        & > .preview-view--deleted { color: $foreground 40%; text-style: strike; }
        & > .preview-view--inserted { color: $success 70%; text-style: italic; }
        & > .preview-view--next-edit-current { color: $success; background: $success 15%; text-style: italic; }
    }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(read_only=True, show_cursor=False, show_line_numbers=True, **kwargs)
        self.layout_shown = Layout("")
        self.scroll_target = None  # the widget whose scroll wheel events we forward (the editor)
        self.on_click = None  # called on a click (the pane's ghost: a click dismisses it)
        # Where show_layout asked to be scrolled (x, y), kept until the view is there: a layer
        # just made visible has no size yet, and a scroll before its first layout stops at 0.
        self.wanted_scroll: tuple[float, float] | None = None
        self.first_row = 0  # the editor's view row where this layer's first line sits (show_over's window)

    def show_over(self, editor, text: str, spans: list[tuple[int, int]], pieces: list[list[Piece]], same_run: bool,
                  cursor: str | None = None, window: tuple[int, int, int, int] | None = None) -> None:
        """Draw `text` with each span's pieces spliced in, over `editor`; `cursor`: the style kind
        of a cell drawn as the cursor where the first span starts (the ghost's). `window` (first
        line, last line, start, end): only lines [first, last) of `text`, its characters
        [start, end), go into the layer, numbered as in the buffer (the ghost's: a few screens
        around the view, so a ghost in a 50,000-line file does not load and parse all of it into
        the layer on every pause)."""
        first, text, spans, marks = window_of(text, spans, editor.marks, window)
        layout = compose(text, spans, pieces, marks)
        if cursor is not None and layout.span_ranges:
            row, column = location(layout.text, layout.span_ranges[0][0])
            layout.line_styles.setdefault(row, []).append((column, column + 1, cursor))
        self.first_row = row_of(editor, first)
        if self.line_number_start != first + 1:
            self.line_number_start = first + 1
        self.gutter_floor = editor.gutter_width if window is not None else 0  # the text must not shift sideways
        if self.language != editor.language:
            self.language = editor.language
        self.soft_wrap = editor.soft_wrap
        if self.theme != editor.theme:
            self.theme = editor.theme
        self.show_layout(layout, editor.scroll_x, editor.scroll_y - self.first_row, same_run=same_run)

    def follow(self, editor) -> None:
        """At `editor`'s rows again (it scrolled)."""
        self.follow_scroll(editor.scroll_x, editor.scroll_y - self.first_row)

    def show_layout(self, layout: Layout, scroll_x: float, scroll_y: float, same_run: bool) -> None:
        """Draw `layout`; with `same_run` (composed over the text the layer shows now, spans anywhere
        in it) only the lines that differ are replaced (changed_rows)."""
        old = self.layout_shown
        if same_run and (old.span_ranges or layout.span_ranges):
            # Text outside the spans is the same in both: re-parsing the whole layer per frame
            # costs tens of milliseconds on big files, a replace of the lines that changed a few.
            runs = changed_rows(old, layout)
            self._holding_highlights = True  # one highlight query for the frame, not one per replace
            try:
                for old_start, old_end, new_start, new_end in reversed(runs):  # bottom up: the old offsets above stay right
                    self.replace(displayable(layout.text[new_start:new_end]), location(old.text, old_start), location(old.text, old_end))
            finally:
                self._holding_highlights = False
            if runs:
                self._build_highlight_map()
            self.history.clear()  # this view is never undone
        elif layout.text != old.text:
            self.load_text(displayable(layout.text))  # a buffer's lone surrogate would stop Textual's document
        self.layout_shown = layout
        self._line_cache.clear()
        self.follow_scroll(scroll_x, scroll_y)
        self.refresh()

    _holding_highlights = False  # show_layout replaces several runs of lines: highlighted once, after them

    def _build_highlight_map(self) -> None:
        if not self._holding_highlights:
            super()._build_highlight_map()

    def follow_scroll(self, scroll_x: float, scroll_y: float) -> None:
        """Scroll to the editor's (x, y) now, or, where this view is not laid out yet, as its
        first lines are rendered (render_lines): a ghost in a long file painted the top of its
        window, a hundred rows above the view, for a frame before."""
        self.scroll_to(scroll_x, scroll_y, animate=False, immediate=True)
        self.wanted_scroll = None if (self.scroll_x, self.scroll_y) == (scroll_x, scroll_y) else (scroll_x, scroll_y)

    def render_lines(self, crop):
        if self.wanted_scroll is not None and self.size.height:
            self.follow_scroll(*self.wanted_scroll)
        return super().render_lines(crop)

    # Next edits off screen (next_edit_overlay.py): an arrow in the gutter of the top row (some
    # above the view) and of the bottom row (some below).
    gutter_arrows: tuple[bool, bool] = (False, False)

    def render_line(self, y: int) -> Strip:
        strip = super().render_line(y)
        above, below = self.gutter_arrows
        if (above and y == 0) or (below and y == self.size.height - 1):
            arrow = Strip([Segment("↑" if above and y == 0 else "↓", self.get_component_rich_style("preview-view--next-edit-current"))], 1)
            strip = Strip.join([arrow, strip.crop(1, strip.cell_length)])
        return strip

    gutter_floor = 0  # at least this gutter width: the editor's, when this view shows a window of its lines

    @property
    def gutter_width(self) -> int:
        return max(super().gutter_width, self.gutter_floor)

    def get_line(self, line_index: int):
        line = Text(drawn_line(self.document.get_line(line_index))[0], end="", no_wrap=True)  # as EditorArea draws it
        for start, end, kind in self.layout_shown.styles_for(line_index):
            if start >= len(line.plain):  # a cursor at the end of its line: a blank cell to draw it on
                line.append(" ")
            line.stylize(self.get_component_rich_style(f"preview-view--{kind}"), start, end)
        return line

    def on_text_area_changed(self, event: TextArea.Changed) -> None:
        event.stop()  # load_text announces a change; nobody outside cares about this view's text

    def on_text_area_selection_changed(self, event: TextArea.SelectionChanged) -> None:
        event.stop()

    async def _on_mouse_down(self, event: events.MouseDown) -> None:
        event.stop()  # the preview is not selectable; clicks must not move anything
        event.prevent_default()
        if self.on_click is not None:
            self.on_click()

    def _on_mouse_scroll_down(self, event: events.MouseScrollDown) -> None:
        if self.scroll_target is not None:
            event.stop()
            event.prevent_default()  # scroll the editor; this view follows it
            self.scroll_target.scroll_down(animate=False)

    def _on_mouse_scroll_up(self, event: events.MouseScrollUp) -> None:
        if self.scroll_target is not None:
            event.stop()
            event.prevent_default()
            self.scroll_target.scroll_up(animate=False)
