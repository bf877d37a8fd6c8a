"""A buffer's search and navigation commands: find, find next / previous, replace, go to line.

Functions of one EditorPane (the widget whose bindings run them); the prompts are pushed on the
pane's app. The query is the session's (one for every buffer, as in most editors):

- plain text matches itself, any case when typed all in lower case (smart case);
- `/pattern/` is a Python regular expression (`/pattern/i`: any case), and its replacement may
  name groups (`\\1`, `\\g<name>`).

Replace asks for the text, then whether to replace the next match or all of them: either way
one edit, so one undo step, and the count is said.
"""
from __future__ import annotations

import re

from .confirm_screen import ConfirmScreen
from .prompt_screen import PromptScreen
from .session import Pane

REGEX = re.compile(r"^/(.+)/(i?)$", re.S)
HINT = "lower case matches any case; /regex/ is a regular expression; F3 / Shift+F3: next / previous"


def pattern_of(query: str) -> re.Pattern:
    """The compiled search for `query` (raises re.error for a bad /regex/)."""
    regex = REGEX.match(query)
    if regex is not None:
        return re.compile(regex.group(1), re.IGNORECASE if regex.group(2) else 0)
    return re.compile(re.escape(query), re.IGNORECASE if query.islower() else 0)


def matches(text: str, query: str) -> list[re.Match]:
    """Every non-empty match of `query` in `text`, in order."""
    return [m for m in pattern_of(query).finditer(text) if m.end() > m.start()]


def _matches_or_say(pane: Pane, query: str) -> list[re.Match] | None:
    try:
        found = matches(pane.editor.buffer_text, query)
    except re.error as exc:
        pane.notify(f"not a regular expression: {query} ({exc})", severity="warning", timeout=4)
        return None
    if not found:
        pane.notify(f"not found: {query}", severity="warning", timeout=2)
        return None
    return found


def find(pane: Pane, then=None) -> None:
    session = pane.session

    def chosen(answer: str | None) -> None:
        if answer:
            session.last_search = answer
            (then or find_next)(pane)

    pane.app.push_screen(PromptScreen("Find:", session.last_search, hint=HINT), chosen)


def find_next(pane: Pane, backwards: bool = False) -> None:
    """Select the next match after the selection (`backwards`: the one before it), wrapping around."""
    query = pane.session.last_search
    if not query:
        find(pane, then=lambda p: find_next(p, backwards))
        return
    found = _matches_or_say(pane, query)
    if found is None:
        return
    editor = pane.editor
    start, end = editor.selected_offsets()
    if backwards:
        before = [m for m in found if m.start() < start]
        match = before[-1] if before else found[-1]
        wrapped = not before
    else:
        after = [m for m in found if m.start() >= end]
        match = after[0] if after else found[0]
        wrapped = not after
    if wrapped:
        pane.notify(f"search wrapped to the {'bottom' if backwards else 'top'}", timeout=1.5)
    editor.select_offsets(match.start(), match.end())
    editor.scroll_cursor_visible(center=True)


def find_previous(pane: Pane) -> None:
    find_next(pane, backwards=True)


def replace(pane: Pane) -> None:
    """Ask what to replace (the selection, else the last search) and with what, then next or all."""
    session, editor = pane.session, pane.editor
    start, end = editor.selected_offsets()
    selected = editor.buffer_text[start:end]
    query = selected if selected and "\n" not in selected else session.last_search

    def with_what(replacement: str | None) -> None:
        if replacement is None:
            return
        found = _matches_or_say(pane, session.last_search)
        if found is None:
            return
        count = f"{len(found)} match" + ("" if len(found) == 1 else "es")
        question = f"{count} of {session.last_search} in {editor.buffer.name}: replace with {replacement!r}"
        choices = [("next", "Replace next", "primary"), ("all", f"Replace all {len(found)}", "warning"), ("cancel", "Cancel", "default")]
        pane.app.push_screen(ConfirmScreen(question, choices), lambda answer: answer in ("next", "all") and
                             replace_matches(pane, session.last_search, replacement, every=answer == "all"))

    def chosen(answer: str | None) -> None:
        if answer:
            session.last_search = answer
            pane.app.push_screen(PromptScreen(f"Replace {answer} with:", hint="/regex/ replacements may use \\1 or \\g<name>"), with_what)

    pane.app.push_screen(PromptScreen("Replace:", query, hint=HINT), chosen)


def replace_matches(pane: Pane, query: str, replacement: str, every: bool) -> int:
    """Replace the next match of `query` at or after the selection (`every`: all of them) in one
    edit, so one undo step; returns how many were replaced (0: none, said to the user)."""
    found = _matches_or_say(pane, query)
    if found is None:
        return 0
    editor = pane.editor
    text = editor.buffer_text
    regex = REGEX.match(query) is not None
    if not every:
        start = editor.selected_offsets()[0]
        found = [next((m for m in found if m.start() >= start), found[0])]
    try:
        pieces = [m.expand(replacement) if regex else replacement for m in found]
    except (re.error, IndexError) as exc:
        pane.notify(f"bad replacement {replacement!r}: {exc}", severity="warning", timeout=4)
        return 0
    first, last = found[0].start(), found[-1].end()
    segment, at = [], first
    for match, piece in zip(found, pieces):
        segment += [text[at:match.start()], piece]
        at = match.end()
    editor.history.checkpoint()  # one replacement over [first, last): one undo step
    applied = editor.replace("".join(segment), editor.location_of(first), editor.location_of(last))
    editor.history.checkpoint()
    editor.move_cursor(applied.end_location)  # after it, no selection: the next Replace asks for the same query
    editor.scroll_cursor_visible(center=True)
    pane.notify(f"replaced {len(found)} match{'' if len(found) == 1 else 'es'}", timeout=3)
    return len(found)


def goto_line(pane: Pane) -> None:
    def chosen(answer: str | None) -> None:
        if not answer:
            return
        try:
            parts = [int(p) for p in answer.strip().split(":")]
        except ValueError:
            pane.notify(f"not a line number: {answer}", severity="warning")
            return
        editor = pane.editor
        row = min(max(parts[0], 1), editor.document.line_count) - 1
        column = max(parts[1] - 1, 0) if len(parts) > 1 else 0
        editor.move_cursor((row, column), center=True)

    pane.app.push_screen(PromptScreen("Go to line (LINE or LINE:COLUMN):"), chosen)
