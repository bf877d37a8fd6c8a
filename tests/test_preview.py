"""app/tui/preview.py: what the live preview shows, as pure data."""
from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from sharpen.app.tui.preview import MARKED, MASK_GLYPH, MASKED, SURE, Piece, compose

_chunks = st.text(alphabet="ab\n", max_size=6)

def test_compose_splices_pieces_and_styles_each_line():
    text = "one\ntwo three\nfour\n"
    layout = compose(text, [(4, 7), (14, 18)], [[Piece("2\n2", SURE)], [Piece(MASK_GLYPH * 2, MASKED)]])
    assert layout.text == "one\n2\n2 three\n░░\n"
    assert layout.styles_for(1) == [(0, 1, SURE)]
    assert layout.styles_for(2) == [(0, 1, SURE)]
    assert layout.styles_for(3) == [(0, 2, MASKED)]
    assert layout.span_rows == (1, 3)
    marked = compose(text, [(4, 7)], [[Piece("2\n2", SURE)]], marks=[(0, 3), (8, 13), (5, 9)])
    assert marked.styles_for(0) == [(0, 3, MARKED)]  # before the span: where it was
    assert marked.styles_for(2) == [(0, 1, SURE), (2, 7, MARKED)]  # after it: moved with its text


@given(_chunks, st.lists(st.tuples(_chunks, st.lists(st.tuples(_chunks, st.sampled_from([SURE, MASKED])), max_size=3)), max_size=3))
def test_compose_styles_cover_exactly_the_span_characters(head, spans):
    text, offsets, pieces, position = head, [], [], len(head)
    for gap, span in spans:  # a replaced region "XY" after each gap
        text += gap + "XY"
        offsets.append((position + len(gap), position + len(gap) + 2))
        pieces.append([Piece(t, kind) for t, kind in span])
        position = len(text)
    layout = compose(text, offsets, pieces)
    lines = layout.text.split("\n")
    styled = "".join(lines[row][a:b] for row in sorted(layout.line_styles) for a, b, _ in layout.line_styles[row])
    assert styled == "".join(p.text for span in pieces for p in span).replace("\n", "")
    assert [layout.text[a:b] for a, b in layout.span_ranges] == ["".join(p.text for p in span) for span in pieces]


# Inserted text with line breaks (a command's frame) or without (a next edit's: rows kept).
_spans = st.lists(st.tuples(st.integers(0, 80), st.integers(0, 3), st.one_of(st.text(alphabet="xy", max_size=4), st.text(alphabet="xy\n", max_size=4))),
                  max_size=6)


def _layout_over(text: str, cuts) -> object:
    spans, pieces, at = [], [], 0
    for start, length, new in sorted(cuts):
        start = max(start, at)
        if start > len(text):
            break
        end = min(len(text), start + length)
        spans.append((start, end))
        pieces.append([Piece(new, SURE)] if new else [])
        at = end + 1  # spans never touch
    return compose(text, spans, pieces)


@given(st.text(alphabet="ab\n", max_size=80), _spans, _spans)
@example("a\nb\nc\nd\ne\nf\ng", [(0, 1, "xxx")], [(0, 1, "x"), (12, 1, "y")])  # two runs of lines, the first shrunk
@settings(max_examples=300)
def test_changed_rows_turn_one_frame_into_the_next(text, before, after):
    """preview_view.changed_rows: the old layer text with its ranges replaced (bottom up, as
    show_layout does) is the new frame's text, whatever the spans did between the frames."""
    from sharpen.app.tui.preview_view import changed_rows

    old, new = _layout_over(text, before), _layout_over(text, after)
    shown = old.text
    for old_start, old_end, new_start, new_end in reversed(changed_rows(old, new)):
        assert shown[old_start - 1:old_start] in ("", "\n")  # whole lines
        shown = shown[:old_start] + new.text[new_start:new_end] + shown[old_end:]
    assert shown == new.text
