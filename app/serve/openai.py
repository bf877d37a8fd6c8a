"""OpenAI-style endpoints: /v1/completions, /v1/fim/completions, /v1/chat/completions, /v1/models.

- /v1/completions: `prompt` + `suffix` fills the middle; a prompt already formatted for
  fill-in-the-middle (Zed's OpenAI-compatible edit prediction: `<|fim_prefix|>P<|fim_suffix|>S
  <|fim_middle|>` for Qwen tokenizers, StarCoder's `<fim_prefix>`, CodeLlama's `<PRE>`,
  Codestral's `[SUFFIX]S[PREFIX]P`) is split back into prefix and suffix; a bare prompt is
  continued.
- /v1/fim/completions: Inception's Mercury FIM (`prompt`, `suffix`, `max_tokens`, `stop`, `stream`).
- /v1/chat/completions: the conversation through the model's own chat template (400 when it
  has none); the answer's slots follow the assistant's turn.
- `diffusing: true` with `stream: true` (Mercury): one chunk per denoising step, each carrying
  the whole current draft, which replaces the previous one. Without `diffusing` a stream carries
  the text committed from the left as it settles, in OpenAI's delta form.
- OpenAI's `echo` (completions) and `stream_options.include_usage` are honoured; a field asking
  for what these runs do not do (logprobs, penalties, logit bias, best_of, tools, a response
  format) is a 400 naming it when it asks anything: clients often send the defaults, and those
  pass.
"""
from __future__ import annotations

import time
import uuid
from contextlib import aclosing

from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse

from .common import (SSE_HEADERS, HTTPError, cut_at_stop, error_body, field_of, point_request, prompt_of, read_json, sampling_of, server_of, split_fim,
                     sse, stop_strings, token_budget)
from .bridge import Failed
from .runs import committed_text, open_stream, run_to_end

DEFAULT_MAX_TOKENS = 16  # OpenAI's default for completions
MAX_MESSAGES = 256

# OpenAI fields for what a run here does not do: (the values that ask nothing, why it is refused).
# Refused rather than ignored, so that no client takes an answer for one that honoured them.
_UNSUPPORTED = {
    "logprobs": ((None, False, 0), "sharpen returns no log probabilities"),
    "top_logprobs": ((None, 0), "sharpen returns no log probabilities"),
    "presence_penalty": ((None, 0), "sharpen applies no presence penalty (its sampling: temperature, top_k, top_p, seed, steps)"),
    "frequency_penalty": ((None, 0), "sharpen applies no frequency penalty (its sampling: temperature, top_k, top_p, seed, steps)"),
    "logit_bias": ((None, {}), "sharpen applies no logit bias"),
    "best_of": ((None, 1), "best_of must be 1 (ask for alternatives with /v1/edits and sampling.samples)"),
    "tools": ((None, []), "sharpen calls no tools"),
    "functions": ((None, []), "sharpen calls no functions"),
    "response_format": ((None, {"type": "text"}), "sharpen answers plain text only (response_format type text)"),
}

async def completions(request: Request):
    return await _text_completion(request, fim_only=False)


async def fim_completions(request: Request):
    return await _text_completion(request, fim_only=True)


async def _text_completion(request: Request, fim_only: bool):
    server = server_of(request)
    body = await read_json(request)
    prompt = prompt_of(body)
    suffix = field_of(body, "suffix", str, None)
    _refuse_unsupported(body)
    echo = prompt if field_of(body, "echo", bool, False) else ""
    if suffix is None and not fim_only and (parts := split_fim(prompt)) is not None:
        prefix, suffix = parts
    else:
        prefix, suffix = prompt, suffix or ""
    # -1: llama.cpp's "no limit" (llama.vscode sends it), the server's own bound
    tokens = token_budget(server, body, "max_tokens", "max_completion_tokens", default=DEFAULT_MAX_TOKENS, endless=-1)
    edit = point_request(server, prefix, suffix, tokens, sampling_of(server, body))
    shape = _Shape("text_completion", server.info.name, chat=False, echo=echo)
    return await _answer(request, server, body, edit, shape)


