"""`sharpen FILE --apply-edit SPEC`: the engine without a screen.

stdout carries only the result (new text, a unified diff, or JSON); progress and errors
go to stderr. The input file is written only with --in-place, only after the whole edit
succeeded, only if it did not change on disk meanwhile, and atomically, with SIGINT and
SIGTERM held around the rename: exit 0 means the new text is on disk, 130 that the file
is byte for byte what it was. Imports no textual; torch is imported only once the input,
the SPEC and the options have been checked, so bad input fails fast.
"""
from __future__ import annotations

import logging
import os
import signal
import stat
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator

from ..core.errors import Cancelled, InputError, UsageError
from ..core.files import MAX_FILE_BYTES, NotRegularFile, TextFile, check_writable, decode_bytes, read_text_file, save_text_file
from ..core.request import EditRequest
from ..core.spans import Span
from .config import Config
from .headless_output import print_result
from .specs import parse_edit_list, parse_spec

MAX_EDIT_LIST_BYTES = 16 * 2**20
# Held during the write; SIGHUP too (a closed terminal), which would otherwise kill us mid-rename.
_STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM} | ({signal.SIGHUP} if hasattr(signal, "SIGHUP") else set())


def _read_limited(stream, limit: int, name: str) -> bytes:
    # Bounded, so `@/dev/zero` or an endless pipe ends in a message, not in swap.
    data = stream.read(limit + 1)
    if len(data) > limit:
        raise InputError(f"{name}: too large (more than {limit // 2**20} MiB)")
    return data


def read_input(file_arg: str) -> TextFile:
    if file_arg == "-":
        if sys.stdin is None:
            raise InputError("<stdin>: standard input is closed")
        try:
            data = _read_limited(sys.stdin.buffer, MAX_FILE_BYTES, "<stdin>")
        except OSError as exc:
            raise InputError(f"<stdin>: cannot read ({exc.strerror or exc})") from None
        text, bom = decode_bytes(data, "<stdin>")
        return TextFile(None, text, bom)
    try:
        return read_text_file(file_arg)
    except NotRegularFile as exc:
        raise NotRegularFile(f"{exc}; pipe text in with FILE - instead") from None


@dataclass(frozen=True)
class HeadlessJob:
    """What `--apply-edit` asks beyond the settings: the file, the SPEC, where the result goes."""

    file: str  # a path, or "-" for stdin
    spec: str  # SPEC as typed (app/specs.py)
    output: str = "text"  # text | in-place | diff | json
    mode: str = "infill"  # what the spans of a plain SPEC do
    max_tokens: int | None = None  # infill slot budget per span of a plain SPEC
    instruction: str | None = None
    quiet: bool = False  # no progress line on stderr

    @property
    def in_place(self) -> bool:
        return self.output == "in-place"


def read_spans(job: HeadlessJob, config: Config, source: TextFile) -> list[Span]:
    spec = job.spec
    if spec == "-" or spec.startswith("@"):
        if spec == "-":
            if job.file == "-":
                raise UsageError("FILE and SPEC cannot both be read from stdin")
            name, raw = "<stdin>", _edit_list_bytes(sys.stdin.buffer, "<stdin>")
        else:
            name = spec[1:]
            try:
                with _open_edit_list(name) as handle:
                    raw = _edit_list_bytes(handle, name)
            except OSError as exc:
                raise UsageError(f"cannot read edit list {name}: {exc.strerror or exc}") from None
        try:
            payload = raw.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise UsageError(f"edit list {name} is not UTF-8 (invalid byte at offset {exc.start})") from None
        spans = parse_edit_list(payload, source.text, name, path=job.file, default_strength=config.editing.strength)
    else:
        options = {"strength": config.editing.strength, "max_tokens": job.max_tokens, "instruction": job.instruction}
        spans = parse_spec(spec, source.text, mode=job.mode, path=job.file, **options)
    return constrained(spans, config)  # validated once, by the EditRequest they go into


def constrained(spans: list[Span], config: Config) -> list[Span]:
    """Spans with the constraint the settings ask of every span (--regex, --json-schema, ...), where
    the edit list gave a span none of its own; every constraint compiled now, before a model loads."""
    from dataclasses import replace

    from ..core.constraints.automaton import constraint_dfa
    from ..core.constraints.spec import from_settings

    common = from_settings(config.editing)
    spans = [replace(s, constraint=common) if s.constraint is None and common is not None else s for s in spans]
    for constraint in {s.constraint for s in spans if s.constraint is not None}:
        constraint_dfa(constraint)  # a bad pattern is refused before a model loads
    return spans


