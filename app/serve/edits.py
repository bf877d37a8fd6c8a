"""sharpen's own POST /v1/edits: several spans of one text, each infill or rewrite (with an
instruction and a strength), denoised together in one canvas.

The body is core.request.EditRequest's JSON (`text`, `spans`, `sampling`, `editing`, `path`)
plus `stream`. Without it the answer is core.events.Done's JSON: the change set (which ranges of
the text become which text), each span's text and alternatives, steps, tokens, time. With it,
server-sent events: one core.events.Progress JSON per denoising step (each span's draft and every
slot's state), then the Done JSON, then [DONE]; a client draws exactly what a local run draws
(app/remote.py does). A stream that fails or runs out of time ends with `{"type": "error",
"error": {...}}` and [DONE].
"""
from __future__ import annotations

from ...core.errors import SharpenError
from ...core.request import EditRequest
from .common import HTTPError, error_body, field_of
from .respond import Plan, Shape


class Edits(Shape):
    @classmethod
    def read(cls, server, body: dict) -> Plan:
        stream = field_of(body, "stream", bool, False)
        return Plan(edit_of(server, body), cls(), stream)

    def step(self, progress) -> list:
        return [progress.to_json()]

    def final(self, done) -> list:
        return [done.to_json()]

    def whole(self, done) -> dict:
        return done.to_json()

    def error(self, status: int, message: str) -> dict:
        return {"type": "error", **error_body(status, message)}  # a frame's and a result's kin: the client reads `type`


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
