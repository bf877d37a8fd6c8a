"""Command-line flags derived from the declared settings (core/settings.py, app/config.py).

`sharpen` (app/cli.py) and `sharpen serve` (app/serve/main.py) build their flags here, so a
setting declared once is spelled the same way by every command.
"""
from __future__ import annotations

import argparse
import typing
from dataclasses import fields

from ..core.settings import Request, rule_of, value_type


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