def _open_edit_list(name: str):
    """The edit list file, opened without blocking and checked on its descriptor: a FIFO named
    as @FILE waited for a writer for ever (FILE itself is refused the same way)."""
    fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            what = "a directory" if stat.S_ISDIR(mode) else "not a regular file (pipe, socket or device)"
            raise UsageError(f"cannot read edit list {name}: {what}; pipe the list in with SPEC - instead")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb")


def _edit_list_bytes(stream, name: str) -> bytes:
    try:
        return _read_limited(stream, MAX_EDIT_LIST_BYTES, name)
    except InputError as exc:
        raise UsageError(f"edit list {exc}") from None


_stop_exits_at_once = False  # true while torch is imported and the model loads
_process_exits = False  # true when the run is the process (the CLI), which exits right after it


def _on_stop(signum, frame):
    """SIGINT/SIGTERM: end like Ctrl+C (KeyboardInterrupt, exit 130, file untouched).

    While torch is imported and the model loads, the process exits at once instead: much of
    that time is spent in C++ that calls back into Python (pybind11), and a KeyboardInterrupt
    raised there aborts the process (exit -6) instead of unwinding. Nothing needs cleaning up
    then: no temp file exists outside `signals_held`, and stdout is written only at the end.
    """
    if not _stop_exits_at_once:
        raise KeyboardInterrupt
    os.write(2, (b"\n" if os.isatty(2) else b"") + b"sharpen: interrupted; nothing was written\n")
    os._exit(130)


@contextmanager
def _exit_at_once_on_stop() -> Iterator[None]:
    global _stop_exits_at_once
    _stop_exits_at_once = True
    try:
        yield
    finally:
        _stop_exits_at_once = False


@contextmanager
def signals_held() -> Iterator[Callable[[], None]]:
    """Hold SIGINT and SIGTERM while a file is replaced, so it ends up old or new, never partial.

    Yields `check`, to call at the commit point (just before the rename): it raises
    KeyboardInterrupt if a stop signal came meanwhile, and the write is abandoned. A signal
    landing after the check is dropped: the new file is already in place and the run ends
    at once, so exit 0 always means "new text written", 130 "file untouched".
    The Python handlers are swapped rather than the signal mask: torch's worker threads do
    not block signals, so a masked main thread would still see the interrupt.
    Outside the main thread there are no handlers to swap: nothing to hold.
    """
    if threading.current_thread() is not threading.main_thread():
        yield lambda: None
        return
    arrived: list[int] = []
    previous = {sig: signal.signal(sig, lambda signum, frame: arrived.append(signum)) for sig in _STOP_SIGNALS}

    def check() -> None:
        if arrived:
            raise KeyboardInterrupt

    committed = False
    try:
        yield check
        committed = True
    finally:
        for sig, handler in previous.items():
            # Once the new file is in place in a process about to exit, the run has succeeded: a
            # stop signal in what is left (flushing, interpreter and torch teardown) must not turn
            # exit 0 into a death by signal, nor into an "interrupted" that is not true.
            keep_ignoring = committed and _process_exits
            signal.signal(sig, signal.SIG_IGN if keep_ignoring else (handler if handler is not None else signal.SIG_DFL))


class Progress:
    """A one-line step counter on stderr, only when stderr is a terminal."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.open = False  # a step line is on screen without its newline

    def update(self, frame, noise: str = "mask") -> None:
        """`frame`: a core.run.Progress; `noise`: how the model's canvas starts (random: noise, not masks)."""
        if self.enabled:
            self.open = True
            rate = f"{(frame.total_steps and (frame.step / max(frame.elapsed, 1e-9))):.1f} steps/s"
            unsharp = "noise" if noise == "random" else "masked"
            sys.stderr.write(f"\rsharpen: step {frame.step}/{frame.total_steps}, {frame.unsharp} {unsharp}, {rate}  ")
            sys.stderr.flush()

    def finish(self, result) -> None:
        if self.enabled:
            rate = result.tokens / max(result.seconds, 1e-9)
            sys.stderr.write(f"\rsharpen: {result.tokens} tokens in {result.steps} steps, {result.seconds:.2f}s ({rate:.0f} tok/s)\n")
            self.open = False

    def abort(self) -> None:
        # End the step line so an error message starts on a line of its own.
        if self.open:
            sys.stderr.write("\n")
            self.open = False


# The libraries a model loads through: their own log lines and Python warnings are theirs, not the user's.
LIBRARY_LOGGERS = ("transformers", "torch", "torchao", "accelerate", "huggingface_hub", "safetensors", "tokenizers", "py.warnings")
library_log = logging.getLogger("sharpen.libraries")


class _ToSharpenLog(logging.Handler):
    """A library's record, re-logged at DEBUG on sharpen.libraries: nothing on stderr unless the
    process asked for debug logs (the server's --log-level debug)."""

    def emit(self, record: logging.LogRecord) -> None:
        library_log.debug("%s: %s", record.name, record.getMessage())


