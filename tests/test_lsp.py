"""`sharpen lsp` driven by pygls' own LanguageClient over stdio, as Neovim 0.12 would drive it."""
from __future__ import annotations

import asyncio
import sys
import time

import pytest
from serving import ROOT

from sharpen.core.request import EditRequest
from sharpen.core.run import Runner
from sharpen.core.settings import Editing, Sampling
from sharpen.core.spans import Span

TEXT = "def fizzbuzz(n):\n    for i in range(1, n + 1):\n        \n    return n\n"
LINE, COLUMN = 2, 8


@pytest.fixture(scope="module")
def runner():
    from sharpen.core.models.load import load_model
    from sharpen.core.settings import ModelRequest

    return Runner(load_model(ModelRequest()))


async def _client(*args: str):
    from lsprotocol import types as lsp
    from pygls.lsp.client import LanguageClient

    client = LanguageClient("sharpen-test", "1")
    await client.start_io(sys.executable, "-m", "sharpen.app.cli", "lsp", *args, cwd=str(ROOT))
    capabilities = lsp.ClientCapabilities(text_document=lsp.TextDocumentClientCapabilities(inline_completion=lsp.InlineCompletionClientCapabilities()))
    result = await client.initialize_async(lsp.InitializeParams(capabilities=capabilities, process_id=None, root_uri=None))
    client.initialized(lsp.InitializedParams())
    client.text_document_did_open(lsp.DidOpenTextDocumentParams(lsp.TextDocumentItem("file:///tmp/fizz.py", "python", 1, TEXT)))
    return client, result


def _params():
    from lsprotocol import types as lsp

    return lsp.InlineCompletionParams(
        context=lsp.InlineCompletionContext(trigger_kind=lsp.InlineCompletionTriggerKind.Invoked),
        text_document=lsp.TextDocumentIdentifier("file:///tmp/fizz.py"), position=lsp.Position(LINE, COLUMN))


async def _stop(client) -> None:
    await client.shutdown_async(None)
    client.exit(None)
    await client.stop()


async def test_inline_completion_is_the_local_infill_at_the_cursor(runner):
    client, result = await _client("--steps", "8")
    try:
        assert result.capabilities.inline_completion_provider is not None
        answer = await asyncio.wait_for(client.text_document_inline_completion_async(_params()), 60)
        at = TEXT.index("        \n") + 8
        alone = runner.result(EditRequest(TEXT, (Span(at, at, max_tokens=Editing().infill_tokens),), Sampling(steps=8))).result.spans[0].text
        assert len(answer.items) == 1 and answer.items[0].insert_text == alone
        assert (answer.items[0].range.start.line, answer.items[0].range.start.character) == (LINE, COLUMN)
    finally:
        await _stop(client)


async def test_cancel_request_stops_the_run(tmp_path):
    from lsprotocol import types as lsp

    config = tmp_path / "config.toml"
    config.write_text("[edit]\ninfill_tokens = 128\n")
    # A run of seconds: 8 samples of 128 slots, 128 steps, no cache.
    client, _ = await _client("--config", str(config), "--steps", "128", "--samples", "8", "--cache", "none")
    try:
        started = time.perf_counter()
        await asyncio.wait_for(client.text_document_inline_completion_async(_params()), 120)
        whole = time.perf_counter() - started
        slow = client.protocol.send_request_async(lsp.TEXT_DOCUMENT_INLINE_COMPLETION, _params(), msg_id="slow-1")
        await asyncio.sleep(min(0.5, whole / 4))
        client.protocol.notify(lsp.CANCEL_REQUEST, lsp.CancelParams(id="slow-1"))
        with pytest.raises(Exception):
            await asyncio.wait_for(slow, 30)
        # The model is free again within a step: the next completion takes one run, not the rest of the cancelled one too.
        started = time.perf_counter()
        await asyncio.wait_for(client.text_document_inline_completion_async(_params()), 120)
        assert time.perf_counter() - started < whole * 1.5, (time.perf_counter() - started, whole)
    finally:
        await _stop(client)


