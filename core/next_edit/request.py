"""A next-edit request and its answer, as values.

    request = NextEditRequest.around("a.py", text, cursor, history.events(), snippets)
    request.windows          # the cursor's window first, then the places the history points to
    answer = NextEditAnswer((Hunk(10, 13, "bar", 0.93),))
    answer.changes           # a ChangeSet over the request's text; empty: "no edit", draw nothing

The request names what every next-edit prompt format carries (formats/): the file and its
text, the cursor, one or more editable windows (whole lines), the recent edits as unified
diffs, and snippets of recently viewed files. Windows past the cursor's come from the history:
an identifier the last edit removed (a rename, a changed signature) that still stands elsewhere
in the file gets a window around each place it stands, so those places are rewritten in the
same run. Pure data: no torch.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..changes import ChangeSet
from ..errors import UsageError
from ..settings import Editing, Sampling
from .history import EditEvent

LINES_BEFORE = 4  # the cursor window: lines above the cursor's line ...
LINES_AFTER = 6  # ... and below it (Zed's Mercury sends ~350 tokens; a diffusion canvas wants few)
POINTED_LINES = 1  # lines around each place the history points to, above and below
MAX_WINDOWS = 5  # windows in one run: the cursor's and at most four pointed ones
MIN_CONFIDENCE = 0.5  # hunks the model is less sure of than this are dropped (quiet when unsure)
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class Snippet:
    """Part of a recently viewed file, shown to the model as context."""

    path: str
    text: str


@dataclass(frozen=True)
class Window:
    """An editable region of the text: whole lines, [start, end) in characters."""

    start: int
    end: int


@dataclass(frozen=True)
class NextEditRequest:
    path: str  # the file's name as prompts show it ('/'-separated, relative where known)
    text: str  # the whole buffer
    cursor: int  # character offset of the cursor in text
    windows: tuple[Window, ...]  # sorted, non-overlapping; the cursor's window contains the cursor
    history: tuple[EditEvent, ...] = ()  # oldest first
    snippets: tuple[Snippet, ...] = ()
    sampling: Sampling = field(default_factory=Sampling)
    editing: Editing = field(default_factory=Editing)
    min_confidence: float = MIN_CONFIDENCE

    def __post_init__(self) -> None:
        if not 0 <= self.cursor <= len(self.text):
            raise UsageError(f"the cursor ({self.cursor}) is outside the text ({len(self.text)} characters)")
        if not self.windows:
            raise UsageError("a next-edit request needs at least one window")
        ordered = tuple(sorted(self.windows, key=lambda w: w.start))
        for w in ordered:
            if not 0 <= w.start <= w.end <= len(self.text):
                raise UsageError(f"window {w.start}-{w.end} is outside the text ({len(self.text)} characters)")
        for a, b in zip(ordered, ordered[1:]):
            if b.start < a.end:
                raise UsageError(f"windows {a.start}-{a.end} and {b.start}-{b.end} overlap")
        object.__setattr__(self, "windows", ordered)

    @property
    def cursor_window(self) -> Window:
        return next((w for w in self.windows if w.start <= self.cursor <= w.end), self.windows[0])

    @classmethod
    def around(cls, path: str, text: str, cursor: int, history: tuple[EditEvent, ...] = (), snippets: tuple[Snippet, ...] = (),
               lines_before: int = LINES_BEFORE, lines_after: int = LINES_AFTER, max_windows: int = MAX_WINDOWS,
               **settings) -> "NextEditRequest":
        """The request with the cursor's window and the windows the history points to."""
        own = line_window(text, cursor, lines_before, lines_after)
        windows = [own] + pointed_windows(text, history, path, [own], max_windows - 1)
        return cls(path, text, cursor, tuple(windows), tuple(history), tuple(snippets), **settings)


def line_window(text: str, offset: int, before: int, after: int) -> Window:
    """Whole lines from `before` lines above `offset`'s line to `after` lines below it; the last
    line's newline included."""
    start = text.rfind("\n", 0, offset) + 1
    for _ in range(before):
        if start == 0:
            break
        start = text.rfind("\n", 0, start - 1) + 1
    end = offset
    for _ in range(after + 1):
        newline = text.find("\n", end)
        if newline == -1:
            end = len(text)
            break
        end = newline + 1
    return Window(start, end)


def removed_names(event: EditEvent) -> list[str]:
    """Identifiers the edit took away: in its removed lines and in none of its added lines (a
    rename's old name, a parameter dropped from a signature), longest first."""
    lines = event.diff.splitlines()
    old = "".join(line[1:] + "\n" for line in lines if line.startswith("-"))
    new = "".join(line[1:] + "\n" for line in lines if line.startswith("+"))
    kept = set(_WORD.findall(new))
    names = {w for w in _WORD.findall(old) if w not in kept and len(w) > 1}
    return sorted(names, key=lambda w: (-len(w), w))


def pointed_windows(text: str, history: tuple[EditEvent, ...], path: str, taken: list[Window], limit: int) -> list[Window]:
    """Windows around the places where the last edit of this file left something to follow up:
    every whole-word use of a name it removed, outside the windows already `taken`."""
    if limit <= 0:
        return []
    last = next((e for e in reversed(history) if e.path == path), None)
    if last is None:
        return []
    out: list[Window] = []
    for name in removed_names(last):
        for match in re.finditer(rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])", text):
            window = line_window(text, match.start(), POINTED_LINES, POINTED_LINES)
            if any(window.start < w.end and w.start < window.end for w in taken + out):
                continue  # a place already inside a window is rewritten with it
            out.append(window)
            if len(out) == limit:
                return out
    return out


@dataclass(frozen=True)
class Hunk:
    """One proposed edit: [start, end) of the request's text becomes `text`."""

    start: int
    end: int
    text: str
    confidence: float  # the model's least sure token in the hunk's new text (1.0 for a pure deletion)

    def to_json(self) -> dict:
        return {"start": self.start, "end": self.end, "text": self.text, "confidence": round(self.confidence, 4)}


@dataclass(frozen=True)
class NextEditAnswer:
    hunks: tuple[Hunk, ...] = ()  # sorted, non-overlapping; empty: no edit

    @property
    def changes(self) -> ChangeSet:
        return ChangeSet.of((h.start, h.end, h.text) for h in self.hunks)

    @property
    def quiet(self) -> bool:
        return not self.hunks

    def to_json(self) -> dict:
        return {"hunks": [h.to_json() for h in self.hunks]}
