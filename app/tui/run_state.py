"""One running model call on a buffer (ModelRun), and the board that routes its worker's messages.

Every model call the editor makes on a buffer is a ModelRun, whoever asked for it: a command's
edit (edit_preview.EditPreview, drawn in the preview layer until Tab or Esc), the as-you-type
ghost (ghost.Ghost) and next-edit prediction (next_edit_overlay.NextEditor). A run holds what it
started from (the buffer's text, its spans or its next-edit request), its stop switch, its
progress (stats, the frames drawn, timings) and its result; its owner decides what the run
means on screen.

    board.start(...) --EditProgress--> owner.run_frame (coalesced: the latest frame only)
    board.start_next_edit(...) |       --EditFinished--> owner.run_finished
           |                   |       --EditFailed----> owner.run_failed
           +--board.stop(run)--> gone: its late messages find no run and are dropped

Each pane has one RunBoard. A run's job (model_runner.EditJob: spans over the text;
model_runner.NextEditJob: a next-edit request, whose frames carry drafts of hunks) runs in one
thread worker and posts its messages to the pane; the pane hands them all to the board, which
finds the live run by id: a message from a run stopped since (cancelled, rejected, dismissed,
superseded by a newer one) finds none and is dropped, so no owner has to recognise a stale run
itself.
"""
from __future__ import annotations

import itertools
import threading
import time
from dataclasses import dataclass, field
from functools import partial
from typing import Protocol

from ...core.spans import Span
from .messages import EditCancelled, EditFailed, EditFinished, EditProgress, RunStats
from .model_runner import EditJob, NextEditJob
from .preview import Piece

_run_ids = itertools.count(1)  # one sequence for every kind of run: an id names one run in the session


class RunOwner(Protocol):
    """What a run tells whoever started it (EditPreview, Ghost), on the UI thread."""

    def run_frame(self, run: ModelRun, message: EditProgress) -> None: ...

    def run_finished(self, run: ModelRun, message: EditFinished) -> None: ...

    def run_failed(self, run: ModelRun, message: EditFailed) -> None: ...


@dataclass(eq=False)
class ModelRun:
    id: int
    purpose: str  # "edit" (a command's preview), "ghost" or "next-edit": the worker group, and what the status says
    text: str  # the buffer when the run started ('\n' line breaks)
    spans: tuple[Span, ...]  # sorted, in offsets of `text` (a next-edit run's: none, its request says what to rewrite)
    owner: RunOwner
    stop: threading.Event = field(default_factory=threading.Event)
    paced: bool = False  # steps held on screen (Editor.first_run_step_ms / min_step_ms)
    window: tuple[int, int, int, int] | None = None  # what the preview layer shows of `text` (PreviewView.show_over); None: all
    typed_at: float = 0.0  # the ghost's: perf_counter of the last edit before the pause that fired it
    started: float = field(default_factory=time.perf_counter)  # its wall time runs from here
    stats: RunStats | None = None  # of the latest frame (or the final one)
    result: object = None  # core.engine.EditResult once done (a next-edit run's: core.next_edit.predict.NextEditDone)
    request: object = None  # a next-edit run's core.next_edit.request.NextEditRequest
    final_pieces: list[list[Piece]] | None = None  # the last frame's pieces (confidence styling of the result)
    choice: int = 0  # which alternative is shown
    frames: int = 0  # frames drawn: the first loads the whole layer, later ones only the spans
    first_frame_at: float | None = None  # when its first frame was drawn
    shown_at: float | None = None  # when its result was drawn
    drafts: list = field(default_factory=list)  # each frame drawn before the result: the ghost's text, next-edit's NextEditAnswer
    pending: EditProgress | None = None  # the latest frame not drawn yet (RunBoard coalesces)

    @property
    def alternatives(self) -> int:
        return len(self.result.samples) if self.result is not None else 0

    @property
    def offset(self) -> int:
        """Where the first span starts (the ghost's cursor)."""
        return self.spans[0].start

    @property
    def fired_at(self) -> float:
        return self.started

    @property
    def compute_seconds(self) -> float:
        """Time inside the model loop so far, without any pacing."""
        return self.stats.compute_seconds if self.stats is not None else 0.0

    @property
    def steps(self) -> int:
        return self.stats.step if self.stats is not None else 0

    def drawn(self, final: bool = False) -> None:
        """Note that a frame (`final`: the result) is on screen now."""
        now = time.perf_counter()
        self.frames += 1
        if self.first_frame_at is None:
            self.first_frame_at = now
        if final:
            self.shown_at = now


