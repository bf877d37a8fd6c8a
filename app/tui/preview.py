"""What the live preview shows, as pure data: styled pieces per span, spliced into the text.

A frame from the engine becomes, per span, a list of Pieces (text + how sure the model is);
`compose` splices them into the buffer's text and says which columns of which lines get
which style. No textual here: the PreviewView widget only paints what this module computes.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass, field

MASKED, DOUBTFUL, UNSURE, SURE, FINAL = "masked", "doubtful", "unsure", "sure", "final"
KINDS = (MASKED, DOUBTFUL, UNSURE, SURE, FINAL)
MASK_GLYPH = "░"  # one per still-masked slot: the blur that sharpens into text
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


def span_pieces(tokens, confidence, decode_pieces, end_ids) -> list[Piece]:
    """One span of a frame -> pieces: masked slots as MASK_GLYPH, pad/eos hidden, text by confidence.

    `decode_pieces(ids)` is the tokenizer's per-token display strings; runs of committed
    tokens are decoded together so characters split across tokens come out whole.
    """
    pieces: list[Piece] = []
    run: list[tuple[int, float]] = []

    def flush() -> None:
        if run:
            texts = decode_pieces([token for token, _ in run])
            pieces.extend(Piece(text, confidence_kind(p)) for text, (_, p) in zip(texts, run))
            run.clear()

    for token, p in zip(tokens, confidence):
        if token is None:
            flush()
            pieces.append(Piece(MASK_GLYPH, MASKED))
        elif token in end_ids:
            flush()  # pad/eos: deleted from the result, so not drawn
        else:
            run.append((token, p))
    flush()
    return merge(pieces)


def pieces_text(pieces: list[Piece]) -> str:
    return "".join(p.text for p in pieces)


@dataclass(frozen=True)
class Layout:
    """The previewed text and the styled column ranges of each of its lines."""

    text: str
    line_styles: dict[int, list[tuple[int, int, str]]] = field(default_factory=dict)  # row -> (col, col, kind)
    span_rows: tuple[int, ...] = ()  # the row each span starts on, in the previewed text

    def styles_for(self, row: int) -> list[tuple[int, int, str]]:
        return self.line_styles.get(row, [])


def compose(text: str, spans: list[tuple[int, int]], pieces: list[list[Piece]]) -> Layout:
    """Splice each span's pieces over [start, end) of `text` (sorted, non-overlapping spans).

    Offsets are characters of `text` with '\\n' line breaks.
    """
    parts: list[str] = []
    ranges: list[tuple[int, int, str]] = []  # offsets in the composed text
    starts: list[int] = []
    cursor = position = 0
    for (start, end), span in zip(spans, pieces):
        parts.append(text[cursor:start])
        position += start - cursor
        starts.append(position)
        for piece in span:
            parts.append(piece.text)
            ranges.append((position, position + len(piece.text), piece.kind))
            position += len(piece.text)
        cursor = end
    parts.append(text[cursor:])
    composed = "".join(parts)
    line_starts = [0] + [i + 1 for i, ch in enumerate(composed) if ch == "\n"]
    row_of = lambda offset: bisect.bisect_right(line_starts, offset) - 1  # noqa: E731
    line_styles: dict[int, list[tuple[int, int, str]]] = {}
    for start, end, kind in ranges:
        row = row_of(start)
        while start < end:
            line_end = line_starts[row + 1] - 1 if row + 1 < len(line_starts) else len(composed)
            stop = min(end, line_end)
            if stop > start:
                line_styles.setdefault(row, []).append((start - line_starts[row], stop - line_starts[row], kind))
            start, row = line_end + 1, row + 1
    return Layout(composed, line_styles, tuple(row_of(s) for s in starts))
