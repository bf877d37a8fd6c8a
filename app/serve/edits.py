"""sharpen's own POST /v1/edits: several spans of one text, each infill or rewrite (with an
instruction and a strength), denoised together in one canvas.

The body is core.request.EditRequest's JSON (`text`, `spans`, `sampling`, `editing`, `path`)
plus `stream`. Without it the answer is core.run.Done's JSON: the change set (which ranges of
the text become which text), each span's text and alternatives, steps, tokens, time. With it,
server-sent events: one core.run.Progress JSON per denoising step (each span's draft and every
slot's state), then the Done JSON, then [DONE]; a client draws exactly what a local run draws
(app/remote.py does).
"""
from __future__ import annotations

from contextlib import aclosing

from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse

from ...core.errors import SharpenError
from ...core.request import EditRequest
from .common import SSE_HEADERS, HTTPError, error_body, read_json, server_of, sse
from .bridge import Failed
from .runs import open_stream, run_to_end


def edit_of(server, body: dict) -> EditRequest:
    """The request in the body, over the server's default settings; the server's bounds apply."""
    body = {k: v for k, v in body.items() if k != "stream"}
    try:
        edit = EditRequest.from_json(body, server.sampling, server.editing)
    except SharpenError as exc:
        raise HTTPError(400, str(exc)) from None
    for span in edit.spans:
        if span.max_tokens is not None and span.max_tokens > server.max_tokens:
            raise HTTPError(400, f"span {span.name}: max_tokens is too large ({span.max_tokens}; this server takes at most {server.max_tokens})")
    if edit.sampling.samples > 8:
        raise HTTPError(400, "sampling.samples is too large for this server (at most 8)")
    return edit


async def edits(request: Request):
    server = server_of(request)
    body = await read_json(request)
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise HTTPError(400, "stream must be true or false")
    edit = edit_of(server, body)
    if stream:
        events = await open_stream(request, server, edit)
        return StreamingResponse(_stream(events, server), media_type="text/event-stream", headers=SSE_HEADERS)
    outcome = await run_to_end(request, server, edit)
    if outcome.done is None:
        if outcome.stopped.reason == "deadline":
            raise HTTPError(504, f"the run took longer than this server allows ({server.limits.seconds:g} s)")
        raise HTTPError(499, "the client closed the request")
    return JSONResponse(outcome.done.to_json())


async def _stream(events, server):
    from ...core.run import Done, Progress

    async with aclosing(events):
        async for event in events:
            if isinstance(event, (Progress, Done)):
                yield sse(event.to_json())
                if isinstance(event, Done):
                    yield sse("[DONE]")
                    return
            elif isinstance(event, Failed):  # the run failed after the stream began
                yield sse(error_body(event.status, event.message))
                return
            else:  # Stopped by the server's time limit
                yield sse({"type": "error", "error": {"message": f"the run took longer than this server allows ({server.limits.seconds:g} s)", "code": 504}})
                return
