"""Shared helpers for the editor's pilot tests (Textual's App.run_test)."""
from __future__ import annotations

from pathlib import Path

import pytest
from textual.command import CommandList

from sharpen.app.config import Config
from sharpen.app.tui.editor_app import SharpenApp
from sharpen.app.tui.messages import ModelLoaded
from sharpen.app.tui.themes import load_themes

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "fizzbuzz.py"
FAST = Config.of(steps=4, frame_rate=60, first_run_step_ms=0)  # the first run unpaced too (tests/test_ghost.py tests the pacing)
SLOW = Config.of(steps=8, min_step_ms=250)  # a run that lasts long enough to interrupt


def make_app(files, config: Config = FAST) -> SharpenApp:
    return SharpenApp([Path(f) for f in files], config, load_themes(None), load_model_on_start=False)


async def wait_for(pilot, predicate, timeout: float = 20.0) -> None:
    for _ in range(int(timeout / 0.02)):
        if predicate():
            await pilot.pause()  # let the messages posted on the way be handled
            return
        await pilot.pause(0.02)
    raise AssertionError("timed out waiting for the app")


async def with_model(app, pilot, denoiser) -> None:
    from sharpen.app.backend import LocalBackend

    app.post_message(ModelLoaded(LocalBackend.of(denoiser), "cpu", 0.0))
    await wait_for(pilot, lambda: app.backend is not None)


def notices(app) -> str:
    return " | ".join(str(n.message) for n in app._notifications)


def top_command(app) -> str:
    """The palette's first hit, once its search has answered."""
    try:
        return str(app.screen.query_one(CommandList).get_option_at_index(0).prompt).splitlines()[0]
    except Exception:  # no palette yet, or no hits yet
        return ""


def select_line(editor, row: int) -> None:
    editor.selection = ((row, 4), (row, len(editor.document.lines[row])))


@pytest.fixture
def example_in_src(tmp_path) -> Path:
    """The example in a folder of its own (tests that remove the folder under a buffer)."""
    path = tmp_path / "src" / "fizzbuzz.py"
    path.parent.mkdir()
    path.write_bytes(EXAMPLE.read_bytes())
    return path
