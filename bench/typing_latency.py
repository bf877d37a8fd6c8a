"""Keystroke latency in the editor against file size: sharpen and Textual's bare TextArea.

    python bench/typing_latency.py                        # 200 / 5,000 / 50,000 lines
    python bench/typing_latency.py --lines 200,5000 --keys 10

In-process, through Textual's pilot: the file is the standard library's argparse.py repeated to
N lines; the cursor goes to the end of line 100, then each key press is timed from the press
until the app is idle again (the key handled, the screen refreshed): typing a character, Enter
(a new line: every row below moves), moving
the cursor down, extending the selection, paging down (medians). Also the time from start to
the first idle screen (open). Rows: sharpen (its EditorArea, Python highlighting), the bare
`TextArea.code_editor` with Python highlighting, and the bare one without a language. The
measured table and what it shows are in docs/editor.md. A benchmark: it prints a table.
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

from textual.app import App, ComposeResult
from textual.widgets import TextArea


def source_of(lines: int) -> str:
    text = Path(_argparse_module.__file__).read_text(encoding="utf-8").splitlines(keepends=True)
    return "".join((text * (lines // len(text) + 1))[:lines])


class Bare(App):
    def __init__(self, text: str, language: str | None) -> None:
        super().__init__()
        self.text, self.language = text, language

    def compose(self) -> ComposeResult:
        yield TextArea.code_editor(self.text, language=self.language)


async def timed_keys(pilot, key: str, times: int) -> list[float]:
    out = []
    for _ in range(times):
        t0 = time.perf_counter()
        await pilot.press(key)
        await pilot.pause()
        out.append(time.perf_counter() - t0)
    return out


async def measure(make, keys: int) -> tuple[float, dict[str, list[float]]]:
    started = time.perf_counter()
    app = make()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        opened = time.perf_counter() - started
        area = app.query_one(TextArea)
        area.focus()
        area.move_cursor((99, len(area.document.lines[99])))
        await pilot.pause()
        times = {"type": await timed_keys(pilot, "x", keys), "enter": await timed_keys(pilot, "enter", keys),
                 "cursor": await timed_keys(pilot, "down", keys),
                 "select": await timed_keys(pilot, "shift+right", keys), "scroll": await timed_keys(pilot, "pagedown", keys)}
    return opened, times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", default="200,5000,50000")
    parser.add_argument("--keys", type=int, default=10)
    args = parser.parse_args(argv)
    from sharpen.app.config import Config
    from sharpen.app.tui.editor_app import SharpenApp
    from sharpen.app.tui.themes import load_themes

    print("| editor | lines | open s | type ms | enter ms | cursor down ms | shift+right ms | page down ms |")
    print("|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for n in (int(x) for x in args.lines.split(",")):
            text = source_of(n)
            path = Path(tmp) / f"big{n}.py"
            path.write_text(text, encoding="utf-8")
            makers = {
                "sharpen": lambda: SharpenApp([path], Config(), load_themes(None), load_model_on_start=False),
                "TextArea, python": lambda: Bare(text, "python"),
                "TextArea, plain": lambda: Bare(text, None),
            }
            for name, make in makers.items():
                opened, times = asyncio.run(measure(make, args.keys))
                medians = [statistics.median(t * 1000 for t in times[k]) for k in ("type", "enter", "cursor", "select", "scroll")]
                print(f"| {name} | {n} | {opened:.2f} | " + " | ".join(f"{m:.1f}" for m in medians) + " |")
                sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
