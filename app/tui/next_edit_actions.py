"""Partial accept of a shown ghost: its next word (Ctrl+Right) or its next line, what users of
Copilot, llama.vim and Zed ask for most after the whole of it (Tab).

The part is written at the cursor as one edit (one undo step), as if typed: the ghost's
type-through (ghost.Ghost.follows) sees its first characters typed and keeps the rest shown.
The pane binds the keys (bindings.py: accept-word, accept-line) only while a ghost is shown;
otherwise they are the TextArea's own (Ctrl+Right: the cursor a word right).
"""
from __future__ import annotations

import re

NEXT_WORD = re.compile(r"\s*(\w+|[^\w\s]+)|\s+")  # blanks, then a word or a run of punctuation


def next_word(rest: str) -> str:
    """The ghost's text up to the end of its next word (leading blanks and line breaks included)."""
    match = NEXT_WORD.match(rest)
    return match.group(0) if match else rest


def next_line(rest: str) -> str:
    """The ghost's text to the end of its line, with the line break: the next line starts after it.
    A ghost starting with a line break takes that break and the line after it."""
    newline = rest.find("\n", 1 if rest.startswith("\n") else 0)
    return rest if newline < 0 else rest[:newline + 1]


def accept_part(ghost, line: bool) -> bool:
    """Write the next word (or line) of the shown ghost; the rest stays shown. False: no ghost."""
    run = ghost.run
    if not ghost.shown or run is None or run.result is None:
        return False
    rest = run.result.spans[0].text
    part = next_line(rest) if line else next_word(rest)
    if len(part) >= len(rest) or not rest[len(part):].strip():
        return ghost.accept()  # the part is all there is (blanks after it suggest nothing)
    editor = ghost.pane.editor
    ghost._through = part  # the edit below types the ghost's next characters: it stays (before_edit)
    editor.history.checkpoint()
    written = editor.insert(part, editor.location_of(run.offset))
    editor.history.checkpoint()
    editor.move_cursor(written.end_location)
    ghost.follows()  # at once, not at the Changed message: a second Ctrl+Right reads the rest
    return True