async def test_a_document_not_open_is_no_completion_and_a_position_past_the_end_answers_at_the_end(runner, tmp_path):
    from lsprotocol import types as lsp

    client, _ = await _client("--steps", "8")
    try:
        # Not opened by the client, and not on disk: pygls would read the URI from disk and fail with a traceback.
        elsewhere = lsp.InlineCompletionParams(context=_params().context, text_document=lsp.TextDocumentIdentifier((tmp_path / "gone.py").as_uri()),
                                               position=lsp.Position(0, 0))
        answer = await asyncio.wait_for(client.text_document_inline_completion_async(elsewhere), 60)
        assert list(answer.items) == []
        past = lsp.InlineCompletionParams(context=_params().context, text_document=_params().text_document, position=lsp.Position(99, 0))
        answer = await asyncio.wait_for(client.text_document_inline_completion_async(past), 60)
        alone = runner.result(EditRequest(TEXT, (Span(len(TEXT), len(TEXT), max_tokens=Editing().infill_tokens),), Sampling(steps=8))).result.spans[0].text
        assert len(answer.items) == 1 and answer.items[0].insert_text == alone
        end = answer.items[0].range.start
        assert (end.line, end.character) == (TEXT.count("\n"), 0)  # the document's end, not line 99
    finally:
        await _stop(client)


async def test_a_request_whose_params_do_not_read_gets_an_invalid_params_answer(runner):
    """JSON-RPC answers every request: a malformed inlineCompletion gets -32602 at once (pygls
    alone sent nothing, and the client waited for ever), and the server goes on answering."""
    from lsprotocol import types as lsp
    from pygls.exceptions import JsonRpcException

    client, _ = await _client("--steps", "8")
    try:
        typed = client.protocol.get_message_type
        client.protocol.get_message_type = lambda method: None  # send the dict as it is, untyped
        try:
            broken = client.protocol.send_request_async(lsp.TEXT_DOCUMENT_INLINE_COMPLETION, {"textDocument": 5, "position": "here"})
        finally:
            client.protocol.get_message_type = typed
        with pytest.raises(JsonRpcException) as caught:
            await asyncio.wait_for(broken, 30)
        assert caught.value.code == -32602 and "textDocument/inlineCompletion" in caught.value.message
        answer = await asyncio.wait_for(client.text_document_inline_completion_async(_params()), 60)
        assert len(answer.items) == 1
    finally:
        await _stop(client)


async def test_a_completion_menu_selection_is_extended_over_its_range(runner):
    """LSP 3.18: with an item selected in the client's completion menu, the inline completion
    must start with that item's text and replace the item's range (else VS Code shows nothing):
    the model fills after the item's text, as if it had been typed."""
    from lsprotocol import types as lsp

    client, _ = await _client("--steps", "8")
    try:
        # The cursor after "    for i in r" on line 1, the menu offering "range" for "r".
        line = TEXT.split("\n")[1]
        typed = "    for i in r"
        assert line.startswith(typed)
        chosen = lsp.SelectedCompletionInfo(range=lsp.Range(lsp.Position(1, len(typed) - 1), lsp.Position(1, len(typed))), text="range")
        params = lsp.InlineCompletionParams(
            context=lsp.InlineCompletionContext(trigger_kind=lsp.InlineCompletionTriggerKind.Automatic, selected_completion_info=chosen),
            text_document=_params().text_document, position=lsp.Position(1, len(typed)))
        answer = await asyncio.wait_for(client.text_document_inline_completion_async(params), 60)
        start = TEXT.index(typed) + len(typed) - 1
        as_typed = TEXT[:start] + "range" + TEXT[start + 1:]
        at = start + len("range")
        alone = runner.result(EditRequest(as_typed, (Span(at, at, max_tokens=Editing().infill_tokens),), Sampling(steps=8))).result.spans[0].text
        assert len(answer.items) == 1 and answer.items[0].insert_text == "range" + alone
        where = answer.items[0].range
        assert (where.start.line, where.start.character, where.end.line, where.end.character) == (1, len(typed) - 1, 1, len(typed))
    finally:
        await _stop(client)


