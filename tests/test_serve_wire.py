"""`sharpen serve` as the network and its operator see it (issue 41 item 5, issue 39 item 3): broken
HTTP framing answered in the JSON error shape, clients that leave while sending their body, a
stderr nobody reads, and the server on a remote Backend (`sharpen serve --backend URL` of another
sharpen server, which runs in this process)."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from urllib.parse import urlsplit

import httpx
import pytest
from serving import ROOT, in_process_server, live_server

PREFIX = "def fizzbuzz(n):\n    for i in range(1, n + 1):\n"
SUFFIX = "\n    return n\n"


def _raw(url: str, data: bytes, timeout: float = 30) -> bytes:
    """Send `data` on a fresh connection and read until the server closes it."""
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=timeout) as sock:
        sock.sendall(data)
        out = b""
        while chunk := sock.recv(65536):
            out += chunk
    return out


@pytest.fixture(scope="module")
def served():
    with tempfile.TemporaryFile("w+b") as log:
        with live_server(log=log) as (url, process):
            yield url, log


@pytest.mark.parametrize("framing", [b"Content-Length: abc\r\n", b"Content-Length: -5\r\n", b"Content-Length: 5\r\nContent-Length: 6\r\n"],
                         ids=["not-a-number", "negative", "two-lengths"])
def test_broken_http_framing_gets_the_documented_json_error(served, framing):
    url, _ = served
    answer = _raw(url, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + framing + b"\r\n{\"prompt\": \"x\"}")
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400") and b"content-type: application/json" in head.lower()
    error = json.loads(body)["error"]
    assert error["code"] == 400 and error["type"] == "invalid_request_error" and "framing" in error["message"]
    assert httpx.get(f"{url}/health").json()["status"] == "ok"


def test_clients_that_close_while_sending_their_body_leave_at_most_a_line_each(served):
    url, log = served
    log.seek(0, os.SEEK_END)
    before = log.tell()
    parts = urlsplit(url)
    for _ in range(20):
        with socket.create_connection((parts.hostname, parts.port), timeout=10) as sock:
            sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"prompt\": \"")
            time.sleep(0.02)  # the server is reading the body when the client goes
    assert httpx.get(f"{url}/health").json()["status"] == "ok"
    time.sleep(0.5)  # the log's thread writes what it was handed
    log.seek(before)
    written = log.read().decode("utf-8", "replace")
    assert "Traceback" not in written and written.count("\n") <= 20, written[:2000]


def test_a_stderr_nobody_reads_never_blocks_the_server():
    """Every request logs a line (access log at info) with a long path, so a pipe's 64 KB fill in a
    few requests; the server answers on, dropping log lines rather than waiting for a reader."""
    process = subprocess.Popen([sys.executable, "-m", "sharpen.app.cli", "serve", "--port", "0", "--log-level", "info"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT)
    try:
        line = b""
        while b"listening on http://" not in line:
            line = process.stderr.readline()
            assert line or process.poll() is None, "the server did not start"
        url = line.decode().split("listening on ")[1].split()[0]
        # from here on nobody reads the server's stderr
        answered = []

        def client() -> None:
            with httpx.Client(timeout=60) as http:
                for _ in range(8):
                    answered.append(http.get(f"{url}/no-such-path/{'x' * 8000}").status_code)

        threads = [threading.Thread(target=client) for _ in range(16)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(90)
        assert answered.count(404) == 16 * 8  # 128 lines of 8 KB: twice a pipe's buffer, none waited for
        assert httpx.get(f"{url}/health", timeout=30).json()["status"] == "ok"
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        process.stderr.close()


@pytest.fixture(scope="module")
def upstream():
    """A sharpen server in this process: the remote model `sharpen serve --backend URL` serves."""
    from sharpen.app.backend import LocalBackend
    from sharpen.core.models.load import load_model
    from sharpen.app.serve.app import build_app
    from sharpen.app.serve.common import Server
    from sharpen.core.settings import ModelRequest

    backend = LocalBackend.of(load_model(ModelRequest()))
    with in_process_server(build_app(Server(backend, backend.describe()))) as url:
        yield url


def test_serve_on_a_remote_backend_answers_infill_and_completions_as_the_model_does(upstream):
    with tempfile.TemporaryFile("w+b") as log, live_server("--backend", upstream, log=log) as (front, _):
        infill = {"input_prefix": PREFIX, "input_suffix": SUFFIX, "n_predict": 12, "seed": 3}
        there = httpx.post(f"{upstream}/infill", json=infill, timeout=60).json()
        here = httpx.post(f"{front}/infill", json=infill, timeout=60)
        assert here.status_code == 200, here.text
        assert here.json()["content"] == there["content"] and here.json()["tokens_evaluated"] == there["tokens_evaluated"]
        completion = {"prompt": PREFIX, "suffix": SUFFIX, "max_tokens": 12, "seed": 3}
        there = httpx.post(f"{upstream}/v1/completions", json=completion, timeout=60).json()
        here = httpx.post(f"{front}/v1/completions", json=completion, timeout=60)
        assert here.status_code == 200, here.text
        assert here.json()["choices"][0]["text"] == there["choices"][0]["text"] and here.json()["usage"] == there["usage"]
        streamed = httpx.post(f"{front}/v1/completions", json={**completion, "stream": True}, timeout=60).text
        assert streamed.rstrip().endswith("data: [DONE]")
        log.seek(0)
        assert f"runs go to {upstream}" in log.read().decode()  # the start says where the model is


def test_log_lines_dropped_on_a_full_queue_are_counted_in_the_log():
    import logging
    import queue

    from sharpen.app.serve.main import _DroppingQueueHandler

    records: queue.Queue = queue.Queue(1)
    handler = _DroppingQueueHandler(records)
    for n in range(3):  # the first fits; two find the queue full and go, without waiting
        handler.emit(logging.makeLogRecord({"msg": f"line {n}"}))
    assert records.get_nowait().getMessage() == "line 0"
    handler.emit(logging.makeLogRecord({"msg": "line 3"}))
    assert records.get_nowait().getMessage() == "2 log lines dropped: stderr was not read"
    assert handler.dropped == 1  # line 3 found no room behind the notice: counted for the next one
