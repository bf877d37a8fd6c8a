"""HTTP to a remote server (app/remote.py): one request and its answer, JSON once or server-sent
events one by one, each bounded in time and in size, and every failure as one line.

    exchange = Exchange(server, "POST", "/v1/completions", body, stream=False)
    for value in exchange.events(should_stop): ...    # decoded JSON values, strings filtered
    exchange.close()                                   # from another thread: the read returns at once

A server is untrusted input. Its whole answer has `timeout` seconds, however it spends them (a
stream kept open with SSE comments, a byte a second, a line without end), not only each gap
between bytes; an answer or one event over MAX_ANSWER_BYTES is refused before it fills memory;
every string of what it sends loses the control characters a local model can never write
(core/newlines.drop_control: NUL, ESC, C1), so no terminal escape reaches a file, the status bar
or stderr. Standard library only (http.client): the editor and headless runs need no web stack.
"""
from __future__ import annotations

import http.client
import json
import os
import queue
import socket
import threading
from typing import Protocol

from ..core.errors import ModelError, SharpenError, UsageError
from ..core.newlines import drop_control

END = object()  # what `pump` puts after an exchange's last value
# A plain answer, or one event of a stream: a whole file's edit with its last frame is a few MB.
MAX_ANSWER_BYTES = 64 * 2**20
ERROR_BODY_BYTES = 64 * 1024  # of a non-200 answer, only its message is read


class Server(Protocol):
    """What an exchange needs of its backend (app.remote.RemoteBackend)."""

    url: str
    scheme: str
    host: str
    port: int | None
    base: str
    key_env: str
    timeout: float
    protocol: str


class Exchange:
    """One HTTP request and its answer."""

    def __init__(self, server: Server, method: str, path: str, body: dict | None, stream: bool) -> None:
        self.server, self.method, self.path, self.body, self.stream = server, method, server.base + path, body, stream
        self.conn: http.client.HTTPConnection | None = None
        # The connection's socket, kept: http.client drops conn.sock once an answer that ends with
        # the connection (HTTP/1.0, no length) has begun, and close() must still reach it.
        self.sock: socket.socket | None = None
        self.closed = False
        self.expired = False  # the answer ran past the server's timeout (the watchdog closed it)

    def close(self) -> None:
        # From another thread: shut the socket so a blocked read returns at once (the server sees the client leave).
        self.closed = True
        sock = self.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _expire(self) -> None:
        self.expired = True
        self.close()

    def events(self, should_stop):
        """The answer's JSON values: one for a plain answer, one per `data:` event for a stream."""
        server = self.server
        # The deadline of the whole answer: a socket timeout bounds only each read, and a server
        # that sends an SSE comment every second (or one byte of a line) would never reach it.
        watchdog = threading.Timer(server.timeout, self._expire)
        watchdog.daemon = True
        watchdog.start()
        try:
            self.conn = connection(server)
            self.conn.connect()
            self.sock = self.conn.sock
            if self.closed:  # stopped, or past the deadline, while connecting
                raise socket.timeout() if self.expired else OSError("stopped")
            payload = json.dumps(self.body).encode("utf-8") if self.body is not None else None
            self.conn.request(self.method, self.path, body=payload, headers=headers(server))
            response = self.conn.getresponse()
            if response.status != 200:
                raise failure(server, response.status, response.read(ERROR_BODY_BYTES), response.headers)
            if not self.stream or "text/event-stream" not in response.headers.get("Content-Type", ""):
                raw = response.read(MAX_ANSWER_BYTES + 1)
                if self.expired:  # cut by the watchdog: what came is not the answer
                    raise ModelError(f"{server.url} did not answer within {server.timeout:g} s")
                if len(raw) > MAX_ANSWER_BYTES:
                    raise _too_large(server.url)
                yield decode(raw, server.url)
                return
            yield from self._stream(response, should_stop)
        except SharpenError:
            raise
        except (socket.timeout, OSError, http.client.HTTPException) as exc:
            if self.expired:
                raise ModelError(f"{server.url} did not answer within {server.timeout:g} s") from None
            if isinstance(exc, socket.timeout):
                if not self.closed:
                    raise ModelError(f"{server.url} did not answer within {server.timeout:g} s") from None
            elif isinstance(exc, (ConnectionRefusedError, socket.gaierror)):
                raise ModelError(f"cannot reach {server.url}: {exc.strerror or exc}") from None
            elif not self.closed and not should_stop():
                raise ModelError(f"{server.url} closed the connection ({type(exc).__name__}{': ' + str(exc) if str(exc) else ''})") from None
        finally:
            watchdog.cancel()
            if self.conn is not None:
                self.conn.close()

    def _stream(self, response, should_stop):
        url = self.server.url
        data: list[bytes] = []  # the `data:` lines of the event being read
        size = 0
        while not should_stop():
            line = response.readline(MAX_ANSWER_BYTES + 1)
            if self.expired:
                raise ModelError(f"{url} did not answer within {self.server.timeout:g} s")
            if not line:
                return
            if len(line) > MAX_ANSWER_BYTES:  # a line (an event's, a comment's) without end
                raise _too_large(url)
            if line.startswith(b"data:"):
                piece = line[5:].rstrip(b"\r\n")
                data.append(piece[1:] if piece.startswith(b" ") else piece)
                size += len(piece)
                if size > MAX_ANSWER_BYTES:  # one event of many lines
                    raise _too_large(url)
            elif not line.rstrip(b"\r\n") and data:
                raw = b"\n".join(data)
                data, size = [], 0
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError:
                    raise ModelError(f"{url} sent an event that is not UTF-8") from None
                if text.strip() == "[DONE]":
                    return
                yield decode(text, url)


