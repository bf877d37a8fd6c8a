"""A buffer's constrained edits (docs/constraints.md): Infill with pattern, Rewrite keeping words.

Functions of one EditorPane (the widget whose bindings run them): each asks for its constraint
in a prompt, compiles it at once (a bad pattern is a warning, not a run) and starts the edit
with the constraint on its span, so every denoising step keeps the span completable to it.
"""
from __future__ import annotations

from ...core.spans import Span
from .prompt_screen import PromptScreen
from .session import Pane


def infill_pattern(pane: Pane) -> None:
    """Infill the selection (or a gap at the cursor) with text that matches a regular expression."""
    if not pane._ready("infill_pattern"):
        return
    start, end = pane.editor.selected_offsets()
    budget = pane.session.config.editing.infill_tokens if start == end else None  # a selection sizes its own slots

    def with_pattern(answer: str | None) -> None:
        if answer and answer.strip():
            constraint = _compiled(pane, regex=answer.strip())
            if constraint is not None:
                pane.edits.start([Span(start, end, "infill", max_tokens=budget, constraint=constraint)])

    pane.app.push_screen(PromptScreen("Pattern the infill must match (a regular expression):",
                                      placeholder="e.g. [0-9]{4}-[0-9]{2}-[0-9]{2}"), with_pattern)


def rewrite_keeping(pane: Pane) -> None:
    """Rewrite the selection; every word asked for stays in it (a required-words constraint)."""
    start, end = pane.editor.selected_offsets()
    if start == end:
        pane.notify("select the text to rewrite first", severity="warning", timeout=3)
        return
    if not pane._ready("rewrite_keeping"):
        return
    strength = pane.session.strength

    def with_words(answer: str | None) -> None:
        words = tuple(answer.split()) if answer else ()
        if words:
            constraint = _compiled(pane, require=words)
            if constraint is not None:
                pane.edits.start([Span(start, end, "rewrite", strength=strength, constraint=constraint)])

    pane.app.push_screen(PromptScreen("Words the rewrite must keep (separated by spaces):", placeholder="e.g. total return"), with_words)


def _compiled(pane: Pane, **fields):
    """The constraint, compiled now; None (and a warning) when it is refused."""
    from ...core.constraints import Constraint
    from ...core.constraints.automaton import constraint_dfa
    from ...core.errors import UsageError

    try:
        constraint = Constraint(**fields)
        constraint_dfa(constraint)
    except UsageError as exc:
        pane.notify(str(exc), severity="warning", timeout=5)
        return None
    return constraint
