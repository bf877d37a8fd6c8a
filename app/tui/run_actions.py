"""A buffer's model commands: infill, rewrite, marked regions filled together, fill body.

Functions of one EditorPane (the widget whose bindings run them): each turns the selection, the
marks or the function at the cursor into spans and starts one run on the pane's run board
(edit_preview.EditPreview draws it; Tab accepts, Esc rejects). The constrained forms are in
constraint_actions.py, next-edit prediction in next_edit_actions.py.
"""
from __future__ import annotations

from ...core.spans import Span
from . import syntax_actions
from .prompt_screen import PromptScreen
from .session import Pane


def infill(pane: Pane) -> None:
    """Mask the selection and let the model refill it; no selection: fill a gap at the cursor."""
    if pane._ready("infill"):
        start, end = pane.editor.selected_offsets()
        budget = pane.session.config.editing.infill_tokens if start == end else None  # a selection sizes its own slots
        pane.edits.start([Span(start, end, "infill", max_tokens=budget)])


def rewrite(pane: Pane) -> None:
    """Re-noise part of the selection and let the model redraft it (an instruct model asks what to do)."""
    start, end = pane.editor.selected_offsets()
    if start == end:
        pane.notify("select the text to rewrite first", severity="warning", timeout=3)
        return
    if not pane._ready("rewrite"):
        return
    strength = pane.session.strength
    if not pane.session.backend.describe().instruct:
        pane.edits.start([Span(start, end, "rewrite", strength=strength)])
        return

    def with_instruction(answer: str | None) -> None:
        if answer is not None:
            pane.edits.start([Span(start, end, "rewrite", strength=strength, instruction=answer.strip() or None)])

    pane.app.push_screen(PromptScreen("Rewrite instruction (empty: none):", placeholder="e.g. make it iterative"), with_instruction)


def mark_region(pane: Pane) -> None:
    """Add the selection to the marked regions of a parallel edit."""
    editor = pane.editor
    why_not = editor.add_mark(*editor.selected_offsets())
    if why_not:
        pane.notify(why_not, severity="warning", timeout=3)
        return
    editor.move_cursor(editor.selection.end)  # drop the selection so the mark's colour shows
    pane.announce()


def fill_marked(pane: Pane) -> None:
    """Infill every marked region together, in one denoising run."""
    if not pane.editor.marks:
        pane.notify(f"mark regions first ({pane.app.keys_for('mark-region')} adds the selection)", severity="warning", timeout=3)
    elif pane._ready("fill_marked"):
        pane.edits.start([Span(s, e, "infill") for s, e in pane.editor.marks])


def fill_body(pane: Pane) -> None:
    """Mask the body of the function or block at the cursor and infill it."""
    span = syntax_actions.body_at_cursor(pane)
    if span is None or not pane._ready("fill_body"):
        return
    start, end = span
    before = pane.editor.selection
    pane.selection_stack.clear()
    pane.editor.select_offsets(start, end)  # shows what is masked once the preview closes
    budget = pane.session.config.editing.infill_tokens if start == end else None
    pane.edits.start([Span(start, end, "infill", max_tokens=budget)])
    # The body's selection is the command's, not the person's: a reject or cancel puts the
    # cursor back where it was (inside the function, so a second Fill body finds it again).
    pane.edits.selection_before_run = before
