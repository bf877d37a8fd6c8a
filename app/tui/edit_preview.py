"""A command's model run on one buffer (Infill, Rewrite, Fill marked, Fill body), from start to Tab or Esc.

    idle --start--> running --frame--> running --done--> preview --Tab--> idle (one undo step)
                       |                                    |
                       +--Esc / typing--> idle              +--Esc / typing--> idle (buffer untouched)

The run (run_state.ModelRun) works on a snapshot of the buffer; any change to the buffer stops
it first (EditorArea.before_change), so the snapshot's offsets stay valid until Accept applies
them. Its frames and its result are drawn in the pane's preview layer; the buffer is written
once, by Accept, as one undo step.
"""
from __future__ import annotations

import time
from dataclasses import replace

from ...core.spans import Span
from ..specs import LineIndex, format_range
from .messages import EditFailed, EditFinished, EditProgress
from .preview import EMPTY_GLYPH, FINAL, MASKED, Piece, pieces_text
from .run_state import ModelRun
from .status_bar import run_summary

IDLE, RUNNING, PREVIEW = "idle", "running", "preview"


def finish_note(message: EditFinished, result) -> str:
    """Why a run's counts are what they are: it ended before its planned steps (confident tokens
    commit together), and slots the model closed with padding were trimmed from the text; and
    what the model did not see: a file longer than the context budget is read only around the
    spans, which explains an answer that ignores a definition far away."""
    notes = []
    if result.context_cut:  # a narrow status bar may cut it off: a buffer's first such run also says it in a toast
        notes.append(f"read {result.prompt_tokens} tokens around it" if result.prompt_tokens else "read only the text around it")
    planned = message.stats.total_steps
    if 0 < result.steps < planned:
        notes.append(f"done before the {planned} planned")
    slots = message.stats.masked + message.stats.tokens
    if slots > result.tokens:
        notes.append(f"{slots - result.tokens} empty slots trimmed")
    return f"; {', '.join(notes)}" if notes else ""


class EditPreview:
    """The command run of one pane and its preview (the pane's `phase` says where it stands)."""

    def __init__(self, pane) -> None:
        self.pane = pane  # the EditorPane it belongs to (not imported here: that module imports this one)
        self.run: ModelRun | None = None
        self.selection_before_run = None  # where a run that selected for itself (Fill body) found the cursor
        self.told_context_cut = False  # the toast that the model reads only part of a long file: once per buffer

    @property
    def phase(self) -> str:
        return self.pane.phase

    # -- starting and stopping ----------------------------------------------------------

    def start(self, spans: list[Span]) -> None:
        """Run `spans` (sorted offsets of the current buffer) on the model in a thread worker."""
        pane = self.pane
        session, editor = pane.session, pane.editor
        self.stop()
        self.selection_before_run = None
        pane.ghost.dismiss()
        path = str(editor.buffer.path) if editor.buffer.path else None
        text = editor.buffer_text
        index = LineIndex.of(text)  # a refusal names the span as the user sees it, L:C-L:C, not by offsets
        spans = [replace(span, label=span.label or format_range(index, span.start, span.end)) for span in spans]
        self.run = pane.runs.start("edit", text, spans, self, session.backend, session.config, self._step_ms(), path)
        pane.notice = "starting…"
        pane.set_phase(RUNNING)
        self._show([[] for _ in spans])

    def _step_ms(self) -> int:
        """How long each step of the run about to start stays on screen: the session's first run
        on the embedded model is paced so a person sees it sharpen (it is over in a blink otherwise)."""
        session = self.pane.session
        editor = session.config.editor
        first, session.first_run_started = not session.first_run_started, True
        if first and session.config.embedded:
            return max(editor.min_step_ms, editor.first_run_step_ms)
        return editor.min_step_ms

    def stop(self) -> None:
        self.pane.runs.stop(self.run)
        self.run = None

    def cancel(self) -> None:
        """Stop a running edit now; the buffer was never touched."""
        if self.phase == RUNNING:
            self.stop()
            self.pane.say_once("cancelled")
            self.pane.set_phase(IDLE)
            self._restore_selection()

    def reject(self) -> None:
        if self.phase == PREVIEW:
            self.run = None
            self.pane.say_once("rejected")
            self.pane.set_phase(IDLE)
            self._restore_selection()

    def _restore_selection(self) -> None:
        before, self.selection_before_run = self.selection_before_run, None
        if before is not None:
            self.pane.editor.selection = before

    def accept(self) -> bool:
        """Write the shown alternative into the buffer as one edit (one undo step)."""
        run, pane = self.run, self.pane
        if self.phase != PREVIEW or run is None:
            return False
        if pane.editor.buffer_text != run.text:  # cannot happen: any edit interrupts the run
            self.reject()
            return False
        self.run = None
        self.selection_before_run = None
        pane.set_phase(IDLE)  # before the edit, so before_change sees nothing to interrupt
        changes = pane.apply_result(run.text, run.result, run.choice)
        written = sum(len(c.text) for c in changes.changes)
        pane.say_once(f"accepted {written} character{'' if written == 1 else 's'} (undo restores)")
        return True

    def cycle(self, delta: int) -> bool:
        run = self.run
        if self.phase != PREVIEW or run is None or run.alternatives < 2:
            return False
        run.choice = (run.choice + delta) % run.alternatives
        self._show_result()
        return True

    # -- what the run tells (run_state.RunOwner) ------------------------------------------

    def run_frame(self, run: ModelRun, message: EditProgress) -> None:
        if run is not self.run or self.phase != RUNNING:
            return
        self.pane.notice = ""
        self._show(message.pieces)
        self.pane.announce()

    def run_finished(self, run: ModelRun, message: EditFinished) -> None:
        if run is not self.run or self.phase != RUNNING:
            return
        pane, result = self.pane, message.result
        # Wall time beside compute time: a paced run lasts far longer than its model time.
        wall = time.perf_counter() - run.started
        pane.notice = run_summary(result.tokens, result.steps, message.stats.compute_seconds, wall, run.paced)
        pane.notice += finish_note(message, result)
        if result.context_cut and not self.told_context_cut:
            self.told_context_cut = True
            pane.notify("The model reads only the text around a span, not the whole file: a definition far away is not seen "
                        "(context_tokens in the config file's [edit] table sets how much).", title="Part of the file")
        pane.set_phase(PREVIEW)
        self._show_result()

    def run_failed(self, run: ModelRun, message: EditFailed) -> None:
        if run is not self.run:
            return
        self.run = None
        self.pane.notice = f"edit failed: {message.error}"
        self.pane.set_phase(IDLE)
        self._restore_selection()
        # The whole reason, however long: the status bar's line may cut it (and the toast stays a while).
        self.pane.app.notify(message.error, title="Edit failed", severity="error", timeout=20)

    # -- drawing ------------------------------------------------------------------------

    def _show_result(self) -> None:
        run = self.run
        pieces = []
        for i, span in enumerate(run.result.spans):
            text = span.alternatives[run.choice]
            frame = run.final_pieces[i] if run.final_pieces else []
            # Sample 0's confidence styling is kept when it is the text shown.
            if not text:
                pieces.append([Piece(EMPTY_GLYPH, MASKED)])
            else:
                pieces.append(frame if pieces_text(frame) == text else [Piece(text, FINAL)])
        self._show(pieces, final=True)
        self.pane.announce()

    def _show(self, pieces: list[list[Piece]], final: bool = False) -> None:
        run = self.run
        self.pane.show_overlay(run.text, [(s.start, s.end) for s in run.spans], pieces, same_run=run.frames > 0)
        run.drawn(final)
