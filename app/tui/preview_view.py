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


def window_of(text: str, spans: list[tuple[int, int]], marks: list[tuple[int, int]], window: tuple[int, int, int, int] | None):
    """(first line, text, spans, marks) cut to `window` (first line, last line, start, end), the
    offsets moved to the cut text and the marks clipped to it; no window: all of it."""
    if window is None:
        return 0, text, spans, marks
    first, _, start, end = window
    spans = [(s - start, e - start) for s, e in spans]
    marks = [(max(s, start) - start, min(e, end) - start) for s, e in marks if s < end and e > start]
    return first, text[start:end], spans, marks


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
        """Draw `layout`; within one run only the text from the first span to the last is replaced."""
        old = self.layout_shown
        if same_run and old.span_ranges and len(old.span_ranges) == len(layout.span_ranges):
            # Text outside the spans never changes during a run: re-parsing the whole file per
            # frame costs tens of milliseconds on big files, one edit a few.
            start, old_end, new_end = old.span_ranges[0][0], old.span_ranges[-1][1], layout.span_ranges[-1][1]
            replacement = layout.text[start:new_end]
            if replacement != old.text[start:old_end]:
                self.replace(displayable(replacement), location(old.text, start), location(old.text, old_end))
                self.history.clear()  # this view is never undone
        elif layout.text != old.text:
            self.load_text(displayable(layout.text))  # a buffer's lone surrogate would stop Textual's document
        self.layout_shown = layout
        self._line_cache.clear()
        self.follow_scroll(scroll_x, scroll_y)
        self.refresh()

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