def _too_large(url: str) -> ModelError:
    return ModelError(f"{url} sent an answer over {MAX_ANSWER_BYTES // 2**20} MiB")


def connection(server: Server) -> http.client.HTTPConnection:
    kind = http.client.HTTPSConnection if server.scheme == "https" else http.client.HTTPConnection
    return kind(server.host, server.port, timeout=server.timeout)


def headers(server: Server) -> dict:
    out = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream", "User-Agent": "sharpen"}
    key = os.environ.get(server.key_env) if server.key_env else None
    if key:
        out["Authorization"] = f"Bearer {key}"
    return out


def pump(exchange: Exchange, index: int, out: queue.Queue, should_stop) -> None:
    """A thread's loop: each value of `exchange` into `out` as (index, value), then an error or END."""
    try:
        for item in exchange.events(should_stop):
            out.put((index, item))
    except BaseException as exc:
        out.put((index, exc))
    out.put((index, END))


def decode(raw: bytes | str, url: str):
    """A server's JSON, every string in it without control characters."""
    try:
        value = json.loads(raw.decode("utf-8") if isinstance(raw, bytes) else raw)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):  # RecursionError: nested past Python's limit
        raise ModelError(f"{url} answered something that is not JSON") from None
    return without_control(value)


def without_control(value):
    """`value` (decoded JSON) with drop_control on each string value, in place; iterative, since a
    server's JSON may nest nearly to Python's recursion limit."""
    if isinstance(value, str):
        return drop_control(value)
    stack = [value] if isinstance(value, (dict, list)) else []
    while stack:
        node = stack.pop()
        for key, item in (node.items() if isinstance(node, dict) else enumerate(node)):
            if isinstance(item, str):
                node[key] = drop_control(item)
            elif isinstance(item, (dict, list)):
                stack.append(item)
    return value


def message_of(body: bytes) -> str:
    """A non-200 answer's message, one line without control characters."""
    try:
        data = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        data = body.decode("utf-8", "replace")
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, dict):
        text = str(error.get("message", ""))
    elif isinstance(error, str):
        text = error
    elif isinstance(data, dict):
        text = str(data.get("detail") or data.get("message") or "")
    elif isinstance(data, str):
        text = data.strip().splitlines()[0] if data.strip() else ""
    else:
        text = ""
    return " ".join(drop_control(text).split())[:300]


def failure(server: Server, status: int, body: bytes, answer_headers) -> SharpenError:
    """A non-200 answer as one line: a UsageError for a request the server calls bad, else a ModelError."""
    message = message_of(body) or http.client.responses.get(status, "")
    where = server.url
    wait = drop_control(str(answer_headers.get("Retry-After") or ""))[:40]
    if status in (401, 403):
        return ModelError(f"{where} refused the request ({status}: {message}); put the key in ${server.key_env}")
    if status == 429:
        return ModelError(f"{where} is rate-limiting ({status}: {message}){f'; try again in {wait} s' if wait else ''}")
    if status == 503:
        return ModelError(f"{where} is busy ({status}: {message}){f'; try again in {wait} s' if wait else ''}")
    if status in (400, 413, 422):
        hint = ""
        if server.protocol == "openai" and "suffix" in message.lower():  # vLLM: "suffix is not currently supported"
            hint = '; this server takes no suffix: set [backend] backend_protocol = "chat" to send infills as a chat'
        return UsageError(f"{where} refused the request ({status}: {message}){hint}")
    return ModelError(f"{where} failed ({status}: {message})")
