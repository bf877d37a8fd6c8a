"""EditorPane: one buffer's editor, its preview layer, and the life of an edit run on it.

    idle --start--> running --frame--> running --done--> preview --Tab--> idle (one undo step)
                       |                                    |
                       +--Esc / typing--> idle              +--Esc / typing--> idle (buffer untouched)

The run works on a snapshot of the buffer; any change to the buffer stops it first (see
EditorArea.before_change), so the snapshot's offsets stay valid until Accept applies them.

The pane owns the commands on its buffer and their key bindings (model runs, marks, syntax
selections, save, find): Textual finds them through the focus chain from the buffer's editor,
and the app keeps only the global ones (tabs, open, help, quit).
"""
from __future__ import annotations

import itertools
import threading
import time
from dataclasses import dataclass, field
from functools import partial

from pathlib import Path

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Container
from textual.message import Message
from textual.reactive import reactive

from ...core.spans import Span
from . import file_actions, syntax_actions
from .buffer_file import BufferFile
from .editor_area import EditorArea
from .ghost import Ghost, row_of, window_of
from .messages import EditCancelled, EditFailed, EditFinished, EditProgress, RunStats
from .model_runner import EditJob, run_job
from .preview import EMPTY_GLYPH, FINAL, MASKED, Piece, compose, location, pieces_text
from .preview_view import PreviewView
from .prompt_screen import PromptScreen
from .session import Session
from .status_bar import StatusBar, run_summary

IDLE, RUNNING, PREVIEW = "idle", "running", "preview"
_run_ids = itertools.count(1)


@dataclass
class Run:
    id: int
    text: str  # the buffer when the run started
    spans: tuple[Span, ...]  # sorted, in offsets of `text`
    stop: threading.Event
    stats: RunStats | None = None
    result: object = None  # core.engine.EditResult once done
    final_pieces: list[list[Piece]] | None = None
    choice: int = 0  # which alternative the preview shows
    started: float = field(default_factory=time.perf_counter)  # its wall time runs from here
    paced: bool = False  # steps held on screen (Editor.first_run_step_ms / min_step_ms)

    @property
    def alternatives(self) -> int:
        return len(self.result.samples) if self.result is not None else 0


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