class RunBoard:
    """The live model runs of one pane, by id; `host` is the pane (workers, timers, messages)."""

    def __init__(self, host) -> None:
        self.host = host
        self._live: dict[int, ModelRun] = {}

    def start(self, purpose: str, text: str, spans, owner: RunOwner, backend, config, step_ms: int,
              path: str | None, **fields) -> ModelRun:
        """Start a run of `spans` over `text` in a thread worker; its messages go to `owner`."""
        run = ModelRun(next(_run_ids), purpose, text, tuple(spans), owner, paced=step_ms > 0, **fields)
        job = EditJob(run.id, text, run.spans, config.sampling, config.editing, config.editor.frame_rate, step_ms, path)
        return self._launch(run, job, backend)

    def start_next_edit(self, request, owner: RunOwner, backend, config, **fields) -> ModelRun:
        """Start a next-edit prediction of `request` (core.next_edit.request.NextEditRequest): its
        frames' `draft` and its result (NextEditDone) go to `owner` as any run's do."""
        run = ModelRun(next(_run_ids), "next-edit", request.text, (), owner, request=request, **fields)
        return self._launch(run, NextEditJob(run.id, request, config.editor.frame_rate), backend)

    def _launch(self, run: ModelRun, job: EditJob | NextEditJob, backend) -> ModelRun:
        """The one worker path: `job` runs in a thread worker of group `run.purpose`, posting to
        the pane, stopping at its next step once `run.stop` is set."""
        self._live[run.id] = run
        self.host.run_worker(partial(job.run, backend, self.host.post_message, run.stop.is_set),
                             thread=True, group=run.purpose, exit_on_error=False)
        return run

    def stop(self, run: ModelRun | None) -> None:
        """Stop `run` at its next step (cooperative cancellation) and forget it: what it still posts is dropped."""
        if run is not None:
            run.stop.set()
            run.pending = None
            self._live.pop(run.id, None)

    def stop_all(self) -> None:
        for run in list(self._live.values()):
            self.stop(run)

    def live(self, run: ModelRun | None) -> bool:
        """Whether `run` is still running (started, not finished, failed nor stopped)."""
        return run is not None and self._live.get(run.id) is run

    def deliver(self, message: EditProgress | EditFinished | EditFailed | EditCancelled) -> None:
        """A worker's message, on the UI thread: to its run's owner, or dropped when the run is gone."""
        run = self._live.get(message.run_id)
        if run is None:
            return  # a late message from a run stopped since
        if isinstance(message, EditProgress):
            # Coalesce: if the UI fell behind, frames already queued only replace the pending
            # one, and a single redraw runs after them (keys never wait behind frames).
            if run.pending is None:
                self.host.call_later(self._draw_pending, run)
            run.pending = message
            return
        del self._live[run.id]
        run.pending = None
        if isinstance(message, EditFinished):
            run.stats, run.result, run.final_pieces = message.stats, message.result, message.pieces
            run.owner.run_finished(run, message)
        elif isinstance(message, EditFailed):
            run.owner.run_failed(run, message)
        else:  # cancelled though nobody stopped it: the backend's events ended without a result
            run.owner.run_failed(run, EditFailed(run.id, "the model stopped without a result"))

    def _draw_pending(self, run: ModelRun) -> None:
        message, run.pending = run.pending, None
        if message is None or not self.live(run):
            return
        run.stats = message.stats
        run.owner.run_frame(run, message)
