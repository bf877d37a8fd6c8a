"""A Backend on a server (--backend URL): every model command runs there instead of here.

    backend = RemoteBackend("http://127.0.0.1:8012")       # [backend] in the config file
    info = backend.load()                                   # asks /v1/models what it speaks
    for event in backend.run(request, should_stop): ...     # core.run.Progress ..., then Done

What a server sends decides what the editor can draw:
- sharpen serve (`/v1/edits`): every denoising step with each slot's state: the preview is
  exactly the local one (the same core.run JSON both ways).
- a Mercury-compatible server (`/v1/fim/completions` with `diffusing`): each chunk is a whole
  draft; each draft becomes a frame of span text (no slot states).
- any OpenAI-compatible completions server (SGLang, vLLM, llama.cpp): the final text only;
  ModelInfo.drafts is False and the editor says so.
- `chat` (chosen in [backend] backend_protocol): the span goes to /v1/chat/completions as the
  turn sharpen writes for a block-diffusion model's chat form (core/instruct.user_message: the
  task or instruction, the text with the span marked), for instruct models served where a
  completion takes no suffix (vLLM refuses one). The final text only; instructions work.
A server that takes one span per request gets one request per span, all at once, with the text
around the span cut to whole lines within about the context budget (Editing.context_tokens).

A server is untrusted: what its model writes is filtered as the local engine's output is
(core/newlines.written_text: no control characters, the document's line breaks, no stray U+FFFD),
and its whole answer is bounded in time and size (app/remote_http.py, the HTTP side). A remote
run imports no model code (no torch). The key comes from an environment variable ([backend]
backend_key_env), never from a command line. Every failure is one SharpenError line:
unreachable, refused key (401/403), rate limits (429), server errors (5xx), timeouts, a
connection cut mid-run; a request the server calls bad (400) is a UsageError. A stop between two
events closes the connection, which cancels the run there.
"""
from __future__ import annotations

import math
import queue
import threading
import time
from dataclasses import replace
from urllib.parse import urlsplit

from ..core.changes import ChangeSet
from ..core.errors import ModelError, UsageError
from ..core.newlines import written_text
from ..core.request import EditRequest
from ..core.result import EditResult, SpanResult
from ..core.run import Done, ModelInfo, Progress, SpanDraft
from .remote_http import END, Exchange, pump

NO_LIMIT = 1 << 20  # a remote model's canvas length is its own business
# Characters of context per token of the budget sent to a server whose tokenizer is not ours: code
# runs about 3-4 characters a token in the released BPE vocabularies, so 4 errs on the side of context.
CHARS_PER_TOKEN = 4
# Servers that name themselves in /v1/models' owned_by (their ModelCard defaults) and whose
# completions take no suffix (vLLM refuses one; SGLang drops it without a completion template):
# the diffusion models they serve (LLaDA2.x, SDAR, DiffusionGemma) are instruct models, so auto
# talks to them as a chat. backend_protocol = "openai" still sends completions with a suffix.
CHAT_SERVERS = ("vllm", "sglang")


class Backoff:
    """When to try reaching a server again after a failure: 1 s after the first, then twice as
    long after each (at most `most` seconds); at once after a success. Front ends try on their
    next request (app/lsp.py) or on a timer (the editor) once `due`."""

    def __init__(self, first: float = 1.0, most: float = 30.0, clock=time.monotonic) -> None:
        self.first, self.most, self.clock = first, most, clock
        self.wait = 0.0
        self.next_try = float("-inf")

    def failed(self) -> float:
        """Note a failure; the seconds until the next try."""
        self.wait = self.first if self.wait == 0 else min(self.wait * 2, self.most)
        self.next_try = self.clock() + self.wait
        return self.wait

    def succeeded(self) -> None:
        self.wait, self.next_try = 0.0, float("-inf")

    def due(self) -> bool:
        return self.clock() >= self.next_try

    def seconds_left(self) -> float:
        return max(0.0, self.next_try - self.clock())


