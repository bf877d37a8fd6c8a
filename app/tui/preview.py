"""What the live preview shows, as pure data: styled pieces per span, spliced into the text.

A frame from the engine becomes, per span, a list of Pieces (text + how sure the model is);
`compose` splices them into the buffer's text and says which columns of which lines get
which style. No textual here: the PreviewView widget only paints what this module computes.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ...core.changes import ChangeSet

MASKED, DOUBTFUL, UNSURE, SURE, FINAL = "masked", "doubtful", "unsure", "sure", "final"
NOISE = "noise"  # a random-token model's slot still noise: the random token itself, faint, new each step
EDITED = "edited"  # a token the model wrote over one it had committed (core.loops.frame: "edited")
MARKED = "marked"  # a region marked for a later parallel edit, outside this run's spans
GHOST, GHOST_MASKED = "ghost", "ghost-masked"  # as-you-type completion (ghost.py): faint text, faint blur
GHOST_CURSOR = "ghost-cursor"  # the cursor's cell while a ghost covers the editor
# A next edit's hunk (next_edit_overlay.py): the text it deletes, the text it inserts, the one Tab jumped to.
DELETED, INSERTED, NEXT_EDIT_CURRENT = "deleted", "inserted", "next-edit-current"
KINDS = (MASKED, NOISE, DOUBTFUL, UNSURE, SURE, FINAL, MARKED, EDITED, GHOST, GHOST_MASKED, GHOST_CURSOR, DELETED, INSERTED, NEXT_EDIT_CURRENT)
MASK_GLYPH = "░"  # one per still-masked slot: the blur that sharpens into text
EMPTY_GLYPH = "∅"  # a finished span whose result is empty, so the preview still shows where it is
SURE_AT = 0.9  # confidence at or above which a token is drawn at full strength
UNSURE_AT = 0.5  # below this a token is drawn faintest


@dataclass(frozen=True)
class Piece:
    text: str
    kind: str  # one of KINDS


def confidence_kind(p: float) -> str:
    return SURE if p >= SURE_AT else UNSURE if p >= UNSURE_AT else DOUBTFUL


def merge(pieces: list[Piece]) -> list[Piece]:
    """Neighbours of the same kind become one piece (fewer style ranges to paint)."""
    out: list[Piece] = []
    for piece in pieces:
        if not piece.text:
            continue
        if out and out[-1].kind == piece.kind:
            out[-1] = Piece(out[-1].text + piece.text, piece.kind)
        else:
            out.append(piece)
    return out


def noise_text(piece: str) -> str:
    """A noise token as drawn: its own characters, line breaks, tabs and control characters
    as MASK_GLYPH, so noise changes from step to step without making the lines jump."""
    shown = "".join(ch if ch.isprintable() and ch not in "\t\n\r" else MASK_GLYPH for ch in piece)
    return shown or MASK_GLYPH


def pieces_text(pieces: list[Piece]) -> str:
    return "".join(p.text for p in pieces)


@dataclass(frozen=True)
class Layout:
    """The previewed text and the styled column ranges of each of its lines."""

    text: str
    line_styles: dict[int, list[tuple[int, int, str]]] = field(default_factory=dict)  # row -> (col, col, kind)
    span_rows: tuple[int, ...] = ()  # the row each span starts on, in the previewed text
    span_ranges: tuple[tuple[int, int], ...] = ()  # each span's [start, end) in the previewed text

    def styles_for(self, row: int) -> list[tuple[int, int, str]]:
        return self.line_styles.get(row, [])


def compose(text: str, spans: list[tuple[int, int]], pieces: list[list[Piece]], marks: list[tuple[int, int]] = ()) -> Layout:
    """Splice each span's pieces over [start, end) of `text` (sorted, non-overlapping spans).

    Offsets are characters of `text` with '\\n' line breaks. `marks` outside the spans keep
    their highlight, moved by what the spans before them grew or shrank.
    """
    parts: list[str] = []
    ranges: list[tuple[int, int, str]] = []  # offsets in the composed text
    span_ranges: list[tuple[int, int]] = []
    cursor = position = 0
    for (start, end), span in zip(spans, pieces):
        parts.append(text[cursor:start])
        position += start - cursor
        span_start = position
        for piece in span:
            parts.append(piece.text)
            ranges.append((position, position + len(piece.text), piece.kind))
            position += len(piece.text)
        span_ranges.append((span_start, position))
        cursor = end
    parts.append(text[cursor:])
    composed = "".join(parts)
    # The marks move with their text through the preview's splice, as through any edit (core.changes).
    splice = ChangeSet.of((s, e, "".join(p.text for p in span)) for (s, e), span in zip(spans, pieces))
    for start, end in marks:
        moved = splice.map_range(start, end)
        if moved is not None:
            ranges.append((*moved, MARKED))
    ranges.sort()
    line_styles: dict[int, list[tuple[int, int, str]]] = {}
    row, counted = 0, 0  # ranges are sorted: count line breaks incrementally, in C (str.count)
    for start, end, kind in ranges:
        row += composed.count("\n", counted, start)
        counted = start
        line_start = composed.rfind("\n", 0, start) + 1
        while start < end:
            line_end = composed.find("\n", start, end)
            stop = end if line_end == -1 else line_end
            if stop > start:
                line_styles.setdefault(row, []).append((start - line_start, stop - line_start, kind))
            if line_end == -1:
                break
            row, counted, start, line_start = row + 1, line_end + 1, line_end + 1, line_end + 1
    span_rows = tuple(composed.count("\n", 0, s) for s, _ in span_ranges)
    return Layout(composed, line_styles, span_rows, tuple(span_ranges))


def location(text: str, offset: int) -> tuple[int, int]:
    """(row, column) of a character offset; str.count/rfind keep it fast on big files."""
    row = text.count("\n", 0, offset)
    return row, offset - (text.rfind("\n", 0, offset) + 1)
