"""Where a batched run's time goes: one Runner in process, 1 client against N, no HTTP.

    python bench/batch_breakdown.py [--model M] [--clients 4] [--requests 8] [--repeats 2] [--device cpu]

bench/serve.py measures what clients get; this one says why. The same fill-in-the-middle jobs
(bench/serve.py's) run through one core.run.Runner with continuous batching (--max-batch 8), first
from one thread, then from `--clients` threads at once, and every packed forward pass is timed
in the thread that runs it (core.batch.StepBatcher._run, wrapped). It prints, per request:
- the process's CPU seconds, split into the model's passes and the rest (the host: canvas,
  sampling math, frames, result), and the passes by kind and by how many runs a pack held;
- the share of wall time during which 0, 1, 2, ... packs were running at once (with one client,
  time with none running is host work; with several, also runs waiting for each other).
Prints tables; asserts nothing.
"""
from __future__ import annotations

import argparse
import collections
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.serve import jobs  # noqa: E402  (the same requests as the server benchmark)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="checkpoint (default: the embedded model)")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--clients", type=int, default=4, help="threads at once in the batched round (default 4)")
    parser.add_argument("--requests", type=int, default=8, help="requests per client per round (default 8)")
    parser.add_argument("--repeats", type=int, default=2, help="rounds of each (default 2; the tables sum them)")
    parser.add_argument("--max-tokens", type=int, default=32, help="slots per completion (default 32)")
    args = parser.parse_args()

    from sharpen.core.models.load import load_model
    from sharpen.core import batch
    from sharpen.core.request import EditRequest
    from sharpen.core.run import Runner
    from sharpen.core.settings import ModelRequest, Sampling
    from sharpen.core.spans import Span

    denoiser = load_model(ModelRequest(model=args.model, device=args.device))
    runner = Runner(denoiser, max_waiting=64, batch=8)
    if runner.batcher is None:
        raise SystemExit(f"{denoiser.spec.name or denoiser.spec.family}: its passes do not pack (core.batch.batchable)")
    packs: list[tuple[str, int, float, float, float]] = []  # kind, runs, start, end, thread CPU
    run_pack = batch.StepBatcher._run

    def timed(self, pack):
        wall, cpu = time.perf_counter(), time.thread_time()
        run_pack(self, pack)
        kind = "canvas" if any(p.ids.numel() > self.rows for p in pack) else "step"
        packs.append((kind, len(pack), wall, time.perf_counter(), time.thread_time() - cpu))

    batch.StepBatcher._run = timed

    def request(job: dict) -> EditRequest:
        at = len(job["prompt"])
        return EditRequest(job["prompt"] + job["suffix"], (Span(at, at, max_tokens=job["max_tokens"]),), Sampling(seed=job["seed"]))

    def round_of(clients: int) -> dict:
        work = [request(j) for j in jobs(clients * args.requests, args.max_tokens)]
        tokens = [0]
        lock = threading.Lock()

        def client(k: int) -> None:
            for edit in work[k::clients]:
                n = runner.result(edit).result.tokens
                with lock:
                    tokens[0] += n

        threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
        packs.clear()
        cpu, started = time.process_time(), time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        ended = time.perf_counter()
        # How many packs ran at each moment: a sweep over their starts and ends.
        edges = sorted([(p[2], 1) for p in packs] + [(p[3], -1) for p in packs])
        running, last, at_once = 0, started, collections.Counter()
        for moment, change in edges:
            at_once[running] += moment - last
            running, last = running + change, moment
        at_once[running] += ended - last
        return {"requests": len(work), "tokens": tokens[0], "wall": ended - started, "cpu": time.process_time() - cpu,
                "packs": list(packs), "at_once": at_once}

    round_of(1)  # warm-up: first-call costs stay out of the tables
    totals: dict[int, list[dict]] = {1: [], args.clients: []}
    for _ in range(args.repeats):
        for clients in totals:
            totals[clients].append(round_of(clients))

    print(f"# {denoiser.spec.name or denoiser.spec.family}, {denoiser.device}, {args.max_tokens} slots per completion, "
          f"{args.repeats} x {args.requests} requests per client, summed; ms per request")
    print(f"{'clients':>7} {'tok/s':>7} {'x one':>6} {'cpu':>6} {'passes':>7} {'host':>6}  passes by kind and runs per pack (count: ms each)")
    base = None
    for clients, rounds in totals.items():
        n = sum(r["requests"] for r in rounds)
        tok_s = sum(r["tokens"] for r in rounds) / sum(r["wall"] for r in rounds)
        base = base or tok_s
        cpu = sum(r["cpu"] for r in rounds) / n * 1000
        groups: dict[tuple[str, int], list[float]] = collections.defaultdict(list)
        for r in rounds:
            for kind, runs, _, _, seconds in r["packs"]:
                groups[kind, runs].append(seconds)
        model = sum(sum(v) for v in groups.values()) / n * 1000
        detail = ", ".join(f"{kind} x{runs} ({len(v)}: {sum(v) / len(v) * 1000:.2f})" for (kind, runs), v in sorted(groups.items()))
        print(f"{clients:>7} {tok_s:>7.1f} {tok_s / base:>6.2f} {cpu:>6.1f} {model:>7.1f} {cpu - model:>6.1f}  {detail}")
    print("\nshare of wall time with k packs running at once")
    print(f"{'clients':>7} " + " ".join(f"{k:>6}" for k in range(5)))
    for clients, rounds in totals.items():
        at_once: collections.Counter = sum((r["at_once"] for r in rounds), collections.Counter())
        wall = sum(at_once.values())
        print(f"{clients:>7} " + " ".join(f"{at_once.get(k, 0.0) / wall:>6.0%}" for k in range(5)))


if __name__ == "__main__":
    main()
