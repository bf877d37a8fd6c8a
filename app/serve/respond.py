"""The one response loop: every endpoint is a Shape (how it words a run) and a route row (app.py).

    class Infill(Shape):                   # llama.py
        @classmethod
        def read(cls, server, body): ...   # the body -> Plan(the EditRequest, a shape, stream or not)
        def step(self, progress): ...      # the chunks one denoising step adds to a stream
        def final(self, done): ...         # the chunks that end it
        def cut(self, stopped): ...        # the chunks that end a stream cut by a time limit
        def whole(self, done): ...         # the answer without a stream

    Endpoint("/infill", Infill)            # app.py's route row

What every endpoint shares is here, once: the run started on its thread (bridge.py), a client
that leaves cancelling it (waiting in line, running, or streaming), a refused run before the
answer began as a JSON error with its status (400, 503 + Retry-After), a failure after a stream
began as the stream's last event (Failed, then `[DONE]` where the shape ends with one), the
server's time limit (504, or the shape's cut chunks once a stream began) and the request's own
budget (Shape.budget: t_max_predict_ms; the answer is then Shape.whole_cut), and the counters
for /metrics.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from contextlib import aclosing
from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse

from ...core.errors import SharpenError
from ...core.events import Done, Failed, Progress, Stopped
from ...core.newlines import match_newlines, newline_style
from .bridge import cancel_on_disconnect, start_run
from .common import SSE_HEADERS, HTTPError, Server, error_body, read_json, server_of, sse, status_of

log = logging.getLogger(__name__)


class Timing:
    """When the request began and when its run's first frame came (the canvas built and read:
    llama.cpp's prompt time); the loop keeps it, a shape reads it for its timings."""

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.first: float | None = None  # seconds from `started` to the first frame

    def seconds(self) -> float:
        return time.perf_counter() - self.started


class Shape:
    """How an endpoint words a run. The defaults: nothing per step, a cut stream ends with a 504
    error event, a whole answer cut by the request's own budget is a 504 too."""

    done_marker = True  # a stream ends with `data: [DONE]` (OpenAI's form; llama.cpp's /infill sends none)
    budget: float | None = None  # the request's own time budget in seconds (t_max_predict_ms), None: the server's
    every = 3600.0  # without a stream, the frames a run keeps: the first, then one per `every` s (0: each step)
    timing: Timing  # set by the loop before the first event

    @classmethod
    def read(cls, server: Server, body: dict) -> "Plan":
        raise NotImplementedError

    def step(self, progress: Progress) -> list:
        return []

    def final(self, done: Done) -> list:
        raise NotImplementedError

    def cut(self, stopped: Stopped, server: Server) -> list:
        return [self.error(504, too_long(server))]

    def whole(self, done: Done | None) -> dict:
        """The answer without a stream; None: nothing ran (a warm-up, max_tokens 0)."""
        raise NotImplementedError

    def whole_cut(self, stopped: Stopped) -> dict:
        raise HTTPError(504, f"the run took longer than its budget ({self.budget:g} s)")

    def error(self, status: int, message: str) -> dict:
        return error_body(status, message)


@dataclass
class Plan:
    """What a body asks: the run (None: nothing to run), how to word it, and whether to stream."""

    edit: object | None  # core.request.EditRequest
    shape: Shape
    stream: bool = False


@dataclass(frozen=True)
class Endpoint:
    """A route row: a POST path and the shape that reads its body and words its answer."""

    path: str
    shape: type[Shape]


def too_long(server: Server) -> str:
    return f"the run took longer than this server allows ({server.limits.seconds:g} s)"


def handler(shape: type[Shape]):
    """The Starlette handler of a route row."""

    async def handle(request: Request):
        server = server_of(request)
        plan = shape.read(server, await read_json(request))
        return await respond(request, server, plan)

    handle.__name__ = shape.__name__
    return handle


