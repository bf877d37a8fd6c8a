"""--backend against servers that answer what sharpen cannot use (app/remote.py): each is one
line naming the server (exit 4 headless), never an internal error, and never a silent edit."""
from __future__ import annotations

import json
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from sharpen.app.remote import RemoteBackend
from sharpen.core.errors import ModelError, UsageError
from sharpen.core.request import EditRequest
from sharpen.core.run import Done
from sharpen.core.spans import Span

ROOT = Path(__file__).resolve().parent.parent
MODELS = b'{"object": "list", "data": [{"id": "m", "object": "model", "owned_by": "x"}]}'
DEEP = b"[" * 50_000 + b"]" * 50_000  # deeper than Python's recursion limit: json.loads raises RecursionError
TEXT = "def f(x):\n    return x\n"


class Scripted(BaseHTTPRequestHandler):
    """Answers each path with the (status, content type, body) in the server's `answers`."""

    def _answer(self) -> None:
        answer = self.server.answers.get(self.path, (404, "application/json", b'{"error": "no"}'))
        if callable(answer):  # a server that writes its answer over time
            answer(self)
            return
        status, kind, body = answer
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self._answer()

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.server.bodies.setdefault(self.path, []).append(json.loads(body))
        self._answer()

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def server():
    """A local server whose answers a test sets: server.answers[path] = (status, type, body)."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Scripted)
    httpd.answers = {"/v1/models": (200, "application/json", MODELS)}
    httpd.bodies = {}  # path -> the JSON bodies posted to it, in order
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def url(httpd) -> str:
    return f"http://127.0.0.1:{httpd.server_address[1]}"


def run(httpd, protocol: str = "openai") -> list:
    request = EditRequest(TEXT, (Span(21, 22, "rewrite"),))  # the x of "return x"
    return list(RemoteBackend(url(httpd), protocol=protocol).run(request))


def completion(text) -> bytes:
    import json

    return json.dumps({"choices": [{"index": 0, "text": text, "finish_reason": "stop"}]}).encode()


def test_a_plain_answer_is_the_span_text_and_an_empty_one_is_an_answer(server):
    server.answers["/v1/completions"] = (200, "application/json", completion("x + 1"))
    done = run(server)[-1]
    assert isinstance(done, Done) and done.result.text == "def f(x):\n    return x + 1\n"
    server.answers["/v1/completions"] = (200, "application/json", completion(""))
    assert run(server)[-1].result.text == "def f(x):\n    return \n"  # "" deletes the selection: the server said so


@pytest.mark.parametrize("choice", [{"text": 5}, {"finish_reason": "stop"}, {"text": None, "delta": {"content": ["x"]}}],
                         ids=["number", "missing", "list"])
def test_an_answer_without_a_text_is_an_error_not_an_empty_edit(server, choice):
    import json

    server.answers["/v1/completions"] = (200, "application/json", json.dumps({"choices": [choice]}).encode())
    with pytest.raises(ModelError, match="answered without a text"):
        run(server)


def test_a_diffusing_stream_that_ends_without_any_draft_is_an_error(server):
    events = b'data: {"choices": [{"delta": {"role": "assistant"}}]}\n\ndata: {"choices": [{"finish_reason": "stop"}]}\n\ndata: [DONE]\n\n'
    server.answers["/v1/fim/completions"] = (200, "text/event-stream", events)
    with pytest.raises(ModelError, match="answered without a text"):
        run(server, "mercury")


@pytest.mark.parametrize("where", ["/v1/models", "/v1/completions"])
def test_json_nested_past_the_recursion_limit_is_not_json(server, where):
    server.answers[where] = (200, "application/json", DEEP)
    with pytest.raises(ModelError, match="answered something that is not JSON"):
        run(server)


def test_an_error_body_nested_past_the_recursion_limit_is_still_one_line(server):
    server.answers["/v1/completions"] = (400, "application/json", DEEP)
    with pytest.raises(UsageError, match=r"refused the request \(400: \[\[\["):
        run(server)


def test_an_event_that_is_not_utf8_is_one_line(server):
    server.answers["/v1/fim/completions"] = (200, "text/event-stream", b'data: {"choices": [{"text": "\xff"}]}\n\n')
    with pytest.raises(ModelError, match="sent an event that is not UTF-8"):
        run(server, "mercury")


def test_a_sharpen_server_whose_max_len_is_no_count_is_no_limit(server):
    server.answers["/v1/models"] = (200, "application/json", b'{"data": [{"id": "m", "meta": {"noise": "mask", "max_len": "x"}}]}')
    info = RemoteBackend(url(server)).load()
    assert info.max_len > 10**6 and info.name == "m"


@pytest.mark.parametrize("meta, chat, instruct", [
    ('{"noise": "mask", "chat": true, "instruct": false}', True, False),  # the embedded model: a chat template, no instructions
    ('{"noise": "mask", "chat": true, "instruct": true}', True, True),
    ('{"noise": "mask", "chat": true}', True, True),  # a server from before "instruct": a chat template meant instructions
    ('{"noise": "mask", "chat": false}', False, False),
])
def test_a_sharpen_servers_chat_and_instructions_are_its_word(server, meta, chat, instruct):
    server.answers["/v1/models"] = (200, "application/json", f'{{"data": [{{"id": "m", "meta": {meta}}}]}}'.encode())
    info = RemoteBackend(url(server)).load()
    assert (info.chat_template is not None, info.instruct) == (chat, instruct)


@pytest.mark.parametrize("meta, edits", [('{"noise": "mask", "edits": true}', True), ('{"noise": "mask"}', False),
                                          ('{"noise": "mask", "edits": "yes"}', False)])
def test_a_sharpen_servers_self_editing_loop_is_its_word(server, meta, edits):
    """A server whose model edits its own tokens (LLaDA2.1) says so (ModelInfo.edits): a next
    edit through it starts from the window's text (core/next_edit/predict.py)."""
    server.answers["/v1/models"] = (200, "application/json", f'{{"data": [{{"id": "m", "meta": {meta}}}]}}'.encode())
    assert RemoteBackend(url(server)).load().edits is edits


