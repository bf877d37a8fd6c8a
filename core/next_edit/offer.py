"""The hunks on offer in a buffer, and what Tab, a second Tab, "apply all" and typing do to them.

    offer = Offer.of(answer)                  # a NextEditAnswer's hunks, none taken yet
    offer, step = offer.tab(cursor)           # Jump(offset): the cursor goes to the next hunk
    offer, step = offer.tab(step.offset)      # Apply(changes): that hunk, one undo step
    offer = offer.after_edit(changes)         # the user typed: hunks move with the text; one typed into goes

Pure data for a front end (sharpen's editor, a test): it applies `Apply.changes` to its buffer as
one edit, so undo takes back one hunk; the hunks left are mapped through it (ChangeSet.map_range)
and stay on offer. No UI here.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..changes import ChangeSet
from .request import Hunk, NextEditAnswer


@dataclass(frozen=True)
class Jump:
    offset: int  # where the cursor goes: the hunk's start


@dataclass(frozen=True)
class Apply:
    changes: ChangeSet  # the hunk as one edit of the buffer (one undo step)
    cursor: int  # where the cursor lands: after the hunk's new text


@dataclass(frozen=True)
class Offer:
    hunks: tuple[Hunk, ...]  # sorted, non-overlapping, in the buffer's current offsets
    current: int | None = None  # the hunk Tab jumped to (a second Tab applies it)

    @classmethod
    def of(cls, answer: NextEditAnswer) -> "Offer | None":
        return cls(tuple(answer.hunks)) if answer.hunks else None

    def tab(self, cursor: int) -> tuple["Offer | None", Jump | Apply]:
        """First Tab: jump to the next hunk at or after the cursor (the first one past the end);
        a Tab on the hunk it jumped to applies it."""
        if self.current is not None and self.hunks[self.current].start == cursor:
            return self.apply(self.current)
        index = next((i for i, h in enumerate(self.hunks) if h.start >= cursor), 0)
        return Offer(self.hunks, index), Jump(self.hunks[index].start)

    def apply(self, index: int) -> tuple["Offer | None", Apply]:
        hunk = self.hunks[index]
        changes = ChangeSet.of([(hunk.start, hunk.end, hunk.text)])
        rest = self._mapped([h for i, h in enumerate(self.hunks) if i != index], changes)
        return rest, Apply(changes, hunk.start + len(hunk.text))

    def apply_all(self) -> ChangeSet:
        """Every hunk at once, as one edit."""
        return ChangeSet.of((h.start, h.end, h.text) for h in self.hunks)

    def after_edit(self, changes: ChangeSet) -> "Offer | None":
        """The buffer changed under the offer (the user typed): hunks move with their text; a
        hunk whose text was touched is withdrawn. None when nothing is left."""
        return self._mapped(list(self.hunks), changes)

    @staticmethod
    def _mapped(hunks: list[Hunk], changes: ChangeSet) -> "Offer | None":
        out = []
        for h in hunks:
            moved = changes.map_range(h.start, h.end)
            if moved is not None:
                out.append(Hunk(moved[0], moved[1], h.text, h.confidence))
        return Offer(tuple(out)) if out else None
