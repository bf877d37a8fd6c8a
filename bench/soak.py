"""Soak run: many headless edits in one process, watching memory and time per edit.

    python bench/soak.py                    # the embedded model (core/embedded/), 500 edits
    python bench/soak.py --model DIR        # a checkpoint directory

Every edit goes through `run_headless` (the function behind `sharpen FILE --apply-edit`),
with the model loaded once and passed in. The edits cycle through --in-place, plain stdout,
--diff and --json, infill and rewrite, one span and several; an --in-place edit is undone
right after, so the workload stays the same size and any RSS growth is the process's own.
A table is printed every --every edits: RSS, its growth since the first window, ms/edit.
A benchmark, not a test: it asserts nothing and prints a table.
"""
from __future__ import annotations

import argparse
import contextlib
import gc
import io
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from sharpen.app.cli import build_parser, config_from, headless_job
from sharpen.app.headless import run_headless
from sharpen.core.models.loading import embedded_model_path

SOURCE = "".join(
    f"def handler_{n}(request, retries={n % 4}):\r\n"
    f"\t\"\"\"Handle request {n}.\"\"\"\r\n"
    f"    value = request.get('key_{n}', {n})\n"
    f"    return value * {n % 7 + 1}\n\n"
    for n in range(200)
)
# (SPEC, extra flags): infill, rewrite, several spans, whole lines, a bare insertion point
WORKLOAD = [
    ("3:13-3:35", ["--mode", "infill"]),
    ("4:12-4:21", ["--mode", "rewrite", "--strength", "0.5"]),
    ("3:13-3:20,8:13-8:20,13:13-13:20", ["--mode", "infill"]),
    ("9-9", ["--mode", "rewrite", "--strength", "1.0"]),
    ("500:1-500:1", ["--mode", "infill"]),
]
OUTPUTS = [["--in-place"], [], ["--diff"], ["--json"]]


def rss_bytes() -> int:
    try:
        import psutil

        return psutil.Process().memory_info().rss
    except ImportError:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="checkpoint directory (default: the embedded model)")
    parser.add_argument("--edits", type=int, default=500)
    parser.add_argument("--every", type=int, default=50, help="print a row every N edits")
    parser.add_argument("--max-tokens", type=int, default=8, help="infill slots per span")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--device", default="auto")
    opts = parser.parse_args(argv)

    work = Path(tempfile.mkdtemp(prefix="sharpen-soak-"))
    model = opts.model
    if model is None and not (embedded_model_path() / "config.json").exists():
        parser.error("no embedded model in core/embedded/; pass --model DIR")
    target = work / "handlers.py"
    original = SOURCE.encode()
    target.write_bytes(original)

    common = ["--max-tokens", str(opts.max_tokens), "--steps", str(opts.steps), "--device", opts.device, "--quiet"]
    common += ["--model", model] if model else []
    from sharpen.core.models.load import load_model

    started = time.perf_counter()
    denoiser = load_model(config_from(build_parser().parse_args([str(target), *common])).model)
    print(f"model {denoiser.spec.name} loaded in {time.perf_counter() - started:.2f}s; {opts.edits} edits on {target}")
    print(f"{'edits':>6} {'rss MiB':>9} {'growth MiB':>11} {'ms/edit':>9} {'p95 ms':>8} {'failed':>7}")

    sink = io.TextIOWrapper(open(os.devnull, "wb"), encoding="utf-8")
    base_rss, times, failed = None, [], 0
    for n in range(1, opts.edits + 1):
        spec, flags = WORKLOAD[n % len(WORKLOAD)]
        output = OUTPUTS[n % len(OUTPUTS)]
        args = build_parser().parse_args([str(target), "--apply-edit", spec, *flags, *output, "--seed", str(n), *common])
        job = headless_job(args)
        t0 = time.perf_counter()
        try:
            with contextlib.redirect_stdout(sink):
                run_headless(job, config_from(args), denoiser=denoiser)
        except Exception as exc:  # a soak counts failures and keeps going
            failed += 1
            print(f"edit {n} ({spec} {' '.join(output)}): {type(exc).__name__}: {exc}", file=sys.stderr)
        times.append((time.perf_counter() - t0) * 1000)
        if output == ["--in-place"]:
            target.write_bytes(original)  # same workload every time
        if n % opts.every == 0:
            gc.collect()
            rss = rss_bytes()
            base_rss = rss if base_rss is None else base_rss
            window = times[-opts.every:]
            p95 = sorted(window)[int(0.95 * (len(window) - 1))]
            print(f"{n:>6} {rss / 2**20:>9.1f} {(rss - base_rss) / 2**20:>+11.1f} {statistics.mean(window):>9.1f} {p95:>8.1f} {failed:>7}", flush=True)
    print(f"done: {opts.edits} edits, {failed} failed, mean {statistics.mean(times):.1f} ms/edit")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
