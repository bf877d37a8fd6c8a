"""Next-edit endpoints: Mercury's POST /v1/edit/completions, and the Zeta 1 / 2 / 2.1 and Sweep
prompts that Zed's OpenAI-compatible edit-prediction provider (and cursortab.nvim) send to
/v1/completions, each answered in its own format (core/next_edit/formats/).

- /v1/edit/completions: an OpenAI chat body whose last user message is the Mercury tag prompt
  (`<|current_file_content|>` ... `<|code_to_edit|>` with `<|cursor|>`). The answer is a chat
  completion whose content is the rewritten region in a ``` fence, or `None` for no prediction.
  `stream` with `diffusing` sends one chunk per denoising step, each the whole current draft
  (which replaces the last); `stream` alone sends the answer in one chunk.
- /v1/completions: `completions_or(fallback)` wraps the route's handler: a prompt that
  detect_format reads as zeta1, zeta2, zeta21 or sweep is predicted here and answered as that model
  would (the client's `stop` strings cut it, as any OpenAI server does); every other body goes
  to the fallback untouched (its bytes replayed).

The prediction runs on a worker thread (bridge.start_run) through core.next_edit.predict; a
client that leaves stops it within a step.
"""
from __future__ import annotations

import time
import uuid
from contextlib import aclosing

from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse

from ...core.errors import SharpenError
from ...core.next_edit.formats import FormatError, detect_format, format_of
from ...core.next_edit.predict import NextEditDone, NextEditDraft, predict, window_after
from .bridge import Stopped, cancel_on_disconnect, start_run
from .common import SSE_HEADERS, HTTPError, read_body, cut_at_stop, error_body, field_of, prompt_of, sampling_of, server_of, sse, stop_strings, status_of

NEXT_EDIT_FORMATS = ("zeta1", "zeta2", "zeta21", "sweep")  # what /v1/completions answers as a next edit


class _Predicting:
    """A backend whose runs are next-edit predictions (bridge.start_run drives it on a thread)."""

    def __init__(self, server) -> None:
        self.backend, self.instruct = server.backend, server.info.instruct

    def run(self, request, should_stop, every):
        return predict(self.backend, request, self.instruct, should_stop, every)


class _Replay:
    """A receive channel that hands the body already read, then the client's own messages."""

    def __init__(self, raw: bytes, receive) -> None:
        self.raw, self.receive, self.sent = raw, receive, False

    async def __call__(self):
        if not self.sent:
            self.sent = True
            return {"type": "http.request", "body": self.raw, "more_body": False}
        return await self.receive()


def _json(raw: bytes) -> dict | None:
    import json

    try:
        data = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError):  # not JSON, not UTF-8, a number past Python's digit limit:
        return None  # not a next-edit prompt; the endpoint's own reader answers it with its 400
    return data if isinstance(data, dict) else None


def completions_or(fallback):
    """/v1/completions: next-edit prompts answered here, every other body by `fallback`."""

    async def completions(request: Request):
        raw = await read_body(request)
        body = _json(raw)
        prompt = body.get("prompt") if body else None
        if isinstance(prompt, list) and len(prompt) == 1:
            prompt = prompt[0]
        name = detect_format(prompt) if isinstance(prompt, str) and body.get("suffix") is None else None
        if name not in NEXT_EDIT_FORMATS:
            return await fallback(Request(request.scope, _Replay(raw, request.receive)))
        return await _answer(request, body, prompt_of(body), name, chat=False)

    return completions


async def edit_completions(request: Request):
    """Mercury's POST /v1/edit/completions."""
    from .common import read_json

    body = await read_json(request)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise HTTPError(400, "messages must be a non-empty list (the next-edit prompt in a user message)")
    users = [m for m in messages if isinstance(m, dict) and m.get("role") == "user"]
    content = users[-1].get("content") if users else None
    if isinstance(content, list):  # OpenAI content parts: the text ones
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    if not isinstance(content, str):
        raise HTTPError(400, "the last user message must hold the next-edit prompt as text")
    return await _answer(request, body, content, "mercury", chat=True)


