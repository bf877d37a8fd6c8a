"""Where a batched run's time goes: one Runner in process, 1, 2 and 4 runs at once, no HTTP.

    python bench/batch_breakdown.py [--model M] [--clients 1,2,4] [--threads 1,2] [--requests 4] [--repeats 2]

bench/serve.py measures what clients get; this one says why. The same fill-in-the-middle jobs
(bench/serve.py's fixed mix, every client the whole list rotated) run through one core.run.Runner
with continuous batching (--max-batch 8), from 1, 2 and 4 threads at once, for each torch thread
count in a process of its own (the model loaded with that count, as `sharpen serve --threads N`
loads it). Per request, in wall-clock milliseconds of the run's own thread:

- pass: the packs that held its passes, from the moment the pack started to run to its end
  (timed inside the batcher, core.batch.StepBatcher._run, in the thread that runs the pack);
- wait: the rest of its time inside StepBatcher.submit (waiting for the others to hand in their
  step's pass, for the batching window, or for a pack run by another thread to start);
- host: the rest of the request's wall time (canvas, sampling math, frames, result, tokenizing).

pass + wait + host is the request's wall time by construction. The passes by kind and by how many
runs a pack held (count: ms each), the process's CPU per request beside the wall time (cpu/wall:
the cores it kept busy), and the share of wall time during which 0, 1, 2, ... packs ran at once.

Why wall clock: the previous version split the process's CPU time into passes (time.thread_time()
around each pack) and host (the rest). thread_time counts the CPU of the calling thread only; with
more than one torch thread a pass's matmuls also run on torch's intra-op worker threads, whose CPU
lands in the process's total and so was booked as host work, as was the CPU those workers spin
after each parallel region before they sleep (OpenMP's wait policy), which belongs to no pass and
to no host work. Measured here, one client, 16 slots: at torch threads 1 it gave passes 34.0 and
host 12.7 ms of CPU per request, at 2 threads passes 27.1 and host 24.0, the host doubled by a
thread count that changes no host code; the wall-clock split gives host 9.1 and 9.9 ms. Wall time
per run needs no attribution of threads: a pass takes as long as it takes, however many threads
compute it, and the run's host work is what its own thread did between its passes.
Prints tables; asserts nothing.
"""
from __future__ import annotations

import argparse
import collections
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from serve import jobs, schedule  # noqa: E402  (the same requests as the server benchmark)


def instrument(batch) -> tuple[list, dict]:
    """Wrap StepBatcher._run and submit: packs (kind, runs, start, end) and, per run thread,
    [seconds in passes, seconds waiting in submit]."""
    packs: list[tuple[str, int, float, float]] = []
    per_thread: dict[int, list[float]] = collections.defaultdict(lambda: [0.0, 0.0])
    run_pack, submit = batch.StepBatcher._run, batch.StepBatcher.submit

    def timed_run(self, pack):
        start = time.perf_counter()
        try:
            run_pack(self, pack)
        finally:
            end = time.perf_counter()
            for work in pack:
                work.timed = (start, end)  # Pass has no __slots__: the submitting thread reads it back
            # A whole canvas: the batcher's own mark where it has one (Pass.whole), else more rows than a pack of steps holds.
            kind = "canvas" if any(p.whole for p in pack) else "step"
            packs.append((kind, len(pack), start, end))

    def timed_submit(self, work, *rest):  # rest: the run's time between passes (core/batch.py submit)
        entered = time.perf_counter()
        try:
            return submit(self, work, *rest)
        finally:
            inside = time.perf_counter() - entered
            start, end = getattr(work, "timed", (0.0, 0.0))
            mine = per_thread[threading.get_ident()]
            mine[0] += end - start
            mine[1] += inside - (end - start)

    batch.StepBatcher._run, batch.StepBatcher.submit = timed_run, timed_submit
    return packs, per_thread


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="checkpoint (default: the embedded model)")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--clients", default="1,2,4", help="runs at once, one round each (default 1,2,4)")
    parser.add_argument("--threads", default="1,2", help="torch thread counts, each in a process of its own (default 1,2)")
    parser.add_argument("--requests", type=int, default=4, help="requests in the mix each client sends per round (default 4)")
    parser.add_argument("--repeats", type=int, default=2, help="rounds of each (default 2; the tables sum them)")
    parser.add_argument("--max-tokens", type=int, default=32, help="slots per completion (default 32)")
    parser.add_argument("--context", type=int, default=400, help="characters of prompt before the cursor (bench/serve.py's)")
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parser.parse_args(argv)
    thread_counts = [int(t) for t in args.threads.split(",")]
    if len(thread_counts) == 1:
        return measure(args, thread_counts[0])
    # Each thread count in a fresh process, its torch threads set at load as `sharpen serve --threads`
    # does: torch.set_num_threads(2) in a process whose model was loaded at 1 thread made the passes
    # of runs on other threads 10-20x slower here (load at 2 threads: as fast as expected).
    given = [a for i, a in enumerate(argv) if a != "--threads" and (i == 0 or argv[i - 1] != "--threads") and not a.startswith("--threads=")]
    tables: list[list[str]] = [[], []]
    for threads in thread_counts:
        child = subprocess.run([sys.executable, __file__, *given, "--threads", str(threads)], capture_output=True, text=True, cwd=ROOT)
        if child.returncode != 0:
            sys.stderr.write(child.stderr)
            return child.returncode
        parts = child.stdout.split("\nshare of wall time")
        for table, part in zip(tables, parts):
            table += [line for line in part.splitlines() if line.startswith(f"| {threads} |")]
        title = child.stdout.splitlines()[0]
    print(title)
    print(COSTS_HEADER)
    print("\n".join(tables[0]))
    print(SHARES_HEADER)
    print("\n".join(tables[1]))
    return 0


