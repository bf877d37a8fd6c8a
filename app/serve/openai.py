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
"""
from __future__ import annotations

import re
import time
import uuid
from contextlib import aclosing

from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse

from .common import SSE_HEADERS, HTTPError, error_body, cut_at_stop, field_of, point_request, read_json, sampling_of, server_of, sse, stop_strings, token_budget
from .bridge import Failed
from .runs import committed_text, open_stream, run_to_end

DEFAULT_MAX_TOKENS = 16  # OpenAI's default for completions
MAX_MESSAGES = 256

# Fill-in-the-middle prompt formats a client may send already formatted: (pattern, prefix group, suffix group).
_FIM_FORMATS = (
    re.compile(r"^(?P<pre>.*?)<\|fim_prefix\|>(?P<p>.*)<\|fim_suffix\|>(?P<s>.*)<\|fim_middle\|>$", re.S),  # Qwen2.5-Coder, Zed
    re.compile(r"^(?P<pre>.*?)<fim_prefix>(?P<p>.*)<fim_suffix>(?P<s>.*)<fim_middle>$", re.S),  # StarCoder
    re.compile(r"^(?P<pre>.*?)<PRE> (?P<p>.*) <SUF>(?P<s>.*) <MID>$", re.S),  # CodeLlama
    re.compile(r"^(?P<pre>.*?)\[SUFFIX\](?P<s>.*)\[PREFIX\](?P<p>.*)$", re.S),  # Codestral (suffix first)
)
_CONTEXT_MARKERS = re.compile(r"<\|(?:repo_name|file_sep|fim_pad|endoftext)\|>")


def split_fim(prompt: str) -> tuple[str, str] | None:
    """(prefix, suffix) of a pre-formatted FIM prompt, or None when it is not one."""
    for pattern in _FIM_FORMATS:
        match = pattern.match(prompt)
        if match:
            context = _CONTEXT_MARKERS.sub("", match.group("pre"))  # repository context before the file: kept as text
            return context + match.group("p"), match.group("s")
    return None


async def completions(request: Request):
    return await _text_completion(request, fim_only=False)


async def fim_completions(request: Request):
    return await _text_completion(request, fim_only=True)


async def _text_completion(request: Request, fim_only: bool):
    server = server_of(request)
    body = await read_json(request)
    prompt = body.get("prompt", "")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]  # OpenAI allows a list of prompts; one is what an editor sends
    if not isinstance(prompt, str):
        raise HTTPError(400, "prompt must be a string (one prompt per request)")
    suffix = field_of(body, "suffix", str, None)
    _one_choice(body)
    if suffix is None and not fim_only and (parts := split_fim(prompt)) is not None:
        prefix, suffix = parts
    else:
        prefix, suffix = prompt, suffix or ""
    tokens = token_budget(server, body, "max_tokens", "max_completion_tokens", default=DEFAULT_MAX_TOKENS)
    edit = point_request(server, prefix, suffix, tokens, sampling_of(server, body))
    shape = _Shape("text_completion", server.info.name, chat=False)
    return await _answer(request, server, body, edit, shape)


async def chat_completions(request: Request):
    server = server_of(request)
    body = await read_json(request)
    messages = _messages(body)
    _one_choice(body)
    prompt = server.chat_prompt(messages)
    tokens = token_budget(server, body, "max_tokens", "max_completion_tokens", "n_predict", default=server.max_tokens)
    edit = point_request(server, prompt, "", tokens, sampling_of(server, body))
    shape = _Shape("chat.completion", server.info.name, chat=True)
    return await _answer(request, server, body, edit, shape)


async def models(request: Request):
    server = server_of(request)
    info = server.info
    return JSONResponse({"object": "list", "data": [
        {"id": info.name, "object": "model", "created": int(server.started), "owned_by": "sharpen", "meta": info.to_json()}]})


def _one_choice(body: dict) -> None:
    n = field_of(body, "n", int, 1)
    if n != 1:
        raise HTTPError(400, "n must be 1 (ask for alternatives with /v1/edits and sampling.samples)")


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
    """How a completion is worded: text completions carry `text`, chat ones a message or a delta."""

    def __init__(self, kind: str, model: str, chat: bool) -> None:
        self.kind, self.model, self.chat = kind, model, chat
        self.id = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex[:24]
        self.created = int(time.time())

    def whole(self, text: str, finish: str, usage: dict) -> dict:
        choice = {"index": 0, "finish_reason": finish, "logprobs": None}
        choice.update({"message": {"role": "assistant", "content": text}} if self.chat else {"text": text})
        return {"id": self.id, "object": self.kind, "created": self.created, "model": self.model, "choices": [choice], "usage": usage}

    def chunk(self, text: str, finish: str | None = None, first: bool = False) -> dict:
        choice = {"index": 0, "finish_reason": finish, "logprobs": None}
        if self.chat:
            choice["delta"] = {"role": "assistant", "content": text} if first else {"content": text}
        else:
            choice["text"] = text
        kind = "chat.completion.chunk" if self.chat else "text_completion"
        return {"id": self.id, "object": kind, "created": self.created, "model": self.model, "choices": [choice]}


def _finish(result, max_tokens: int, word: str | None) -> str:
    # "length": every slot held content (the span may have wanted more); else the model ended it.
    return "stop" if word is not None or result.spans[0].tokens < max_tokens else "length"


def _usage(server, edit, result) -> dict:
    prompt = result.prompt_tokens if result is not None else server.context_tokens(edit)
    completion = result.tokens if result is not None else 0
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


async def _answer(request, server, body, edit, shape: _Shape):
    stops = stop_strings(body)
    max_tokens = edit.spans[0].max_tokens
    if field_of(body, "stream", bool, False):
        diffusing = field_of(body, "diffusing", bool, False)
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
    async with aclosing(events):
        async for event in events:
            if isinstance(event, Progress):
                if diffusing:  # Mercury: the whole current draft, replacing the last one
                    yield sse(shape.chunk(cut_at_stop(event.spans[0].text, stops)[0], first=first))
                    first = False
                    continue
                now = cut_at_stop(committed_text(event, edit.text, at), stops)[0]
                if now.startswith(sent) and len(now) > len(sent):
                    yield sse(shape.chunk(now[len(sent):], first=first))
                    sent, first = now, False
            elif isinstance(event, Done):
                text, word = cut_at_stop(event.result.spans[0].text, stops)
                finish = _finish(event.result, max_tokens, word)
                if diffusing:
                    yield sse(shape.chunk(text, finish, first=first))
                else:
                    yield sse(shape.chunk(text[len(sent):] if text.startswith(sent) else "", finish, first=first))
                yield sse("[DONE]")
                return
            elif isinstance(event, Failed):  # the run failed after the stream began
                yield sse(error_body(event.status, event.message))
                return
            else:  # Stopped by the server's time limit: end the stream as OpenAI ends a cut one
                yield sse(shape.chunk("", "length", first=first))
                yield sse("[DONE]")
                return
