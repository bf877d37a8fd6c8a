"""A live `sharpen serve` for tests: a real process on a free loopback port, and local runs to
compare its answers with."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@contextmanager
def live_server(*args: str, env: dict | None = None, timeout: float = 120.0, log=None):
    """`sharpen serve --port 0 ARGS` until the block ends; yields (base URL, process). `log`: a
    binary file for its stderr (a temporary one when None), for a test that reads the log."""
    with (tempfile.TemporaryFile("w+b") if log is None else _kept(log)) as log:
        process = subprocess.Popen([sys.executable, "-m", "sharpen.app.cli", "serve", "--port", "0", *args],
                                   stdout=subprocess.DEVNULL, stderr=log, cwd=ROOT, env={**os.environ, **(env or {})})
        try:
            deadline = time.monotonic() + timeout
            while True:
                log.seek(0)
                text = log.read().decode("utf-8", "replace")
                if "listening on http://" in text:
                    url = text.split("listening on ")[1].split()[0]
                    break
                if process.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"the server did not start: {text}")
                time.sleep(0.05)
            yield url, process
        finally:
            if process.poll() is None:
                process.send_signal(signal.SIGINT)
                try:
                    process.wait(10)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()


@contextmanager
def _kept(file):
    yield file


@contextmanager
def in_process_server(app):
    """`app` on uvicorn in a thread of this process, on a free loopback port; yields its URL."""
    import threading

    import uvicorn

    from sharpen.app.serve.main import bind

    sock = bind("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True, name="in-process-server")
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


def metric(url: str, name: str) -> float:
    import httpx

    for line in httpx.get(f"{url}/metrics").text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"no metric {name}")


def local_text(runner, text: str, at: int, tokens: int, **sampling) -> str:
    """What a one-point infill gives in this process, run alone."""
    from sharpen.core.request import EditRequest
    from sharpen.core.settings import Sampling
    from sharpen.core.spans import Span

    return runner.result(EditRequest(text, (Span(at, at, max_tokens=tokens),), Sampling(**sampling))).result.spans[0].text


def four_runs_second_stopped(runner, batch: list) -> tuple[list, list[int]]:
    """Four runs of `batch` at once on `runner`, the second stopped from its third frame on (read
    by its loop between steps). Returns each run's events and the batcher's runs per pass formed
    after the stop was seen: within one step, no pass holds four runs again."""
    import threading

    seen: dict = {"frames": 0, "passes_at_stop": None}

    def stop_after_three() -> bool:
        if seen["passes_at_stop"] is None and seen["frames"] >= 3:
            seen["passes_at_stop"] = len(runner.batcher.runs_per_pass)
        return seen["passes_at_stop"] is not None

    stops = [lambda: False, stop_after_three, lambda: False, lambda: False]
    out: list = [None] * 4
    start = threading.Barrier(4)

    def one(i: int) -> None:
        start.wait()
        events = []
        for event in runner.run(batch[i], stops[i]):
            events.append(event)
            if i == 1:
                seen["frames"] += 1
        out[i] = events

    threads = [threading.Thread(target=one, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    return out, runner.batcher.runs_per_pass[seen["passes_at_stop"]:]