async def chat_completions(request: Request):
    server = server_of(request)
    body = await read_json(request)
    messages = _messages(body)
    _refuse_unsupported(body)
    tokens = token_budget(server, body, "max_tokens", "max_completion_tokens", "n_predict", default=server.max_tokens, endless=-1)
    prompt = server.chat_prompt(messages, tokens)
    edit = point_request(server, prompt, "", tokens, sampling_of(server, body))
    shape = _Shape("chat.completion", server.info.name, chat=True)
    return await _answer(request, server, body, edit, shape)


async def models(request: Request):
    return JSONResponse({"object": "list", "data": [_model(server_of(request))]})


async def model(request: Request):
    """OpenAI's retrieve: GET /v1/models/{model} (the openai package's models.retrieve)."""
    server, name = server_of(request), request.path_params["model"]
    if name != server.info.name:
        raise HTTPError(404, f"no model {name} here (this server serves {server.info.name})")
    return JSONResponse(_model(server))


def _model(server) -> dict:
    info = server.info
    return {"id": info.name, "object": "model", "created": int(server.started), "owned_by": "sharpen", "meta": info.to_json()}


def _refuse_unsupported(body: dict) -> None:
    """One answer, asking nothing this server does not do (see _UNSUPPORTED)."""
    n = field_of(body, "n", int, 1)
    if n != 1:
        raise HTTPError(400, "n must be 1 (ask for alternatives with /v1/edits and sampling.samples)")
    for name, (nothing, why) in _UNSUPPORTED.items():
        value = body.get(name)
        # == with bools kept apart: False == 0 in Python, but best_of: true is not best_of: 1
        if not any(value == off and isinstance(value, bool) == isinstance(off, bool) for off in nothing):
            raise HTTPError(400, why if why.startswith(name) else f"{name}: {why}")


def _include_usage(body: dict) -> bool:
    """OpenAI's stream_options.include_usage: a last chunk carries the usage."""
    options = field_of(body, "stream_options", dict, {})
    return field_of(options, "include_usage", bool, False, where="stream_options.")


def _messages(body: dict) -> list[dict]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise HTTPError(400, "messages must be a non-empty list")
    if len(messages) > MAX_MESSAGES:
        raise HTTPError(400, f"too many messages ({len(messages)}; at most {MAX_MESSAGES})")
    out = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise HTTPError(400, f"messages[{i}] must be an object with a role")
        content = message.get("content", "")
        if isinstance(content, list):  # OpenAI's content parts: the text ones, joined
            if not all(isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str) for p in content):
                raise HTTPError(400, f"messages[{i}].content: only text parts are supported")
            content = "".join(p["text"] for p in content)
        if not isinstance(content, str):
            raise HTTPError(400, f"messages[{i}].content must be a string")
        out.append({"role": message["role"], "content": content})
    return out


class _Shape:
    """How a completion is worded: text completions carry `text`, chat ones a message or a delta.
    `echo`: the prompt, put before the text (OpenAI's echo); `usage`: a stream's chunks carry a
    usage field and a last chunk the counts (stream_options.include_usage)."""

    def __init__(self, kind: str, model: str, chat: bool, echo: str = "", usage: bool = False) -> None:
        self.kind, self.model, self.chat, self.echo, self.usage = kind, model, chat, echo, usage
        self.id = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex[:24]
        self.created = int(time.time())

    def whole(self, text: str, finish: str, usage: dict) -> dict:
        choice = {"index": 0, "finish_reason": finish, "logprobs": None}
        text = self.echo + text
        choice.update({"message": {"role": "assistant", "content": text}} if self.chat else {"text": text})
        return {"id": self.id, "object": self.kind, "created": self.created, "model": self.model, "choices": [choice], "usage": usage}

    def chunk(self, text: str, finish: str | None = None, first: bool = False) -> dict:
        choice = {"index": 0, "finish_reason": finish, "logprobs": None}
        if self.chat:
            choice["delta"] = {"role": "assistant", "content": text} if first else {"content": text}
        else:
            choice["text"] = text
        return self._chunk([choice], None)

    def usage_chunk(self, usage: dict) -> dict:
        return self._chunk([], usage)

    def _chunk(self, choices: list, usage: dict | None) -> dict:
        kind = "chat.completion.chunk" if self.chat else "text_completion"
        chunk = {"id": self.id, "object": kind, "created": self.created, "model": self.model, "choices": choices}
        if self.usage:
            chunk["usage"] = usage
        return chunk


