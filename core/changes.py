"""Edits as values: which ranges of a text become which text, and where positions go.

    changes = ChangeSet.of([(4, 7, "xyz"), (12, 12, "\\n")])   # offsets in the old text
    new = changes.apply(old)
    changes.map_pos(9)                  # where offset 9 of the old text is in the new one
    changes.map_pos(12, assoc="before")  # an insertion point: stay before what was inserted there

The engine's result is a ChangeSet; the headless runner and the editor apply that same value,
and everything that holds offsets into a buffer (marks, the selection stack, the preview's
highlights, adaptive length's spans) moves them through `map_pos` instead of shifting them by
hand. Helix's `ChangeSet::map_pos` with its `Assoc` is the model. Pure Python: no torch.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Literal

Assoc = Literal["before", "after"]  # at an edit's boundary: stick to the text before it, or after it


@dataclass(frozen=True)
class Change:
    start: int  # offset in the old text, inclusive
    end: int  # offset in the old text, exclusive; start == end inserts
    text: str  # what [start, end) becomes

    @property
    def delta(self) -> int:
        return len(self.text) - (self.end - self.start)


@dataclass(frozen=True)
class ChangeSet:
    changes: tuple[Change, ...]  # sorted by start, non-overlapping (insertions may touch ranges)

    @classmethod
    def of(cls, changes: Iterable[Change | tuple[int, int, str]]) -> "ChangeSet":
        items = sorted((c if isinstance(c, Change) else Change(*c) for c in changes), key=lambda c: (c.start, c.end))
        for a, b in zip(items, items[1:]):
            if b.start < a.end or (a.start == a.end == b.start == b.end):
                raise ValueError(f"changes overlap: {a.start}-{a.end} and {b.start}-{b.end}")
        for c in items:
            if not 0 <= c.start <= c.end:
                raise ValueError(f"bad change range {c.start}-{c.end}")
        return cls(tuple(items))

    def __bool__(self) -> bool:
        return bool(self.changes)

    def apply(self, text: str) -> str:
        """The new text; text outside the changed ranges is copied, never re-encoded."""
        if self.changes and self.changes[-1].end > len(text):
            raise ValueError(f"change {self.changes[-1].start}-{self.changes[-1].end} is outside the text ({len(text)} characters)")
        out, pos = [], 0
        for c in self.changes:
            out += [text[pos:c.start], c.text]
            pos = c.end
        out.append(text[pos:])
        return "".join(out)

    def is_noop(self, text: str) -> bool:
        return all(text[c.start:c.end] == c.text for c in self.changes)

    def window(self) -> tuple[int, int]:
        """(start of the first change, end of the last) in the old text."""
        return self.changes[0].start, self.changes[-1].end

    def as_one_edit(self, text: str) -> tuple[int, int, str]:
        """(start, end, replacement): the whole change set as one replacement of the old text's
        window, for a buffer whose undo history should hold one step."""
        start, end = self.window()
        return start, end, ChangeSet(tuple(Change(c.start - start, c.end - start, c.text) for c in self.changes)).apply(text[start:end])

    def map_pos(self, pos: int, assoc: Assoc = "after") -> int:
        """Where old offset `pos` is in the new text.

        At an insertion point, or inside (or at the start of) a replaced range, `assoc` picks
        the side: "before" stays before the new text, "after" moves past it.
        """
        shift = 0
        for c in self.changes:
            if pos < c.start:
                break
            if pos < c.end or pos == c.start == c.end:
                new_start = c.start + shift
                return new_start if assoc == "before" else new_start + len(c.text)
            shift += c.delta
        return pos + shift

    def map_range(self, start: int, end: int) -> tuple[int, int] | None:
        """A range [start, end) of the old text in the new one; text inserted at its edges
        stays outside it. None when a change touched the text inside it."""
        for c in self.changes:
            if (c.start < end and start < c.end) or start < c.start < end:
                return None
        return self.map_pos(start, "after"), self.map_pos(end, "before") if end > start else self.map_pos(start, "after")

    def inverted(self, old: str) -> "ChangeSet":
        """The change set that turns the new text back into `old` (undo)."""
        out, shift = [], 0
        for c in self.changes:
            start = c.start + shift
            out.append(Change(start, start + len(c.text), old[c.start:c.end]))
            shift += c.delta
        return ChangeSet(tuple(out))
