"""The code that runs in thread workers: load the model, run one edit, post messages.

Nothing here touches a widget; results go out through `post` (the UI's thread-safe
post_message). torch is imported here, inside the worker, never on the UI's first paint.
"""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Callable

from ...core.errors import SharpenError
from ...core.settings import Editing, ModelRequest, Sampling
from ...core.spans import Span
from .messages import EditCancelled, EditFailed, EditFinished, EditProgress, ModelFailed, ModelLoaded, RunStats
from .preview import Piece, span_pieces

log = logging.getLogger(__name__)

# One run on the model at a time: a run started right after a cancel waits here for the
# cancelled one to finish its current step (it stops at the next should_stop check).
MODEL_LOCK = threading.Lock()


def load_model(request: ModelRequest, post: Callable) -> None:
    """Load the requested checkpoint (None: the embedded model) and post the outcome."""
    started = time.perf_counter()
    try:
        from ..model_choice import load_model as load

        denoiser = load(request, quiet=True, editor=True)  # a device plan printed on stderr would land on top of the screen
    except SharpenError as exc:
        post(ModelFailed(str(exc)))
        return
    except Exception as exc:  # an editor without a model is still an editor
        log.exception("model loading failed")
        post(ModelFailed(f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"))
        return
    post(ModelLoaded(denoiser, str(denoiser.device), time.perf_counter() - started))


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


def frame_pieces(frame, denoiser) -> list[list[Piece]]:
    end_ids = set(denoiser.spec.end_ids)
    return [span_pieces(s.tokens, s.confidence, denoiser.tokenizer.pieces, end_ids, s.noise) for s in frame.spans]


def run_job(job: EditJob, denoiser, post: Callable, should_stop: Callable[[], bool]) -> None:
    """Run one edit to the end (EditFinished), to a cancel (EditCancelled) or an error (EditFailed)."""
    with MODEL_LOCK:
        if should_stop():
            post(EditCancelled(job.run_id))
            return
        _run(job, denoiser, post, should_stop)


def _run(job: EditJob, denoiser, post: Callable, should_stop: Callable[[], bool]) -> None:
    from ...core.engine import edit_options, run_edit

    compute = 0.0
    last_post = float("-inf")
    interval = 1.0 / job.frame_rate
    try:
        options = edit_options(job.editing, job.path)
        frames = run_edit(denoiser, job.text, list(job.spans), job.sampling, should_stop=should_stop, **options)
        while True:
            started = time.perf_counter()
            edit_frame = next(frames, None)
            compute += time.perf_counter() - started
            if edit_frame is None:
                break
            frame = edit_frame.frame
            stats = RunStats(frame.step, frame.total_steps, frame.masked, sum(t is not None for s in frame.spans for t in s.tokens), compute)
            if edit_frame.result is not None:
                post(EditFinished(job.run_id, edit_frame.result, frame_pieces(frame, denoiser), stats))
                return
            now = time.perf_counter()
            if now - last_post >= interval:  # coalesce: frames in between are never drawn
                post(EditProgress(job.run_id, frame_pieces(frame, denoiser), stats))
                last_post = now
            _pace(job.min_step_ms / 1000 - (time.perf_counter() - started), should_stop)
    except SharpenError as exc:
        post(EditFailed(job.run_id, str(exc)))
        return
    except Exception as exc:
        log.exception("edit run failed")
        post(EditFailed(job.run_id, f"{type(exc).__name__}: {exc}"))
        return
    post(EditCancelled(job.run_id))


def _pace(seconds: float, should_stop: Callable[[], bool]) -> None:
    # Sleep in short slices so a cancel during pacing is still answered at once.
    deadline = time.perf_counter() + seconds
    while not should_stop() and (left := deadline - time.perf_counter()) > 0:
        time.sleep(min(left, 0.01))
