"""The app's model actions: infill, rewrite, marks, fill marked, accept, reject, cancel, alternatives.

A mixin for SharpenApp, kept apart from buffers and files so each module stays readable. Each
action works on the active tab's EditorPane, which owns the run.
"""
from __future__ import annotations

from ...core.spans import Span
from .editor_pane import IDLE, PREVIEW, RUNNING, EditorPane
from .prompt_screen import PromptScreen


class EditActions:
    """Needs from the app: active_pane(), panes(), denoiser, model_error, config, strength, status, keys_for()."""

    def _ready_pane(self) -> EditorPane | None:
        """The active pane when a new run may start on it; otherwise say why not."""
        pane = self.active_pane()
        if pane is None:
            return None
        if self.denoiser is None:
            why = f"the model is unavailable: {self.model_error}" if self.model_error else "the model is still loading…"
            self.notify(why, severity="warning", timeout=3)
            return None
        if any(p.phase == RUNNING for p in self.panes()):
            self.notify("an edit is already running (Esc cancels it)", severity="warning", timeout=3)
            return None
        if pane.phase == PREVIEW:
            pane.reject()
        return pane

    def action_infill(self) -> None:
        pane = self._ready_pane()
        if pane is None:
            return
        start, end = pane.editor.selected_offsets()
        budget = self.config.editing.infill_tokens if start == end else None  # a selection sizes its own slots
        pane.start([Span(start, end, "infill", max_tokens=budget)], self.denoiser, self.config)

    def action_rewrite(self) -> None:
        pane = self._ready_pane()
        if pane is None:
            return
        start, end = pane.editor.selected_offsets()
        if start == end:
            self.notify("select the text to rewrite first", severity="warning", timeout=3)
            return
        strength = self.strength
        if not self.denoiser.spec.chat_template:
            pane.start([Span(start, end, "rewrite", strength=strength)], self.denoiser, self.config)
            return

        def with_instruction(answer: str | None) -> None:
            if answer is not None:
                span = Span(start, end, "rewrite", strength=strength, instruction=answer.strip() or None)
                pane.start([span], self.denoiser, self.config)

        self.push_screen(PromptScreen("Rewrite instruction (empty: none):", placeholder="e.g. make it iterative"), with_instruction)

    def action_mark_region(self) -> None:
        pane = self.active_pane()
        if pane is None:
            return
        editor = pane.editor
        start, end = editor.selected_offsets()
        why_not = editor.add_mark(start, end)
        if why_not:
            self.notify(why_not, severity="warning", timeout=3)
            return
        editor.move_cursor(editor.selection.end)  # drop the selection so the mark's colour shows
        self.update_status()

    def action_clear_marks(self) -> None:
        pane = self.active_pane()
        if pane is not None:
            pane.editor.clear_marks()
            self.update_status()

    def action_fill_marked(self) -> None:
        pane = self.active_pane()
        if pane is None:
            return
        if not pane.editor.marks:
            self.notify(f"mark regions first ({self.keys_for('mark-region')} adds the selection)", severity="warning", timeout=3)
            return
        pane = self._ready_pane()
        if pane is not None:
            pane.start([Span(s, e, "infill") for s, e in pane.editor.marks], self.denoiser, self.config)

    def action_accept(self) -> None:
        pane = self.active_pane()
        if pane is None or pane.phase == IDLE:
            self.notify("nothing to accept", timeout=2)
        elif pane.phase == RUNNING:
            self.notify("still running: Tab accepts once it is done, Esc cancels", timeout=2)
        else:
            pane.accept()

    def action_reject(self) -> None:
        pane = self.active_pane()
        if pane is not None:
            pane.reject()

    def action_cancel(self) -> None:
        pane = self.active_pane()
        if pane is not None:
            pane.cancel()

    def action_cancel_or_reject(self) -> None:
        pane = self.active_pane()
        if pane is None:
            return
        if pane.phase == RUNNING:
            pane.cancel()
        elif pane.phase == PREVIEW:
            pane.reject()
        else:
            pane.editor.move_cursor(pane.editor.selection.end)  # idle: Esc just drops the selection

    def action_cycle(self, delta: int) -> None:
        pane = self.active_pane()
        if pane is not None and not pane.cycle(delta):
            self.notify("one alternative only (set samples > 1 in the config)", timeout=2)

    def action_strength(self, delta: float) -> None:
        self.strength = round(min(1.0, max(0.1, self.strength + delta)), 2)
        self.status.strength = self.strength
        self.notify(f"Rewrite re-noises {self.strength:.0%} of the selection", timeout=1.5)