async def _answer(request: Request, body: dict, prompt: str, name: str, chat: bool):
    server = server_of(request)
    fmt = format_of(name)
    try:
        parts = fmt.parse_prompt(prompt)
        edit = parts.request(sampling=sampling_of(server, body), editing=server.editing)
    except FormatError as exc:
        raise HTTPError(400, f"{name} prompt: {exc}") from None
    except SharpenError as exc:
        raise HTTPError(400, str(exc)) from None
    window = edit.windows[0]
    old = edit.text[window.start:window.end]
    stops = stop_strings(body)

    def render(answer) -> str:
        new = window_after(edit, answer, window)
        extra = {"prefill": parts.prefill, "layout": parts.layout} if name == "sweep" else {}
        return cut_at_stop(fmt.render_answer(old, new, parts.cursor, **extra), stops)[0]

    shape = _Shape(chat, server.info.name)
    handle = start_run(_Predicting(server), edit, every=0.0 if field_of(body, "stream", bool, False) else None,
                       seconds=server.limits.seconds)
    watcher = None
    if not field_of(body, "stream", bool, False):
        import asyncio

        watcher = asyncio.create_task(cancel_on_disconnect(request, handle))
        try:
            async for event in handle.events():
                if isinstance(event, NextEditDone):
                    return JSONResponse(shape.whole(render(event.answer), _usage(event)))
                if isinstance(event, Stopped):
                    raise HTTPError(504 if event.reason == "deadline" else 499, "the next-edit prediction did not finish")
        except SharpenError as exc:
            raise HTTPError(status_of(exc), str(exc)) from None
        finally:
            watcher.cancel()
            handle.cancel()
        raise HTTPError(500, "the prediction ended without an answer")
    diffusing = field_of(body, "diffusing", bool, False)
    return StreamingResponse(_stream(handle, shape, render, diffusing), media_type="text/event-stream", headers=SSE_HEADERS)


async def _stream(handle, shape, render, diffusing: bool):
    events = handle.events()
    try:
        async with aclosing(events):
            async for event in events:
                if isinstance(event, NextEditDraft) and diffusing:
                    yield sse(shape.chunk(render(event.answer), None))
                elif isinstance(event, NextEditDone):
                    yield sse(shape.chunk(render(event.answer), "stop"))
                    yield sse("[DONE]")
                    return
                elif isinstance(event, Stopped):
                    yield sse(error_body(504, "the next-edit prediction did not finish in time"))
                    return
    except SharpenError as exc:
        yield sse(error_body(status_of(exc), str(exc)))
    finally:
        handle.cancel()


def _usage(done: NextEditDone) -> dict:
    return {"prompt_tokens": done.prompt_tokens, "completion_tokens": done.tokens, "total_tokens": done.prompt_tokens + done.tokens}


class _Shape:
    """A chat completion (Mercury) or a text completion (Zeta, Sweep), whole or as chunks."""

    def __init__(self, chat: bool, model: str) -> None:
        self.chat, self.model = chat, model
        self.id = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex[:24]
        self.created = int(time.time())

    def whole(self, text: str, usage: dict) -> dict:
        choice = {"index": 0, "finish_reason": "stop", "logprobs": None}
        choice.update({"message": {"role": "assistant", "content": text}} if self.chat else {"text": text})
        kind = "chat.completion" if self.chat else "text_completion"
        return {"id": self.id, "object": kind, "created": self.created, "model": self.model, "choices": [choice], "usage": usage}

    def chunk(self, text: str, finish: str | None) -> dict:
        choice = {"index": 0, "finish_reason": finish, "logprobs": None}
        choice.update({"delta": {"role": "assistant", "content": text}} if self.chat else {"text": text})
        kind = "chat.completion.chunk" if self.chat else "text_completion"
        return {"id": self.id, "object": kind, "created": self.created, "model": self.model, "choices": [choice]}
