"""Next-edit prediction in the editor: after a pause that follows an edit, the model proposes the
follow-up edits (core/next_edit/), drawn as edits over the buffer while they sharpen.

    edit --pause--> running --draft--> running --done--> shown --Tab--> jumped --Tab--> applied (one undo step)
                      |                                   |  typing: hunks move with the text, a typed-into one goes
                      +-- typing: cancelled at its next step    Esc: dismissed; apply-all: every hunk, one undo step

A pane owns one NextEditor. The buffer's edits feed the session's EditHistory (core/next_edit/
history.py) as ChangeSets with their time and file; each prediction is a run_state.ModelRun on
the pane's RunBoard, as the ghost's and a command's runs are (core.next_edit.predict over the
session's backend in the board's one worker path): its drafts come back as the run's frames
(run_frame), its answer as run_finished; a run typing made stale is stopped on the board, which
drops whatever it still sends. The hunks are drawn in the pane's preview
layer, as the ghost is, so the buffer and its undo history are untouched until Tab applies one:
deleted text dimmed and struck, inserted text faint (a line break in it as ⏎, so no row of the
buffer moves). Hunks outside the view are counted in the status bar's note with their lines.
"""
from __future__ import annotations

import time

from ...core.changes import ChangeSet
from ...core.next_edit.history import EditHistory
from ...core.next_edit.offer import Apply, Offer
from ...core.next_edit.request import Hunk, NextEditAnswer, NextEditRequest
from .messages import EditFailed, EditFinished, EditProgress
from .preview import DELETED, INSERTED, NEXT_EDIT_CURRENT as CURRENT, Piece
from .pause import FiresAfterPause
from .preview_view import lines_around, shows_view, top_line
from .run_state import ModelRun

NEWLINE_GLYPH = "⏎"  # an inserted line break, drawn in place so the rows below never move
RUNNING, SHOWN = "running", "shown"  # and WAITING (pause.py); None: nothing pending
NOTICE = "next edit: "  # how the status bar's note on the offer starts


def next_edit_default(config) -> bool:
    """On with a checkpoint the user chose or a server, off with the embedded demo model unless
    asked for (as ghost completion: a 1.8M-parameter toy's guesses on every pause are noise)."""
    if config.editor.next_edit is not None:
        return config.editor.next_edit
    return not config.embedded


def one_change(old: str, new: str) -> ChangeSet | None:
    """The edit turning `old` into `new` as one replacement (common prefix and suffix kept), found
    by comparing slices in C: the buffer's Changed message says that it changed, not where."""
    if old == new:
        return None
    limit = min(len(old), len(new))
    lo, hi = 0, limit  # the longest common prefix, by bisection
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if old[:mid] == new[:mid]:
            lo = mid
        else:
            hi = mid - 1
    prefix, lo, hi = lo, 0, limit - lo
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if old[len(old) - mid:] == new[len(new) - mid:]:
            lo = mid
        else:
            hi = mid - 1
    return ChangeSet.of([(prefix, len(old) - lo, new[prefix:len(new) - lo])])


def hunk_pieces(text: str, hunk: Hunk, current: bool = False) -> list[Piece]:
    """A hunk drawn as an edit: the text it removes (struck), then the text it writes (faint)."""
    pieces = []
    if hunk.end > hunk.start:
        pieces.append(Piece(text[hunk.start:hunk.end], DELETED))
    if hunk.text:
        pieces.append(Piece(hunk.text.replace("\n", NEWLINE_GLYPH), CURRENT if current else INSERTED))
    return pieces


def off_screen(text: str, hunks, top: int, height: int) -> tuple[list[int], list[int]]:
    """The 1-based lines of the hunks above the view's lines [top, top + height) and below it."""
    above, below = [], []
    for h in hunks:
        line = text.count("\n", 0, h.start)
        if line < top:
            above.append(line + 1)
        elif line >= top + height:
            below.append(line + 1)
    return above, below


