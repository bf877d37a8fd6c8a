"""Theme TOML files -> a Textual Theme (widgets) plus a TextAreaTheme (syntax colours) each.

Both halves come from the same file, so switching the app theme also switches the code colours.
"""
from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

from rich.style import Style
from textual.color import Color
from textual.theme import Theme
from textual.widgets.text_area import TextAreaTheme

from ...core.errors import UsageError
from ...themes import shipped_theme_files

# A group name in a theme's [syntax] table styles every tree-sitter highlight name listed here.
SYNTAX_GROUPS: dict[str, tuple[str, ...]] = {
    "keyword": ("keyword", "conditional", "repeat", "exception", "include", "keyword.function", "keyword.return", "keyword.operator"),
    "string": ("string", "string.documentation", "inline_code", "info_string"),
    "comment": ("comment",),
    "number": ("number", "float"),
    "function": ("function", "function.call", "method", "method.call"),
    "type": ("type", "class", "type.class", "type.builtin", "constructor"),
    "constant": ("boolean", "constant.builtin", "json.null", "toml.datetime"),
    "operator": ("operator", "punctuation.bracket", "punctuation.delimiter", "punctuation.special"),
    "tag": ("tag", "yaml.field", "json.label", "toml.type", "css.property"),
    "heading": ("heading", "heading.marker", "list.marker"),
    "link": ("link.uri", "link.label"),
}
MARKUP = {"bold": Style(bold=True), "italic": Style(italic=True), "strikethrough": Style(strike=True)}
COLOR_FIELDS = ("primary", "secondary", "accent", "foreground", "background", "surface", "panel", "success", "warning", "error")


@dataclass(frozen=True)
class LoadedTheme:
    app_theme: Theme
    syntax: TextAreaTheme
    source: Path


def rich_color(value: str) -> str:
    """A theme colour as rich's Style.parse reads it: Textual's ANSI themes name colours
    `ansi_cyan`, `ansi_bright_white`, `ansi_default` (the terminal's own palette), which rich
    calls `cyan`, `bright_white`, `default`."""
    return value[len("ansi_"):] if value.startswith("ansi_") else value


def derived_syntax(colors: dict[str, str], dark: bool) -> dict[str, str]:
    """Syntax colours from the palette, for theme files without a [syntax] table."""
    fg_name = colors.get("foreground", "#e0e0e0" if dark else "#202020")
    bg_name = colors.get("background", "#000000" if dark else "#ffffff")
    if fg_name.startswith("ansi_") or bg_name.startswith("ansi_"):
        # Terminal palette colours (an ANSI theme) cannot be blended: the palette's grey is the muted one.
        fg, muted = rich_color(fg_name), "bright_black" if dark else "black"
    else:
        fg = Color.parse(fg_name).hex
        muted = Color.parse(fg_name).blend(Color.parse(bg_name), 0.45).hex
    colors = {name: rich_color(value) for name, value in colors.items()}
    pick = lambda name, fallback: colors.get(name, fallback)  # noqa: E731
    return {
        "keyword": pick("secondary", fg), "string": pick("success", fg), "comment": f"italic {muted}",
        "number": pick("warning", fg), "function": pick("primary", fg), "type": pick("accent", fg),
        "constant": pick("warning", fg), "operator": fg, "tag": pick("primary", fg),
        "heading": f"bold {pick('primary', fg)}", "link": f"underline {pick('primary', fg)}",
    }


def syntax_styles(table: dict[str, str], where: str) -> dict[str, Style]:
    styles = dict(MARKUP)
    # Groups first, exact names after, so "keyword.return" can refine "keyword".
    for name in sorted(table, key=lambda n: n not in SYNTAX_GROUPS):
        try:
            style = Style.parse(table[name])
        except Exception as exc:  # rich raises StyleSyntaxError / ColorParseError
            raise UsageError(f"{where}: syntax.{name}: {exc}") from None
        for target in SYNTAX_GROUPS.get(name, (name,)):
            styles[target] = style
    return styles


def parse_theme(text: str, source: Path) -> LoadedTheme:
    where = str(source)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"theme {where}: {exc}") from None
    name = data.get("name") or source.stem
    dark = bool(data.get("dark", True))
    colors = data.get("colors", {})
    unknown = sorted(set(colors) - set(COLOR_FIELDS))
    if unknown:
        raise UsageError(f"theme {where}: unknown colour {unknown[0]!r}; known: {', '.join(COLOR_FIELDS)}")
    if "primary" not in colors:
        raise UsageError(f"theme {where}: [colors] needs at least `primary`")
    for key, value in colors.items():
        try:
            Color.parse(value)
        except Exception:
            raise UsageError(f"theme {where}: colors.{key} = {value!r} is not a colour") from None
    app_theme = Theme(name=name, dark=dark, variables=dict(data.get("variables", {})), **colors)
    table = data.get("syntax") or derived_syntax(colors, dark)
    syntax = TextAreaTheme(name=name, syntax_styles=syntax_styles(table, f"theme {where}"))
    return LoadedTheme(app_theme, syntax, source)


def load_themes(user_dir: Path | None) -> dict[str, LoadedTheme]:
    """Shipped themes, then the user's (same name: the user's wins). Bad files are errors."""
    files = list(shipped_theme_files())
    if user_dir is not None and user_dir.is_dir():
        files += sorted(user_dir.glob("*.toml"))
    themes: dict[str, LoadedTheme] = {}
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"cannot read theme {path}: {exc}") from None
        loaded = parse_theme(text, path)
        themes[loaded.app_theme.name] = loaded
    return themes


def syntax_theme_for(theme: Theme, themes: dict[str, LoadedTheme]) -> TextAreaTheme:
    """The code colours for an app theme: its own file's, or derived from its palette (Textual's themes)."""
    if theme.name in themes:
        return themes[theme.name].syntax
    colors = {name: getattr(theme, name) for name in COLOR_FIELDS if getattr(theme, name, None)}
    return TextAreaTheme(name=theme.name, syntax_styles=syntax_styles(derived_syntax(colors, theme.dark), theme.name))
