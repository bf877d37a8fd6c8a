"""Every key kept, in the order it was typed.

Textual hands each key to a widget's own message queue and runs bindings when the key comes
back up to the app, so a burst that arrives in one read is spread over several queues:
`Ctrl+G 1 2 Enter x` typed "12", a line break and "x" into the buffer and opened the prompt
afterwards (the pilot), or left Enter behind "x" in the prompt ("not a line number: 12x", a
terminal). Keys typed before the first editor had focus went nowhere.

KeyOrder sits in the app's own key handling (SharpenApp.on_event) and keeps one order:

- until the first editor has focus, keys (and pastes) are held, then replayed in order; a
  Ctrl+J among them was an Enter (the terminal's cooked mode turned its CR into LF);
- a key the editor would not type (arrows, Shift+arrows, Ctrl and Alt chords, F-keys) waits
  until the editor has handled every key before it, then runs its binding right here, so
  whatever it opens is open before the next key is looked at;
- while a prompt is up, its keys are applied to it here, and Enter submits it (and runs the
  prompt's answer) before the next key: the keys after it go where they would have gone had
  they been typed a second later;
- a dialog that was just opened gets the keys once it is on screen;
- before an Enter in a buffer with no language yet (untitled), the language is decided from
  the text typed so far, so the Enter's auto-indent follows it.
"""
from __future__ import annotations

import asyncio
import logging

from textual import events

from .drain import WAIT_SECONDS, drained
from .editor_area import EditorArea
from .prompt_screen import PromptScreen

log = logging.getLogger(__name__)

TYPED_AS_TEXT = ("enter",)  # keys EditorArea handles itself (auto-indent), never through a binding


class KeyOrder:
    """The app's keys, in order. `app` is the SharpenApp; its on_event calls `take`."""

    def __init__(self, app) -> None:
        self.app = app
        self.ready = False  # the first editor has focus (or a dialog is up at start)
        self.held: list[events.Event] = []
        self.deferred: list[events.Event] = []  # typed before a dialog that came up at start: for the buffer, after it

    async def open(self) -> None:
        """The editor is ready: replay what was typed before, in order. If a dialog came up while
        sharpen started (a recovery offer), the keys typed before it were meant for the buffer, not
        for a question nobody had seen yet (a typed Enter answered "Restore all"): they wait until
        the dialog is gone; keys typed after it appeared are the dialog's."""
        self.ready = True
        held, self.held = self.held, []
        if held and self.app.screen is not self.app.screen_stack[0]:
            self.deferred = held
            self._wait_for_dialog = self.app.set_interval(0.05, self._after_dialog)
            return
        await self._replay(held)

    async def _after_dialog(self) -> None:
        if self.deferred and self.app.screen is self.app.screen_stack[0]:
            await self._replay_deferred()

    async def _replay_deferred(self) -> None:
        self._wait_for_dialog.stop()
        deferred, self.deferred = self.deferred, []
        await self._replay(deferred)

    async def _replay(self, held: list[events.Event]) -> None:
        for event in held:
            if isinstance(event, events.Key) and event.key == "ctrl+j":
                event = events.Key("enter", "\r")  # typed before raw mode: the terminal's ICRNL made it LF
            if not await self.take(event):
                await self.app.forward_key(event)

    async def take(self, event: events.Event) -> bool:
        """Handle `event` (a Key or a Paste) here, in the order it came; False: let Textual
        forward it as usual (text for the editor goes through the editor's own queue, in order)."""
        if not self.ready:
            self.held.append(event)
            return True
        app = self.app
        if self.deferred and app.screen is app.screen_stack[0]:  # the start's dialog is gone: its keys first
            await self._replay_deferred()
        screen = app.screen
        if screen is not app.screen_stack[0] and not getattr(screen, "_sharpen_keys_ready", False):
            await self._screen_ready(screen)  # a dialog was just pushed: its widgets may still be mounting
            screen._sharpen_keys_ready = True  # once per dialog: a dialog that lost its focus never waits again
            screen = app.screen
        if isinstance(screen, PromptScreen):
            return await screen.take_key(event) if isinstance(event, events.Key) else screen.take_paste(event)
        if not isinstance(event, events.Key):
            return False
        focused = app.focused
        if isinstance(focused, EditorArea) and event.key == "enter" and focused.language is None and focused.buffer.path is None:
            await drained(focused)  # "def main():" typed into an untitled buffer: its language
            app.before_enter(focused)  # is decided before the Enter that auto-indents by it
            return False
        if not isinstance(focused, EditorArea) or not self._runs_a_binding(focused, event):
            return False
        await drained(focused)  # every key typed before this one is in the buffer first
        return await app._check_bindings(event.key, priority=True) or await app._check_bindings(event.key)

    def _runs_a_binding(self, editor: EditorArea, event: events.Key) -> bool:
        if event.key in TYPED_AS_TEXT or editor.check_consume_key(event.key, event.character):
            return False
        screen = self.app.screen
        chains = (*screen._binding_chain, *screen._modal_binding_chain)
        return any(event.key in bindings.key_to_bindings for _, bindings in chains)

    async def _screen_ready(self, screen) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + WAIT_SECONDS
        while loop.time() < deadline and screen is self.app.screen:
            if screen.is_mounted and (screen.focused is not None or not screen.focus_chain):
                return
            await asyncio.sleep(0.005)
        log.info("screen %s not ready after %.1f s; keys go on", screen, WAIT_SECONDS)
