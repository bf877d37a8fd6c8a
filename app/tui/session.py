"""What every buffer's pane shares: the settings, the model once it is loaded, the rewrite strength.

The app owns one Session and hands it to each EditorPane, so a pane's actions read the model
and the settings from a value they were given rather than from the app's attributes.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..config import Config


@dataclass
class Session:
    config: Config
    denoiser: object | None = None  # a core.denoiser.DenoiserLike once loaded
    model_error: str | None = None  # why loading failed; the editor works on without a model
    strength: float = 0.5  # share of a selection a rewrite re-noises (Alt+Up / Alt+Down)
    last_search: str = ""  # Find's query, shared by every buffer as in most editors

    def unavailable(self) -> str | None:
        """Why no run can start now, or None when the model is ready."""
        if self.denoiser is not None:
            return None
        return f"the model is unavailable: {self.model_error}" if self.model_error else "the model is still loading…"
