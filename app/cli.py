"""The `sharpen` command: opens the editor, or runs headless with --apply-edit.

Only argparse is imported at the top so that `sharpen --help` answers at once; torch,
the engine and textual load when they are needed.
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path

from ..core.settings import Editing, ModelRequest, Sampling
from ..core.spans import MODES
from . import stop
from .config import Config, Editor, Remote
from .flags import add_settings, config_from

EXIT_CODES = """exit codes:
  0    done
  2    usage error or bad SPEC (overlapping, reversed or out-of-range spans)
  3    input/output error (missing, unreadable, binary or non-UTF-8 file; cannot write)
  4    model or runtime error (weights missing or corrupt, unknown family, out of memory)
  130  interrupted (Ctrl+C or SIGTERM); the file is left untouched
"""

SPEC_HELP = """SPEC forms (1-based lines and columns, end exclusive):
  L:C-L:C          a character range, e.g. 3:5-3:20; equal ends mean an insertion point
  L-L, L           whole lines (their content; the last line break stays)
  A,B,...          several spans, filled together in one denoising run
  @edits.json, -   a JSON list of {"range", "mode", "instruction", "max_tokens", "strength"}
  body@L[:C]       the body of the function or block at line L ("Fill body"; in prose, the paragraph)
  node@L[:C]       the smallest syntax node at L:C (no column: the line's first non-blank character)
  expr@, stmt@, block@, func@ L[:C]   the smallest expression, statement, block or function there

Every model, sampling and edit setting above can also be set in the config file (--print-config-path says where):
top-level keys for the editor, [model], [sampling] and [edit] tables for the rest.
"""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one plain line, documented exit code
        sys.stderr.write(f"sharpen: error: {message}\n")
        raise SystemExit(2)


def headless_job(args: argparse.Namespace):
    """The --apply-edit options that are not settings, as app.headless.HeadlessJob."""
    from .headless import HeadlessJob

    output = "in-place" if args.in_place else "diff" if args.diff else "json" if args.json else "text"
    return HeadlessJob(args.files[0], args.apply_edit, output, args.mode, args.max_tokens, args.instruction, args.quiet)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="sharpen",
        description="A terminal editor with a local diffusion language model: select, infill, rewrite, watch it sharpen.",
        epilog=SPEC_HELP + "\n" + EXIT_CODES + "\nother commands: sharpen models | sharpen doctor | sharpen download REPO_ID | sharpen serve | sharpen lsp",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("files", nargs="*", metavar="FILE", help="files to open; with --apply-edit exactly one (or - for stdin)")
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    parser.add_argument("--config", metavar="PATH", help="editor config file (default: see --print-config-path)")
    parser.add_argument("--print-config-path", action="store_true", help="print where the editor's config file is read from and exit")
    add_settings(parser, Editor, None)

    edit = parser.add_argument_group("headless editing")
    edit.add_argument("--apply-edit", metavar="SPEC", help="edit FILE without a screen and print the result")
    out = edit.add_mutually_exclusive_group()
    out.add_argument("--in-place", action="store_true", help="write the result back to FILE (atomically)")
    out.add_argument("--diff", action="store_true", help="print a unified diff instead of the new text")
    out.add_argument("--json", action="store_true", help="print JSON: per span the new text, steps, tokens and time")
    edit.add_argument("--mode", choices=MODES, default="infill", help="what the spans of a plain SPEC do (default infill)")
    edit.add_argument("--max-tokens", type=int, metavar="N", help="infill slot budget per span (pad/eos trims it)")
    edit.add_argument("--instruction", metavar="TEXT", help="rewrite instruction (instruct checkpoints only)")
    edit.add_argument("--quiet", "-q", action="store_true", help="no progress line on stderr")
    add_settings(parser, Editing, "edit settings (also [edit] in the config file)")
    add_settings(parser, ModelRequest, "model (also [model] in the config file)")
    add_settings(parser, Sampling, "sampling (also [sampling] in the config file)")
    add_settings(parser, Remote, "backend (also [backend] in the config file; the key only from $SHARPEN_API_KEY)")
    return parser


# Line breaks and other control characters (say, in a hostile file name) are escaped so
# that an error is always exactly one line on stderr.
_ONE_LINE = {c: f"\\x{c:02x}" for c in [*range(0x20), 0x7F, 0x85]} | {0x2028: "\\u2028", 0x2029: "\\u2029"}


def _fail(message: str, code: int) -> int:
    sys.stderr.write(f"sharpen: {message.translate(_ONE_LINE)}\n")
    return code


def main(argv: list[str] | None = None) -> int:
    """The console script. `argv` None means this is the process itself (not a caller in Python)."""
    process = argv is None
    if process:
        stop.install()  # already done by app/start.py (the console script); again for `python -c` callers
        _hold_standard_streams()
    argv = sys.argv[1:] if argv is None else argv
    try:
        code = _main(argv, process)
    except KeyboardInterrupt:
        code = stop.INTERRUPTED_EXIT
        if process:
            _decided(code)  # first: a second Ctrl+C must not interrupt the line or the exit
        return _fail("interrupted; nothing was written", code)
    except BrokenPipeError:
        code = 0
    if process:
        _decided(code)
    return code


def _decided(code: int) -> None:
    """The exit code is known: from here stop signals are ignored until the process is gone.

    What is left is flushing and teardown (atexit, torch's threads); a burst of Ctrl+C there
    must neither print a traceback from an atexit handler nor turn the exit into a death by
    SIGINT, so "0: written, 130: untouched" stays true. SIG_IGN, not a Python handler: the
    interpreter's finalization puts SIG_DFL back in place of Python handlers (but leaves
    SIG_IGN), and a signal after that point would kill the process by the signal.
    """
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            pass
    stop.install(signal.SIG_IGN)


def _hold_standard_streams() -> None:
    """Started with stdin, stdout or stderr closed (`2>&-`): put /dev/null on that descriptor.

    Otherwise the next file opened (a temp file being saved!) would get descriptor 2 and
    receive whatever writes to stderr, and Python's sys.stderr is None: every message would
    raise. What was closed stays closed for sharpen's purposes: stdout and stdin are marked
    None again, so writing a result there or reading FILE - is a plain I/O error (exit 3).
    """
    closed = []
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            closed.append(fd)
            os.open(os.devnull, os.O_RDWR)  # takes the lowest free descriptor: this one
    if 2 in closed:
        sys.stderr = open(os.devnull, "w", encoding="utf-8")  # messages go nowhere, exit codes still tell
    if 1 in closed:
        sys.stdout = None
    if 0 in closed:
        sys.stdin = None


def _main(argv: list[str], process: bool = False) -> int:
    from .subcommands import SUBCOMMANDS

    if argv and argv[0] in SUBCOMMANDS:
        from ..core.errors import SharpenError
        from .subcommands import run_subcommand

        try:
            return run_subcommand(argv[0], argv[1:])
        except SharpenError as exc:
            return _fail(str(exc), exc.exit_code)
    args = build_parser().parse_args(argv)
    if args.version:
        from importlib.metadata import version

        print(f"sharpen {version('sharpen')}")
        return 0
    if args.print_config_path:
        from .config import default_config_path

        print(args.config or default_config_path())
        return 0
    from ..core.errors import SharpenError

    config = None
    try:
        config = config_from(args)
        if args.apply_edit is not None:
            if len(args.files) != 1:
                return _fail("error: --apply-edit needs exactly one FILE (or - for stdin)", 2)
            from .headless import run_headless

            return run_headless(headless_job(args), config, process_exits=process)
        if args.in_place or args.diff or args.json:
            return _fail("error: --in-place, --diff and --json go with --apply-edit", 2)
        return _open_editor(args, config)
    except SharpenError as exc:
        return _fail(str(exc), exc.exit_code)
    except MemoryError:
        return _fail(f"out of memory; try {_smaller(config)}", 4)
    except Exception as exc:  # torch raises its OOM as a RuntimeError subclass
        if type(exc).__name__ == "OutOfMemoryError":
            return _fail(f"out of GPU memory; try {_smaller(config)}, or --device cpu", 4)
        if args.apply_edit is None or os.environ.get("SHARPEN_DEBUG"):
            raise
        # Headless callers get the documented contract even for a bug: one line, exit 4.
        return _fail(f"internal error: {type(exc).__name__}: {exc} (SHARPEN_DEBUG=1 shows the traceback)", 4)


def _smaller(config: Config | None) -> str:
    """The settings that shrink a run's memory, from the ones it used."""
    config = config or Config()
    hints = [f"--context-tokens {max(64, config.editing.context_tokens // 2)}"]
    if config.sampling.samples > 1:
        hints.append("--samples 1")
    return ", ".join(hints)


def _open_editor(args: argparse.Namespace, config: Config) -> int:
    try:
        from .tui.editor_app import run_editor
    except ImportError:
        return _fail("error: the editor is not available in this build; use --apply-edit", 2)
    config_path = Path(args.config).expanduser() if args.config else None
    if signal.getsignal(signal.SIGINT) is stop.stop_at_once:
        # The editor takes Ctrl+C as a key; a SIGINT from `kill` goes through its own crash path
        # (recovery first), as before; SIGTERM/SIGHUP stay one line until its handlers are in place.
        signal.signal(signal.SIGINT, signal.default_int_handler)
    return run_editor([Path(f) for f in args.files], config, config_path)


if __name__ == "__main__":
    sys.exit(main())
