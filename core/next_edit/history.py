"""The buffer's recent edits as values: which file, when, and the text before and after.

    history = EditHistory()
    history.record("src/a.py", old_text, changes)       # the ChangeSet the buffer just applied
    history.events()                                     # oldest first: EditEvent(path, diff, ...)

A next-edit model reads the user's last few edits as unified diffs (every format in formats/
carries them so). Edits of the same file that follow each other within `merge_seconds` and touch
neighbouring lines are one event (typing a word is one edit, not five), as Zed and cursortab
coalesce theirs. Pure Python: no torch, no UI.
"""
from __future__ import annotations

import difflib
import time
from collections import deque
from dataclasses import dataclass, field

from ..changes import ChangeSet

MAX_EVENTS = 16  # what a prompt can hold at most: the formats keep the last 6-16
MERGE_SECONDS = 2.0  # edits closer in time than this, on neighbouring lines, are one event
MERGE_LINES = 3  # "neighbouring": the new edit starts within this many lines of the last one
DIFF_CONTEXT = 1  # lines of context around each diff hunk (the formats' public examples keep few)


@dataclass(frozen=True)
class EditEvent:
    """One recorded edit, in the form every prompt format writes: a unified diff body."""

    path: str  # the file, as the prompt names it (relative, '/'-separated)
    diff: str  # unified diff hunks ("@@ -a,b +c,d @@" and their lines), without the ---/+++ header
    old_path: str | None = None  # a renamed file's old name (None: the same as path)
    predicted: bool = False  # the user accepted a prediction (Zeta writes "// User accepted prediction:")
    at: float = 0.0  # time.time() of the edit's end

    def unified(self, prefix: bool = True) -> str:
        """The diff with its header: `--- a/path` / `+++ b/path` (prefix) or bare paths."""
        a, b = ("a/", "b/") if prefix else ("", "")
        return f"--- {a}{self.old_path or self.path}\n+++ {b}{self.path}\n{self.diff}"

    def sides(self) -> tuple[str, str]:
        """(the removed lines, the added lines) of the diff, each with its line ends: what
        Sweep's `original:` / `updated:` blocks show."""
        old, new = [], []
        for line in self.diff.splitlines(keepends=True):
            if line.startswith("@@"):
                continue
            if line.startswith("-") or line.startswith(" "):
                old.append(line[1:])
            if line.startswith("+") or line.startswith(" "):
                new.append(line[1:])
        return "".join(old), "".join(new)


def unified_diff(old: str, new: str, context: int = DIFF_CONTEXT) -> str:
    """The hunks turning `old` into `new` (no file header), each line ending in a newline."""
    lines = difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True), n=context, lineterm="\n")
    out = []
    for line in list(lines)[2:]:  # the ---/+++ header: the formats write their own
        out.append(line if line.endswith("\n") else line + "\n")
    return "".join(out)


@dataclass
class _Pending:
    path: str
    before: str  # the text before the first edit of the group
    after: str  # the text after the last one
    line: int  # where the last edit started (0-based line)
    at: float
    predicted: bool


@dataclass
class EditHistory:
    """Recent edits across files, oldest first, bounded to `limit` events."""

    limit: int = MAX_EVENTS
    merge_seconds: float = MERGE_SECONDS
    _groups: deque = field(default_factory=deque)

    def record(self, path: str, old_text: str, changes: ChangeSet, at: float | None = None, predicted: bool = False) -> None:
        """The buffer applied `changes` to `old_text` (of file `path`) at time `at`."""
        if not changes or changes.is_noop(old_text):
            return
        at = time.time() if at is None else at
        new_text = changes.apply(old_text)
        line = old_text.count("\n", 0, changes.changes[0].start)
        last = self._groups[-1] if self._groups else None
        if (last is not None and last.path == path and last.after == old_text and not predicted and not last.predicted
                and at - last.at <= self.merge_seconds and abs(line - last.line) <= MERGE_LINES):
            last.after, last.line, last.at = new_text, line, at
            return
        self._groups.append(_Pending(path, old_text, new_text, line, at, predicted))
        while len(self._groups) > self.limit:
            self._groups.popleft()

    def events(self, limit: int | None = None) -> tuple[EditEvent, ...]:
        """The last `limit` edits (all kept by default), oldest first, as unified diffs."""
        out = []
        for group in self._groups:
            diff = unified_diff(group.before, group.after)
            if diff:
                out.append(EditEvent(group.path, diff, predicted=group.predicted, at=group.at))
        return tuple(out[-limit:] if limit else out)

    def clear(self) -> None:
        self._groups.clear()
