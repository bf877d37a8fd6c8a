"""How many torch threads a CPU edit should use: one headless-sized edit per thread count.

    python bench/threads.py                         # the embedded model and a Qwen2-0.5B-shaped one
    python bench/threads.py --busy 1                # with one core kept busy by another process

Each row: the same infill (32 slots, default settings) timed best of --repeats after a warm-up,
at 1, 2, ... up to every core, for a small model (the embedded one) and a bigger random one.
The editor's default leaves one core to the UI; headless uses them all for big models and one
for small ones (core/models/load.py: cpu_threads). A benchmark: it prints a table.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

import torch


def busy_process():
    """Another program on the machine: a Python loop that keeps one core busy."""
    return subprocess.Popen([sys.executable, "-c", "while True: pass"])


def denoisers(shapes: list[str]):
    from sharpen.core.models.loading import load_denoiser

    for shape in shapes:
        if shape == "embedded":
            yield shape, load_denoiser()
        else:
            from synthetic import build  # bench/ is on the path

            yield shape, build(shape, "cpu", torch.float32)


def main(argv: list[str] | None = None) -> int:
    from sharpen.core.engine import apply_edit
    from sharpen.core.settings import Sampling
    from sharpen.core.spans import Span

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="embedded,qwen2-0.5b")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--busy", type=int, default=0, help="cores kept busy by other processes meanwhile")
    args = parser.parse_args(argv)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    others = [busy_process() for _ in range(args.busy)]
    text = "def add(a, b):\n    return a + b\n\n\ndef main():\n    print(add(1, 2))\n"
    span = Span(text.index("a + b"), text.index("a + b") + 5, max_tokens=32)
    try:
        print(f"| model | threads | seconds per edit ({cores} cores, {args.busy} busy) |")
        print("|---|---|---|")
        for shape, den in denoisers(args.shapes.split(",")):
            for threads in sorted({1, 2, cores} - {c for c in (2,) if c > cores}):
                torch.set_num_threads(threads)
                apply_edit(den, text, [span], Sampling())  # warm-up
                best = float("inf")
                for _ in range(args.repeats):
                    started = time.perf_counter()
                    apply_edit(den, text, [span], Sampling())
                    best = min(best, time.perf_counter() - started)
                print(f"| {shape} | {threads} | {best:.3f} |")
                sys.stdout.flush()
    finally:
        for other in others:
            other.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main())
