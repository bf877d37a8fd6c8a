"""What every buffer's pane shares: the settings, the model once it is loaded, the rewrite strength.

The app owns one Session and hands it to each EditorPane, so a pane's actions read the model
and the settings from a value they were given rather than from the app's attributes.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from ..config import Config
from .editor_area import EditorArea


@dataclass
class Session:
    config: Config
    backend: object | None = None  # an app.backend.Backend once loaded (or reached)
    model_error: str | None = None  # why loading failed; the editor works on without a model
    strength: float = 0.5  # share of a selection a rewrite re-noises (Alt+Up / Alt+Down)
    last_search: str = ""  # Find's query, shared by every buffer as in most editors
    queued: tuple | None = None  # (pane, action name): a model command asked for while the model loads
    ghost: bool | None = None  # the palette's ghost-completion switch; None: the config decides (ghost.ghost_default)
    next_edit: bool | None = None  # the palette's next-edit switch; None: the config decides (next_edit_overlay.next_edit_default)
    edit_history: Any = None  # every buffer's recent edits (core.next_edit.history.EditHistory), made on first use
    first_run_started: bool = False  # the session's first run was started (Editor.first_run_step_ms paces only that one)

    def unavailable(self) -> str | None:
        """Why no run can start now, or None when the model is ready."""
        if self.backend is not None:
            return None
        return f"the model is unavailable: {self.model_error}" if self.model_error else "the model is still loading…"


class Pane(Protocol):
    """What a buffer command (file_actions, syntax_actions) reads of the EditorPane that runs it."""

    editor: EditorArea
    session: Session
    selection_stack: list[tuple[tuple[int, int], tuple[int, int]]]  # Expand selection's history
    Saved: Any  # the message class a save posts

    @property
    def app(self) -> Any: ...  # the running App (dialogs)

    def notify(self, message: str, **kwargs) -> None: ...

    def post_message(self, message: Any) -> bool: ...