class RemoteBackend:
    retry_load = True  # a server that is not up yet may be later: front ends try load() again (Backoff)

    def __init__(self, url: str, protocol: str = "auto", key_env: str = "SHARPEN_API_KEY", timeout: float = 30.0,
                 model: str | None = None) -> None:
        parts = urlsplit(url.rstrip("/"))
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise UsageError(f"--backend {url}: not an http:// or https:// URL")
        self.url = url
        self.scheme, self.host, self.port = parts.scheme, parts.hostname, parts.port
        base = parts.path.rstrip("/")
        self.base = base[:-3] if base.endswith("/v1") else base  # ".../v1" and "..." name the same server
        self.protocol, self.key_env, self.timeout, self.model = protocol, key_env, timeout, model
        self.info = None

    @classmethod
    def from_config(cls, remote) -> "RemoteBackend":
        """From app.config.Remote ([backend] and --backend)."""
        return cls(remote.backend, remote.backend_protocol, remote.backend_key_env, remote.backend_timeout, remote.backend_model)

    # -- Backend ----------------------------------------------------------------------------

    def load(self):
        listed = self._json("GET", "/v1/models")
        models = listed.get("data") if isinstance(listed, dict) else None
        first = models[0] if isinstance(models, list) and models and isinstance(models[0], dict) else {}
        name = self.model or str(first.get("id", "")) or self.host
        meta = first.get("meta") if isinstance(first.get("meta"), dict) else None
        protocol = self.protocol
        if protocol == "auto":
            protocol = ("sharpen" if meta is not None and "noise" in meta else "mercury" if name.lower().startswith("mercury")
                        else "chat" if first.get("owned_by") in CHAT_SERVERS else "openai")
        self.protocol = protocol
        where = f"{self.host}:{self.port}" if self.port else self.host
        if protocol == "sharpen" and meta is not None:
            max_len = meta.get("max_len")  # a server's word: a length that is not a count is no limit here
            max_len = max_len if isinstance(max_len, int) and not isinstance(max_len, bool) and max_len > 0 else NO_LIMIT
            self.info = ModelInfo(name, str(meta.get("family", "sharpen")), f"{meta.get('device', '?')} on {where}", str(meta.get("noise", "mask")),
                                  "(the server's)" if meta.get("chat") else None, max_len, True,
                                  instruct=bool(meta.get("instruct", meta.get("chat"))),  # a server from before "instruct": chat meant it
                                  edits=meta.get("edits") is True)  # its loop edits its own tokens: next edits start from the text
        elif protocol == "chat":  # an instruct model behind a chat endpoint: it takes instructions, sends no drafts
            self.info = ModelInfo(name, protocol, where, "mask", "(the server's)", NO_LIMIT, False, instruct=True)
        else:
            self.info = ModelInfo(name, protocol, where, "mask", None, NO_LIMIT, protocol == "mercury")
        return self.info

    def describe(self):
        if self.info is None:
            raise ModelError(f"the server at {self.url} has not been reached yet")
        return self.info

    def run(self, request: EditRequest, should_stop=lambda: False, every: float | None = 0.0):
        if self.info is None:
            self.load()
        if self.protocol == "sharpen":
            return self._run_sharpen(request, should_stop, every)
        if self.protocol != "chat" and any(s.instruction for s in request.spans):
            raise UsageError(f"instructions need a sharpen server or backend_protocol = \"chat\"; {self.url} speaks {self.protocol}")
        return self._run_per_span(request, should_stop, every)

    # -- sharpen serve: the run's own events --------------------------------------------------

    def _run_sharpen(self, request: EditRequest, should_stop, every):
        exchange = Exchange(self, "POST", "/v1/edits", {**request.to_json(), "stream": True}, stream=True)
        last_sent = float("-inf")
        for data in exchange.events(should_stop):
            kind = data.get("type") if isinstance(data, dict) else None
            try:
                if kind == "frame":
                    now = time.perf_counter()
                    if every is not None and now - last_sent >= every:
                        last_sent = now
                        yield Progress.from_json(data)
                elif kind == "result":
                    yield written(Done.from_json(data, request), request)
                    return
                elif kind == "error":
                    raise ModelError(f"{self.url}: {data.get('error', {}).get('message', 'the run failed')}")
            except (KeyError, TypeError, ValueError, IndexError, AttributeError):
                raise ModelError(f"{self.url} sent a {kind} sharpen cannot read") from None
        if not should_stop():
            raise ModelError(f"{self.url} closed the connection before the result")

    # -- one request per span: Mercury drafts, or plain completions ------------------------------

    def _run_per_span(self, request: EditRequest, should_stop, every):
        diffusing = self.protocol == "mercury"
        if self.protocol == "chat":
            path, body = "/v1/chat/completions", self._chat_body
        else:
            path, body = ("/v1/fim/completions" if diffusing else "/v1/completions"), lambda r, s: self._fim_body(r, s, diffusing)
        exchanges = [Exchange(self, "POST", path, body(request, span), stream=diffusing) for span in request.spans]
        drafts = [""] * len(request.spans)
        answered = [False] * len(request.spans)  # a text (string) came for the span: "" is an answer, 5 or none is not
        finals: list[str | None] = [None] * len(request.spans)
        tokens = [0] * len(request.spans)
        prompts = [0] * len(request.spans)  # each span's prompt tokens, as its server counted them
        merged: queue.Queue = queue.Queue()
        for i, exchange in enumerate(exchanges):  # all spans at once, each on its own connection
            threading.Thread(target=pump, args=(exchange, i, merged, should_stop), daemon=True).start()
        started = time.perf_counter()
        step, open_, last_sent = 0, len(exchanges), float("-inf")
        if every is not None:
            yield Progress(0, 0, 0.0, tuple(SpanDraft("", ()) for _ in drafts))
        while open_:
            try:
                i, item = merged.get(timeout=0.05)
            except queue.Empty:
                if should_stop():
                    for exchange in exchanges:
                        exchange.close()
                    return
                continue
            if item is END:
                open_ -= 1
                continue
            if isinstance(item, BaseException):
                for exchange in exchanges:
                    exchange.close()
                raise item
            if isinstance(item, dict) and item.get("choices") == [] and isinstance(item.get("usage"), dict):
                # stream_options.include_usage: the counts come in a chunk of their own after the last text
                tokens[i], prompts[i] = (_count(item["usage"].get(name)) for name in ("completion_tokens", "prompt_tokens"))
                continue
            choice = _first_choice(item, self.url)
            text = choice.get("text")
            for part in ("delta", "message"):  # a chat stream's delta, a chat answer's message
                if text is None and isinstance(choice.get(part), dict):
                    text = choice[part].get("content")
            if isinstance(text, str) and self.protocol == "chat":
                text = unfenced(text, request.text[request.spans[i].start:request.spans[i].end])
            if isinstance(text, str):
                drafts[i], answered[i] = text, True  # a diffusing chunk is the whole draft; a plain answer the whole text
            if choice.get("finish_reason") is not None or not diffusing:
                if not answered[i]:  # taking "" for it would delete the selection and exit 0
                    for exchange in exchanges:
                        exchange.close()
                    raise ModelError(f"{self.url} answered without a text")
                finals[i] = written_text(drafts[i], request.text)
                usage = item.get("usage") if isinstance(item.get("usage"), dict) else {}
                tokens[i], prompts[i] = (_count(usage.get(name)) for name in ("completion_tokens", "prompt_tokens"))
            step += 1
            now = time.perf_counter()
            if diffusing and every is not None and now - last_sent >= every:
                last_sent = now
                yield Progress(step, 0, now - started, tuple(SpanDraft(d, ()) for d in drafts))
        if should_stop():
            return
        if any(f is None for f in finals):
            raise ModelError(f"{self.url} closed the connection before the result")
        spans = tuple(SpanResult(s, f, t, (f,)) for s, f, t in zip(request.spans, finals, tokens))
        new_text = ChangeSet.of((s.start, s.end, f) for s, f in zip(request.spans, finals)).apply(request.text)
        seconds = time.perf_counter() - started
        cut = any(sum(map(len, around(request, s))) < len(request.text) - (s.end - s.start) for s in request.spans)
        result = EditResult(new_text, spans, step, seconds, (new_text,), prompt_tokens=sum(prompts), context_cut=cut)
        last = Progress(step, step, seconds, tuple(SpanDraft(f, ()) for f in finals))
        yield Done(result, last, self.info.name, "mask", ())

    def _fim_body(self, request: EditRequest, span, diffusing: bool) -> dict:
        before, after = around(request, span)
        body = {"model": self.info.name, "prompt": before, "suffix": after, "max_tokens": _budget(request, span),
                "temperature": request.sampling.temperature}
        if request.sampling.top_p is not None:
            body["top_p"] = request.sampling.top_p
        if diffusing:  # the counts a plain answer's usage carries, in a last chunk of their own (OpenAI's option)
            body.update(stream=True, diffusing=True, stream_options={"include_usage": True})
        return body

    def _chat_body(self, request: EditRequest, span) -> dict:
        from ..core.instruct import INFILL_TASK, REWRITE_TASK, user_message  # the tokenizer's module too: only for a chat

        before, after = around(request, span)
        task = span.instruction or (REWRITE_TASK if span.mode == "rewrite" else INFILL_TASK)
        message = user_message(task, before, request.text[span.start:span.end], after)
        body = {"model": self.info.name, "messages": [{"role": "user", "content": message}], "max_tokens": _budget(request, span),
                "temperature": request.sampling.temperature}
        if request.sampling.top_p is not None:
            body["top_p"] = request.sampling.top_p
        return body

    def _json(self, method: str, path: str, body: dict | None = None):
        for item in Exchange(self, method, path, body, stream=False).events(lambda: False):
            return item
        raise ModelError(f"{self.url}{path} answered nothing")


