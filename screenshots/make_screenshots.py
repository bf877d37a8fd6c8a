"""Render SVG screenshots of the real editor into screenshots/ (the README shows them).

    .venv/bin/python screenshots/make_screenshots.py            # the embedded model, or a tiny random one
    .venv/bin/python screenshots/make_screenshots.py --model DIR

Each scene drives the app with Textual's pilot (`App.run_test`) and a real model run in its
thread worker; steps are paced (`min_step_ms`) so a frame half-way through can be caught.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
from pathlib import Path

from sharpen.app.config import Config
from sharpen.app.tui.editor_app import SharpenApp
from sharpen.app.tui.editor_pane import PREVIEW, RUNNING
from sharpen.app.tui.themes import load_themes

HERE = Path(__file__).resolve().parent
EXAMPLE = HERE.parent / "examples" / "fizzbuzz.py"
SIZE = (120, 30)


def tiny_random_model(out: Path) -> Path:
    """A random checkpoint of the `test` preset (as tests/checkpoints.py builds it): garbage text, real frames."""
    import torch

    from sharpen.core.models.loading import save_checkpoint
    from sharpen.core.models.model import Transformer, preset
    from sharpen.core.tokenizer import train_byte_bpe

    tokenizer = train_byte_bpe([EXAMPLE.read_text()] * 20, 400)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer.hf.save(str(out / "tokenizer.json"))
    torch.manual_seed(0)
    model = Transformer(preset("test", vocab_size=tokenizer.vocab_size))
    return save_checkpoint(model, out / "tokenizer.json", out, {"name": "tiny-random"})


def default_model(scratch: Path) -> str | None:
    from sharpen.core.models.loading import embedded_model_path

    if (embedded_model_path() / "config.json").exists():
        return None  # the embedded model
    print("no embedded model in this build; using a tiny random checkpoint (the text will be noise)", file=sys.stderr)
    return str(tiny_random_model(scratch / "tiny"))


async def until(pilot, predicate, timeout: float = 120.0) -> None:
    for _ in range(int(timeout / 0.02)):
        if predicate():
            await pilot.pause()
            return
        await pilot.pause(0.02)
    raise TimeoutError("the app did not get there in time")


def select(editor, first_row: int, last_row: int) -> None:
    """Select whole lines first_row..last_row (0-based), indentation included."""
    editor.selection = ((first_row, 0), (last_row, len(editor.document.lines[last_row])))


async def scene(name: str, config: Config, drive) -> None:
    app = SharpenApp([EXAMPLE], config, load_themes(None))
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.backend is not None or app.model_error is not None)
        if app.model_error:
            raise SystemExit(f"cannot load the model: {app.model_error}")
        await drive(app, pilot)
        app.save_screenshot(str(HERE / f"{name}.svg"))
        print(f"wrote screenshots/{name}.svg")


async def main(model: str | None) -> None:
    # Default settings everywhere; the two mid-run scenes also wait 300 ms between steps so a
    # frame in the middle of the run can be caught. The tok/s they show is compute time only
    # (the waiting is not counted: app/tui/model_runner.py), so it is the real rate.
    paced = Config.of(model=model, min_step_ms=300)

    async def file_open(app, pilot):
        app.active_pane().editor.move_cursor((4, 4))

    async def midway(app, pilot):
        pane = app.active_pane()
        select(pane.editor, 4, 10)
        await pilot.press("alt+i")
        await until(pilot, lambda: pane.edit_run is not None and pane.edit_run.stats is not None and pane.edit_run.stats.step >= 3)

    async def finished(app, pilot):
        pane = app.active_pane()
        select(pane.editor, 4, 10)
        await pilot.press("alt+i")
        await until(pilot, lambda: pane.phase == PREVIEW)

    async def marked(app, pilot):
        editor = app.active_pane().editor
        for row in (5, 7, 9):
            editor.selection = ((row, 15), (row, len(editor.document.lines[row])))
            await pilot.press("alt+m")
        editor.move_cursor((15, 0))

    async def parallel(app, pilot):
        await marked(app, pilot)
        pane = app.active_pane()
        await pilot.press("alt+a")
        await until(pilot, lambda: pane.phase == RUNNING and pane.edit_run is not None and pane.edit_run.stats is not None and pane.edit_run.stats.step >= 2)

    await scene("editor", Config.of(model=model), file_open)
    await scene("denoise-midway", paced, midway)
    await scene("finished-preview", Config.of(model=model), finished)
    await scene("marked-regions", Config.of(model=model), marked)
    await scene("parallel-fill", paced, parallel)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="checkpoint directory (default: the embedded model, else a tiny random one)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        # A recovery store of its own: no entry of the person's own sessions is offered on top of a scene.
        os.environ["SHARPEN_RECOVERY_DIR"] = str(Path(scratch) / "recovery")
        asyncio.run(main(args.model or default_model(Path(scratch))))
