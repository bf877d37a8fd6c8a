"""What a stop signal (SIGINT, SIGTERM, SIGHUP) does before a run installs its own handling.

The console script's first instruction (app/start.py) sets `stop_at_once` for all three, so
a Ctrl+C 20 ms after start never prints a KeyboardInterrupt traceback from inside an import,
and can never be swallowed by a library's `except BaseException` and let a run go on to
write the file. Until the headless run or the editor takes over, nothing has been written,
so ending at once with one line is always true. No side effect on import: tests and callers
that import the app keep Python's own handlers.
"""
from __future__ import annotations

import os
import signal

STOP_SIGNALS = tuple(s for s in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGHUP", None)) if s is not None)
INTERRUPTED = b"sharpen: interrupted; nothing was written\n"
INTERRUPTED_EXIT = 130


def stop_at_once(signum, frame) -> None:
    """One line on stderr, exit 130, no unwinding (there is nothing to clean up yet)."""
    try:
        os.write(2, INTERRUPTED)
    except OSError:  # stderr closed (`2>&-`) before app/cli.py put /dev/null there
        pass
    os._exit(INTERRUPTED_EXIT)


def install(handler=stop_at_once) -> None:
    for signum in STOP_SIGNALS:
        signal.signal(signum, handler)
