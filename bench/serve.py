"""`sharpen serve` with 1, 2, 4 and 8 clients at once, batched against one run at a time, per loop kind.

    python bench/serve.py                                    # masked, block-causal, MoE; small models and the 0.5B shape
    python bench/serve.py --models 0.5b --requests 1 --repeats 1 --context 120   # docs/server.md's table (~10 min per kind here)
    python bench/serve.py --quick                            # seconds: small models, 1 and 2 clients (tests, CI)
    python bench/serve.py --kinds masked --batch 8,8x2,1     # also two batched processes, clients spread over them

For each loop kind (masked, block-causal, mixture of experts) and model size (bench/serve_models.py:
the embedded model or the tests' tiny fixtures, and checkpoints at the Qwen2.5-0.5B or 1.5B shape,
random weights, float32 unless --checkpoint-dtype says otherwise) it starts the servers to compare side by side on free loopback ports: one with
continuous batching (`--max-batch 8`: concurrent runs share passes, core/batch.py) and one with
batching off (`--max-batch 1`: one run at a time). Their rounds alternate (every client count on
one, then on the other, `--repeats` times), so load from other work on a shared machine falls on
both alike. A round at c clients runs c threads, each streaming `--requests` fill-in-the-middle
completions (/v1/completions, `stream` and `diffusing`: one whole draft per denoising step).

Every round sends the same mix of requests: one fixed list (real files, a cursor at a line start,
`--context` characters of prompt before it and a quarter of that after, a seed per request), and
client k sends the whole list rotated by k. So c clients send c times the same requests, whatever
c, and the ratios compare equal work (the `mix` column fingerprints each round's requests per client:
one value down the table). Columns:

- tok/s: completion tokens over the round's wall time; x one: over the one-at-a-time server's at
  the same client count (median of each repeat's own ratio);
- p50/p90 s: request latency; draft p50/p90: time to the first streamed draft (pooled over repeats);
- runs/pass: runs' passes over forward passes run, from the server's /metrics counters
  (sharpen_packed_pass_runs_total / sharpen_packed_passes_total) before and after the rounds;
- alone: the share of passes that held one run, from /metrics' runs-per-pass histogram
  (sharpen_pass_runs_bucket{le="1"}); a server whose /metrics has only the two totals gets their
  lower bound, marked >=: a pass that packs holds at least two runs, so at most runs - passes packed.

The prefix cache is off (`--prefix-cache-mb 0`): every round repeats the same prompts, which it
would answer from cache after the warm-up (`--server-args "--prefix-cache-mb 1024"` keeps it).
Prints a markdown table; asserts nothing.
"""
from __future__ import annotations

import argparse
import collections
import hashlib
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
sys.path.insert(0, str(ROOT / "bench"))

import torch  # noqa: E402

from serve_models import KINDS, MODELS, checkpoint  # noqa: E402

SOURCES = ["examples/fizzbuzz.py", "core/changes.py", "core/spans.py", "app/specs.py"]
# Every server's limits: nothing refused or cut short while eight clients wait their turn.
SERVER_ARGS = ["--max-waiting", "64", "--max-seconds", "3600", "--prefix-cache-mb", "0"]


def launch(model: str | None, batch: int, extra: list[str] = ()) -> tuple[subprocess.Popen, object]:
    """A server process on a free port; `port_of` waits for it (so several load at once)."""
    log = tempfile.TemporaryFile("w+b")
    args = [sys.executable, "-m", "sharpen.app.cli", "serve", "--port", "0", *SERVER_ARGS, "--max-batch", str(batch)]
    args += (["--model", model] if model else []) + list(extra)
    return subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=log, cwd=ROOT), log


def port_of(process: subprocess.Popen, log, timeout: float = 600) -> int:
    deadline = time.monotonic() + timeout
    while True:
        log.seek(0)
        text = log.read().decode("utf-8", "replace")
        if "listening on http://" in text:
            return int(text.split("listening on http://")[1].split()[0].rsplit(":", 1)[1])
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise SystemExit(f"the server did not start: {text}")
        time.sleep(0.05)