class NextEditor(FiresAfterPause):
    """Next-edit prediction on one pane (history feed, timer, run, drawing, the offer and its keys)."""

    def __init__(self, pane) -> None:
        self.pane = pane  # the EditorPane (not imported: that module imports this one)
        self.state: str | None = None
        self.run: ModelRun | None = None  # the prediction running (purpose "next-edit", on pane.runs)
        self.last: ModelRun | None = None  # the last finished run (its result: a NextEditDone)
        self.offer: Offer | None = None
        self._text: str | None = None  # the buffer as the history last saw it
        self._typed_at = 0.0
        self._timer = None
        self._applying = False  # the change coming in is a hunk Tab applied (history: predicted)
        # What the layer shows now, drawn by this: (the text under it, its window, the layout);
        # a frame over the same text and window replaces only the lines that changed.
        self._drawn: tuple[str, tuple[int, int, int, int], object] | None = None

    # -- switching it on and off ----------------------------------------------------------

    @property
    def history(self) -> EditHistory:
        session = self.pane.session
        if session.edit_history is None:  # one history for all buffers: the prompt names each edit's file
            session.edit_history = EditHistory()
        return session.edit_history

    @property
    def enabled(self) -> bool:
        session = self.pane.session
        return session.next_edit if session.next_edit is not None else next_edit_default(session.config)

    @property
    def pause(self) -> float:
        return self.pane.session.config.editor.next_edit_pause_ms / 1000

    def toggle(self) -> bool:
        self.pane.session.next_edit = not self.enabled
        if not self.pane.session.next_edit:
            self.dismiss()
        return self.pane.session.next_edit

    @property
    def path(self) -> str:
        path = self.pane.editor.buffer.path
        return path.name if path is not None else "untitled"

    # -- the buffer's edits ---------------------------------------------------------------

    def changed(self) -> None:
        """The buffer changed (its Changed message): into the history; a running prediction is
        told to stop (it does at its next step); shown hunks move with the text, and one typed
        into is withdrawn; and a new prediction is armed for the next pause."""
        if not self.enabled:  # off: no history kept (a diff per keystroke costs milliseconds in a long file)
            self._text = None
            return
        text = self.pane.editor.buffer_text
        old, self._text = self._text, text
        applying, self._applying = self._applying, False
        changes = one_change(old, text) if old is not None else None
        if changes is None:
            return
        self.history.record(self.path, old, changes, predicted=applying)
        if applying:
            return  # the offer was already mapped through the hunk it applied
        if self.state == RUNNING:
            self._stop()
            self._hide()  # its draft was for the text before this edit: drawn over it, the typing would not show
        if self.offer is not None:
            self.offer = self.offer.after_edit(changes)
            if self.offer is not None:
                self._draw_offer()
                return
            self._hide()
        if self.pane.editor.history.redo_stack:  # an undo: asking again would offer back what was taken out
            self.state = None
            return
        self._typed_at = time.perf_counter()
        self.wait_for_pause()

    def seen(self) -> None:
        """The buffer as it is now is no one's edit (loaded, reloaded): the history starts here."""
        self._text = self.pane.editor.buffer_text

    def why_not(self) -> str | None:
        """Why a prediction may not start now (None: it may)."""
        pane, session = self.pane, self.pane.session
        if not self.enabled:
            return "next-edit prediction is off"
        if session.backend is None:
            return "no model"
        if session.queued is not None or any(p.phase != "idle" for p in pane.app.query(type(pane))) or pane.ghost.active:
            return "another run or preview is active"
        if pane.editor.read_only:
            return "the buffer is read-only"
        return None

    # -- the run --------------------------------------------------------------------------

    def fire(self) -> None:
        editor, config = self.pane.editor, self.pane.session.config
        text = editor.buffer_text
        request = NextEditRequest.around(self.path, text, editor.offset_of(editor.selection.end), self.history.events(),
                                         sampling=config.sampling, editing=config.editing)
        self.pane.runs.stop(self.run)  # a newer edit's prediction supersedes a stale one
        self.state = RUNNING
        self.run = self.pane.runs.start_next_edit(request, self, self.pane.session.backend, config)

    # -- what the run tells (run_state.RunOwner) ------------------------------------------
    # Only a live run's news arrives: every run this leaves behind (superseded, typed over,
    # dismissed) is stopped on the board, which drops what it still sends (RunBoard.live).

    def run_frame(self, run: ModelRun, message: EditProgress) -> None:
        run.drafts.append(message.draft)
        self._draw(run.text, message.draft.hunks, None)
        run.drawn()

    def run_finished(self, run: ModelRun, message: EditFinished) -> None:
        answer: NextEditAnswer = message.result.answer
        self.run, self.last = None, run
        run.drawn(final=True)
        self.offer = Offer.of(answer)
        if self.offer is None:  # "no edit": nothing drawn, nothing said
            self.state = None
            self._hide()
            return
        self.state = SHOWN
        self._draw_offer()

    def run_failed(self, run: ModelRun, message: EditFailed) -> None:
        self.run, self.state = None, None
        self._hide()
        self.pane.notice = f"next edit failed: {message.error}"  # no news worth a dialog; the status says it
        self.pane.announce()

    def _stop(self) -> None:
        """The model stops at its next step (the board's stop); what it still sends is dropped."""
        self.pane.runs.stop(self.run)
        self.run, self.state = None, None

    def dismiss(self) -> bool:
        """Esc: stop a running prediction, drop shown hunks; True when there was one."""
        was = self.state in (RUNNING, SHOWN)
        if self._timer is not None:
            self._timer.stop()
            self._timer = None
        self._stop()
        self.offer = None
        if was:
            self._hide()
        return was

    # -- the offer's keys (core/next_edit/offer.py) ----------------------------------------

    @property
    def active(self) -> bool:
        return self.state in (RUNNING, SHOWN)

    @property
    def shown(self) -> bool:
        return self.state == SHOWN and self.offer is not None

    def tab(self) -> bool:
        """First Tab: the cursor jumps to the next hunk; a second Tab applies it (one undo step)."""
        if not self.shown:
            return False
        editor = self.pane.editor
        offer, step = self.offer.tab(editor.offset_of(editor.selection.end))
        if isinstance(step, Apply):
            self.offer = offer
            self._write(step.changes, step.cursor)
            left = len(offer.hunks) if offer is not None else 0
            self.pane.say_once(f"next edit applied (undo takes it back); {left} more on offer" if left else "next edit applied (undo takes it back)")
            return True
        self.offer = offer
        editor.move_cursor(editor.location_of(step.offset))
        editor.scroll_cursor_visible()
        self._draw_offer()
        return True

    def apply_all(self) -> bool:
        """Every hunk on offer at once, as one edit (one undo step)."""
        if not self.shown:
            return False
        changes, count = self.offer.apply_all(), len(self.offer.hunks)
        last = self.offer.hunks[-1]
        self.offer = None
        self._write(changes, changes.map_pos(last.end))
        self.pane.say_once(f"next edit: {count} hunk{'' if count == 1 else 's'} applied (one undo step)")
        return True

    def _write(self, changes: ChangeSet, cursor: int | None) -> None:
        editor = self.pane.editor
        text = editor.buffer_text
        first, last, segment = changes.as_one_edit(text)  # one replacement: one undo step
        self._applying = True
        if self.offer is None:
            self.state = None
            self._hide()
        editor.history.checkpoint()
        applied = editor.replace(segment, editor.location_of(first), editor.location_of(last))
        editor.history.checkpoint()
        editor.move_cursor(editor.location_of(cursor) if cursor is not None else applied.end_location)
        if self.offer is not None:
            self._draw_offer()

    # -- drawing --------------------------------------------------------------------------

    def _draw_offer(self) -> None:
        offer = self.offer
        self._draw(self.pane.editor.buffer_text, offer.hunks, offer.current)
        self._note()

    def _note(self) -> None:
        """The status bar's line on the offer: how many, how many off screen and where, the keys."""
        above, below = self._off_screen()
        where = "".join([f", {len(above)} above ↑ (line {above[-1]})" if above else "",
                         f", {len(below)} below ↓ (line {below[0]})" if below else ""])
        count = len(self.offer.hunks)
        keys = self.pane.app.keys_for("accept").split(", ")[0]
        every = self.pane.app.keys_for("next-edit-apply-all").split(", ")[0]
        self.pane.notice = f"{NOTICE}{count} edit{'' if count == 1 else 's'}{where} · {keys} jumps, {keys} again applies, {every} all, Esc dismisses"
        self.pane.editor.yield_tab = True
        self.pane.announce()

    def _off_screen(self) -> tuple[list[int], list[int]]:
        """The lines of the hunks on offer above and below the view, and the gutter's arrows set by them."""
        editor = self.pane.editor
        above, below = off_screen(editor.buffer_text, self.offer.hunks, top_line(editor), editor.size.height or 1)
        arrows = (bool(above), bool(below))
        if self.pane.preview.gutter_arrows != arrows:
            self.pane.preview.gutter_arrows = arrows
            self.pane.preview.refresh()
        return above, below

    def scrolled(self) -> None:
        """The editor scrolled: past the layer's lines the hunks are drawn again around the view;
        the gutter's arrows and the status bar's count follow."""
        if self.state in (RUNNING, SHOWN) and self._drawn is not None and not shows_view(self.pane.editor, self._drawn[1]):
            if self.shown:
                self._draw_offer()
                return
            if self.run is not None and self.run.drafts:
                self._draw(self.run.text, self.run.drafts[-1].hunks, None)
        if self.shown:
            self._note()

    def _draw(self, text: str, hunks, current: int | None) -> None:
        """`hunks` over `text` (the buffer the run started from, or as it is now) in the layer.
        The layer holds the view and a margin of lines each side (as the ghost's), so a frame costs
        the same in any file longer than that; a hunk outside them is off screen (the gutter and
        the status bar say where). A frame over the text and window of the last replaces only
        the lines whose drawing changed (preview_view.changed_rows); the first loads the window."""
        pane = self.pane
        drawn = self._drawn
        same_text = drawn is not None and pane.preview.layout_shown is drawn[2] and (drawn[0] is text or drawn[0] == text)
        window = drawn[1] if same_text and shows_view(pane.editor, drawn[1]) else lines_around(pane.editor, pane.editor.selection.end[0], len(text))
        start, end = window[2:]
        inside = [(i, h) for i, h in enumerate(hunks) if start <= h.start and h.end <= end]
        spans = [(h.start, h.end) for _, h in inside]
        pieces = [hunk_pieces(text, h, i == current) for i, h in inside]
        pane.show_overlay(text, spans, pieces, same_run=same_text and window == drawn[1], window=window)
        self._drawn = (text, window, pane.preview.layout_shown)
        pane.set_class(True, "-previewing")

    def _hide(self) -> None:
        pane = self.pane
        self._drawn = None
        pane.preview.gutter_arrows = (False, False)
        if pane.notice.startswith(NOTICE):
            pane.notice = ""
            pane.announce()
        if pane.phase == "idle" and not pane.ghost.active:
            pane.set_class(False, "-previewing")
            pane.editor.yield_tab = False
