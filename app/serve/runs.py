"""Running a request for an endpoint: to the end (with the client's leaving watched), or as a
stream of events; and the text a one-span run has committed so far."""
from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

from ...core.errors import SharpenError
from ...core.newlines import match_newlines, newline_style
from .bridge import Failed, Stopped, cancel_on_disconnect, start_run
from .common import HTTPError, Server, status_of

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Outcome:
    done: object | None  # core.run.Done, or None when stopped
    stopped: Stopped | None
    seconds: float  # wall time from the request's start
    first_frame: float | None  # seconds to the run's first frame (the canvas built, the model's turn came)


async def run_to_end(request, server: Server, edit, seconds: float | None = None, every: float = 3600.0) -> Outcome:
    """Run `edit` to its end; a client that leaves cancels it within a step. SharpenErrors
    become HTTPErrors (400 bad request, 503 busy, 500 the rest). `every`: how often a frame is
    kept (the first always is; a run cut by its time budget answers from the last one kept)."""
    from ...core.run import Done, Progress

    started = time.perf_counter()
    handle = start_run(server.backend, edit, every=every, seconds=min(seconds or server.limits.seconds, server.limits.seconds))
    watcher = asyncio.create_task(cancel_on_disconnect(request, handle))
    first = None
    try:
        async for event in handle.events():
            if isinstance(event, Progress) and first is None:
                first = time.perf_counter() - started
            elif isinstance(event, Done):
                server.metrics.finished(event.result.tokens, event.result.steps, time.perf_counter() - started)
                return Outcome(event, None, time.perf_counter() - started, first)
            elif isinstance(event, Stopped):
                server.metrics.stopped()
                return Outcome(None, event, time.perf_counter() - started, first)
    except SharpenError as exc:
        raise HTTPError(status_of(exc), str(exc), retry_after(exc)) from None
    finally:
        watcher.cancel()
    raise HTTPError(500, "the run ended without a result")


async def open_stream(request, server: Server, edit, every: float = 0.0, seconds: float | None = None):
    """The run's events for a streamed answer: Progress per step (coalesced to `every`), then
    Done or Stopped (the server's time limit, or `seconds` when shorter, ran out). Waits for the first event, so a refused run (bad request, a busy model)
    is still a JSON error with its status, not a broken stream. A client that leaves, while
    waiting or while streaming, stops the run within a step."""
    from ...core.run import Done

    started = time.perf_counter()
    handle = start_run(server.backend, edit, every=every, seconds=min(seconds or server.limits.seconds, server.limits.seconds))
    watcher = asyncio.create_task(cancel_on_disconnect(request, handle))
    events = handle.events()
    try:
        first = await events.__anext__()
    except SharpenError as exc:
        watcher.cancel()
        raise HTTPError(status_of(exc), str(exc), retry_after(exc)) from None

    async def metered():
        event = first
        try:
            while True:
                if isinstance(event, Done):
                    server.metrics.finished(event.result.tokens, event.result.steps, time.perf_counter() - started)
                yield event
                if isinstance(event, (Done, Stopped, Failed)):
                    return
                try:
                    event = await events.__anext__()
                except SharpenError as exc:  # the stream has begun: the error becomes its last event
                    event = Failed(status_of(exc), str(exc))
                except Exception as exc:
                    log.exception("a streamed run failed")
                    event = Failed(500, f"internal error: {type(exc).__name__}")
        finally:
            if not isinstance(event, Done):  # the time ran out, or the client left mid-stream
                server.metrics.stopped()
            watcher.cancel()
            handle.cancel()
            await events.aclose()

    return metered()


def retry_after(exc: SharpenError) -> dict:
    from ...core.run import Busy

    return {"Retry-After": "1"} if isinstance(exc, Busy) else {}


def committed_text(progress, text: str, at: int) -> str:
    """What a one-span run at offset `at` of `text` has settled from the left: the slots up to
    the first one still masked or noise, as the result will show them (leading blanks after a
    blank-ending prefix dropped, the file's line endings)."""
    pieces = []
    for slot in progress.spans[0].slots:
        if slot.state in ("masked", "noise"):
            break
        pieces.append(slot.text)
    out = "".join(pieces)
    if at > 0 and text[at - 1] in " \t":  # the engine's rule (core.engine.leading_blank)
        out = out.lstrip(" \t")
    return match_newlines(out, newline_style(text))
