"""EditorPane: one buffer's editor, its preview layer, and the commands on it.

The pane owns the commands on its buffer and their key bindings (model runs, marks, syntax
selections, save, find): Textual finds them through the focus chain from the buffer's editor,
and the app keeps only the global ones (tabs, open, help, quit).

Model runs on the buffer: a command's run and its preview (edit_preview.EditPreview, whose
state is the pane's `phase`), the as-you-type ghost (ghost.Ghost); both are run_state.ModelRuns
on the pane's RunBoard, which the worker's messages reach through the pane.
"""
from __future__ import annotations

from pathlib import Path

from textual.app import ComposeResult
from textual.containers import Container
from textual.message import Message
from textual.reactive import reactive

from . import constraint_actions, file_actions, next_edit_actions, run_actions, search_actions, syntax_actions
from .bindings import PANE_BINDINGS
from .buffer_file import BufferFile
from .edit_preview import IDLE, PREVIEW, RUNNING, EditPreview
from .editor_area import EditorArea
from .ghost import Ghost
from .next_edit_overlay import NextEditor
from .messages import EditCancelled, EditFailed, EditFinished, EditProgress
from .preview import Piece
from .preview_view import PreviewView
from .run_state import RunBoard
from .session import Session
from .status_bar import StatusBar


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

    BINDINGS = PANE_BINDINGS  # bindings.py: every key of the editor in one declaration

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
        self.runs = RunBoard(self)  # every model run on this buffer, by id (run_state.py)
        self.edits = EditPreview(self)  # a command's run and its preview (edit_preview.py)
        self.ghost = Ghost(self)  # as-you-type completion (ghost.py)
        self.next_edit = NextEditor(self)  # next-edit prediction (next_edit_overlay.py)
        self._notice = ""
        self.fleeting = False  # the notice goes with the next key (say_once)
        self.disk_notice = ""  # the file changed on disk (RecoveryKeeper.watch_files)
        # Expand selection's history: (selection before, selection after) per expansion.
        self.selection_stack: list[tuple[tuple[int, int], tuple[int, int]]] = []

    @property
    def notice(self) -> str:
        """One line about the last run for the status bar."""
        return self._notice

    @notice.setter
    def notice(self, text: str) -> None:
        self._notice, self.fleeting = text, False

    def say_once(self, text: str) -> None:
        """A notice that is news once ("accepted 12 characters"): the next key clears it."""
        self.notice, self.fleeting = text, True
        self.announce()

    def key_pressed(self) -> None:
        """Any key reached the app while this pane is shown (SharpenApp.on_event)."""
        if self.fleeting:
            self.notice = ""
            self.announce()

    @property
    def edit_run(self):
        """The command run shown (running or previewed), a run_state.ModelRun; None when idle."""
        return self.edits.run

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
        self.next_edit.seen()

    # -- the ghost's triggers (ghost.py): an edit arms it, a move dismisses it (keys: the app's on_event) --

    def on_text_area_changed(self, event) -> None:
        if event.text_area is self.editor:  # not stopped: the app follows it too
            self.ghost.typed()
            self.next_edit.changed()

    def on_text_area_selection_changed(self, event) -> None:
        if event.text_area is self.editor:
            self.ghost.moved()  # an edit moves the cursor too: a pending ghost stays armed, a typed-through one stays

    def show_ghost_switch(self) -> None:
        for bar in self.app.query(StatusBar):
            bar.ghost = self.ghost.enabled

    def on_unmount(self) -> None:
        # Thread workers cannot be killed, and Python waits for them at exit: stop the run
        # between two steps so quitting during a long run does not wait for its end.
        self.runs.stop_all()
        self.ghost.dismiss()
        self.next_edit.dismiss()

    def reload(self, buffer: BufferFile) -> None:
        """Show `buffer` (the file read again from disk) in place of the current, clean text."""
        editor = self.editor
        editor.buffer = buffer
        cursor = editor.selection.end
        editor.load_text(buffer.original)
        editor.mark_saved()
        self.next_edit.seen()
        row = min(cursor[0], editor.document.line_count - 1)
        editor.move_cursor((row, min(cursor[1], len(editor.document.lines[row]))))

    def notify(self, message: str, *, markup: bool = False, **kwargs) -> None:
        # Messages carry paths and model errors: brackets in them are text, not Textual markup.
        super().notify(message, markup=markup, **kwargs)

    # -- commands on this buffer (bound above; the palette runs them too) ---------------

    def action_infill(self) -> None:
        run_actions.infill(self)

    def action_rewrite(self) -> None:
        run_actions.rewrite(self)

    def action_infill_pattern(self) -> None:
        constraint_actions.infill_pattern(self)

    def action_rewrite_keeping(self) -> None:
        constraint_actions.rewrite_keeping(self)

    def action_mark_region(self) -> None:
        run_actions.mark_region(self)

    def action_clear_marks(self) -> None:
        self.editor.clear_marks()
        self.announce()

    def action_fill_marked(self) -> None:
        run_actions.fill_marked(self)

    def action_fill_body(self) -> None:
        run_actions.fill_body(self)

    def action_expand_selection(self) -> None:
        syntax_actions.expand_selection(self)

    def action_shrink_selection(self) -> None:
        syntax_actions.shrink_selection(self)

    def action_accept(self) -> None:
        if self.ghost.accept() or self.next_edit.tab():
            return
        if self.phase == IDLE:
            self.notify("nothing to accept", timeout=2)
        elif self.phase == RUNNING:
            self.notify("still running: Tab accepts once it is done, Esc cancels", timeout=2)
        else:
            self.edits.accept()

    def action_reject(self) -> None:
        self.edits.reject()

    def action_cancel(self) -> None:
        self.edits.cancel()

    def action_cancel_or_reject(self) -> None:
        if self.session.queued is not None and self.session.queued[0] is self:
            self.session.queued = None
            self.notify("cancelled: it will not run when the model is ready", timeout=2)
        elif self.phase == RUNNING:
            self.edits.cancel()
        elif self.phase == PREVIEW:
            self.edits.reject()
        elif self.ghost.dismiss() or self.next_edit.dismiss():
            pass  # Esc over a ghost or proposed next edits only dismisses them
        else:
            self.editor.move_cursor(self.editor.selection.end)  # idle: Esc just drops the selection

    def action_cycle(self, delta: int) -> None:
        if not self.edits.cycle(delta):
            self.notify("one alternative only (set samples > 1 in the config)", timeout=2)

    def action_strength(self, delta: float) -> None:
        session = self.session
        session.strength = round(min(1.0, max(0.1, session.strength + delta)), 2)
        self.notify(f"Rewrite re-noises {session.strength:.0%} of the selection", timeout=1.5)
        self.announce()

    def action_save(self) -> None:
        file_actions.save(self)

    def action_save_as(self) -> None:
        file_actions.save_as(self)

    def action_find(self) -> None:
        search_actions.find(self)

    def action_find_next(self) -> None:
        search_actions.find_next(self)

    def action_find_previous(self) -> None:
        search_actions.find_previous(self)

    def action_replace(self) -> None:
        search_actions.replace(self)

    def action_goto_line(self) -> None:
        search_actions.goto_line(self)

    def action_toggle_ghost(self) -> None:
        on = self.ghost.toggle()
        self.notify(f"ghost completion {'on' if on else 'off'}", timeout=2)
        self.show_ghost_switch()

    def action_toggle_next_edit(self) -> None:
        self.notify(f"next-edit prediction {'on' if self.next_edit.toggle() else 'off'}", timeout=2)

    def action_accept_word(self) -> None:
        next_edit_actions.accept_part(self.ghost, line=False)

    def action_accept_line(self) -> None:
        next_edit_actions.accept_part(self.ghost, line=True)

    def action_next_edit_apply_all(self) -> None:
        if not self.next_edit.apply_all():
            self.notify("no next edit on offer", timeout=2)

    def action_toggle_wrap(self) -> None:
        self.editor.soft_wrap = not self.editor.soft_wrap

    def action_undo(self) -> None:
        self.editor.undo()

    def action_redo(self) -> None:
        self.editor.redo()

    def check_action(self, action: str, parameters: tuple) -> bool | None:
        # Tab and the alternative keys belong to the preview; elsewhere they go to the editor.
        if action == "accept":
            return self.phase != IDLE or self.ghost.shown or self.next_edit.shown
        if action in ("accept_word", "accept_line"):
            return self.ghost.shown  # otherwise Ctrl+Right / Ctrl+Down are the TextArea's
        if action == "next_edit_apply_all":
            return self.next_edit.shown
        if action == "cycle":
            return self.phase == PREVIEW  # with one alternative, action_cycle says so
        return True

    def _typing_over_preview(self) -> None:
        """Typing while a finished preview shows: the preview goes, the text stays as it was, and
        the character goes in at the cursor (not over the selection the run was made from)."""
        if self.phase == PREVIEW:
            self.edits.reject()
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
            self.edits.reject()
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

    def _interrupt(self) -> bool:
        # Typing (or undo, paste, ...) during a run cancels it; during a preview it rejects it.
        if self.phase == RUNNING:
            self.edits.cancel()
            return True
        if self.phase == PREVIEW:
            self.edits.reject()
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

    # -- messages from the workers: to the run they belong to (run_state.RunBoard) -------

    def _to_its_run(self, message: EditProgress | EditFinished | EditFailed | EditCancelled) -> None:
        message.stop()
        self.runs.deliver(message)

    on_edit_progress = on_edit_finished = on_edit_failed = on_edit_cancelled = _to_its_run

    # -- drawing ------------------------------------------------------------------------

    def show_overlay(self, text: str, spans: list[tuple[int, int]], pieces: list[list[Piece]], same_run: bool,
                     cursor: str | None = None, window: tuple[int, int, int, int] | None = None) -> None:
        """Draw a run's frame in the preview layer over the editor (PreviewView.show_over)."""
        self.preview.show_over(self.editor, text, spans, pieces, same_run, cursor, window)
        if not same_run:  # the ghost learns where the layer sits once it is laid out
            self.call_after_refresh(self._follow_scroll)

    def _follow_scroll(self) -> None:
        """The preview layer at the editor's rows (PreviewView.follow_scroll: a layer not laid
        out yet gets there as it is first drawn)."""
        if self.phase != IDLE or self.ghost.active or self.next_edit.state is not None:
            self.preview.follow(self.editor)
            self.ghost.scrolled()
            self.next_edit.scrolled()

    def set_phase(self, phase: str) -> None:
        self.phase = phase
        self.editor.yield_tab = phase != IDLE
        self.set_class(phase != IDLE, "-previewing")
        self.announce()

    def announce(self) -> None:
        self.post_message(self.StateChanged(self))

    def register_syntax_theme(self, theme) -> None:
        for area in (self.editor, self.preview):
            area.register_theme(theme)
