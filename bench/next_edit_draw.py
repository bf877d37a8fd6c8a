"""What a next-edit draft costs to draw, against the file's length: ms per drawn frame.

    python bench/next_edit_draw.py                        # 100 / 2,000 / 20,000 lines x 1 / 5 hunks
    python bench/next_edit_draw.py --lines 100,20000 --hunks 1,5 --frames 12

In-process, through Textual's pilot (120x40): the file is the standard library's argparse.py
repeated to N lines (Python highlighting), the cursor and the view in its middle. A prediction's
drafts are replayed as a run gives them: over the same snapshot of the text, hunks on lines just
below the cursor, each draft with more of the hunks and more of their new text (a hunk appears,
its text grows, as a model sharpens). A frame is NextEditor._draw (the hunks composed over the
text and put into the preview layer) plus painting the layer's rows on screen (render_line for
each). Rows:

- old: the path before this bench (every frame composed over the whole text and loaded whole
  into the layer: `load_text`, a parse of the whole file), kept here behind `--old` only;
- new: the layer holds the view and 100 lines each side (as the ghost's), and a frame replaces
  only the lines whose drawing changed (preview_view.changed_rows).

ms per frame: the median of frames 2..N (the first frame of a run loads the layer: its own
column); draw: into the layer; paint: the rows on screen (the same work in both paths, bounded by
the view). A benchmark: it prints a table; timings swing on a shared machine.
"""
from __future__ import annotations

import argparse
import asyncio
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from typing_latency import source_of  # noqa: E402

WORD = re.compile(r"[A-Za-z_]\w{2,}")


def drafts_of(text: str, first_line: int, hunks: int, frames: int):
    """`frames` drafts over `text`: `hunks` hunks, one every other line from `first_line` (the
    first word of 3+ characters on each, renamed), appearing one after another, their new text
    growing frame by frame."""
    from sharpen.core.next_edit.request import Hunk, NextEditAnswer

    lines = text.split("\n")
    offsets, at = [], 0
    for line in lines:
        offsets.append(at)
        at += len(line) + 1
    targets, row = [], first_line
    while len(targets) < hunks and row < len(lines):
        match = WORD.search(lines[row])
        if match:
            targets.append((offsets[row] + match.start(), offsets[row] + match.end(), match.group(0)))
        row += 2
    out = []
    for k in range(1, frames + 1):
        shown = targets[:max(1, round(hunks * k / frames))]
        out.append(NextEditAnswer(tuple(Hunk(s, e, ("renamed_" + w)[:max(1, len("renamed_" + w) * k // frames)], 0.9)
                                        for s, e, w in shown)))
    return out


def old_draw(pane, text: str, hunks) -> None:
    """NextEditor._draw as it was (commit 0d7107b): the whole text composed and loaded per frame."""
    from sharpen.app.tui.next_edit_overlay import hunk_pieces

    spans = [(h.start, h.end) for h in hunks]
    pieces = [hunk_pieces(text, h) for h in hunks]
    if not spans:
        spans, pieces = [(0, 0)], [[]]
    pane.show_overlay(text, spans, pieces, same_run=False)
    pane.set_class(True, "-previewing")


async def measure(path: Path, hunks: int, frames: int, old: bool) -> tuple[float, float]:
    from sharpen.app.config import Config
    from sharpen.app.tui.editor_app import SharpenApp
    from sharpen.app.tui.themes import load_themes

    app = SharpenApp([path], Config.of(ghost=False, next_edit=False), load_themes(None), load_model_on_start=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        pane = app.active_pane()
        editor, preview = pane.editor, pane.preview
        middle = editor.document.line_count // 2
        editor.move_cursor((middle, 0))
        editor.scroll_to(0, max(0, middle - 10), animate=False, immediate=True)
        await pilot.pause()
        text = editor.buffer_text  # the run's snapshot: one string for all its drafts
        draws, paints = [], []
        for draft in drafts_of(text, middle + 1, hunks, frames):
            started = time.perf_counter()
            if old:
                old_draw(pane, text, draft.hunks)
            else:
                pane.next_edit._draw(text, draft.hunks, None)
            drawn = time.perf_counter()
            for y in range(preview.size.height or 38):
                preview.render_line(y)
            draws.append(drawn - started)
            paints.append(time.perf_counter() - drawn)
            await pilot.pause()
        pane.next_edit._hide()
    frame = [d + p for d, p in zip(draws, paints)]
    return (frame[0] * 1000, statistics.median(draws[1:]) * 1000, statistics.median(paints[1:]) * 1000,
            statistics.median(frame[1:]) * 1000)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", default="100,2000,20000")
    parser.add_argument("--hunks", default="1,5")
    parser.add_argument("--frames", type=int, default=12)
    parser.add_argument("--old", action="store_true", help="only the old path (else both)")
    parser.add_argument("--new", action="store_true", help="only the new path (else both)")
    args = parser.parse_args(argv)
    paths = ["old"] if args.old else ["new"] if args.new else ["old", "new"]
    print("| lines | hunks | path | first frame ms | draw ms | paint ms | ms per frame |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for lines in (int(n) for n in args.lines.split(",")):
            path = Path(tmp) / f"file_{lines}.py"
            path.write_text(source_of(lines))
            for hunks in (int(n) for n in args.hunks.split(",")):
                for which in paths:
                    first, draw, paint, frame = asyncio.run(measure(path, hunks, args.frames, which == "old"))
                    print(f"| {lines:,} | {hunks} | {which} | {first:.1f} | {draw:.2f} | {paint:.2f} | {frame:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