def test_headless_edit_on_a_server_without_text_exits_4_and_leaves_the_file(server, tmp_path):
    server.answers["/v1/completions"] = (200, "application/json", b'{"choices": [{"text": 5, "finish_reason": "stop"}]}')
    path = tmp_path / "f.py"
    path.write_text(TEXT)
    out = subprocess.run([sys.executable, "-m", "sharpen.app.cli", str(path), "--apply-edit", "2:12-2:13", "--in-place",
                          "--backend", url(server)],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 4 and out.stderr.count("\n") == 1 and "answered without a text" in out.stderr, out.stderr
    assert path.read_text() == TEXT


def test_a_diffusing_streams_usage_chunk_gives_the_counts_and_is_no_error(server):
    """With stream_options.include_usage (which sharpen asks for) an OpenAI-style stream ends with
    a chunk whose choices are empty and whose usage holds the counts: it was "answered without
    choices" and the edit failed; now its counts are the result's."""
    events = (b'data: {"choices": [{"index": 0, "delta": {"role": "assistant", "content": "x"}, "finish_reason": null}], "usage": null}\n\n'
              b'data: {"choices": [{"index": 0, "delta": {"content": "x * 2"}, "finish_reason": "stop"}], "usage": null}\n\n'
              b'data: {"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12}}\n\n'
              b'data: [DONE]\n\n')
    server.answers["/v1/fim/completions"] = (200, "text/event-stream", events)
    done = run(server, "mercury")[-1]
    assert done.result.text == "def f(x):\n    return x * 2\n"
    assert (done.result.spans[0].tokens, done.result.prompt_tokens) == (3, 9)


def chat_answer(content: str) -> bytes:
    return json.dumps({"choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
                       "usage": {"prompt_tokens": 40, "completion_tokens": 4, "total_tokens": 44}}).encode()


def test_the_chat_protocol_sends_sharpens_marked_turn_and_takes_instructions(server):
    """backend_protocol = "chat": an instruct model behind /v1/chat/completions (vLLM, which takes
    no suffix) gets the turn sharpen writes for a block-diffusion model's chat form; a fenced
    answer is the code inside the fence; instructions reach it."""
    from sharpen.core.instruct import CLOSE, OPEN

    server.answers["/v1/chat/completions"] = (200, "application/json", chat_answer("```python\nx * 2\n```"))
    backend = RemoteBackend(url(server), protocol="chat")
    info = backend.load()
    assert info.instruct and not info.drafts
    request = EditRequest(TEXT, (Span(21, 22, "rewrite", instruction="double it"),))
    done = list(backend.run(request))[-1]
    assert done.result.text == "def f(x):\n    return x * 2\n" and done.result.prompt_tokens == 40
    sent = server.bodies["/v1/chat/completions"][-1]
    turn = sent["messages"][0]["content"]
    assert sent["messages"][0]["role"] == "user" and turn.startswith("double it\n")
    assert turn.endswith(f"def f(x):\n    return {OPEN}x{CLOSE}\n")
    plain = list(backend.run(EditRequest(TEXT, (Span(21, 22, "rewrite"),))))[-1]
    assert plain.result.text == "def f(x):\n    return x * 2\n"
    assert server.bodies["/v1/chat/completions"][-1]["messages"][0]["content"].startswith("Rewrite the marked part")


@pytest.mark.parametrize("answer, region, text", [
    ("```python\nx * 2\n```", "x", "x * 2"),
    ("```\n    return y\n```\n", "    return x\n", "    return y\n"),  # a whole line keeps its line break
    ("x * 2", "x", "x * 2"),  # no fence
    ("```python\na\n```\nand then\n```python\nb\n```", "x", "```python\na\n```\nand then\n```python\nb\n```"),  # two blocks: as is
    ("```\ncode\n```", "```\nold\n```", "```\ncode\n```"),  # the region is itself fenced (Markdown): as is
])
def test_a_chat_answer_wrapped_in_one_fence_is_its_code(answer, region, text):
    from sharpen.app.remote import unfenced

    assert unfenced(answer, region) == text


def test_a_server_refusing_the_suffix_says_to_use_the_chat_protocol(server):
    server.answers["/v1/completions"] = (400, "application/json", b'{"object": "error", "message": "suffix is not currently supported", "code": 400}')
    with pytest.raises(UsageError) as refused:
        run(server)
    assert str(refused.value).endswith('(400: suffix is not currently supported); this server takes no suffix: '
                                       'set [backend] backend_protocol = "chat" to send infills as a chat')


def test_a_one_span_server_gets_whole_lines_within_the_context_budget(server):
    """A large file is not sent whole with every request: about context_tokens x 4 characters,
    half each side, cut at line starts and ends."""
    from sharpen.core.settings import Editing

    server.answers["/v1/completions"] = (200, "application/json", completion("0"))
    lines = [f"value_{n} = {n}\n" for n in range(20_000)]
    text = "".join(lines)
    at = text.index("value_10000 = ") + len("value_10000 = ")
    request = EditRequest(text, (Span(at, at + len("10000")),), editing=Editing(context_tokens=256))
    done = list(RemoteBackend(url(server), protocol="openai").run(request))[-1]
    assert done.result.text == text.replace("value_10000 = 10000", "value_10000 = 0")
    sent = server.bodies["/v1/completions"][-1]
    assert 0 < len(sent["prompt"]) <= 512 and 0 < len(sent["suffix"]) <= 512
    assert sent["prompt"].startswith("value_") and text[:at].endswith(sent["prompt"])
    assert sent["suffix"].endswith("\n") and text[at + 5:].startswith(sent["suffix"])
    assert done.result.context_cut  # what was left out is said (headless --json context_cut)
    at_end = list(RemoteBackend(url(server), protocol="openai").run(
        EditRequest(text, (Span(len(text), len(text)),), editing=Editing(context_tokens=256))))[-1]
    sent = server.bodies["/v1/completions"][-1]
    assert sent["suffix"] == "" and 1000 < len(sent["prompt"]) <= 1024 and text.endswith(sent["prompt"])  # the whole budget before it
    assert at_end.result.context_cut
    small = list(RemoteBackend(url(server), protocol="openai").run(EditRequest(TEXT, (Span(21, 22),))))[-1]
    assert not small.result.context_cut


@pytest.mark.parametrize("owned_by, protocol", [("vllm", "chat"), ("sglang", "chat"), ("llamacpp", "openai"), ("openai", "openai")])
def test_auto_talks_to_vllm_and_sglang_as_a_chat(server, owned_by, protocol):
    """Their /v1/models names them (ModelCard's owned_by default: vLLM "vllm", SGLang "sglang");
    their completions take no suffix, and the diffusion models they serve are instruct models."""
    listing = {"object": "list", "data": [{"id": "inclusionAI/LLaDA2.0-mini", "object": "model", "owned_by": owned_by, "max_model_len": 8192}]}
    server.answers["/v1/models"] = (200, "application/json", json.dumps(listing).encode())
    backend = RemoteBackend(url(server))
    info = backend.load()
    assert backend.protocol == protocol and info.instruct == (protocol == "chat")


# -- a server is untrusted input -------------------------------------------------------------

# ESC (a terminal's clear-screen), NUL, a C1 CSI, a lone CR, a lone surrogate, U+FFFD (TEXT holds none).
HOSTILE = "a\x1b[2J\x00b\x9b1mc\rd\ud800e\ufffdf"
CLEAN = "a[2Jb1mc\nde" + "f"  # what the local engine would write: no control characters, LF breaks
SHARPEN_MODELS = b'{"data": [{"id": "m\\u001b[31m", "meta": {"noise": "mask", "max_len": 4096}}]}'


def sharpen_events(text: str) -> bytes:
    """sharpen serve's /v1/edits stream for TEXT's rewrite of x (a frame, the result) writing `text`."""
    last = {"step": 1, "total_steps": 1, "elapsed": 0.1, "spans": [{"text": text, "slots": [["sharp", text, 0.9]]}]}
    result = {"type": "result", "model": "m", "noise": "mask", "steps": 1, "tokens": 1, "prompt_tokens": 3, "denoise_seconds": 0.1,
              "spans": [{"start": 21, "end": 22, "mode": "rewrite", "text": text, "tokens": 1, "alternatives": [text]}], "last": last}
    return b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in ({"type": "frame", **last}, result)) + b"data: [DONE]\n\n"