COSTS_HEADER = ("| threads | clients | tok/s | x one | wall | pass | wait | host | cpu | passes by kind and runs per pack (count: ms each) |\n"
                "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
SHARES_HEADER = ("\nshare of wall time with k packs running at once\n| threads | clients | " + " | ".join(f"{k}" for k in range(5)) + " |\n"
                 "|---:|---:|" + "---:|" * 5)


def measure(args, threads: int) -> int:
    """The tables at one torch thread count, the model loaded with it (as `sharpen serve --threads`)."""
    from sharpen.core import batch
    from sharpen.core.models.load import load_model
    from sharpen.core.request import EditRequest
    from sharpen.core.run import Runner
    from sharpen.core.settings import ModelRequest, Sampling
    from sharpen.core.spans import Span

    denoiser = load_model(ModelRequest(model=args.model, device=args.device, threads=threads))
    runner = Runner(denoiser, max_waiting=64, batch=8)
    if runner.batcher is None:
        raise SystemExit(f"{denoiser.spec.name or denoiser.spec.family}: its passes do not pack (core.batch.batchable)")
    packs, per_thread = instrument(batch)

    def request(job: dict) -> EditRequest:
        at = len(job["prompt"])
        return EditRequest(job["prompt"] + job["suffix"], (Span(at, at, max_tokens=job["max_tokens"]),), Sampling(seed=job["seed"]))

    mix = [request(j) for j in jobs(args.requests, args.max_tokens, args.context)]

    def round_of(clients: int) -> dict:
        work = schedule(mix, clients)
        totals = collections.Counter()
        lock = threading.Lock()

        def client(k: int) -> None:
            for edit in work[k]:
                per_thread.pop(threading.get_ident(), None)
                started = time.perf_counter()
                n = runner.result(edit).result.tokens
                wall = time.perf_counter() - started
                passes, waited = per_thread.pop(threading.get_ident(), (0.0, 0.0))
                with lock:
                    totals.update(tokens=n, requests=1, wall=wall, passes=passes, wait=waited)

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
        return {**totals, "round": ended - started, "cpu": time.process_time() - cpu, "packs": list(packs), "at_once": at_once}

    counts = [int(c) for c in args.clients.split(",")]
    results: dict[tuple[int, int], list[dict]] = {}
    round_of(1)  # warm-up: first-call costs stay out of the tables
    for _ in range(args.repeats):
        for clients in counts:
            results.setdefault((threads, clients), []).append(round_of(clients))

    print(f"# {denoiser.spec.name or denoiser.spec.family}, {denoiser.device}, {args.max_tokens} slots per completion, "
          f"{args.repeats} x a mix of {args.requests} requests per client, summed; ms per request (wall clock of the run's thread)")
    print(COSTS_HEADER)
    for threads in (threads,):
        base = None
        for clients in counts:
            rounds = results[threads, clients]
            n = sum(r["requests"] for r in rounds)
            tok_s = sum(r["tokens"] for r in rounds) / sum(r["round"] for r in rounds)
            base = base or tok_s
            ms = {key: sum(r[key] for r in rounds) / n * 1000 for key in ("wall", "passes", "wait", "cpu")}
            host = ms["wall"] - ms["passes"] - ms["wait"]
            groups: dict[tuple[str, int], list[float]] = collections.defaultdict(list)
            for r in rounds:
                for kind, runs, start, end in r["packs"]:
                    groups[kind, runs].append(end - start)
            detail = ", ".join(f"{kind} x{runs} ({len(v)}: {sum(v) / len(v) * 1000:.2f})" for (kind, runs), v in sorted(groups.items()))
            print(f"| {threads} | {clients} | {tok_s:.1f} | {tok_s / base:.2f} | {ms['wall']:.1f} | {ms['passes']:.1f} | {ms['wait']:.1f} | "
                  f"{host:.1f} | {ms['cpu']:.1f} | {detail} |")
    print(SHARES_HEADER)
    for (threads, clients), rounds in results.items():
        at_once: collections.Counter = sum((r["at_once"] for r in rounds), collections.Counter())
        wall = sum(at_once.values())
        print(f"| {threads} | {clients} | " + " | ".join(f"{at_once.get(k, 0.0) / wall:.0%}" for k in range(5)) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
