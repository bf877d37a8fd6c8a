"""core/changes.py: edits as values, positions mapped through them."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sharpen.core.changes import Change, ChangeSet


def test_apply_and_invert():
    old = "abc def ghi"
    changes = ChangeSet.of([(8, 11, "XY"), (4, 7, "d"), (0, 0, ">")])
    assert changes.apply(old) == ">abc d XY"
    assert changes.inverted(old).apply(changes.apply(old)) == old
    assert changes.as_one_edit(old) == (0, 11, ">abc d XY")


def test_overlaps_are_refused():
    with pytest.raises(ValueError, match="overlap"):
        ChangeSet.of([(0, 4, "a"), (3, 5, "b")])
    with pytest.raises(ValueError, match="outside the text"):
        ChangeSet.of([(0, 9, "a")]).apply("abc")


def test_map_pos_sides():
    changes = ChangeSet.of([(4, 7, "xy"), (9, 9, "++")])  # "abc def ghi" -> "abc xy g++hi"
    assert changes.map_pos(2) == 2  # before every change
    assert changes.map_pos(5, "before") == 4 and changes.map_pos(5, "after") == 6  # inside the replaced range
    assert changes.map_pos(7) == 6  # right after it
    assert changes.map_pos(9, "before") == 8 and changes.map_pos(9, "after") == 10  # at the insertion
    assert changes.map_pos(11) == 12


def test_map_range_keeps_untouched_ranges_and_drops_touched_ones():
    changes = ChangeSet.of([(4, 7, "xy"), (9, 9, "++")])
    assert changes.map_range(0, 3) == (0, 3)
    assert changes.map_range(7, 9) == (6, 8)  # edits at both edges stay outside
    assert changes.map_range(3, 5) is None and changes.map_range(8, 10) is None


texts = st.text(alphabet="ab\n", max_size=30)


@given(texts, st.data())
def test_map_pos_agrees_with_the_text(text, data):
    """A character outside every change is found at its mapped offset in the new text."""
    cuts = sorted(data.draw(st.lists(st.integers(0, len(text)), max_size=6)))
    pairs = list(zip(cuts[::2], cuts[1::2]))
    changes = ChangeSet.of([Change(a, b, data.draw(st.text(alphabet="xyz", max_size=3))) for a, b in pairs if b > a])
    new = changes.apply(text)
    for pos, char in enumerate(text):
        if all(not (c.start <= pos < c.end) for c in changes.changes):
            assert new[changes.map_pos(pos)] == char