def diffusing_events(text: str) -> bytes:
    chunks = [{"choices": [{"index": 0, "delta": {"content": text[:3]}, "finish_reason": None}]},
              {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": "stop"}]}]
    return b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"


def hostile(server, protocol: str) -> None:
    if protocol == "sharpen":
        server.answers["/v1/models"] = (200, "application/json", SHARPEN_MODELS)
        server.answers["/v1/edits"] = (200, "text/event-stream", sharpen_events(HOSTILE))
    server.answers["/v1/completions"] = (200, "application/json", completion(HOSTILE))
    server.answers["/v1/chat/completions"] = (200, "application/json", chat_answer(HOSTILE))
    server.answers["/v1/fim/completions"] = (200, "text/event-stream", diffusing_events(HOSTILE))


@pytest.mark.parametrize("protocol", ["sharpen", "mercury", "openai", "chat"])
def test_what_a_server_writes_is_filtered_as_the_local_engine_filters(server, protocol):
    """A server's text with NUL and ESC bytes was written raw: each protocol's result, its drafts
    and the model's name (the status bar's) lose the control characters a local model never writes."""
    hostile(server, protocol)
    backend = RemoteBackend(url(server), protocol="auto" if protocol == "sharpen" else protocol)
    events = list(backend.run(EditRequest(TEXT, (Span(21, 22, "rewrite"),))))
    done = events[-1]
    assert backend.protocol == protocol and isinstance(done, Done)
    assert done.result.text == f"def f(x):\n    return {CLEAN}\n"
    assert set(done.result.spans[0].alternatives) == {CLEAN} and done.result.samples == (done.result.text,)
    shown = [s.text for e in events[:-1] for s in e.spans] + [x.text for e in events[:-1] for s in e.spans for x in s.slots]
    assert not any("\x1b" in t or "\x00" in t or "\x9b" in t for t in shown + [backend.describe().name])


def test_headless_apply_edit_never_writes_a_servers_terminal_escape(server, tmp_path):
    """--apply-edit --backend over sharpen's own /v1/edits: the file gets the filtered text, and
    nothing the server sent reaches the terminal raw."""
    hostile(server, "sharpen")
    path = tmp_path / "f.py"
    path.write_text(TEXT)
    out = subprocess.run([sys.executable, "-m", "sharpen.app.cli", str(path), "--apply-edit", "2:12-2:13", "--in-place", "--backend", url(server)],
                         capture_output=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    assert path.read_bytes() == f"def f(x):\n    return {CLEAN}\n".encode()
    assert b"\x1b" not in out.stdout + out.stderr


def keep_open(write_every: bytes):
    """A server that answers 200 with an event stream and then only writes `write_every` every
    0.1 s (an SSE comment, one byte of a line that never ends), for at most 30 s."""
    import time

    def answer(handler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.end_headers()
        try:
            for _ in range(300):
                handler.wfile.write(write_every)
                handler.wfile.flush()
                time.sleep(0.1)
        except OSError:  # the client left
            pass
    return answer


@pytest.mark.parametrize("write_every", [b": keep-alive\n\n", b"x"], ids=["sse-comments", "a-line-without-end"])
def test_a_stream_kept_open_without_an_answer_is_bounded_by_the_timeout(server, tmp_path, write_every):
    """The timeout bounds the whole answer, not each gap between bytes: exit 4, one line, the file
    untouched (it ran until the server gave up, 30 s here, and then blamed the server's close)."""
    server.answers["/v1/fim/completions"] = keep_open(write_every)
    path, config = tmp_path / "f.py", tmp_path / "config.toml"
    path.write_text(TEXT)
    config.write_text('[backend]\nbackend_protocol = "mercury"\nbackend_timeout = 1.5\n')
    out = subprocess.run([sys.executable, "-m", "sharpen.app.cli", "--config", str(config), str(path), "--apply-edit", "2:12-2:13",
                          "--in-place", "--backend", url(server)], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 4 and out.stderr.count("\n") == 1 and "did not answer within 1.5 s" in out.stderr, out.stderr
    assert path.read_text() == TEXT


@pytest.mark.parametrize("protocol", ["sharpen", "mercury", "openai", "chat"])
def test_a_remote_run_imports_no_model_code(server, tmp_path, protocol):
    """--backend runs the model elsewhere: the headless run imports no torch (it cost 1 to 5.6 s
    before the request left)."""
    hostile(server, protocol)
    path, config = tmp_path / "f.py", tmp_path / "config.toml"
    path.write_text(TEXT)
    config.write_text(f'[backend]\nbackend_protocol = "{protocol}"\n')
    code = ("import sys\nfrom sharpen.app.cli import main\n"
            f"code = main(['--config', {str(config)!r}, {str(path)!r}, '--apply-edit', '2:12-2:13', '--backend', {url(server)!r}])\n"
            "assert code == 0, code\n"
            "model_code = ('torch', 'sharpen.kernels', 'sharpen.core.engine', 'sharpen.core.loops', 'sharpen.core.models.denoiser', 'sharpen.core.models.loading')\n"
            "print('torch' in sys.modules, sorted(m for m in sys.modules if m.startswith(model_code)))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-1] == "False []", out.stdout


async def test_the_editor_reaches_a_server_that_comes_up_late():
    """The editor stayed "model unavailable" for ever when its --backend server started after it:
    it tries again with backoff, and the status bar names the model once the server answers."""
    import socket

    from pilot import notices, wait_for
    from sharpen.app.config import Config
    from sharpen.app.tui.editor_app import SharpenApp
    from sharpen.app.tui.themes import load_themes

    with socket.socket() as probe:  # a free port, nothing listening on it yet
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    app = SharpenApp([], Config.of().layered({"backend": {"backend": f"http://127.0.0.1:{port}"}}), load_themes(None))
    async with app.run_test(size=(100, 32)) as pilot:
        await wait_for(pilot, lambda: app.status.model_failed, timeout=30)
        assert app.status.model == "server unavailable (retrying)"
        httpd = ThreadingHTTPServer(("127.0.0.1", port), Scripted)
        httpd.answers, httpd.bodies = {"/v1/models": (200, "application/json", MODELS)}, {}
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        try:
            await wait_for(pilot, lambda: app.backend is not None, timeout=60)
            assert app.status.model == "m (no drafts)" and not app.status.model_failed
            assert "m answers again" in notices(app)
        finally:
            httpd.shutdown()
            httpd.server_close()


def test_the_backoff_doubles_up_to_its_bound_and_a_success_resets_it():
    from sharpen.app.remote import Backoff

    now = [100.0]
    backoff = Backoff(first=1.0, most=5.0, clock=lambda: now[0])
    assert backoff.due()
    assert [backoff.failed() for _ in range(5)] == [1.0, 2.0, 4.0, 5.0, 5.0]
    assert not backoff.due() and backoff.seconds_left() == 5.0
    now[0] += 5.0
    assert backoff.due()
    backoff.succeeded()
    assert backoff.failed() == 1.0