def written(done: Done, request: EditRequest) -> Done:
    """A sharpen server's result with each span's text (and alternatives) as the local engine
    would write it: a server is not trusted to have filtered its model's text."""
    spans = tuple(replace(r, text=written_text(r.text, request.text), alternatives=tuple(written_text(a, request.text) for a in r.alternatives))
                  for r in done.result.spans)
    new_text = ChangeSet.of((r.span.start, r.span.end, r.text) for r in spans).apply(request.text)
    return replace(done, result=replace(done.result, text=new_text, spans=spans, samples=(new_text,)))


def _count(value) -> int:
    """A usage count as a server sent it: a non-negative integer, else 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _budget(request: EditRequest, span) -> int:
    """Tokens to ask a one-span server for."""
    if span.max_tokens is not None:
        return span.max_tokens
    if span.start == span.end:
        return request.editing.infill_tokens
    return max(8, math.ceil(1.5 * (span.end - span.start) / 3) + 4)  # a rewrite regenerates the selection: room to grow


def around(request: EditRequest, span) -> tuple[str, str]:
    """The text before and after `span` that goes to a one-span server: about the context budget
    (half each side, a short side's rest to the other) in whole lines, or the nearest characters
    when one line is longer; so a large file is not sent whole with every keystroke's completion."""
    budget = request.editing.context_tokens * CHARS_PER_TOKEN
    text = request.text
    before, after = text[:span.start], text[span.end:]
    # Half each side, and a side with less than its half leaves the rest to the other (as build_canvas).
    before_room = max(budget // 2, budget - len(after))
    after_room = max(budget - budget // 2, budget - len(before))
    if len(before) > before_room:
        cut = before.find("\n", len(before) - before_room)
        before = before[cut + 1:] if cut != -1 else before[len(before) - before_room:]
    if len(after) > after_room:
        cut = after.rfind("\n", 0, after_room)
        after = after[:cut + 1] if cut != -1 else after[:after_room]
    return before, after


def unfenced(answer: str, region: str) -> str:
    """A chat answer wrapped whole in one Markdown code fence, without it: instruct models fence
    code though asked for the text alone. Kept as is when the region itself holds a fence."""
    stripped = answer.strip("\n")
    if "```" in region or len(stripped) < 6 or not stripped.startswith("```") or not stripped.endswith("```"):
        return answer
    body = stripped[3:-3]
    newline = body.find("\n")  # the opening fence's line ends; its info string (python) goes with it
    if newline == -1 or "```" in body:
        return answer
    code = body[newline + 1:]
    code = code[:-1] if code.endswith("\n") else code  # the line break before the closing fence is the fence's
    return code + "\n" if region.endswith("\n") and code and not code.endswith("\n") else code


def _first_choice(item, url: str) -> dict:
    choices = item.get("choices") if isinstance(item, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise ModelError(f"{url} answered without choices")
    return choices[0]
