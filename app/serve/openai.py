"""OpenAI-style endpoints: /v1/completions, /v1/fim/completions, /v1/chat/completions, /v1/models.

- /v1/completions: `prompt` + `suffix` fills the middle; a prompt already formatted for
  fill-in-the-middle (Zed's OpenAI-compatible edit prediction: `<|fim_prefix|>P<|fim_suffix|>S
  <|fim_middle|>` for Qwen tokenizers, StarCoder's `<fim_prefix>`, CodeLlama's `<PRE>`,
  Codestral's `[SUFFIX]S[PREFIX]P`, DeepSeek-Coder's `<｜fim▁begin｜>`, GLM's `<|code_prefix|>`)
  is split back into prefix and suffix; a bare prompt is continued.
- max_tokens above the server's bound (Continue's 4096, Mercury's 1000) is clamped to it and the
  answer's finish_reason is "length"; 0 generates nothing; only negative or non-whole is a 400.
- /v1/fim/completions: Inception's Mercury FIM (`prompt`, `suffix`, `max_tokens`, `stop`, `stream`).
- /v1/chat/completions: the conversation through the model's own chat template (400 when it
  has none); the answer's slots follow the assistant's turn.
- `diffusing: true` with `stream: true` (Mercury): one chunk per denoising step, each carrying
  the whole current draft, which replaces the previous one. Without `diffusing` a stream carries
  the text committed from the left as it settles, in OpenAI's delta form.
- OpenAI's `echo` (completions) and `stream_options.include_usage` are honoured; a field asking
  for what these runs do not do (logprobs, penalties, logit bias, best_of, tools) is a 400 naming
  it when it asks anything: clients often send the defaults, and those pass.
- `response_format` (json_object, json_schema) and vLLM's / SGLang's `regex`, `json_schema`,
  `ebnf` steer every denoising step (common.constraint_of; docs/constraints.md).
- A stream without `diffusing` never sends the end of the committed text that may yet become a
  stop string (common.sendable); `diffusing` drafts are whole drafts, each replaced by the next,
  cut at a whole stop string only.
"""
from __future__ import annotations

import time
import uuid

from starlette.requests import Request
from starlette.responses import JSONResponse

from .common import (HTTPError, constraint_of, cut_at_stop, field_of, point_request, prompt_of, sampling_of, sendable, server_of,
                     split_fim, stop_strings, token_budget)
from .respond import Plan, Shape, committed_text

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
}

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


