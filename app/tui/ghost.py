"""Ghost text: the model completes at the cursor after a pause in typing (as llama.vim, Copilot).

    typing --pause--> running --frame--> running --done--> shown --Tab--> accepted (one undo step)
                         |                                   |  ^
                         |                                   +--+ typing its next character: the rest stays
                         +------- any other key, a click, an edit: dismissed (run cancelled) -+

A pane owns one Ghost. It fires only when nothing else is going on: the model is loaded, no
run or preview is up in any buffer, nothing is selected, the buffer is editable and has the
focus, and the rest of the cursor's line is empty or closing characters (mid-word infill is
noise). The run is an infill at the cursor with the text before and after it, a
run_state.ModelRun on the pane's RunBoard like every other run; its frames are drawn
faint in the pane's preview layer, so the ghost is never in the buffer or its undo history
until Tab writes it as one edit.
"""
from __future__ import annotations

import time
from dataclasses import replace

from ...core.changes import ChangeSet
from ...core.spans import Span
from ..config import Config
from .messages import EditFailed, EditFinished, EditProgress
from .preview import GHOST, GHOST_CURSOR, GHOST_MASKED, MASKED, NOISE, Piece, merge, pieces_text
from .pause import FiresAfterPause
from .preview_view import lines_around, shows_view
from .run_state import ModelRun

RUNNING, SHOWN = "running", "shown"  # and WAITING (pause.py); None: nothing pending
CLOSING = frozenset(")]}>\"'`;:,")  # what may follow the cursor on its line for a ghost to fire
NOTICE = "ghost: "  # how the status bar's note on a shown ghost starts


def ghost_default(config: Config) -> bool:
    """On with a checkpoint the user chose, off with the embedded demo model unless asked for:
    its completions are a 1.8M-parameter toy's, worth watching on request, not on every pause."""
    if config.editor.ghost is not None:
        return config.editor.ghost
    return not config.embedded


def fits_cursor(rest_of_line: str) -> bool:
    """Whether a completion belongs here: nothing after the cursor on its line but blanks and
    closing characters (Copilot's rule; in the middle of a word an infill only adds noise)."""
    return all(ch.isspace() or ch in CLOSING for ch in rest_of_line)


def ghost_pieces(pieces: list[Piece]) -> list[Piece]:
    """A frame's pieces drawn as ghost text: still-masked slots as faint blur, every committed
    token faint whatever its confidence (the ghost is a suggestion until accepted)."""
    return merge([Piece(p.text, GHOST_MASKED if p.kind in (MASKED, NOISE) else GHOST) for p in pieces])


def _rest_of(result, text: str, at: int, rest: str):
    """A ghost's result once its first characters were typed: `rest` at `at` of `text` (the
    buffer now), as Tab writes it (core.engine.EditResult: one infill span, one alternative)."""
    span = result.spans[0]
    moved = replace(span, span=replace(span.span, start=at, end=at), text=rest, alternatives=(rest,))
    whole = ChangeSet.of([(at, at, rest)]).apply(text)
    return replace(result, text=whole, spans=(moved,), samples=(whole,), candidates=())


