"""Command-line flags derived from the declared settings (core/settings.py, app/config.py).

`sharpen` (app/cli.py), `sharpen serve` (app/serve/main.py) and `sharpen lsp` (app/lsp.py) build
their flags here, so a setting declared once is spelled the same way by every command, and read
them back with the one config_from: defaults < config file < command line.
"""
from __future__ import annotations

import argparse
import typing
from dataclasses import fields
from pathlib import Path

from ..core.errors import UsageError
from ..core.settings import Request, SettingError, rule_of, value_type
from .config import SECTIONS, by_section, load_config


def add_settings(parser: argparse.ArgumentParser, request: type[Request], title: str | None) -> None:
    """One flag per declared setting of `request` (core/settings.py); default None = not given."""
    group = parser.add_argument_group(title) if title else parser
    for f in fields(request):
        rule = rule_of(f)
        if not rule.flag:
            continue
        kind, optional = value_type(request, f.name)
        shown = f" (default {f.default})" if f.default not in (None, False) else ""
        options: dict = {"dest": f.name, "default": None, "help": rule.help + shown}
        if kind is bool:
            options["action"] = argparse.BooleanOptionalAction if optional else "store_true"
        elif typing.get_origin(kind) is tuple:  # a list of words: the flag repeats (--require a --require b)
            options.update(action="append", type=str, metavar=rule.metavar)
        else:
            options["type"] = kind
            options["choices"] = rule.choices
            options["metavar"] = None if rule.choices else rule.metavar
        group.add_argument("--" + f.name.replace("_", "-"), **options)


def flag_name(name: str) -> str:
    return "--" + name.replace("_", "-")


def config_from(args: argparse.Namespace):
    """defaults < config file < command line, layered once; every error names where it came from.

    The one argparse-to-settings step of every command line: each setting flag `args` has
    (add_settings) over the config file its --config names (or the default one). An app.config.Config."""
    config_path = Path(args.config).expanduser() if getattr(args, "config", None) else None
    config = load_config(config_path)
    given = {f.name: getattr(args, f.name) for r in SECTIONS for f in fields(r) if rule_of(f).flag and hasattr(args, f.name)}
    try:
        return config.layered(by_section(given))
    except SettingError as exc:
        raise UsageError(f"{flag_name(exc.name)} {exc.rule}") from None
