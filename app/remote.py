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

Standard library only (http.client): the editor and headless runs need no web stack. The key
comes from an environment variable ([backend] backend_key_env), never from a command line.
Every failure is one SharpenError line: unreachable, refused key (401/403), rate limits (429),
server errors (5xx), timeouts, a connection cut mid-run; a request the server calls bad (400)
is a UsageError. A stop between two events closes the connection, which cancels the run there.
"""
from __future__ import annotations

import http.client
import json
import math
import os
import queue
import socket
import threading
import time
from urllib.parse import urlsplit

from ..core.errors import ModelError, SharpenError, UsageError
from ..core.request import EditRequest

_END = object()
NO_LIMIT = 1 << 20  # a remote model's canvas length is its own business
# Characters of context per token of the budget sent to a server whose tokenizer is not ours: code
# runs about 3-4 characters a token in the released BPE vocabularies, so 4 errs on the side of context.
CHARS_PER_TOKEN = 4
# Servers that name themselves in /v1/models' owned_by (their ModelCard defaults) and whose
# completions take no suffix (vLLM refuses one; SGLang drops it without a completion template):
# the diffusion models they serve (LLaDA2.x, SDAR, DiffusionGemma) are instruct models, so auto
# talks to them as a chat. backend_protocol = "openai" still sends completions with a suffix.
CHAT_SERVERS = ("vllm", "sglang")


class RemoteBackend:
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
        from ..core.run import ModelInfo

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
                                  instruct=bool(meta.get("instruct", meta.get("chat"))))  # a server from before "instruct": chat meant it
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
        from ..core.run import Done, Progress

        exchange = _Exchange(self, "POST", "/v1/edits", {**request.to_json(), "stream": True}, stream=True)
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
                    yield Done.from_json(data, request)
                    return
                elif kind == "error":
                    raise ModelError(f"{self.url}: {data.get('error', {}).get('message', 'the run failed')}")
            except (KeyError, TypeError, ValueError, IndexError, AttributeError):
                raise ModelError(f"{self.url} sent a {kind} sharpen cannot read") from None
        if not should_stop():
            raise ModelError(f"{self.url} closed the connection before the result")

    # -- one request per span: Mercury drafts, or plain completions ------------------------------

    def _run_per_span(self, request: EditRequest, should_stop, every):
        from ..core.engine import EditResult, SpanResult
        from ..core.run import Done, Progress, SpanDraft

        diffusing = self.protocol == "mercury"
        if self.protocol == "chat":
            path, body = "/v1/chat/completions", self._chat_body
        else:
            path, body = ("/v1/fim/completions" if diffusing else "/v1/completions"), lambda r, s: self._fim_body(r, s, diffusing)
        exchanges = [_Exchange(self, "POST", path, body(request, span), stream=diffusing) for span in request.spans]
        drafts = [""] * len(request.spans)
        answered = [False] * len(request.spans)  # a text (string) came for the span: "" is an answer, 5 or none is not
        finals: list[str | None] = [None] * len(request.spans)
        tokens = [0] * len(request.spans)
        prompts = [0] * len(request.spans)  # each span's prompt tokens, as its server counted them
        merged: queue.Queue = queue.Queue()
        for i, exchange in enumerate(exchanges):  # all spans at once, each on its own connection
            threading.Thread(target=_pump, args=(exchange, i, merged, should_stop), daemon=True).start()
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
            if item is _END:
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
                finals[i] = drafts[i]
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
        from ..core.changes import ChangeSet

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
        from ..core.instruct import user_message
        from ..core.prompted import INFILL_TASK, REWRITE_TASK

        before, after = around(request, span)
        task = span.instruction or (REWRITE_TASK if span.mode == "rewrite" else INFILL_TASK)
        message = user_message(task, before, request.text[span.start:span.end], after)
        body = {"model": self.info.name, "messages": [{"role": "user", "content": message}], "max_tokens": _budget(request, span),
                "temperature": request.sampling.temperature}
        if request.sampling.top_p is not None:
            body["top_p"] = request.sampling.top_p
        return body

    # -- HTTP ----------------------------------------------------------------------------------

    def connection(self) -> http.client.HTTPConnection:
        kind = http.client.HTTPSConnection if self.scheme == "https" else http.client.HTTPConnection
        return kind(self.host, self.port, timeout=self.timeout)

    def headers(self) -> dict:
        headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream", "User-Agent": "sharpen"}
        key = os.environ.get(self.key_env) if self.key_env else None
        if key:
            headers["Authorization"] = f"Bearer {key}"
        return headers

    def _json(self, method: str, path: str, body: dict | None = None):
        exchange = _Exchange(self, method, path, body, stream=False)
        for item in exchange.events(lambda: False):
            return item
        raise ModelError(f"{self.url}{path} answered nothing")

    def fail(self, status: int, body: bytes, headers) -> SharpenError:
        """A non-200 answer as one line."""
        message = _message(body) or http.client.responses.get(status, "")
        where = self.url
        if status in (401, 403):
            return ModelError(f"{where} refused the request ({status}: {message}); put the key in ${self.key_env}")
        if status == 429:
            wait = headers.get("Retry-After")
            return ModelError(f"{where} is rate-limiting ({status}: {message}){f'; try again in {wait} s' if wait else ''}")
        if status == 503:
            wait = headers.get("Retry-After")
            return ModelError(f"{where} is busy ({status}: {message}){f'; try again in {wait} s' if wait else ''}")
        if status in (400, 413, 422):
            hint = ""
            if self.protocol == "openai" and "suffix" in message.lower():  # vLLM: "suffix is not currently supported"
                hint = '; this server takes no suffix: set [backend] backend_protocol = "chat" to send infills as a chat'
            return UsageError(f"{where} refused the request ({status}: {message}){hint}")
        return ModelError(f"{where} failed ({status}: {message})")


class _Exchange:
    """One HTTP request and its answer: JSON once, or server-sent events one by one."""

    def __init__(self, backend: RemoteBackend, method: str, path: str, body: dict | None, stream: bool) -> None:
        self.backend, self.method, self.path, self.body, self.stream = backend, method, backend.base + path, body, stream
        self.conn = None
        self.closed = False

    def close(self) -> None:
        # From another thread: shut the socket so a blocked read returns at once (the server sees the client leave).
        self.closed = True
        conn = self.conn
        if conn is not None and conn.sock is not None:
            try:
                conn.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def events(self, should_stop):
        """The answer's JSON values: one for a plain answer, one per `data:` event for a stream."""
        backend = self.backend
        try:
            self.conn = backend.connection()
            payload = json.dumps(self.body).encode("utf-8") if self.body is not None else None
            self.conn.request(self.method, self.path, body=payload, headers=backend.headers())
            response = self.conn.getresponse()
            if response.status != 200:
                raise backend.fail(response.status, response.read(64 * 1024), response.headers)
            if not self.stream or "text/event-stream" not in response.headers.get("Content-Type", ""):
                yield _decode(response.read(), backend.url)
                return
            data: list[str] = []
            while not should_stop():
                line = response.readline()
                if not line:
                    return
                try:
                    line = line.decode("utf-8").rstrip("\r\n")
                except UnicodeDecodeError:
                    raise ModelError(f"{backend.url} sent an event that is not UTF-8") from None
                if line.startswith("data:"):
                    data.append(line[5:].lstrip(" "))
                elif not line and data:
                    text = "\n".join(data)
                    data = []
                    if text.strip() == "[DONE]":
                        return
                    yield _decode(text.encode("utf-8"), backend.url)
        except SharpenError:
            raise
        except socket.timeout:
            if not self.closed:
                raise ModelError(f"{backend.url} did not answer within {backend.timeout:g} s") from None
        except (ConnectionRefusedError, socket.gaierror) as exc:
            raise ModelError(f"cannot reach {backend.url}: {exc.strerror or exc}") from None
        except (http.client.HTTPException, OSError) as exc:
            if not self.closed and not should_stop():
                raise ModelError(f"{backend.url} closed the connection ({type(exc).__name__}{': ' + str(exc) if str(exc) else ''})") from None
        finally:
            if self.conn is not None:
                self.conn.close()


def _count(value) -> int:
    """A usage count as a server sent it: a non-negative integer, else 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _pump(exchange: _Exchange, index: int, out: queue.Queue, should_stop) -> None:
    try:
        for item in exchange.events(should_stop):
            out.put((index, item))
    except BaseException as exc:
        out.put((index, exc))
    out.put((index, _END))


def _decode(raw: bytes, url: str):
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):  # RecursionError: nested past Python's limit
        raise ModelError(f"{url} answered something that is not JSON") from None


def _message(body: bytes) -> str:
    try:
        data = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        return body.decode("utf-8", "replace").strip().splitlines()[0][:200] if body.strip() else ""
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, dict):
        return str(error.get("message", ""))[:300]
    if isinstance(error, str):
        return error[:300]
    return str(data.get("detail") or data.get("message") or "")[:300] if isinstance(data, dict) else ""


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