class EditorPane(Container):
    """A buffer in the editor: EditorArea below, PreviewView above it while a run is shown."""

    DEFAULT_CSS = """
    EditorPane {
        layers: editor preview;
        & > EditorArea { layer: editor; height: 1fr; }
        & > PreviewView { layer: preview; height: 1fr; display: none; }
        &.-previewing > PreviewView { display: block; }
    }
    """

    # Keys chosen to reach the editor through plain terminals and tmux: no ctrl+shift, no
    # ctrl+space, and no Alt+punctuation (Textual reads ESC = as "≠" and ESC . as "."; ESC f is
    # ctrl+right). Each binding has an id: the config's [keymap] rebinds by id (docs/editor.md).
    BINDINGS = [
        # Each model command also has an F-key: complete escape sequences, so a held or repeated
        # key never reaches the buffer (Alt chords need EditorArea's guard: docs/textual-upstream-keys.md).
        Binding("alt+i,f2", "infill", "Infill", id="infill", tooltip="Infill the selection, or fill at the cursor"),
        Binding("alt+r,f4", "rewrite", "Rewrite", id="rewrite"),
        Binding("alt+m,f6", "mark_region", "Mark", id="mark-region"),
        Binding("alt+a,f7", "fill_marked", "Fill marked", id="fill-marked"),  # not alt+f: terminals send it as ctrl+right
        # Alt+E / Alt+D: E above D on the keyboard, grow / shrink. Alt+L: fiLL body.
        Binding("alt+e", "expand_selection", "Expand", id="expand-selection", show=False),
        Binding("alt+d", "shrink_selection", "Shrink", id="shrink-selection", show=False),
        Binding("alt+l,f8", "fill_body", "Fill body", id="fill-body", show=False),
        Binding("alt+c", "clear_marks", "Clear marks", id="clear-marks", show=False),
        # Priority: while a run or preview is up these are the preview's, before the TextArea's own.
        Binding("tab", "accept", "Accept", id="accept", priority=True),
        Binding("escape", "cancel_or_reject", "Cancel/Reject", id="cancel", priority=True, show=False),
        # Alt+] / Alt+[ need a terminal that reports them unambiguously (kitty protocol); in tmux
        # they arrive as ESC ] / ESC [, so Alt+N / Alt+P do the same everywhere.
        Binding("alt+right_square_bracket,alt+n", "cycle(1)", "Next alt.", id="next-alternative", priority=True, show=False),
        Binding("alt+left_square_bracket,alt+p", "cycle(-1)", "Prev alt.", id="previous-alternative", priority=True, show=False),
        Binding("alt+up", "strength(0.1)", "Stronger", id="rewrite-stronger", show=False),
        Binding("alt+down", "strength(-0.1)", "Weaker", id="rewrite-weaker", show=False),
        Binding("ctrl+s", "save", "Save", id="save"),
        Binding("alt+s", "save_as", "Save as", id="save-as", show=False),
        Binding("ctrl+f", "find", "Find", id="find", show=False),
        Binding("f3", "find_next", "Find next", id="find-next", show=False),
        Binding("ctrl+g", "goto_line", "Go to line", id="goto-line", show=False),
        Binding("alt+z", "toggle_wrap", "Soft wrap", id="soft-wrap", show=False),
    ]

    phase: reactive[str] = reactive(IDLE)

    class StateChanged(Message):
        """The run's phase, progress or shown alternative changed (the status bar redraws)."""

        def __init__(self, pane: "EditorPane") -> None:
            super().__init__()
            self.pane = pane

    class Saved(Message):
        """The buffer was written to its file (the app updates recovery, the tab and the status)."""

        def __init__(self, pane: "EditorPane", old_path: Path | None) -> None:
            super().__init__()
            self.pane, self.old_path = pane, old_path

    def __init__(self, buffer: BufferFile, session: Session, soft_wrap: bool = False, **kwargs) -> None:
        super().__init__(**kwargs)
        self.session = session
        self.editor = EditorArea(buffer, soft_wrap=soft_wrap)
        self.preview = PreviewView()
        self.edit_run: Run | None = None
        self.ghost = Ghost(self)  # as-you-type completion (ghost.py)
        self._overlay_y0 = 0  # the editor's view row where the preview layer's first line sits (show_overlay's window)
        self._pending_frame: EditProgress | None = None
        self._frames_shown = 0  # of the current run: the first one loads the whole preview text
        self.notice = ""  # one line about the last run for the status bar
        self.disk_notice = ""  # the file changed on disk (RecoveryKeeper.watch_files)
        self.selection_before_run = None  # where a run that selected for itself (Fill body) found the cursor
        self.told_context_cut = False  # the toast that the model reads only part of a long file: once per buffer
        # Expand selection's history: (selection before, selection after) per expansion.
        self.selection_stack: list[tuple[tuple[int, int], tuple[int, int]]] = []

    def compose(self) -> ComposeResult:
        yield self.editor
        yield self.preview

    def on_mount(self) -> None:
        self.editor.before_change = self._interrupt
        self.editor.after_change = self._follow_change
        self.editor.follows = lambda: bool(self.selection_stack)
        self.editor.before_typing = self._typing_over_preview
        self.preview.scroll_target = self.editor
        self.preview.on_click = lambda: self.ghost.dismiss(pending=False)  # a run's preview ignores clicks; a ghost goes
        self.watch(self.editor, "scroll_y", self._follow_scroll, init=False)
        self.watch(self.editor, "scroll_x", self._follow_scroll, init=False)
        self.show_ghost_switch()

    # -- the ghost's triggers (ghost.py): an edit arms it, a move dismisses it (keys: the app's on_event) --

    def on_text_area_changed(self, event) -> None:
        if event.text_area is self.editor:  # not stopped: the app follows it too
            self.ghost.typed()

    def on_text_area_selection_changed(self, event) -> None:
        if event.text_area is self.editor:
            self.ghost.moved()  # an edit moves the cursor too: a pending ghost stays armed, a typed-through one stays

    def show_ghost_switch(self) -> None:
        for bar in self.app.query(StatusBar):
            bar.ghost = self.ghost.enabled

    def on_unmount(self) -> None:
        # Thread workers cannot be killed, and Python waits for them at exit: stop the run
        # between two steps so quitting during a long run does not wait for its end.
        self._stop_run()
        self.ghost.dismiss()

    def reload(self, buffer: BufferFile) -> None:
        """Show `buffer` (the file read again from disk) in place of the current, clean text."""
        editor = self.editor
        editor.buffer = buffer
        cursor = editor.selection.end
        editor.load_text(buffer.original)
        editor.mark_saved()
        row = min(cursor[0], editor.document.line_count - 1)
        editor.move_cursor((row, min(cursor[1], len(editor.document.lines[row]))))

    def notify(self, message: str, *, markup: bool = False, **kwargs) -> None:
        # Messages carry paths and model errors: brackets in them are text, not Textual markup.
        super().notify(message, markup=markup, **kwargs)

    # -- commands on this buffer (bound above; the palette runs them too) ---------------

    def action_infill(self) -> None:
        if self._ready("infill"):
            start, end = self.editor.selected_offsets()
            budget = self.session.config.editing.infill_tokens if start == end else None  # a selection sizes its own slots
            self.start([Span(start, end, "infill", max_tokens=budget)])

    def action_rewrite(self) -> None:
        start, end = self.editor.selected_offsets()
        if start == end:
            self.notify("select the text to rewrite first", severity="warning", timeout=3)
            return
        if not self._ready("rewrite"):
            return
        strength = self.session.strength
        if not self.session.backend.describe().instruct:
            self.start([Span(start, end, "rewrite", strength=strength)])
            return

        def with_instruction(answer: str | None) -> None:
            if answer is not None:
                self.start([Span(start, end, "rewrite", strength=strength, instruction=answer.strip() or None)])

        self.app.push_screen(PromptScreen("Rewrite instruction (empty: none):", placeholder="e.g. make it iterative"), with_instruction)

    def action_infill_pattern(self) -> None:
        """Infill with a constraint (docs/constraints.md): the span's text will match the pattern asked for."""
        if not self._ready("infill_pattern"):
            return
        start, end = self.editor.selected_offsets()
        budget = self.session.config.editing.infill_tokens if start == end else None

        def with_pattern(answer: str | None) -> None:
            if answer and answer.strip():
                constraint = self._constraint(regex=answer.strip())
                if constraint is not None:
                    self.start([Span(start, end, "infill", max_tokens=budget, constraint=constraint)])

        self.app.push_screen(PromptScreen("Pattern the infill must match (a regular expression):",
                                          placeholder="e.g. [0-9]{4}-[0-9]{2}-[0-9]{2}"), with_pattern)

    def action_rewrite_keeping(self) -> None:
        """Rewrite the selection; every word asked for stays in it (a required-words constraint)."""
        start, end = self.editor.selected_offsets()
        if start == end:
            self.notify("select the text to rewrite first", severity="warning", timeout=3)
            return
        if not self._ready("rewrite_keeping"):
            return
        strength = self.session.strength

        def with_words(answer: str | None) -> None:
            words = tuple(answer.split()) if answer else ()
            if words:
                constraint = self._constraint(require=words)
                if constraint is not None:
                    self.start([Span(start, end, "rewrite", strength=strength, constraint=constraint)])

        self.app.push_screen(PromptScreen("Words the rewrite must keep (separated by spaces):", placeholder="e.g. total return"), with_words)

    def _constraint(self, **fields):
        """The constraint, compiled now (a bad pattern is a warning, not a run); None when refused."""
        from ...core.constraints import Constraint
        from ...core.constraints.automaton import constraint_dfa
        from ...core.errors import UsageError

        try:
            constraint = Constraint(**fields)
            constraint_dfa(constraint)
        except UsageError as exc:
            self.notify(str(exc), severity="warning", timeout=5)
            return None
        return constraint

    def action_mark_region(self) -> None:
        editor = self.editor
        why_not = editor.add_mark(*editor.selected_offsets())
        if why_not:
            self.notify(why_not, severity="warning", timeout=3)
            return
        editor.move_cursor(editor.selection.end)  # drop the selection so the mark's colour shows
        self._announce()

    def action_clear_marks(self) -> None:
        self.editor.clear_marks()
        self._announce()

    def action_fill_marked(self) -> None:
        if not self.editor.marks:
            self.notify(f"mark regions first ({self.app.keys_for('mark-region')} adds the selection)", severity="warning", timeout=3)
        elif self._ready("fill_marked"):
            self.start([Span(s, e, "infill") for s, e in self.editor.marks])

    def action_fill_body(self) -> None:
        span = syntax_actions.body_at_cursor(self)
        if span is None or not self._ready("fill_body"):
            return
        start, end = span
        before = self.editor.selection
        self.selection_stack.clear()
        self.editor.select_offsets(start, end)  # shows what is masked once the preview closes
        budget = self.session.config.editing.infill_tokens if start == end else None
        self.start([Span(start, end, "infill", max_tokens=budget)])
        # The body's selection is the command's, not the person's: a reject or cancel puts the
        # cursor back where it was (inside the function, so a second Fill body finds it again).
        self.selection_before_run = before

    def action_expand_selection(self) -> None:
        syntax_actions.expand_selection(self)

    def action_shrink_selection(self) -> None:
        syntax_actions.shrink_selection(self)

    def action_accept(self) -> None:
        if self.ghost.accept():
            return
        if self.phase == IDLE:
            self.notify("nothing to accept", timeout=2)
        elif self.phase == RUNNING:
            self.notify("still running: Tab accepts once it is done, Esc cancels", timeout=2)
        else:
            self.accept()

    def action_reject(self) -> None:
        self.reject()

    def action_cancel(self) -> None:
        self.cancel()

    def action_cancel_or_reject(self) -> None:
        if self.session.queued is not None and self.session.queued[0] is self:
            self.session.queued = None
            self.notify("cancelled: it will not run when the model is ready", timeout=2)
        elif self.phase == RUNNING:
            self.cancel()
        elif self.phase == PREVIEW:
            self.reject()
        elif self.ghost.dismiss():
            pass  # Esc over a ghost only dismisses it
        else:
            self.editor.move_cursor(self.editor.selection.end)  # idle: Esc just drops the selection

    def action_cycle(self, delta: int) -> None:
        if not self.cycle(delta):
            self.notify("one alternative only (set samples > 1 in the config)", timeout=2)

    def action_strength(self, delta: float) -> None:
        session = self.session
        session.strength = round(min(1.0, max(0.1, session.strength + delta)), 2)
        self.notify(f"Rewrite re-noises {session.strength:.0%} of the selection", timeout=1.5)
        self._announce()

    def action_save(self) -> None:
        file_actions.save(self)

    def action_save_as(self) -> None:
        file_actions.save_as(self)

    def action_find(self) -> None:
        file_actions.find(self)

    def action_find_next(self) -> None:
        file_actions.find_next(self)

    def action_goto_line(self) -> None:
        file_actions.goto_line(self)

    def action_toggle_ghost(self) -> None:
        on = self.ghost.toggle()
        self.notify(f"ghost completion {'on' if on else 'off'}", timeout=2)
        self.show_ghost_switch()

    def action_toggle_wrap(self) -> None:
        self.editor.soft_wrap = not self.editor.soft_wrap

    def action_undo(self) -> None:
        self.editor.undo()

    def action_redo(self) -> None:
        self.editor.redo()

    def check_action(self, action: str, parameters: tuple) -> bool | None:
        # Tab and the alternative keys belong to the preview; elsewhere they go to the editor.
        if action == "accept":
            return self.phase != IDLE or self.ghost.shown
        if action == "cycle":
            return self.phase == PREVIEW  # with one alternative, action_cycle says so
        return True

    def _typing_over_preview(self) -> None:
        """Typing while a finished preview shows: the preview goes, the text stays as it was, and
        the character goes in at the cursor (not over the selection the run was made from)."""
        if self.phase == PREVIEW:
            self.reject()
            self.editor.move_cursor(self.editor.selection.end)

    def _ready(self, action: str | None = None) -> bool:
        """Whether a new run may start on this buffer now; otherwise say why not. A command asked
        for while the model still loads is queued and runs once it is loaded (Esc cancels)."""
        if action is not None and self.session.backend is None and self.session.model_error is None:
            self.session.queued = (self, action)
            self.notify("the model is still loading: this runs as soon as it is ready (Esc cancels)", timeout=4)
            return False
        why = self.session.unavailable()
        if why is None and any(p.phase == RUNNING for p in self.screen.query(EditorPane)):
            why = "an edit is already running (Esc cancels it)"
        if why is not None:
            self.notify(why, severity="warning", timeout=3)
            return False
        if self.phase == PREVIEW:
            self.reject()
        return True

    # -- starting and stopping ----------------------------------------------------------

    def start(self, spans: list[Span]) -> None:
        """Run `spans` (sorted offsets of the current buffer) on the model in a thread worker."""
        config, backend = self.session.config, self.session.backend
        self._stop_run()
        self.selection_before_run = None
        self.ghost.dismiss()
        step_ms = self._step_ms()
        self.edit_run = Run(next(_run_ids), self.editor.buffer_text, tuple(spans), threading.Event(), paced=step_ms > 0)
        path = str(self.editor.buffer.path) if self.editor.buffer.path else None
        job = EditJob(self.edit_run.id, self.edit_run.text, self.edit_run.spans, config.sampling, config.editing, config.editor.frame_rate, step_ms, path)
        self.notice = "starting…"
        self._frames_shown = 0
        self._set_phase(RUNNING)
        self._show([[] for _ in spans])
        self.run_worker(partial(run_job, job, backend, self.post_message, self.edit_run.stop.is_set), thread=True, group="edit", exit_on_error=False)

    def _step_ms(self) -> int:
        """How long each step of the run about to start stays on screen: the session's first run
        on the embedded model is paced so a person sees it sharpen (it is over in a blink otherwise)."""
        editor, session = self.session.config.editor, self.session
        first, session.first_run_started = not session.first_run_started, True
        if first and session.config.embedded:
            return max(editor.min_step_ms, editor.first_run_step_ms)
        return editor.min_step_ms

    def cancel(self) -> None:
        """Stop a running edit now; the buffer was never touched."""
        if self.phase == RUNNING:
            self._stop_run()
            self.notice = "cancelled"
            self._set_phase(IDLE)
            self._restore_selection()

    def reject(self) -> None:
        if self.phase == PREVIEW:
            self.edit_run = None
            self.notice = "rejected"
            self._set_phase(IDLE)
            self._restore_selection()

    def _restore_selection(self) -> None:
        before, self.selection_before_run = self.selection_before_run, None
        if before is not None:
            self.editor.selection = before

    def accept(self) -> bool:
        """Write the shown alternative into the buffer as one edit (one undo step)."""
        run = self.edit_run
        if self.phase != PREVIEW or run is None:
            return False
        if self.editor.buffer_text != run.text:  # cannot happen: any edit interrupts the run
            self.reject()
            return False
        self.edit_run = None
        self.selection_before_run = None
        self._set_phase(IDLE)  # before the edit, so before_change sees nothing to interrupt
        changes = self.apply_result(run.text, run.result, run.choice)
        self.notice = f"accepted {sum(len(c.text) for c in changes.changes)} characters (undo restores)"
        self._announce()
        return True

    def apply_result(self, text: str, result, choice: int):
        """Write alternative `choice` of `result` (a run over `text`, the buffer as it still is)
        into the buffer as one replacement, so one undo step; the cursor goes to its end.
        Returns the ChangeSet written, or None when the buffer moved on since `text`."""
        editor = self.editor
        if editor.buffer_text != text:
            return None
        changes = result.changes(choice)
        first, last, segment = changes.as_one_edit(text)  # one replacement: one undo step
        editor.history.checkpoint()
        applied = editor.replace(segment, editor.location_of(first), editor.location_of(last))
        editor.history.checkpoint()
        editor.move_cursor(applied.end_location)  # marks inside the edit are dropped by it, others move with their text
        return changes

    def cycle(self, delta: int) -> bool:
        run = self.edit_run
        if self.phase != PREVIEW or run is None or run.alternatives < 2:
            return False
        run.choice = (run.choice + delta) % run.alternatives
        self._show_result()
        return True

    def _interrupt(self) -> bool:
        # Typing (or undo, paste, ...) during a run cancels it; during a preview it rejects it.
        if self.phase == RUNNING:
            self.cancel()
            return True
        if self.phase == PREVIEW:
            self.reject()
            return True
        if self.ghost.before_edit():  # typing through a shown ghost: it and its note stay
            return False
        self.notice = ""  # the last run's note is stale once the buffer moves on
        return False

    def _follow_change(self, changes) -> None:
        """Expand selection's history moves with the text (core.changes); an entry whose
        selection the change cut into is no longer a step back to anything: dropped."""
        kept = []
        for before, after in self.selection_stack:
            moved = changes.map_range(*before), changes.map_range(*after)
            if None not in moved:
                kept.append(moved)
        self.selection_stack = kept

    def _stop_run(self) -> None:
        if self.edit_run is not None:
            self.edit_run.stop.set()
        self.edit_run = None

    # -- messages from the worker -------------------------------------------------------

    def _current(self, run_id: int) -> Run | None:
        return self.edit_run if self.edit_run is not None and self.edit_run.id == run_id else None

    def on_edit_progress(self, message: EditProgress) -> None:
        message.stop()
        if self.ghost.handles(message):
            return
        run = self._current(message.run_id)
        if run is None or self.phase != RUNNING:
            return  # a late frame from a cancelled run
        # Coalesce on this side too: if the UI fell behind, frames already queued only replace
        # the pending one, and a single redraw runs after them (keys never wait behind frames).
        if self._pending_frame is None:
            self.call_later(self._draw_pending_frame)
        self._pending_frame = message

    def _draw_pending_frame(self) -> None:
        message, self._pending_frame = self._pending_frame, None
        run = self._current(message.run_id) if message is not None else None
        if run is None or self.phase != RUNNING:
            return
        run.stats = message.stats
        self.notice = ""
        self._show(message.pieces)
        self._announce()

    def on_edit_finished(self, message: EditFinished) -> None:
        message.stop()
        if self.ghost.handles(message):
            return
        run = self._current(message.run_id)
        if run is None or self.phase != RUNNING:
            return
        run.stats, run.result, run.final_pieces = message.stats, message.result, message.pieces
        result = message.result
        # Wall time beside compute time: a paced run lasts far longer than its model time.
        wall = time.perf_counter() - run.started
        self.notice = run_summary(result.tokens, result.steps, message.stats.compute_seconds, wall, run.paced)
        self.notice += finish_note(message, result)
        if result.context_cut and not self.told_context_cut:
            self.told_context_cut = True
            self.notify("The model reads only the text around a span, not the whole file: a definition far away is not seen "
                        "(context_tokens in the config file's [edit] table sets how much).", title="Part of the file")
        self._set_phase(PREVIEW)
        self._show_result()

    def on_edit_cancelled(self, message: EditCancelled) -> None:
        message.stop()  # the UI already moved on when it asked for the cancel
        self.ghost.handles(message)

    def on_edit_failed(self, message: EditFailed) -> None:
        message.stop()
        if self.ghost.handles(message):
            return
        if self._current(message.run_id) is None:
            return
        self.edit_run = None
        self.notice = f"edit failed: {message.error}"
        self._set_phase(IDLE)
        self.app.notify(message.error, title="Edit failed", severity="error")

    # -- drawing ------------------------------------------------------------------------

    def _show_result(self) -> None:
        run = self.edit_run
        pieces = []
        for i, span in enumerate(run.result.spans):
            text = span.alternatives[run.choice]
            frame = run.final_pieces[i] if run.final_pieces else []
            # Sample 0's confidence styling is kept when it is the text shown.
            if not text:
                pieces.append([Piece(EMPTY_GLYPH, MASKED)])
            else:
                pieces.append(frame if pieces_text(frame) == text else [Piece(text, FINAL)])
        self._show(pieces)
        self._announce()

    def _show(self, pieces: list[list[Piece]]) -> None:
        run = self.edit_run
        self.show_overlay(run.text, [(s.start, s.end) for s in run.spans], pieces, same_run=self._frames_shown > 0)
        self._frames_shown += 1

    def show_overlay(self, text: str, spans: list[tuple[int, int]], pieces: list[list[Piece]], same_run: bool,
                     cursor: str | None = None, window: tuple[int, int, int, int] | None = None) -> None:
        """Draw `text` with each span's pieces spliced in, in the preview layer; `cursor`: the
        style kind of a cell drawn as the cursor where the first span starts (the ghost's).
        `window` (first line, last line, start, end): only lines [first, last) of `text`, its
        characters [start, end), go into the layer, numbered as in the buffer (the ghost's: a
        few screens around the view, so a ghost in a 50,000-line file does not load and parse
        all of it into the layer on every pause)."""
        editor = self.editor
        first, text, spans, marks = window_of(text, spans, editor.marks, window)
        layout = compose(text, spans, pieces, marks)
        if cursor is not None and layout.span_ranges:
            row, column = location(layout.text, layout.span_ranges[0][0])
            layout.line_styles.setdefault(row, []).append((column, column + 1, cursor))
        preview = self.preview
        self._overlay_y0 = row_of(editor, first)
        if preview.line_number_start != first + 1:
            preview.line_number_start = first + 1
        preview.gutter_floor = editor.gutter_width if window is not None else 0  # the text must not shift sideways
        if preview.language != self.editor.language:
            preview.language = self.editor.language
        preview.soft_wrap = self.editor.soft_wrap
        if preview.theme != self.editor.theme:
            preview.theme = self.editor.theme
        preview.show_layout(layout, self.editor.scroll_x, self.editor.scroll_y - self._overlay_y0, same_run=same_run)
        if not same_run:  # the ghost learns where the layer sits once it is laid out
            self.call_after_refresh(self._follow_scroll)

    def _follow_scroll(self) -> None:
        """The preview layer at the editor's rows (PreviewView.follow_scroll: a layer not laid
        out yet gets there as it is first drawn)."""
        if self.phase != IDLE or self.ghost.active:
            self.preview.follow_scroll(self.editor.scroll_x, self.editor.scroll_y - self._overlay_y0)
            self.ghost.scrolled()

    def _set_phase(self, phase: str) -> None:
        self.phase = phase
        self.editor.yield_tab = phase != IDLE
        self.set_class(phase != IDLE, "-previewing")
        self._announce()

    def _announce(self) -> None:
        self.post_message(self.StateChanged(self))

    def register_syntax_theme(self, theme) -> None:
        for area in (self.editor, self.preview):
            area.register_theme(theme)
