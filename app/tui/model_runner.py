"""The code that runs in thread workers: reach the backend, run one edit, post messages.

A thin adapter of app/backend.py: the backend (a local model's core.run.Runner, or a server)
turns the edit into plain-data events, and this module turns those into the UI's messages.
Nothing here touches a widget nor holds a model lock; results go out through `post` (the UI's
thread-safe post_message). torch is imported inside the worker, never on the UI's first paint.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Callable

from ...core.errors import SharpenError
from ...core.request import EditRequest
from ...core.settings import Editing, ModelRequest, Sampling
from ...core.spans import Span
from .messages import EditCancelled, EditFailed, EditFinished, EditProgress, ModelFailed, ModelLoaded, RunStats
from .preview import FINAL, MASK_GLYPH, MASKED, NOISE, Piece, confidence_kind, merge, noise_text

log = logging.getLogger(__name__)


def load_model(request: ModelRequest, post: Callable, backend=None) -> None:
    """Load the requested checkpoint (None: the embedded model), or reach `backend`, and post the outcome."""
    started = time.perf_counter()
    try:
        from ..backend import LocalBackend

        # A device plan printed on stderr would land on top of the screen: quiet.
        backend = backend if backend is not None else LocalBackend(request, quiet=True, editor=True)
        info = backend.load()
    except SharpenError as exc:
        post(ModelFailed(str(exc)))
        return
    except Exception as exc:  # an editor without a model is still an editor
        log.exception("model loading failed")
        post(ModelFailed(f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"))
        return
    post(ModelLoaded(backend, info.device, time.perf_counter() - started))


@dataclass(frozen=True)
class EditJob:
    run_id: int
    text: str  # the buffer as the run saw it ('\n' line breaks)
    spans: tuple[Span, ...]
    sampling: Sampling
    editing: Editing
    frame_rate: int = 30  # at most this many EditProgress messages a second
    min_step_ms: int = 0  # pace steps so a fast model can still be watched
    path: str | None = None  # the buffer's file: candidate ranking parses by its language

    def request(self) -> EditRequest:
        return EditRequest(self.text, self.spans, self.sampling, self.editing, self.path)

    def run(self, backend, post: Callable, should_stop: Callable[[], bool]) -> None:
        run_job(self, backend, post, should_stop)


def draft_pieces(progress) -> list[list[Piece]]:
    """A core.run.Progress as the preview's pieces: masked slots as MASK_GLYPH, noise faint,
    pad/eos hidden, committed text by confidence."""
    out = []
    for span in progress.spans:
        pieces = []
        for slot in span.slots:
            if slot.state == "masked":
                pieces.append(Piece(MASK_GLYPH, MASKED))
            elif slot.state == "noise":
                pieces.append(Piece(noise_text(slot.text), NOISE))
            elif slot.state == "sharp":
                pieces.append(Piece(slot.text, confidence_kind(slot.confidence)))
            elif slot.state == "edited":
                pieces.append(Piece(slot.text, "edited"))  # drawn as an edit (preview.EDITED)
        out.append(merge(pieces))
    return out


def text_pieces(progress) -> list[list[Piece]]:
    """A frame from a server that sends no slot states (a Mercury draft): each span's text, final."""
    return [[Piece(span.text, FINAL)] if span.text else [] for span in progress.spans]


def run_job(job: EditJob, backend, post: Callable, should_stop: Callable[[], bool]) -> None:
    """Run one edit to the end (EditFinished), to a cancel (EditCancelled) or an error (EditFailed)."""
    from ...core.run import Done

    compute = 0.0
    try:
        events = backend.run(job.request(), should_stop, every=1.0 / job.frame_rate)
        while True:
            started = time.perf_counter()
            event = next(events, None)
            compute += time.perf_counter() - started
            if event is None:
                break
            progress = event.last if isinstance(event, Done) else event
            pieces = draft_pieces(progress) if any(span.slots for span in progress.spans) else text_pieces(progress)
            stats = RunStats(progress.step, progress.total_steps, progress.unsharp, progress.sharp, compute)
            if isinstance(event, Done):
                post(EditFinished(job.run_id, event.result, pieces, stats))
                return
            post(EditProgress(job.run_id, pieces, stats))
            _pace(job.min_step_ms / 1000 - (time.perf_counter() - started), should_stop)
    except SharpenError as exc:
        post(EditFailed(job.run_id, str(exc)))
        return
    except Exception as exc:
        log.exception("edit run failed")
        post(EditFailed(job.run_id, f"{type(exc).__name__}: {exc}"))
        return
    post(EditCancelled(job.run_id))


@dataclass(frozen=True)
class NextEditJob:
    """A next-edit prediction (core.next_edit.predict): a request, not spans; frames carry drafts."""

    run_id: int
    request: object  # core.next_edit.request.NextEditRequest
    frame_rate: int = 30

    def run(self, backend, post: Callable, should_stop: Callable[[], bool]) -> None:
        run_next_edit(self, backend, post, should_stop)


def run_next_edit(job: NextEditJob, backend, post: Callable, should_stop: Callable[[], bool]) -> None:
    """Predict to the end (EditFinished with the NextEditDone), to a stop (EditCancelled: predict
    ends without a result once `should_stop`) or an error (EditFailed). Each draft is a frame
    whose `draft` is the hunks it shows now."""
    from ...core.next_edit.predict import NextEditDone, predict

    try:
        for event in predict(backend, job.request, should_stop=should_stop, every=1.0 / job.frame_rate):
            if isinstance(event, NextEditDone):
                stats = RunStats(0, 0, 0, event.tokens, event.seconds)
                post(EditFinished(job.run_id, event, [], stats))
                return
            stats = RunStats(event.step, event.total_steps, 0, 0, event.elapsed)
            post(EditProgress(job.run_id, [], stats, draft=event.answer))
    except SharpenError as exc:
        post(EditFailed(job.run_id, str(exc)))
        return
    except Exception as exc:  # a failed prediction is no news worth a traceback on screen; the status says it
        log.debug("next-edit prediction failed", exc_info=True)
        post(EditFailed(job.run_id, f"{type(exc).__name__}: {exc}"))
        return
    post(EditCancelled(job.run_id))


def _pace(seconds: float, should_stop: Callable[[], bool]) -> None:
    # Sleep in short slices so a cancel during pacing is still answered at once.
    deadline = time.perf_counter() + seconds
    while not should_stop() and (left := deadline - time.perf_counter()) > 0:
        time.sleep(min(left, 0.01))
