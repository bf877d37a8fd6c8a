"""The console script `sharpen`: stop signals are handled from its first instruction.

pyproject.toml points the script here rather than at app/cli.py so that importing the CLI
from Python (tests, bench/) installs no handlers; only the process itself does, before
anything else is imported (app/stop.py says why).
"""
from . import stop

stop.install()

from .cli import main  # noqa: E402  (after the handlers, on purpose)

__all__ = ["main"]