class _Completion(Shape):
    """How an OpenAI-style completion is worded: text completions carry `text`, chat ones a message
    or a delta. `echo`: the prompt, put before the text (OpenAI's echo); `usage`: a stream's chunks
    carry a usage field and a last chunk the counts (stream_options.include_usage); `diffusing`
    (Mercury): each streamed chunk is the whole current draft, else the text newly committed from
    the left. `clamped`: max_tokens asked more than the server's bound: the answer's
    finish_reason is "length" whatever the model did, since the client asked for more."""

    kind, chat = "text_completion", False

    def __init__(self, server, body: dict, before: str, suffix: str, tokens: int, clamped: bool, echo: str = "") -> None:
        self.server, self.text, self.at = server, before + suffix, len(before)
        self.model, self.echo, self.max_tokens, self.clamped = server.info.name, echo, tokens, clamped
        self.stops = stop_strings(body)
        self.diffusing = field_of(body, "diffusing", bool, False)
        self.usage = _include_usage(body)
        self.id = ("chatcmpl-" if self.chat else "cmpl-") + uuid.uuid4().hex[:24]
        self.created = int(time.time())
        self.sent, self.committed, self.first = "", "", True

    @classmethod
    def planned(cls, server, body: dict, before: str, suffix: str, tokens: int, clamped: bool, echo: str = "") -> Plan:
        shape = cls(server, body, before, suffix, tokens, clamped, echo)
        stream = field_of(body, "stream", bool, False)
        constraint = constraint_of(body)  # response_format, regex, json_schema, ebnf: steered at every step
        if tokens == 0:  # max_tokens 0: nothing to generate, nothing runs (the prompt is still counted)
            return Plan(None, shape, stream)
        return Plan(point_request(server, before, suffix, tokens, sampling_of(server, body), constraint), shape, stream)

    # -- the whole answer ---------------------------------------------------------------------

    def whole(self, done) -> dict:
        text, finish = self._text(done)
        choice = {"index": 0, "finish_reason": finish, "logprobs": None}
        text = self.echo + text
        choice.update({"message": {"role": "assistant", "content": text}} if self.chat else {"text": text})
        return {"id": self.id, "object": self.kind, "created": self.created, "model": self.model, "choices": [choice], "usage": self._counts(done)}

    # -- a stream -------------------------------------------------------------------------------

    def step(self, progress) -> list:
        committed = committed_text(progress, self.text, self.at)
        self.committed = cut_at_stop(committed, self.stops)[0]  # what a cut stream ends with
        if self.diffusing:  # the whole draft, replaced by the next: nothing held back (docs/server.md)
            return [self._draft(progress.spans[0].text)]
        now = sendable(committed, self.stops)  # never the part of a stop string that settled first
        if now.startswith(self.sent) and len(now) > len(self.sent):
            chunk = self._delta(now[len(self.sent):])
            self.sent = now
            return [chunk]
        return []

    def final(self, done) -> list:
        text, finish = self._text(done)
        last = self._draft(text, finish) if self.diffusing else self._delta(text[len(self.sent):] if text.startswith(self.sent) else "", finish)
        return [last, *self._usage_chunk(done)]

    def cut(self, stopped, server) -> list:
        """The server's time limit: end as OpenAI ends a cut stream, with what was committed (a
        diffusing client replaces its draft with each chunk: it gets the committed text, not nothing)."""
        text = self.committed
        last = self._draft(text, "length") if self.diffusing else self._delta(text[len(self.sent):] if text.startswith(self.sent) else "", "length")
        return [last, *self._usage_chunk(None)]

    # -- pieces -----------------------------------------------------------------------------------

    def _text(self, done) -> tuple[str, str]:
        """The answer's text and finish_reason: "length" when every slot held content (the span may
        have wanted more), max_tokens was clamped, or nothing was asked; else "stop"."""
        if done is None:
            return "", "length"
        text, word = cut_at_stop(done.result.spans[0].text, self.stops)
        full = done.result.spans[0].tokens >= self.max_tokens
        return text, "stop" if word is not None or not (full or self.clamped) else "length"

    def _counts(self, done) -> dict:
        result = done.result if done is not None else None
        prompt = result.prompt_tokens if result is not None else self.server.estimate_context(self.text, self.at, self.max_tokens)[0]
        completion = result.tokens if result is not None else 0
        # cached_tokens: the prompt tokens taken from the model's prefix cache (core/prefix_cache.py), as OpenAI reports its own
        cached = result.cached_tokens if result is not None else 0
        return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
                "prompt_tokens_details": {"cached_tokens": cached}}

    def _delta(self, text: str, finish: str | None = None) -> dict:
        # Committed text as OpenAI deltas; echo goes before the first one.
        return self._chunk((self.echo if self.first else "") + text, finish)

    def _draft(self, text: str, finish: str | None = None) -> dict:
        # Mercury's diffusing chunks: each the whole current draft, replacing the last one.
        return self._chunk(self.echo + cut_at_stop(text, self.stops)[0], finish)

    def _chunk(self, text: str, finish: str | None) -> dict:
        choice = {"index": 0, "finish_reason": finish, "logprobs": None}
        if self.chat:
            choice["delta"] = {"role": "assistant", "content": text} if self.first else {"content": text}
        else:
            choice["text"] = text
        self.first = False
        return self._wrap([choice], None)

    def _usage_chunk(self, done) -> list:
        return [self._wrap([], self._counts(done))] if self.usage else []

    def _wrap(self, choices: list, usage: dict | None) -> dict:
        kind = "chat.completion.chunk" if self.chat else "text_completion"
        chunk = {"id": self.id, "object": kind, "created": self.created, "model": self.model, "choices": choices}
        if self.usage:
            chunk["usage"] = usage
        return chunk


class Completions(_Completion):
    """POST /v1/completions: `prompt` + `suffix`, or a prompt formatted for fill-in-the-middle."""

    fim_only = False

    @classmethod
    def read(cls, server, body: dict) -> Plan:
        prompt = prompt_of(body)
        suffix = field_of(body, "suffix", str, None)
        _refuse_unsupported(body)
        echo = prompt if field_of(body, "echo", bool, False) else ""
        if suffix is None and not cls.fim_only and (parts := split_fim(prompt)) is not None:
            prefix, suffix = parts
        else:
            prefix, suffix = prompt, suffix or ""
        # -1: llama.cpp's "no limit" (llama.vscode sends it), the server's own bound
        tokens, clamped = token_budget(server, body, "max_tokens", "max_completion_tokens", default=DEFAULT_MAX_TOKENS, endless=-1)
        return cls.planned(server, body, prefix, suffix, tokens, clamped, echo)


class FimCompletions(Completions):
    """POST /v1/fim/completions: Inception's Mercury FIM (`prompt`, `suffix`, `max_tokens`, `stop`, `stream`)."""

    fim_only = True


class ChatCompletions(_Completion):
    """POST /v1/chat/completions: the conversation through the model's own chat template."""

    kind, chat = "chat.completion", True

    @classmethod
    def read(cls, server, body: dict) -> Plan:
        messages = _messages(body)
        _refuse_unsupported(body)
        tokens, clamped = token_budget(server, body, "max_tokens", "max_completion_tokens", "n_predict", default=server.max_tokens, endless=-1)
        prompt = server.chat_prompt(messages, tokens)
        return cls.planned(server, body, prompt, "", tokens, clamped)
