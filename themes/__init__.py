"""Theme files shipped with sharpen: one TOML file per theme (see sharpen-dark.toml for the format).

The editor loads every `*.toml` here, then those in `<config dir>/themes/` (a user theme with
a shipped theme's name replaces it). This package holds data only; the loader that turns a
file into a Textual theme lives in `sharpen.app.tui.themes`.
"""
from pathlib import Path

THEMES_DIR = Path(__file__).parent


def shipped_theme_files() -> list[Path]:
    return sorted(THEMES_DIR.glob("*.toml"))