# -- JSON-RPC framing, driven with raw bytes as clients write them -------------------------------

class RawClient:
    """`sharpen lsp ARGS` on pipes, written to byte for byte (Content-Length header, CRLF, body),
    its answers read back as JSON. No model loads: the backend is a server (or none)."""

    def __init__(self, *args: str) -> None:
        import queue
        import subprocess
        import threading

        self.process = subprocess.Popen([sys.executable, "-m", "sharpen.app.cli", "lsp", *args], cwd=ROOT,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.received: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        import json

        out = self.process.stdout
        while True:
            length, line = None, out.readline()
            if not line:
                self.received.put(None)  # the server closed stdout
                return
            while line.strip():
                name, _, value = line.decode("ascii").partition(":")
                length = int(value) if name.lower() == "content-length" else length
                line = out.readline()
            self.received.put(json.loads(out.read(length)))

    def send(self, raw: bytes) -> None:
        self.process.stdin.write(raw)
        self.process.stdin.flush()

    def frame(self, message) -> None:
        import json

        body = json.dumps(message).encode("utf-8")
        self.send(b"Content-Length: %d\r\n\r\n" % len(body) + body)

    def next(self, timeout: float = 30):
        return self.received.get(timeout=timeout)

    def answer(self, request_id, timeout: float = 60) -> dict:
        """The answer to `request_id`; notifications on the way are kept in `notes`."""
        self.notes = getattr(self, "notes", [])
        while True:
            message = self.next(timeout)
            assert message is not None, "the server closed its output"
            if "method" not in message and message.get("id") == request_id:
                return message
            self.notes.append(message)

    def initialize(self, request_id=1) -> dict:
        capabilities = {"textDocument": {"inlineCompletion": {}}}
        self.frame({"jsonrpc": "2.0", "id": request_id, "method": "initialize", "params": {"processId": None, "rootUri": None, "capabilities": capabilities}})
        answer = self.answer(request_id)
        self.frame({"jsonrpc": "2.0", "method": "initialized", "params": {}})
        return answer

    def end(self, shutdown: bool = True) -> tuple[int, str]:
        """shutdown (when asked) and exit; the exit code and stderr."""
        if shutdown:
            self.frame({"jsonrpc": "2.0", "id": "bye", "method": "shutdown"})
            assert self.answer("bye")["result"] is None
        self.frame({"jsonrpc": "2.0", "method": "exit"})
        code = self.process.wait(60)
        return code, self.process.stderr.read().decode("utf-8", "replace")


NOWHERE = "http://127.0.0.1:9"  # nothing listens there: the backend is unavailable, the protocol still works


def test_a_body_that_is_not_json_gets_a_parse_error_and_the_server_goes_on():
    """JSON-RPC: a body that does not parse is answered Parse error (-32700) with id null, one that
    is no request object Invalid Request (-32600); a line in the log each, no popup, no traceback."""
    client = RawClient("--backend", NOWHERE)
    client.initialize()
    for body in (b"{nope", b'{"jsonrpc": "2.0", "id": 7, "method": "x"', b"\xff\xfe{}", b"[" * 100_000):
        client.send(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        answer = client.next()
        assert (answer["id"], answer["error"]["code"]) == (None, -32700), answer
    client.frame([{"jsonrpc": "2.0", "id": 8, "method": "shutdown"}])  # a batch: not LSP
    client.frame({"id": 9, "method": "shutdown"})  # no "jsonrpc": "2.0"
    assert [(a["id"], a["error"]["code"]) for a in (client.next(), client.next())] == [(None, -32600), (9, -32600)]
    code, log = client.end()
    assert code == 0 and "Traceback" not in log and log.count("\n") == 6, log
    assert not [n for n in client.notes if n.get("method") == "window/showMessage"]


def test_a_content_length_past_the_bound_is_refused_and_the_server_stays_up():
    """`Content-Length: 99999999999` was read whole (MemoryError, the server gone): it is answered
    Invalid Request and skipped, and the frame after it is read."""
    client = RawClient("--backend", NOWHERE)
    client.send(b'Content-Length: 99999999999\r\nContent-Type: application/vscode-jsonrpc; charset=utf-8\r\n\r\n{"jsonrpc": "2.0", "id": 1}')
    refused = client.next()
    assert refused["id"] is None and refused["error"]["code"] == -32600 and "99999999999" in refused["error"]["message"]
    assert client.initialize(2)["result"]["capabilities"]["inlineCompletionProvider"] is not None
    code, log = client.end()
    assert code == 0 and "MemoryError" not in log and "Traceback" not in log, log


def test_a_request_before_initialize_gets_server_not_initialized():
    """LSP 3.18: before initialize, a request is answered -32002 and a notification dropped (it
    was -32603 with pygls' traceback in the answer, and a popup for the notification)."""
    client = RawClient("--backend", NOWHERE)
    client.frame({"jsonrpc": "2.0", "method": "textDocument/didOpen",
                  "params": {"textDocument": {"uri": "file:///tmp/fizz.py", "languageId": "python", "version": 1, "text": TEXT}}})
    position = {"textDocument": {"uri": "file:///tmp/fizz.py"}, "position": {"line": LINE, "character": COLUMN}, "context": {"triggerKind": 1}}
    client.frame({"jsonrpc": "2.0", "id": 1, "method": "textDocument/inlineCompletion", "params": position})
    early = client.answer(1)
    assert early["error"]["code"] == -32002 and "data" not in early["error"], early
    client.initialize(2)
    code, log = client.end()
    assert code == 0 and "Traceback" not in log, log
    assert client.notes == [], client.notes  # the early didOpen: no popup, no log message


@pytest.mark.parametrize("shutdown, code", [(True, 0), (False, 1)])
def test_exit_without_shutdown_exits_1(shutdown, code):
    client = RawClient("--backend", NOWHERE)
    client.initialize()
    assert client.end(shutdown)[0] == code


def test_a_backend_that_comes_up_late_is_tried_again_on_a_later_request():
    """`sharpen lsp --backend URL` started before the server: it stayed "unavailable" for ever.
    A request after the backoff tries again; the client is told when the server answers."""
    import json
    import socket
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Completions(BaseHTTPRequestHandler):
        def _send(self, body: bytes) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            self._send(b'{"data": [{"id": "late-model", "owned_by": "x"}]}')

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            self._send(json.dumps({"choices": [{"index": 0, "text": "print(i)", "finish_reason": "stop"}]}).encode())

        def log_message(self, *args) -> None:
            pass

    with socket.socket() as probe:  # a free port, nothing listening on it yet
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    client = RawClient("--backend", f"http://127.0.0.1:{port}")
    client.initialize()
    client.frame({"jsonrpc": "2.0", "method": "textDocument/didOpen",
                  "params": {"textDocument": {"uri": "file:///tmp/fizz.py", "languageId": "python", "version": 1, "text": TEXT}}})
    position = {"textDocument": {"uri": "file:///tmp/fizz.py"}, "position": {"line": LINE, "character": COLUMN}, "context": {"triggerKind": 1}}
    client.frame({"jsonrpc": "2.0", "id": "early", "method": "textDocument/inlineCompletion", "params": position})
    assert client.answer("early")["result"] is None
    assert any("unavailable" in n["params"]["message"] for n in client.notes if n.get("method") == "window/logMessage")
    httpd = ThreadingHTTPServer(("127.0.0.1", port), Completions)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        for attempt in range(120):  # the backoff's first wait is a second; each request before it is answered at once
            client.frame({"jsonrpc": "2.0", "id": attempt, "method": "textDocument/inlineCompletion", "params": position})
            answer = client.answer(attempt)
            if answer["result"] is not None:
                break
            time.sleep(0.25)
        assert answer["result"]["items"][0]["insertText"] == "print(i)"
        told = [n["params"]["message"] for n in client.notes if n.get("method") == "window/showMessage"]
        assert told == ["sharpen: late-model is reachable again"], told
        assert client.end()[0] == 0
    finally:
        httpd.shutdown()
        httpd.server_close()