def _finish(result, max_tokens: int, word: str | None) -> str:
    # "length": every slot held content (the span may have wanted more); else the model ended it.
    return "stop" if word is not None or result.spans[0].tokens < max_tokens else "length"


def _usage(server, edit, result) -> dict:
    prompt = result.prompt_tokens if result is not None else server.estimate_context(edit)[0]
    completion = result.tokens if result is not None else 0
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


async def _answer(request, server, body, edit, shape: _Shape):
    stops = stop_strings(body)
    max_tokens = edit.spans[0].max_tokens
    if field_of(body, "stream", bool, False):
        diffusing = field_of(body, "diffusing", bool, False)
        shape.usage = _include_usage(body)
        events = await open_stream(request, server, edit)
        return StreamingResponse(_stream(server, events, edit, shape, stops, diffusing, max_tokens), media_type="text/event-stream", headers=SSE_HEADERS)
    outcome = await run_to_end(request, server, edit)
    if outcome.done is None:
        if outcome.stopped.reason == "deadline":
            raise HTTPError(504, f"the run took longer than this server allows ({server.limits.seconds:g} s)")
        raise HTTPError(499, "the client closed the request")
    result = outcome.done.result
    text, word = cut_at_stop(result.spans[0].text, stops)
    return JSONResponse(shape.whole(text, _finish(result, max_tokens, word), _usage(server, edit, result)))


async def _stream(server, events, edit, shape: _Shape, stops, diffusing: bool, max_tokens: int):
    from ...core.run import Done, Progress

    at = edit.spans[0].start
    sent, first = "", True

    def delta(text: str, finish: str | None = None) -> bytes:
        # Committed text as OpenAI deltas; echo goes before the first one.
        nonlocal first
        chunk = shape.chunk((shape.echo if first else "") + text, finish, first=first)
        first = False
        return sse(chunk)

    def draft(text: str, finish: str | None = None) -> bytes:
        # Mercury's diffusing chunks: each the whole current draft, replacing the last one.
        nonlocal first
        chunk = shape.chunk(shape.echo + cut_at_stop(text, stops)[0], finish, first=first)
        first = False
        return sse(chunk)

    def end(result) -> list[bytes]:
        tail = [sse(shape.usage_chunk(_usage(server, edit, result)))] if shape.usage else []
        return tail + [sse("[DONE]")]

    committed = ""  # the draft's text settled from the left: what a run cut by time answers
    async with aclosing(events):
        async for event in events:
            if isinstance(event, Progress):
                committed = now = cut_at_stop(committed_text(event, edit.text, at), stops)[0]
                if diffusing:
                    yield draft(event.spans[0].text)
                    continue
                if now.startswith(sent) and len(now) > len(sent):
                    yield delta(now[len(sent):])
                    sent = now
            elif isinstance(event, Done):
                text, word = cut_at_stop(event.result.spans[0].text, stops)
                finish = _finish(event.result, max_tokens, word)
                yield draft(text, finish) if diffusing else delta(text[len(sent):] if text.startswith(sent) else "", finish)
                for line in end(event.result):
                    yield line
                return
            elif isinstance(event, Failed):  # the run failed after the stream began
                yield sse(error_body(event.status, event.message))
                return
            else:  # Stopped by the server's time limit: end as OpenAI ends a cut stream, with what was committed
                # (a diffusing client replaces its draft with each chunk: it gets the committed text, not nothing)
                yield draft(committed, "length") if diffusing else delta(committed[len(sent):] if committed.startswith(sent) else "", "length")
                for line in end(None):
                    yield line
                return