class Ghost(FiresAfterPause):
    """The as-you-type completion of one pane (state, timer, run, drawing)."""

    def __init__(self, pane) -> None:
        self.pane = pane  # the EditorPane it belongs to (not imported here: that module imports this one)
        self.state: str | None = None
        self.run: ModelRun | None = None
        self.last: ModelRun | None = None  # the last run that showed a ghost (its timings: bench/ghost_latency.py)
        self._typed_at = 0.0
        self._timer = None
        self._through: str | None = None  # the character of the key typing through a shown ghost

    # -- switching it on and off ----------------------------------------------------------

    @property
    def enabled(self) -> bool:
        session = self.pane.session
        return session.ghost if session.ghost is not None else ghost_default(session.config)

    @property
    def pause(self) -> float:
        return self.pane.session.config.editor.ghost_pause_ms / 1000

    def toggle(self) -> bool:
        """The palette's switch, for every buffer of the session; returns the new state."""
        self.pane.session.ghost = not self.enabled
        if not self.pane.session.ghost:
            self.dismiss()
        return self.pane.session.ghost

    # -- the pause ------------------------------------------------------------------------

    def typed(self) -> None:
        """The buffer changed: a ghost may fire once typing pauses. One timer per pause, not per
        key: when it comes due early (the user typed on) it waits out the rest. Typing what a
        shown ghost shows next keeps it (`follows`)."""
        self._typed_at = time.perf_counter()
        if not self.enabled or self.follows():
            return
        if self.pane.editor.history.redo_stack:  # an undo (every typed edit empties it): asking again
            self.dismiss()                        # would offer back what was just taken out
            return
        if self.state in (RUNNING, SHOWN):
            self.dismiss()
        self.wait_for_pause()

    def why_not(self) -> str | None:
        """Why a ghost may not fire now (None: it may)."""
        pane, session = self.pane, self.pane.session
        editor = pane.editor
        if not self.enabled:
            return "ghost completion is off"
        if session.backend is None:
            return "no model"
        if session.queued is not None or any(p.phase != "idle" for p in pane.app.query(type(pane))):  # editor_pane.IDLE
            return "another run or preview is active"
        if pane.next_edit.active:  # the layer shows proposed next edits (next_edit_overlay.py)
            return "next edits are proposed"
        if not editor.selection.is_empty:
            return "text is selected"
        if editor.read_only or not editor.has_focus:
            return "the buffer is read-only or not focused"
        row, column = editor.selection.end
        if not fits_cursor(editor.document.lines[row][column:]):
            return "the cursor is inside a line"
        return None

    # -- the run --------------------------------------------------------------------------

    def fire(self) -> None:
        pane = self.pane
        config, editor = pane.session.config, pane.editor
        text = editor.buffer_text
        offset = editor.offset_of(editor.selection.end)
        path = str(editor.buffer.path) if editor.buffer.path else None
        span = Span(offset, offset, "infill", max_tokens=config.editing.infill_tokens)
        self.state = RUNNING
        # Paced only by min_step_ms, a choice to watch every run; never by the first-run pacing.
        self.run = pane.runs.start("ghost", text, (span,), self, pane.session.backend, config, config.editor.min_step_ms, path,
                                   window=self._window(len(text)), typed_at=self._typed_at)

    def _window(self, length: int) -> tuple[int, int, int, int]:
        """What of the buffer the layer shows: the view and the cursor's line, a margin each side."""
        return lines_around(self.pane.editor, self.pane.editor.selection.end[0], length)

    def scrolled(self) -> None:
        """The editor scrolled under a ghost: past the layer's lines the ghost goes (nothing is drawn there)."""
        run = self.run
        if run is None or not self.active:
            return
        if not shows_view(self.pane.editor, run.window):
            self.dismiss(pending=False)

    def dismiss(self, pending: bool = True) -> bool:
        """Stop a running or shown ghost, and with `pending` one still waiting for the pause;
        True when one was running or shown. The model stops at its next step (cooperative
        cancellation between steps)."""
        was = self.state in (RUNNING, SHOWN)
        if not was:
            if pending:
                self.state = None
            return False
        self.pane.runs.stop(self.run)
        self.run, self.state = None, None
        self._hide()
        if self.pane.notice.startswith(NOTICE):  # "Tab accepts" is stale once the ghost is gone
            self.pane.notice = ""
            self._announce()
        return True

    def key(self, key: str, accept_keys: list[str], character: str | None = None) -> None:
        """A key reached the app: unless it is one of Accept's keys over a shown ghost, or types the
        ghost's next character (type-through, below), the ghost goes (the key then does what it
        always does). A pending one stays armed: a key that types re-arms it anyway, and one that
        does not leaves the cursor where the pause counts."""
        self._through = character if self.shown and self._types_next(character) else None
        if self.shown and (key in accept_keys or self._through):
            return
        self.dismiss(pending=False)

    def before_edit(self) -> bool:
        """The buffer is about to change: the ghost's text was for the buffer as it was, so it goes,
        unless the edit is the key that types its next character (then True: it stays)."""
        if self.shown and self._through:
            return True
        self.dismiss()
        return False

    # -- type-through: typing what the ghost shows keeps the rest of it (Copilot, llama.vim) --

    def _types_next(self, character: str | None) -> bool:
        rest = self.run.result.spans[0].text if self.run is not None and self.run.result is not None else ""
        return bool(character) and len(character) == 1 and character.isprintable() and rest.startswith(character)

    def follows(self) -> bool:
        """Whether a shown ghost still matches the buffer after an edit or a cursor move: the same
        text and cursor (nothing changed), or its first character typed at the cursor, which it
        then drops (the rest stays shown; the whole of it typed, it is done). An editor that
        typed more (a closing bracket, an indent) or anything else: False, and it goes."""
        run, editor = self.run, self.pane.editor
        if self.state != SHOWN or run is None or not editor.selection.is_empty:
            return False
        text, cursor = editor.buffer_text, editor.offset_of(editor.selection.end)
        if text == run.text and cursor == run.offset:
            return True
        rest, self._through = run.result.spans[0].text, None
        typed = cursor - run.offset  # one character typed, or a word or line taken (next_edit_actions.accept_part)
        if not rest or typed < 1 or text != run.text[:run.offset] + rest[:typed] + run.text[run.offset:]:
            return False
        rest = rest[typed:]
        if not rest.strip():  # all of it typed (blanks left are no suggestion): done
            self.dismiss()
            self.pane.say_once("ghost typed through")
            return True
        run.text, run.spans, run.window = text, (replace(run.spans[0], start=cursor, end=cursor),), self._window(len(text))
        run.result = _rest_of(run.result, text, cursor, rest)
        self._draw(run, self._final(run))
        return True

    def accept(self) -> bool:
        """Write the shown ghost into the buffer as one edit (one undo step)."""
        run = self.run
        if self.state != SHOWN or run is None:
            return False
        self.run, self.state = None, None
        self._hide()
        if self.pane.apply_result(run.text, run.result, 0) is None:  # cannot happen: every edit dismisses the ghost
            return False
        written = len(pieces_text(self._final(run)))
        self.pane.say_once(f"ghost accepted: {written} character{'' if written == 1 else 's'} (undo removes them)")
        return True

    @property
    def active(self) -> bool:
        return self.state in (RUNNING, SHOWN)

    @property
    def shown(self) -> bool:
        return self.state == SHOWN

    # -- what the run tells (run_state.RunOwner) ------------------------------------------

    def run_frame(self, run: ModelRun, message: EditProgress) -> None:
        if run is not self.run or self.state != RUNNING:
            return
        pieces = ghost_pieces(message.pieces[0])
        self._draw(run, pieces)
        run.drafts.append(pieces_text(pieces))

    def run_finished(self, run: ModelRun, message: EditFinished) -> None:
        if run is not self.run or self.state != RUNNING:
            return
        text = self._final(run)
        if not pieces_text(text).strip():  # nothing (or only blanks) to suggest: no ghost
            self.dismiss()
            return
        self.state = SHOWN
        self._draw(run, text, final=True)
        self.last = run
        self.pane.editor.yield_tab = True  # Tab is Accept now (the pane's check_action says so)
        keys = self.pane.app.keys_for("accept").split(", ")[0]
        self.pane.notice = f"{NOTICE}{keys} accepts, any other key dismisses ({run.compute_seconds:.2f} s)"
        self._announce()

    def run_failed(self, run: ModelRun, message: EditFailed) -> None:
        if run is not self.run:
            return
        self.dismiss()  # a failed ghost is no news worth a dialog; the status says it
        self.pane.notice = f"ghost failed: {message.error}"
        self._announce()

    def moved(self) -> None:
        """The cursor moved (an edit moves it too): a shown ghost it no longer follows goes; a
        pending one stays armed."""
        if not self.follows():
            self.dismiss(pending=False)

    @staticmethod
    def _final(run: ModelRun) -> list[Piece]:
        """The finished ghost: what Tab writes (the best sample's text), all of it faint."""
        text = run.result.spans[0].text
        return [Piece(text, GHOST)] if text else []

    # -- drawing --------------------------------------------------------------------------

    def _draw(self, run: ModelRun, pieces: list[Piece], final: bool = False) -> None:
        pane = self.pane
        first = run.frames == 0
        pane.show_overlay(run.text, [(run.offset, run.offset)], [pieces], same_run=not first, cursor=GHOST_CURSOR, window=run.window)
        run.drawn(final)
        if first:
            pane.set_class(True, "-previewing")

    def _announce(self) -> None:
        self.pane.announce()

    def _hide(self) -> None:
        pane = self.pane
        if pane.phase == "idle":
            pane.set_class(False, "-previewing")
            pane.editor.yield_tab = False
