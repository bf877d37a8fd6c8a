"""app/config.py and app/tui/themes.py: the config file layered over the declared settings, themes."""
from __future__ import annotations

from pathlib import Path

import pytest

from sharpen.app.config import load_config, parse_config
from sharpen.app.tui.themes import load_themes, parse_theme
from sharpen.core.errors import UsageError


def test_config_parses_every_section_and_names_errors(tmp_path):
    config = parse_config('theme = "sharpen-light"\n[model]\nmodel = "/m"\n[sampling]\nsteps = 12\npolicy = "margin"\n[edit]\ncandidates = 3\n[keymap]\ninfill = "f5"\n')
    assert (config.model.model, config.editor.theme, config.sampling.steps, config.sampling.policy) == ("/m", "sharpen-light", 12, "margin")
    assert config.editing.candidates == 3
    assert config.keymap == {"infill": "f5"}
    with pytest.raises(UsageError, match="unknown setting 'stpes'"):
        parse_config("[sampling]\nstpes = 3\n")
    with pytest.raises(UsageError, match=r"\[sampling\] policy must be one of: confidence"):
        parse_config('[sampling]\npolicy = "loudest"\n')
    with pytest.raises(UsageError, match=r"\[edit\] candidates must be between 1 and 16"):
        parse_config('[edit]\ncandidates = 40\n')
    with pytest.raises(UsageError, match=r"\[sampling\] steps must be a whole number"):
        parse_config('[sampling]\nsteps = "many"\n')
    with pytest.raises(UsageError, match="not found"):
        load_config(tmp_path / "missing.toml")


def test_config_of_the_older_layout_still_reads():
    old = parse_config('model = "/m"\ndevice = "cpu"\nrewrite_strength = 0.3\ninfill_tokens = 12\n[sampling]\ncontext_tokens = 64\nlength = "adaptive"\n')
    assert (old.model.model, old.model.device, old.editing.strength, old.editing.infill_tokens) == ("/m", "cpu", 0.3, 12)
    assert (old.editing.context_tokens, old.editing.length) == (64, "adaptive")


def test_command_line_options_win_over_the_config(tmp_path):
    from sharpen.app.cli import build_parser, config_from

    path = tmp_path / "config.toml"
    path.write_text('[model]\ndevice = "cuda"\n[sampling]\nsteps = 9\nseed = 4\n')
    argv = ["f.py", "--config", str(path), "--steps", "3", "--theme", "sharpen-dusk", "--length", "adaptive", "--cache", "none"]
    merged = config_from(build_parser().parse_args(argv))
    assert (merged.sampling.steps, merged.sampling.seed, merged.model.device, merged.editor.theme) == (3, 4, "cuda", "sharpen-dusk")
    assert (merged.editing.length, merged.sampling.cache, merged.sampling.kernels) == ("adaptive", "none", "auto")


def test_shipped_and_user_themes_load(tmp_path):
    (tmp_path / "mine.toml").write_text('name = "mine"\ndark = false\n[colors]\nprimary = "#123456"\n')
    themes = load_themes(tmp_path)
    assert {"sharpen-dark", "sharpen-light", "sharpen-dusk", "mine"} <= set(themes)
    assert themes["sharpen-light"].app_theme.dark is False
    assert "keyword.return" in themes["sharpen-dark"].syntax.syntax_styles  # groups expand to tree-sitter names
    assert "string" in themes["mine"].syntax.syntax_styles  # derived from the palette when [syntax] is missing
    with pytest.raises(UsageError, match="colors.primary"):
        parse_theme('[colors]\nprimary = "not a colour"\n', Path("bad.toml"))


def test_every_builtin_textual_theme_gets_code_colours():
    """Textual's ANSI themes name colours `ansi_cyan` / `ansi_default`: rich reads them without the prefix."""
    from textual.theme import BUILTIN_THEMES

    from sharpen.app.tui.themes import syntax_theme_for

    for name, theme in BUILTIN_THEMES.items():
        styles = syntax_theme_for(theme, {}).syntax_styles
        assert styles["keyword"] is not None, name
    ansi = syntax_theme_for(BUILTIN_THEMES["ansi-dark"], {}).syntax_styles
    assert ansi["keyword"].color.name == "cyan" and ansi["comment"].color.name == "bright_black"
