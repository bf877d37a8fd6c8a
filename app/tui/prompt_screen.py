"""PromptScreen: a one-line question (find, replace, go to line, open, save as, rewrite instruction).

A pre-filled answer (Save as's name, Find's last query) starts selected: typing replaces it, as
in every editor. Path prompts (open, save as) complete with Tab, as a shell does: to the longest
common start of the names that match, listing them when there are several.

Its keys come from the app's KeyOrder (app/tui/key_order.py) through `take_key`, applied at
once: Textual's Input would get them through its own queue and post Enter's Submitted behind
the keys that followed, so `Ctrl+G 1 2 Enter x` in one read answered "12x".
"""
from __future__ import annotations

import os
from pathlib import Path

from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.suggester import Suggester
from textual.widgets import Input, Label

from .drain import drained


def complete_path(typed: str, limit: int = 8) -> tuple[str, list[str]]:
    """`typed` completed as far as the files allow (a directory gets its "/"), and the names that
    still match when more than one does (at most `limit`); unreadable folders complete nothing."""
    folder, _, start = typed.rpartition("/")
    folder = folder + "/" if "/" in typed else ""
    where = Path(os.path.expanduser(folder or "."))
    try:
        names = sorted(entry.name + ("/" if entry.is_dir() else "") for entry in os.scandir(where)
                       if entry.name.startswith(start) and (start.startswith(".") or not entry.name.startswith(".")))
    except OSError:
        return typed, []
    if not names:
        return typed, []
    common = os.path.commonprefix(names)
    return folder + common, (names[:limit] + ["…"] if len(names) > limit else names) if len(names) > 1 else []


class PathSuggester(Suggester):
    """The completion Tab would make, drawn faint after the cursor (Right takes it too)."""

    def __init__(self) -> None:
        super().__init__(use_cache=False, case_sensitive=True)  # the folder may change between two asks

    async def get_suggestion(self, value: str) -> str | None:
        completed, _ = complete_path(value)
        return completed if completed != value else None


class PromptScreen(ModalScreen[str | None]):
    """Dismisses with the typed text on Enter, or None on Esc."""

    BINDINGS = [Binding("escape", "cancel", "Cancel", id="prompt.cancel")]

    DEFAULT_CSS = """
    PromptScreen {
        align: center top;
        background: $background 40%;
        & > Vertical {
            margin-top: 3;
            width: 70;
            height: auto;
            padding: 1 2;
            background: $panel;
            border: round $primary;
        }
        & Label { width: 100%; margin-bottom: 1; }
        & .prompt-screen--hint { color: $foreground 60%; margin: 1 0 0 0; }
    }
    """

    def __init__(self, question: str, value: str = "", placeholder: str = "", hint: str = "", complete_paths: bool = False) -> None:
        super().__init__()
        self.question, self.value, self.placeholder, self.hint = question, value, placeholder, hint
        self.complete_paths = complete_paths
        if complete_paths and not hint:
            self.hint = "Tab completes the name"

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(self.question, markup=False)
            yield Input(self.value, placeholder=self.placeholder, select_on_focus=True,
                        suggester=PathSuggester() if self.complete_paths else None)
            if self.hint:
                yield Label(self.hint, classes="prompt-screen--hint", markup=False)

    def complete(self, field: Input) -> None:
        """Tab in a path prompt: complete the name before the cursor, list the names that still match."""
        completed, names = complete_path(field.value[:field.cursor_position])
        field.value = completed + field.value[field.cursor_position:]
        field.cursor_position = len(completed)
        hint = self.query(".prompt-screen--hint")
        if hint:
            hint.first().update("  ".join(names) if names else "Tab completes the name")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if self.is_current:  # Enter through take_key has dismissed it already
            self.dismiss(event.value)

    async def take_key(self, event: events.Key) -> bool:
        """Apply a key now (from KeyOrder, in the app's order of keys); False: not a prompt key."""
        try:
            field = self.query_one(Input)
        except Exception:  # not composed (the app waited for it and gave up): Textual's way then
            return False
        if event.key == "enter":
            await self.submit(field.value)
            return True
        if event.is_printable and event.character:
            if field.selection.is_empty:
                field.insert_text_at_cursor(event.character)
            else:  # a pre-filled answer starts selected: typing replaces it
                field.replace(event.character, *field.selection)
            return True
        if event.key == "tab" and self.complete_paths:
            self.complete(field)
            return True
        for binding in field._bindings.key_to_bindings.get(event.key, ()):  # Input's keys, the keymap applied
            if await self.app.run_action(binding.action, field):
                return True
        return await self.app._check_bindings(event.key, priority=True) or await self.app._check_bindings(event.key)

    def take_paste(self, event: events.Paste) -> bool:
        """A paste, in its place among the keys: its first line, as Textual's Input takes it."""
        try:
            field = self.query_one(Input)
        except Exception:
            return False
        if event.text:
            line = event.text.splitlines()[0]
            if field.selection.is_empty:
                field.insert_text_at_cursor(line)
            else:
                field.replace(line, *field.selection)
        return True

    async def submit(self, value: str) -> None:
        """Dismiss with `value`, and return once the asker's callback has run."""
        callbacks = self._result_callbacks
        asker = callbacks[-1].requester if callbacks else None
        self.dismiss(value)
        if asker is not None and asker is not self.app:
            # The callback runs in the asker's queue; the app's own queue runs it right after the
            # current key. Either way it has run before the next key is looked at.
            await drained(asker)

    def action_cancel(self) -> None:
        self.dismiss(None)