def jobs(count: int, max_tokens: int, context: int = 1 << 30) -> list[dict]:
    """Completions at line starts of real files: up to `context` characters before as prompt, a
    quarter of that after as suffix, each cut at a line boundary. The same list for the same
    arguments: the fixed mix every round sends (bench/batch_breakdown.py runs it too)."""
    out = []
    texts = [(ROOT / s).read_text(encoding="utf-8") for s in SOURCES]
    for i in range(count):
        text = texts[i % len(texts)]
        lines = text.splitlines(keepends=True)
        row = 3 + (i * 7) % max(1, len(lines) - 6)
        at = sum(len(line) for line in lines[:row])
        start = at
        for line in reversed(lines[:row]):  # whole lines before the cursor, while they fit
            if at - (start - len(line)) > context:
                break
            start -= len(line)
        end = at
        for line in lines[row:]:
            if end + len(line) - at > max(context // 4, 1):
                break
            end += len(line)
        out.append({"prompt": text[start:at], "suffix": text[at:end], "max_tokens": max_tokens, "seed": i})
    return out


def schedule(mix: list[dict], clients: int) -> list[list[dict]]:
    """What each client sends in a round: the whole mix, client k's rotated by k (so clients at
    once ask about different places while every round holds `clients` copies of the same mix)."""
    return [[mix[(k + i) % len(mix)] for i in range(len(mix))] for k in range(clients)]


def fingerprint(sent: list[dict], clients: int) -> str:
    """The round's requests per client, as a short hash: equal for rounds that sent the same mix."""
    counts = collections.Counter(json.dumps(body, sort_keys=True) for body in sent)
    per_client = sorted((body, n / clients) for body, n in counts.items())
    return hashlib.sha1(json.dumps(per_client).encode()).hexdigest()[:6]


def ask(port: int, body: dict) -> tuple[float, float, int]:
    """One streamed completion: (seconds to its first draft, seconds in all, completion tokens)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=3600)
    started = time.perf_counter()
    streamed = {**body, "stream": True, "diffusing": True, "stream_options": {"include_usage": True}}
    conn.request("POST", "/v1/completions", json.dumps(streamed), {"Content-Type": "application/json"})
    answer = conn.getresponse()
    if answer.status != 200:
        raise SystemExit(f"the server answered {answer.status}: {answer.read()[:500]!r}")
    first, tokens = None, None
    for line in answer:
        if not line.startswith(b"data: ") or line.strip() == b"data: [DONE]":
            continue
        chunk = json.loads(line[6:])
        if "error" in chunk:
            raise SystemExit(f"the stream ended in an error: {chunk['error']}")
        if chunk.get("choices") and first is None:
            first = time.perf_counter() - started
        if chunk.get("usage"):
            tokens = int(chunk["usage"]["completion_tokens"])
    conn.close()
    if first is None or tokens is None:
        raise SystemExit("the stream carried no draft or no usage")
    return first, time.perf_counter() - started, tokens


ALONE = 'sharpen_pass_runs_bucket{le="1"}'  # the runs-per-pass histogram's first bucket, where /metrics has it


def packing(port: int) -> tuple[int, int, int | None] | None:
    """(packed passes, runs' passes they held, passes that held one run where /metrics counts them)
    from /metrics; None where runs do not share passes."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    conn.close()
    values = dict(line.rsplit(" ", 1) for line in text.splitlines() if line.startswith(("sharpen_packed_pass", ALONE)))
    if "sharpen_packed_passes_total" not in values:
        return None
    alone = int(values[ALONE]) if ALONE in values else None
    return int(values["sharpen_packed_passes_total"]), int(values["sharpen_packed_pass_runs_total"]), alone


def round_of(ports: list[int], clients: int, mix: list[dict]) -> dict:
    """`clients` threads at once, client k on server k mod len(ports), each sending the mix."""
    work = schedule(mix, clients)
    done: list[tuple[float, float, int]] = []
    lock = threading.Lock()
    failed: list[BaseException] = []

    def client(k: int) -> None:
        try:
            for body in work[k]:
                result = ask(ports[k % len(ports)], body)
                with lock:
                    done.append(result)
        except BaseException as error:  # noqa: BLE001 - raised in the main thread below
            failed.append(error)

    before = [packing(port) for port in ports]
    threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - started
    if failed:
        raise failed[0]
    after = [packing(port) for port in ports]
    passes = runs = 0
    alone: int | None = 0
    for b, a in zip(before, after):
        if b is not None:
            passes, runs = passes + a[0] - b[0], runs + a[1] - b[1]
            alone = None if alone is None or b[2] is None else alone + a[2] - b[2]
    tokens = sum(n for _, _, n in done)
    return {"clients": clients, "requests": len(done), "tokens": tokens, "wall": wall, "tok_s": tokens / wall,
            "latency": [s for _, s, _ in done], "draft": [f for f, _, _ in done], "passes": passes, "runs": runs,
            "alone": alone, "packs": before[0] is not None, "mix": fingerprint([b for w in work for b in w], clients)}


def percentile(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def measure(kind: str, model: str, args, folder: Path) -> dict[tuple[str, int], list[dict]]:
    """Every round of one kind and model size: its servers up side by side, rounds alternating."""
    path = checkpoint(kind, model, folder, getattr(torch, args.checkpoint_dtype))
    mix = jobs(args.requests, args.max_tokens, args.context)
    servers: dict[str, list[tuple[subprocess.Popen, int]]] = {}
    rounds: dict[tuple[str, int], list[dict]] = {(m, c): [] for m in args.modes for c in args.counts}
    launched = {mode: [launch(path, int(mode.partition("x")[0]), args.server_args.split())
                       for _ in range(int(mode.partition("x")[2] or 1))] for mode in args.modes}
    try:
        for mode, group in launched.items():
            servers[mode] = [(process, port_of(process, log)) for process, log in group]
        for mode in args.modes:
            for _, port in servers[mode]:
                for body in mix:  # warm-up: first-call costs stay out of the table
                    ask(port, body)
        for _ in range(args.repeats):
            for mode in args.modes:
                for c in args.counts:
                    rounds[mode, c].append(round_of([port for _, port in servers[mode]], c, mix))
    finally:
        for process, _log in (pair for group in launched.values() for pair in group):
            process.send_signal(signal.SIGINT)
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
    return rounds


def table(kind: str, model: str, rounds: dict[tuple[str, int], list[dict]], modes: list[str], counts: list[int]) -> list[str]:
    median = statistics.median
    serial = "1" if "1" in modes else modes[-1]  # the one-at-a-time server, else the last listed
    out = []
    for mode in modes:
        for c in counts:
            rows = rounds[mode, c]
            versus = median(r["tok_s"] / s["tok_s"] for r, s in zip(rows, rounds[serial, c]))
            latency = [x for r in rows for x in r["latency"]]
            draft = [x for r in rows for x in r["draft"]]
            passes, runs = sum(r["passes"] for r in rows), sum(r["runs"] for r in rows)
            counted = [r["alone"] for r in rows]
            if rows[0]["packs"] and passes:
                per_pass = f"{runs / passes:.2f}"
                if None in counted:  # only the totals: their bound (a pass that packs holds two runs or more)
                    alone = f">= {max(0, 2 * passes - runs) / passes:.0%}"
                else:
                    alone = f"{sum(counted) / passes:.0%}"
            else:
                per_pass = alone = "-"
            mixes = "/".join(sorted({r["mix"] for r in rows}))
            out.append(f"| {kind} | {model} | {c} | batch {mode} | {sum(r['requests'] for r in rows)} | "
                       f"{median(r['tok_s'] for r in rows):.1f} | {versus:.2f} | {percentile(latency, 0.5):.3f} | "
                       f"{percentile(latency, 0.9):.3f} | {percentile(draft, 0.5):.3f} | {percentile(draft, 0.9):.3f} | "
                       f"{per_pass} | {alone} | {mixes} |")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kinds", default=",".join(KINDS), help=f"loop kinds (default {','.join(KINDS)})")
    parser.add_argument("--models", default="small,0.5b",
                        help="small (the embedded model, the tests' tiny fixtures), 0.5b, 1.5b (the Qwen2.5 shapes); default small,0.5b")
    parser.add_argument("--clients", default="1,2,4,8", help="client counts (default 1,2,4,8)")
    parser.add_argument("--requests", type=int, default=4, help="requests in the mix each client sends per round (default 4)")
    parser.add_argument("--repeats", type=int, default=2, help="rounds per client count and server, alternating (default 2)")
    parser.add_argument("--max-tokens", type=int, default=16, help="slots per completion (default 16)")
    parser.add_argument("--context", type=int, default=400, help="characters of prompt before the cursor, a quarter after (default 400)")
    parser.add_argument("--batch", default="8,1",
                        help="the servers to compare, by --max-batch (default 8,1: batched, one at a time); BxP: P server "
                             "processes of --max-batch B, clients spread over them (8x2: what a second process adds)")
    parser.add_argument("--server-args", default="", help="more `sharpen serve` options for every server, e.g. \"--threads 2\"")
    parser.add_argument("--checkpoint-dtype", default="float32", choices=["float32", "bfloat16"],
                        help="how the written checkpoints store their random weights (default float32; the GPU session: bfloat16)")
    parser.add_argument("--checkpoints", help="folder for the written checkpoints, kept for the next run (default: a temporary one)")
    parser.add_argument("--quick", action="store_true", help="seconds, not minutes: small models, clients 1,2, 2 requests, 8 slots, 1 repeat (options given still win)")
    if "--quick" in (sys.argv[1:] if argv is None else argv):  # its sizes as defaults: options given still win
        parser.set_defaults(models="small", clients="1,2", requests=2, max_tokens=8, repeats=1, context=160)
    args = parser.parse_args(argv)
    args.modes = [m.strip() for m in args.batch.split(",")]
    args.counts = [int(c) for c in args.clients.split(",")]
    kinds, models = args.kinds.split(","), args.models.split(",")
    for name, given, known in (("kind", kinds, KINDS), ("model", models, MODELS)):
        if set(given) - set(known):
            parser.error(f"unknown {name} {sorted(set(given) - set(known))}; known: {', '.join(known)}")
    if args.requests < 1 or args.repeats < 1:
        parser.error("--requests and --repeats must be at least 1")
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(args.checkpoints or scratch)
        print(f"sharpen serve, {os.cpu_count()} CPUs visible, {args.max_tokens} slots per completion, a mix of {args.requests} "
              f"requests per client ({args.context} characters before the cursor), {args.repeats} alternating repeats; "
              f"batch: the server's --max-batch (1: one run at a time)\n", flush=True)
        print("| kind | model | clients | mode | requests | tok/s | x one at a time | p50 s | p90 s | draft p50 s | draft p90 s "
              "| runs/pass | alone | mix |")
        print("|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|", flush=True)
        for kind in kinds:
            for model in models:
                rows = table(kind, model, measure(kind, model, args, folder), args.modes, args.counts)
                print("\n".join(rows), flush=True)
    return 0


if __name__ == "__main__":
    # `timeout` stops this script with SIGTERM: exit through the finally blocks that stop the servers.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(124))
    sys.exit(main())
