"""Key-to-ghost latency: from a typed key to the ghost text on screen, with the embedded model.

    python bench/ghost_latency.py                        # 200 / 5,000 lines, 8 keys each
    python bench/ghost_latency.py --lines 200 --keys 20 --pause-ms 300

In-process, through Textual's pilot, the real editor with the embedded model loaded and ghost
completion switched on (it is off by default on the embedded model): the file is the standard
library's argparse.py repeated to N lines; each trial puts the cursor at the end of a line,
types a space, and waits until the final ghost is drawn. Columns, medians over the keys (from
the moment the key is sent):

  pause        the configured pause, then the ghost fires (the timer's own lateness included)
  model        time inside the model's loop (the run's compute time)
  first frame  when the first draft (still blurred) is drawn
  final ghost  when the finished ghost is drawn
  overhead     final ghost - pause - model: the worker, the messages, and drawing the layer

Each trial's ghost is dismissed (Esc) and the space taken back before the next. A benchmark: it prints a table; what it
shows is in docs/editor.md ("Ghost completion").
"""
from __future__ import annotations

import argparse
import argparse as _argparse_module
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout

from sharpen.app.config import Config  # noqa: E402
from sharpen.app.tui.editor_app import SharpenApp  # noqa: E402
from sharpen.app.tui.ghost import SHOWN  # noqa: E402
from sharpen.app.tui.themes import load_themes  # noqa: E402


def source_of(lines: int) -> str:
    text = Path(_argparse_module.__file__).read_text(encoding="utf-8").splitlines(keepends=True)
    return "".join((text * (lines // len(text) + 1))[:lines])


async def until(pilot, predicate, timeout: float = 60.0) -> None:
    deadline = time.perf_counter() + timeout
    while not predicate():
        if time.perf_counter() > deadline:
            raise TimeoutError("the app did not get there in time")
        await pilot.pause(0.05)  # a busy poll would hold the GIL the model thread needs


async def measure(path: Path, config: Config, keys: int) -> dict[str, list[float]]:
    app = SharpenApp([path], config, load_themes(None))
    out: dict[str, list[float]] = {name: [] for name in ("pause", "model", "first", "final", "steps", "tokens")}
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: app.session.backend is not None or app.session.model_error is not None)
        if app.session.model_error:
            raise SystemExit(f"ghost_latency: the model did not load: {app.session.model_error}")
        pane = app.active_pane()
        editor, ghost = pane.editor, pane.ghost
        lines = editor.document.lines
        rows = [row for row in range(40, len(lines), max(1, len(lines) // (keys + 1))) if lines[row].strip()][:keys]
        for trial, row in enumerate(rows):
            editor.move_cursor((row, len(lines[row])))
            await pilot.pause()
            sent = time.perf_counter()
            await pilot.press("space")
            await until(pilot, lambda: ghost.state == SHOWN or (ghost.state is None and ghost.run is None and time.perf_counter() - sent > 5))
            run = ghost.last
            if ghost.state == SHOWN and run is not None and run.shown_at >= sent:  # else an empty suggestion: nothing drawn
                out["pause"].append(run.fired_at - sent)
                out["model"].append(run.compute_seconds)
                out["first"].append(run.first_frame_at - sent)
                out["final"].append(run.shown_at - sent)
                out["steps"].append(run.steps)
                out["tokens"].append(len(run.result.spans[0].text))
            await pilot.press("escape")
            app.session.ghost = False  # the backspace that puts the file back must not ask for a ghost
            await pilot.press("backspace")
            app.session.ghost = True
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", default="200,5000", help="file sizes, comma separated")
    parser.add_argument("--keys", type=int, default=8, help="trials per file size")
    parser.add_argument("--pause-ms", type=int, default=300, help="the ghost_pause_ms setting")
    args = parser.parse_args(argv)
    import torch

    config = Config.of(ghost=True, ghost_pause_ms=args.pause_ms, first_run_step_ms=0)
    print(f"# embedded model, cpu, torch {torch.__version__}, {torch.get_num_threads()} threads; ghost_pause_ms {args.pause_ms}; "
          f"infill_tokens {config.editing.infill_tokens}; medians over {args.keys} keys (ms from the key)")
    print("| lines | ghosts | steps | characters | pause | model | first frame | final ghost | overhead |")
    print("|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as folder:
        for lines in (int(n) for n in args.lines.split(",")):
            path = Path(folder) / f"file{lines}.py"
            path.write_text(source_of(lines), encoding="utf-8")
            got = asyncio.run(measure(path, config, args.keys))
            if not got["final"]:
                print(f"| {lines:,} | 0 | | | | | | | |")
                continue
            med = {name: statistics.median(values) for name, values in got.items()}
            overhead = med["final"] - med["pause"] - med["model"]
            print(f"| {lines:,} | {len(got['final'])} | {med['steps']:.0f} | {med['tokens']:.0f} | {med['pause'] * 1000:.0f} | {med['model'] * 1000:.0f} | "
                  f"{med['first'] * 1000:.0f} | {med['final'] * 1000:.0f} | {overhead * 1000:.0f} |")
            sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
