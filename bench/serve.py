"""Throughput and latency of `sharpen serve` with 1, 2, 4 and 8 clients at once.

    python bench/serve.py [--model M] [--requests 6] [--repeats 3] [--max-tokens 32] [--clients 1,2,4,8] [--batch 8,1]
    python bench/serve.py --batch 8,8x2,1     # also: two batched server processes, clients spread over them

Starts a server process on a free loopback port, then for each client count runs that many
threads, each sending `--requests` fill-in-the-middle completions (/v1/completions with a
suffix, different places in a few real files, seeds per request), and prints aggregate tokens
per second, requests per second and latency percentiles. It does so for two servers side by
side: one with continuous batching (--max-batch 8: concurrent runs share one forward pass per
step, core/batch.py) and one running one request at a time (--max-batch 1). Both are up for the
whole run and their rounds alternate (every client count on one, then on the other, `--repeats`
times), so load from other work on a shared machine falls on both alike; each row is the median
over the repeats, and `x one` is the median of each repeat's own ratio to that repeat's
one-client round (min-max across repeats in brackets). The server's own CPU seconds per request
(utime + stime from /proc) show the work batching saves even where wall times scatter.
`8x2` measures what a second process would add: no shared interpreter lock and no step in
lockstep with the other process's runs, only the cores (docs/server.md reads it).
Prints a table; asserts nothing.
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ["examples/fizzbuzz.py", "core/changes.py", "core/spans.py", "app/specs.py"]


def start_server(model: str | None, batch: int, extra: list[str] = ()) -> tuple[subprocess.Popen, int, object]:
    log = tempfile.TemporaryFile("w+b")
    args = [sys.executable, "-m", "sharpen.app.cli", "serve", "--port", "0", "--max-waiting", "64", "--max-batch", str(batch)]
    args += (["--model", model] if model else []) + list(extra)
    process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=log, cwd=ROOT)
    deadline = time.monotonic() + 300
    while True:
        log.seek(0)
        text = log.read().decode("utf-8", "replace")
        if "listening on http://" in text:
            return process, int(text.split("listening on http://")[1].split()[0].rsplit(":", 1)[1]), log
        if process.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"the server did not start: {text}")
        time.sleep(0.05)


def jobs(count: int, max_tokens: int) -> list[dict]:
    """Completions at line starts of real files: the text before as prompt, after as suffix."""
    out = []
    texts = [(ROOT / s).read_text(encoding="utf-8") for s in SOURCES]
    for i in range(count):
        text = texts[i % len(texts)]
        lines = text.splitlines(keepends=True)
        row = 3 + (i * 7) % max(1, len(lines) - 6)
        at = sum(len(line) for line in lines[:row])
        out.append({"prompt": text[:at], "suffix": text[at:], "max_tokens": max_tokens, "seed": i})
    return out


def ask(port: int, body: dict) -> tuple[float, int]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    started = time.perf_counter()
    conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    answer = conn.getresponse()
    data = json.loads(answer.read())
    conn.close()
    if answer.status != 200:
        raise SystemExit(f"the server answered {answer.status}: {data}")
    return time.perf_counter() - started, int(data["usage"]["completion_tokens"])


def cpu_seconds(pid: int) -> float:
    """The process's user + system CPU time so far (Linux /proc; NaN elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def round_of(ports: list[int], clients: int, requests: int, max_tokens: int, pids: list[int]) -> dict:
    """`clients` threads at once, client k on server k mod len(ports); CPU summed over the servers."""
    work = jobs(clients * requests, max_tokens)
    latencies: list[float] = []
    tokens = [0]
    lock = threading.Lock()

    def client(k: int) -> None:
        for body in work[k::clients]:
            seconds, n = ask(ports[k % len(ports)], body)
            with lock:
                latencies.append(seconds)
                tokens[0] += n

    threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    cpu = sum(cpu_seconds(pid) for pid in pids)
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - started
    cpu = sum(cpu_seconds(pid) for pid in pids) - cpu
    latencies.sort()
    return {"clients": clients, "requests": len(latencies), "tokens": tokens[0], "wall": wall,
            "tok_s": tokens[0] / wall, "req_s": len(latencies) / wall, "p50": statistics.median(latencies),
            "p95": latencies[min(len(latencies) - 1, int(0.95 * len(latencies)))], "cpu": cpu / len(latencies)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="checkpoint (default: the embedded model)")
    parser.add_argument("--requests", type=int, default=6, help="requests per client per round (default 6)")
    parser.add_argument("--repeats", type=int, default=3, help="rounds per client count and server, alternating (default 3)")
    parser.add_argument("--max-tokens", type=int, default=32, help="slots per completion (default 32)")
    parser.add_argument("--clients", default="1,2,4,8", help="client counts (default 1,2,4,8)")
    parser.add_argument("--batch", default="8,1",
                        help="the servers to compare, by --max-batch (default 8,1: batched, one at a time); BxP: P server "
                             "processes of --max-batch B, clients spread over them (8x2: what a second process adds)")
    parser.add_argument("--server-args", default="", help="more `sharpen serve` options for every server, e.g. \"--threads 2\"")
    args = parser.parse_args()
    modes = [m.strip() for m in args.batch.split(",")]
    counts = [int(c) for c in args.clients.split(",")]
    servers: dict[str, list[tuple[subprocess.Popen, int]]] = {}
    try:
        for mode in modes:
            batch, _, processes = mode.partition("x")
            servers[mode] = []
            for _ in range(int(processes or 1)):
                process, port, _log = start_server(args.model, int(batch), args.server_args.split())
                servers[mode].append((process, port))
                ask(port, jobs(1, args.max_tokens)[0])  # warm-up: first-call costs stay out of the table
        rounds: dict[tuple[str, int], list[dict]] = {(m, c): [] for m in modes for c in counts}
        for _ in range(args.repeats):
            for mode in modes:
                ports, pids = [port for _, port in servers[mode]], [process.pid for process, _ in servers[mode]]
                for c in counts:
                    rounds[mode, c].append(round_of(ports, c, args.requests, args.max_tokens, pids))
    finally:
        for process, _port in (pair for group in servers.values() for pair in group):
            process.send_signal(signal.SIGINT)
            process.wait(30)
    median = statistics.median
    print(f"sharpen serve, {args.model or 'embedded model'}, {args.max_tokens} slots per completion, {os.cpu_count()} CPUs visible, "
          f"{args.repeats} alternating repeats of {args.requests} requests per client")
    print("batch: the server's --max-batch (1: one run at a time; BxP: P processes); x one: aggregate tok/s over one client's at the same batch\n"
          "(median of the repeats' own ratios, [min-max]); x serial: over the last batch listed at the same client count;\n"
          "cpu/req: the server's CPU seconds per request; medians over the repeats")
    print(f"{'batch':>5} {'clients':>7} {'requests':>8} {'tok/s':>8} {'x one':>6} {'[min-max]':>11} {'x serial':>8} "
          f"{'req/s':>6} {'p50 s':>6} {'p95 s':>6} {'cpu/req':>7}")
    serial = modes[-1]
    for mode in modes:
        for c in counts:
            rows = rounds[mode, c]
            ratios = [r["tok_s"] / one["tok_s"] for r, one in zip(rows, rounds[mode, counts[0]])]
            versus = median([r["tok_s"] / s["tok_s"] for r, s in zip(rows, rounds[serial, c])])
            spread = f"[{min(ratios):.2f}-{max(ratios):.2f}]"
            print(f"{mode:>5} {c:>7} {sum(r['requests'] for r in rows):>8} {median(r['tok_s'] for r in rows):>8.1f} "
                  f"{median(ratios):>6.2f} {spread:>11} {versus:>8.2f} {median(r['req_s'] for r in rows):>6.2f} "
                  f"{median(r['p50'] for r in rows):>6.3f} {median(r['p95'] for r in rows):>6.3f} {median(r['cpu'] for r in rows):>7.3f}")

if __name__ == "__main__":
    main()