@contextmanager
def library_output_routed() -> Iterator[None]:
    """Headless prints one line for an error and nothing for a success, so while it runs the
    libraries' logging (transformers' "[transformers] Last layer must use `full_attention`...",
    torch's and torchao's notes) and Python warnings go to sharpen's debug log instead of stderr.
    transformers adds its stderr handler when it is first imported, which may be mid-run:
    TRANSFORMERS_VERBOSITY (when the user set none) keeps that handler silent too."""
    route = _ToSharpenLog()
    saved = []
    for name in LIBRARY_LOGGERS:
        logger = logging.getLogger(name)
        saved.append((logger, logger.handlers[:], logger.propagate))
        logger.handlers[:] = [route]
        logger.propagate = False
    verbosity = os.environ.get("TRANSFORMERS_VERBOSITY")
    if verbosity is None:
        os.environ["TRANSFORMERS_VERBOSITY"] = "critical"
    logging.captureWarnings(True)
    try:
        yield
    finally:
        logging.captureWarnings(False)
        if verbosity is None:
            os.environ.pop("TRANSFORMERS_VERBOSITY", None)
        for logger, handlers, propagate in saved:  # a handler a library added mid-run (on import) goes too
            logger.handlers[:] = handlers
            logger.propagate = propagate


def run_headless(job: HeadlessJob, config: Config = Config(), denoiser=None, process_exits: bool = False, backend=None) -> int:
    """The whole headless run; `denoiser` lets a caller (bench/soak.py) reuse a loaded model,
    `backend` (app/backend.py) run it elsewhere.

    `process_exits`: the caller ends the process right after (the CLI). Then, once the result
    is written, stop signals are ignored for the rest of the process: exit 0 means written,
    and a Ctrl+C during the interpreter's and torch's teardown cannot turn it into a death by
    signal or an "interrupted" that is not true.
    """
    global _process_exits
    _process_exits = process_exits
    main_thread = threading.current_thread() is threading.main_thread()
    # SIGTERM and SIGHUP (a closed terminal) end like Ctrl+C: exit 130, the file untouched.
    previous = {sig: signal.signal(sig, _on_stop) for sig in _STOP_SIGNALS} if main_thread else {}
    done = False
    try:
        if backend is None and denoiser is not None:
            from .backend import LocalBackend

            backend = LocalBackend.of(denoiser)
        with library_output_routed():
            code = _run(job, config, backend)
        done = True
        return code
    finally:
        for sig, handler in previous.items():
            if done and process_exits:
                signal.signal(sig, signal.SIG_IGN)
            else:
                signal.signal(sig, handler if handler is not None else signal.SIG_DFL)


def _run(job: HeadlessJob, config: Config, backend) -> int:
    if job.in_place and job.file == "-":
        raise UsageError("--in-place needs a file, not stdin")
    source = read_input(job.file)
    spans = read_spans(job, config, source)
    request = EditRequest(source.text, tuple(spans), config.sampling, config.editing, None if job.file == "-" else job.file)
    if job.in_place:
        check_writable(source.path)  # fail now, not after minutes of denoising

    if backend is None and not config.remote.backend:
        from ..core.models.load import resolve_model_path

        resolve_model_path(config.model.model)  # a missing --model says so before torch loads
    with _exit_at_once_on_stop():
        if backend is None:
            from .backend import backend_for  # torch loads in load(), after input and SPEC are known good

            backend = backend_for(config, quiet=job.quiet)
        info = backend.load()
    from ..core.run import Done

    progress = Progress(sys.stderr.isatty() and not job.quiet)
    started = time.perf_counter()
    done = None
    try:
        for event in backend.run(request, every=0.0 if progress.enabled else None):
            if isinstance(event, Done):
                done = event
            else:
                progress.update(event, info.noise)
    except BaseException:
        progress.abort()
        raise
    if done is None:
        raise Cancelled("the edit was cancelled; nothing was written")
    progress.finish(done.result)
    write_result(job, source, done, time.perf_counter() - started)
    return 0


def write_result(job: HeadlessJob, source: TextFile, done, seconds: float) -> None:
    """Write `done` (a core.run.Done)'s edit where the job says: the file, a diff, JSON or the text."""
    new_text = done.result.changes().apply(source.text)  # the engine's edit, applied here as in the editor
    if job.in_place:
        if new_text == source.text:
            return  # nothing changed: leave the file, its mtime included
        with signals_held() as check:
            # Refused (exit 3) if another program changed the file while the model ran.
            save_text_file(source, new_text, before_commit=check)
        return
    print_result(job.output, source, done, new_text, seconds)
