"""Keystroke to screen through tmux: how long a typed character takes to appear, by file size.

    python bench/typing_screen.py                       # 200 / 5,000 / 50,000 lines
    python bench/typing_screen.py --lines 200,50000 --keys 30

bench/typing_latency.py times the editor in-process (press until idle); this one measures what
a person sees: sharpen runs in a detached tmux session (120x40) on the standard library's
argparse.py repeated to N lines, the cursor goes to the end of line 100 (Ctrl+G), then for each
key `tmux send-keys x` is timed until `tmux capture-pane` shows one more "x" (median and p90, in
ms; the polling itself adds about a millisecond). The editor loads its embedded model in the
background first, so the keys are typed into an idle editor. Needs tmux. A benchmark: it prints
a table.
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from typing_latency import source_of

SESSION = "sharpen-typing-bench"


def tmux(*args: str) -> str:
    return subprocess.run(["tmux", *args], capture_output=True, text=True).stdout


def screen() -> str:
    return tmux("capture-pane", "-p", "-t", SESSION)


def wait_for(predicate, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return False


def measure(sharpen: str, path: Path, state: Path, keys: int, settle: float) -> list[float]:
    command = f"SHARPEN_RECOVERY_DIR={state} {sharpen} {path}"  # its own recovery store: nothing offered, nothing left behind
    tmux("new-session", "-d", "-x", "120", "-y", "40", "-s", SESSION, command)
    try:
        if not wait_for(lambda: path.name in screen(), 60):
            raise RuntimeError(f"sharpen did not show {path.name} within 60 s")
        time.sleep(settle)  # the embedded model loads in the background
        tmux("send-keys", "-t", SESSION, "C-g")
        time.sleep(0.5)
        tmux("send-keys", "-t", SESSION, "100", "Enter")
        time.sleep(0.5)
        tmux("send-keys", "-t", SESSION, "End")
        time.sleep(0.5)
        times = []
        for _ in range(keys):
            before = screen().count("x")
            started = time.perf_counter()
            tmux("send-keys", "-t", SESSION, "x")
            if not wait_for(lambda: screen().count("x") > before, 10):
                raise RuntimeError("a typed key did not appear within 10 s")
            times.append((time.perf_counter() - started) * 1000)
            time.sleep(0.2)  # a person's pace, and the status bar's second frame is drawn
        return times
    finally:
        tmux("kill-session", "-t", SESSION)
        # The hang-up makes the editor write the typed, unsaved text to its recovery store (`state`)
        # and exit within seconds: wait for it, or the store is removed while it is written.
        wait_for(lambda: not running(path), 15)


def running(path: Path) -> bool:
    """Whether a process with `path` on its command line is alive (Linux's /proc; elsewhere False)."""
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if str(path).encode() in cmdline.read_bytes():
                return True
        except OSError:  # it exited while we looked
            continue
    return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", default="200,5000,50000")
    parser.add_argument("--keys", type=int, default=25)
    parser.add_argument("--settle", type=float, default=6.0, help="seconds to wait after the file shows (model loading)")
    parser.add_argument("--sharpen", default=str(Path(sys.executable).with_name("sharpen")))
    args = parser.parse_args(argv)
    if shutil.which("tmux") is None:
        print("bench/typing_screen.py needs tmux", file=sys.stderr)
        return 2
    print("| editor | lines | key to screen, median ms | p90 ms |")
    print("|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for n in (int(x) for x in args.lines.split(",")):
            path = Path(tmp) / f"big{n}.py"
            path.write_text(source_of(n), encoding="utf-8")
            times = sorted(measure(args.sharpen, path, Path(tmp) / f"state{n}", args.keys, args.settle))
            p90 = times[max(0, round(0.9 * len(times)) - 1)]
            print(f"| sharpen | {n:,} | {statistics.median(times):.1f} | {p90:.1f} |")
            sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
