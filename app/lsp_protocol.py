"""JSON-RPC over stdio for `sharpen lsp` (app/lsp.py): the framing and the answers that pygls
leaves out, so that a client never waits for ever and a bad frame never ends the server.

    server = LanguageServer("sharpen", release, protocol_cls=answering_protocol())
    code = serve_stdio(server)          # until `exit` or the end of stdin; the process's exit code

- A frame's body is read only when its Content-Length is within MAX_FRAME_BYTES: a larger one
  (`Content-Length: 99999999999`) gets an Invalid Request answer and its bytes are skipped line
  by line, in bounded pieces, until the next header: memory stays bounded and the server up.
- A body that is not JSON (nor UTF-8) is answered with Parse error (-32700, id null), one that
  is JSON but no request object with Invalid Request (-32600); a log line, not a popup.
- Before `initialize`, a request gets ServerNotInitialized (-32002) and a notification is dropped
  (`exit` excepted); after `shutdown`, a request gets Invalid Request (LSP 3.18).
- `exit` ends the process with 0 after `shutdown`, else 1 (pygls' SystemExit code, which its
  own start_io swallows into 0).
- A request whose params do not read as its method's type gets -32602 (pygls logs it and sends
  nothing).
"""
from __future__ import annotations

import asyncio
import json
import logging
import re
import sys
import threading

from ..core.files import MAX_FILE_BYTES

log = logging.getLogger(__name__)

# didOpen carries a whole document: sharpen's largest file, with room for JSON's escapes.
MAX_FRAME_BYTES = 2 * MAX_FILE_BYTES
MAX_HEADER_LINE = 4096  # bytes of one header line read at once; a longer line is skipped in pieces
_LENGTH = re.compile(rb"Content-Length:[ \t]*(\d+)[ \t]*\r?\n\Z", re.IGNORECASE)

PARSE_ERROR, INVALID_REQUEST, SERVER_NOT_INITIALIZED = -32700, -32600, -32002


