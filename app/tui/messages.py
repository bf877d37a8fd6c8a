"""Every message between the model's thread workers and the UI, in one place.

Workers never touch widgets: they post these, and the UI thread handles them. Each edit run
has an id, so a late message from a cancelled run is recognised and dropped.
"""
from __future__ import annotations

from dataclasses import dataclass

from textual.message import Message

from .preview import Piece


class ModelLoaded(Message):
    """The model is ready; `backend` is an app.backend.Backend (a local model or a server)."""

    def __init__(self, backend, device: str, seconds: float) -> None:
        super().__init__()
        self.backend = backend
        self.device = device
        self.seconds = seconds


class ModelFailed(Message):
    """Loading failed; the editor goes on without a model."""

    def __init__(self, error: str) -> None:
        super().__init__()
        self.error = error


@dataclass(frozen=True)
class RunStats:
    step: int
    total_steps: int
    masked: int  # slots still masked
    tokens: int  # slots committed so far (pad/eos included: they are decisions too)
    compute_seconds: float  # time inside the model loop, without any pacing

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.compute_seconds if self.compute_seconds > 0 else 0.0


class EditProgress(Message):
    """A frame to draw: per span its pieces (masked slots, text by confidence); `draft`: what a
    run that is not spans shows instead (a next-edit prediction's core.next_edit NextEditAnswer)."""

    def __init__(self, run_id: int, pieces: list[list[Piece]], stats: RunStats, draft=None) -> None:
        super().__init__()
        self.run_id = run_id
        self.pieces = pieces
        self.stats = stats
        self.draft = draft


class EditFinished(Message):
    """The run is done: `result` is a sharpen.core.engine.EditResult (a next-edit run's: a
    core.next_edit.predict.NextEditDone); `pieces` the last frame's."""

    def __init__(self, run_id: int, result, pieces: list[list[Piece]], stats: RunStats) -> None:
        super().__init__()
        self.run_id = run_id
        self.result = result
        self.pieces = pieces
        self.stats = stats


class EditCancelled(Message):
    def __init__(self, run_id: int) -> None:
        super().__init__()
        self.run_id = run_id


class EditFailed(Message):
    def __init__(self, run_id: int, error: str) -> None:
        super().__init__()
        self.run_id = run_id
        self.error = error