async def respond(request: Request, server: Server, plan: Plan):
    """Run the plan and answer it in its shape (see the module's notes)."""
    shape = plan.shape
    shape.timing = Timing()
    if plan.edit is None:
        return _streamed_now(shape, None) if plan.stream else JSONResponse(shape.whole(None))
    limit = server.limits.seconds
    own = shape.budget is not None and shape.budget < limit  # the request's budget, not the server's, ends it
    every = 0.0 if plan.stream or own else shape.every
    handle = start_run(server.backend, plan.edit, every=every, seconds=shape.budget if own else limit)
    watcher = asyncio.create_task(cancel_on_disconnect(request, handle))
    events = handle.events()
    early = []
    try:
        early.append(await events.__anext__())  # a refused run (bad request, busy model) is an error with its status
        shape_first(shape, early[-1])
        # A run refuses a constraint no text of the span's length meets before its first pass, but
        # a loop may show its untouched canvas first (the block-causal kinds' step 0): a
        # constrained stream begins after that frame, so the refusal is a status too, not a
        # stream's last event. Other streams begin at once.
        while plan.stream and constrained(plan.edit) and isinstance(early[-1], Progress) and early[-1].step == 0:
            early.append(await events.__anext__())
            shape_first(shape, early[-1])
    except SharpenError as exc:
        watcher.cancel()
        raise HTTPError(status_of(exc), str(exc), retry_after(exc)) from None
    except BaseException:
        watcher.cancel()
        raise
    first = early[0]
    if plan.stream:
        body = _stream(server, shape, early, events, watcher)
        return StreamingResponse(body, media_type="text/event-stream", headers=SSE_HEADERS)
    try:
        event = first
        while not isinstance(event, (Done, Stopped)):
            shape_first(shape, event)
            event = await events.__anext__()
    except SharpenError as exc:
        raise HTTPError(status_of(exc), str(exc), retry_after(exc)) from None
    finally:
        watcher.cancel()
        await events.aclose()
    if isinstance(event, Done):
        server.metrics.finished(event.result.tokens, event.result.steps, shape.timing.seconds())
        return JSONResponse(shape.whole(event))
    server.metrics.stopped()
    if event.reason == "cancelled":
        raise HTTPError(499, "the client closed the request")
    if own:
        return JSONResponse(shape.whole_cut(event))
    raise HTTPError(504, too_long(server))


def constrained(edit) -> bool:
    return any(getattr(span, "constraint", None) is not None for span in edit.spans)


def shape_first(shape: Shape, event) -> None:
    if isinstance(event, Progress) and shape.timing.first is None:
        shape.timing.first = shape.timing.seconds()


async def _stream(server: Server, shape: Shape, early: list, events, watcher):
    """The stream's bytes: each step's chunks (from the events already read, `early`, on), then
    the final ones, a cut's or an error's; then [DONE] where the shape has one. A client that
    leaves closes this generator: the run stops."""
    pending = deque(early)
    event, ended = pending.popleft(), False
    try:
        async with aclosing(events):
            while True:
                shape_first(shape, event)
                if isinstance(event, Progress):
                    chunks = shape.step(event)
                elif isinstance(event, Done):
                    server.metrics.finished(event.result.tokens, event.result.steps, shape.timing.seconds())
                    chunks, ended = shape.final(event), True
                elif isinstance(event, Stopped):
                    chunks, ended = shape.cut(event, server), True
                else:  # Failed
                    chunks, ended = [shape.error(event.status, event.message)], True
                for chunk in chunks:
                    yield sse(chunk)
                if ended:
                    break
                try:
                    event = pending.popleft() if pending else await events.__anext__()
                except SharpenError as exc:  # the stream has begun: the error becomes its last event
                    event = Failed(status_of(exc), str(exc))
                except Exception as exc:
                    log.exception("a streamed run failed")
                    event = Failed(500, f"internal error: {type(exc).__name__}")
        if shape.done_marker:
            yield sse("[DONE]")
    finally:
        if not isinstance(event, Done):  # the time ran out, the run failed, or the client left mid-stream
            server.metrics.stopped()
        watcher.cancel()


def _streamed_now(shape: Shape, done) -> StreamingResponse:
    """A stream of an answer that needed no run (a warm-up): its final chunks, at once."""

    async def body():
        for chunk in shape.final(done):
            yield sse(chunk)
        if shape.done_marker:
            yield sse("[DONE]")

    return StreamingResponse(body(), media_type="text/event-stream", headers=SSE_HEADERS)


def retry_after(exc: SharpenError) -> dict:
    from ...core.run import Busy

    return {"Retry-After": "1"} if isinstance(exc, Busy) else {}


def committed_text(progress: Progress, text: str, at: int) -> str:
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