def answering_protocol():
    """pygls' LanguageServerProtocol with the answers above; a class, so that pygls is imported
    only when the server starts."""
    from dataclasses import dataclass

    from pygls.exceptions import JsonRpcException, JsonRpcInvalidParams
    from pygls.protocol import LanguageServerProtocol

    @dataclass(frozen=True)
    class Unreadable:
        id: int | str
        method: str

    # pygls logs a traceback for each request whose params do not read; it is answered -32602 here.
    logging.getLogger("pygls.protocol.json_rpc").addFilter(lambda record: not record.getMessage().startswith("Unable to deserialize"))

    class AnsweringProtocol(LanguageServerProtocol):
        initialize_seen = False

        def structure_message(self, data):
            try:
                return super().structure_message(data)
            except JsonRpcException:
                if _is_id(data.get("id")) and isinstance(data.get("method"), str):
                    return Unreadable(data["id"], data["method"])
                raise  # a notification or a response: JSON-RPC answers neither

        def handle_message(self, message):
            method = getattr(message, "method", None)
            request_id = getattr(message, "id", None) if method is not None else None  # a response has an id, no method
            if method == "initialize":
                self.initialize_seen = self.initialize_seen or not isinstance(message, Unreadable)
            elif not self.initialize_seen and method != "exit":
                if request_id is not None:
                    self.answer_error(request_id, SERVER_NOT_INITIALIZED, f"{method}: the server is not initialized yet (send initialize first)")
                return None  # a notification (or a response) before initialize is dropped
            elif self._shutdown and method != "exit" and request_id is not None:
                self.answer_error(request_id, INVALID_REQUEST, f"{method}: the server is shutting down (only exit is answered)")
                return None
            if isinstance(message, Unreadable):
                error = JsonRpcInvalidParams(f"{message.method}: the params do not match the method's (LSP 3.18)")
                self._send_response(message.id, None, error.to_response_error())
                return None
            return super().handle_message(message)

        def answer_error(self, request_id, code: int, message: str) -> None:
            """An error answer written as is (`id` null included, which pygls' converter drops)."""
            body = json.dumps({"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}).encode("utf-8")
            if self.writer is not None:
                self.writer.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)

    return AnsweringProtocol


def _is_id(value) -> bool:
    return isinstance(value, (int, str)) and not isinstance(value, bool)


def serve_stdio(server, stdin=None, stdout=None) -> int:
    """Run `server` (a pygls LanguageServer built with answering_protocol) on stdio until `exit`
    or the end of stdin; the exit code: `exit`'s (0 after shutdown, else 1), 0 at end of input."""
    from pygls.io_ import StdoutWriter

    server._stop_event = threading.Event()  # pygls' shutdown() sets it
    server.protocol.set_writer(StdoutWriter(stdout or sys.stdout.buffer))
    try:
        return asyncio.run(_read_frames(server, stdin or sys.stdin.buffer))
    except BrokenPipeError:
        log.warning("the client closed its end of the connection")
        return 1
    finally:
        server.shutdown()


async def _read_frames(server, stdin) -> int:
    loop = asyncio.get_running_loop()
    protocol = server.protocol

    def read(call, *args):
        return loop.run_in_executor(server.thread_pool, call, *args)

    length: int | None = None
    skipping = False  # after a refused frame, until the next header that reads
    while not server._stop_event.is_set():
        line = await read(stdin.readline, MAX_HEADER_LINE)
        if not line:
            return 0  # the client closed stdin
        # A length header ends its line; searched, not matched, so that a skipped body's last
        # piece (`...}Content-Length: 52`) does not cost the frame after it.
        found = _LENGTH.search(line)
        if found:
            length, skipping = int(found.group(1)), False
            if length > MAX_FRAME_BYTES:
                log.warning("a frame of %d bytes is over the bound of %d bytes: skipped", length, MAX_FRAME_BYTES)
                protocol.answer_error(None, INVALID_REQUEST, f"a frame of {length} bytes is over this server's bound of {MAX_FRAME_BYTES} bytes; it is skipped")
                length, skipping = None, True
            continue
        if skipping or line.strip():  # another header (Content-Type), or a piece of a skipped body
            continue
        if length is None:  # a blank line without a length before it: nothing to read
            continue
        wanted, length = length, None
        body = await read(stdin.read, wanted)
        if len(body) < wanted:  # the input ended inside the frame
            return 0
        code = _handle_body(protocol, body)
        if code is not None:
            return code
    return 0


def _handle_body(protocol, body: bytes) -> int | None:
    """One frame's body to pygls; the exit code when it was `exit`."""
    try:
        data = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        log.warning("a frame that is not JSON: %s", str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
        protocol.answer_error(None, PARSE_ERROR, f"Parse error: the frame's body is not JSON ({type(exc).__name__})")
        return None
    if not isinstance(data, dict) or data.get("jsonrpc") != "2.0" or ("method" in data and not isinstance(data["method"], str)):
        request_id = data.get("id") if isinstance(data, dict) and _is_id(data.get("id")) else None
        log.warning("a frame that is no JSON-RPC 2.0 message: answered Invalid Request")
        protocol.answer_error(request_id, INVALID_REQUEST, "Invalid Request: not a JSON-RPC 2.0 request object (a batch is not LSP)")
        return None
    try:
        message = protocol.structure_message(data)
    except Exception as exc:  # a notification or response that does not read (a request is answered -32602 above)
        log.warning("%s: a message that does not read as its type (%s): ignored", data.get("method", "a response"), type(exc).__name__)
        return None
    try:
        protocol.handle_message(message)
    except SystemExit as exc:  # pygls' `exit`: 0 after shutdown, else 1
        return exc.code if isinstance(exc.code, int) else 1
    except Exception:  # pygls answers a request's failure itself; anything else is logged, the server stays
        log.exception("handling %s failed", data.get("method", "a response"))
    return None
