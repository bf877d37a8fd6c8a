"""The editor's terminal guards: what the terminal sends never kills it, and it always ends.

Textual's Linux driver reads the terminal in a thread of its own and decodes it as strict
UTF-8: one byte that is not UTF-8 (a Latin-1 terminal, PuTTY, xterm's 8-bit meta) killed that
thread, the app panicked without sharpen's crash path, and the unsaved typing was lost. Its
parser also turned a burst of Alt chords (ESC i ESC i ...) into "^" and letters
(docs/textual-upstream-keys.md). And after a hang-up its shutdown could block for good on
the output thread's queue (docs/editor.md, "Terminal input and hang-ups").

Here:

- `SharpenDriver` reads with an incremental decoder that replaces invalid UTF-8 (U+FFFD),
  parses with `ChordParser`, treats end of input on a terminal as a hang-up, never blocks on
  an output thread that has died, and reports its threads' exceptions to the guard;
- `ProcessGuard` sees an exception in any thread of the process (threading.excepthook): the
  app's crash path writes every unsaved buffer to recovery and the exit code is 1;
- the guard's watchdog ends the process in bounded time once it must end (SIGHUP, SIGTERM, a
  crashed thread): if the app has not finished SHUTDOWN_SECONDS later, the watchdog writes
  recovery itself and calls os._exit. It is woken through a pipe, the one thing a signal
  handler may safely touch while the main thread holds a lock.
"""
from __future__ import annotations

import asyncio
import logging
import os
import queue
import selectors
import signal
import termios
import threading
import time
from codecs import getincrementaldecoder
from typing import Callable, Iterable

from textual import events
from textual._xterm_parser import XTermParser
from textual.drivers.linux_driver import LinuxDriver

log = logging.getLogger(__name__)

SHUTDOWN_SECONDS = 3.0  # a hang-up or a crash: the process is gone this long after, whatever the UI does
RECOVERY_SECONDS = 1.0  # of those, at most this long for the watchdog's own recovery write
HANGUP_EXIT = 128 + 1  # exit code after SIGHUP or end of terminal input, as a shell reports it
CRASH_EXIT = 1  # exit code after an exception in any thread


class ChordParser(XTermParser):
    """XTermParser that keeps a burst of Alt chords as Alt chords.

    When a new ESC arrives while "ESC i" is pending, XTermParser re-issues the pending
    characters with the ESC as a "^" key (so a held Alt+I typed "^i^i"). Here the ESC of a
    re-issued sequence makes the character after it an Alt chord, as it does when the
    sequence times out on its own."""

    def __init__(self, debug: bool = False) -> None:
        super().__init__(debug)
        self._alt_next = False

    def _sequence_to_key_events(self, sequence: str, alt: bool = False) -> Iterable[events.Key]:
        # A lone ESC reaches this method only when a pending sequence is re-issued without
        # Alt processing (the escape key itself is sent directly as events.Key("escape")).
        if sequence == "\x1b" and not alt:
            self._alt_next = True
            return
        if self._alt_next:
            self._alt_next, alt = False, True
        yield from super()._sequence_to_key_events(sequence, alt=alt)


def replacing_decoder() -> Callable[..., str]:
    """UTF-8, incremental (a character split across two reads is kept), invalid bytes as U+FFFD."""
    return getincrementaldecoder("utf-8")(errors="replace").decode


class SharpenDriver(LinuxDriver):
    """LinuxDriver whose input survives any bytes and whose threads report to the ProcessGuard."""

    guard: "ProcessGuard | None" = None  # set by ProcessGuard.install

    def run_input_thread(self) -> None:
        """Read the terminal, decode (invalid UTF-8 replaced), parse, post the events."""
        selector = selectors.SelectSelector()
        selector.register(self.fileno, selectors.EVENT_READ)
        parser = ChordParser(self._debug)
        decode = replacing_decoder()
        try:
            while not self.exit_event.is_set():
                ready = selector.select(0.1)
                if ready:
                    try:
                        data = os.read(self.fileno, 4096)
                    except OSError:  # EIO: the terminal hung up
                        data = b""
                    if not data:
                        self._input_ended()
                        return
                    for event in parser.feed(decode(data)):
                        self.process_message(event)
                for event in parser.tick():  # an ESC alone, after its delay: the Escape key
                    self.process_message(event)
        finally:
            selector.close()

    def _input_ended(self) -> None:
        # End of input on a terminal is a hang-up (the terminal's other end closed), whether or
        # not SIGHUP reaches this process (it goes to a terminal's controlling process only).
        # Piped input (not a terminal) just has nothing more to say.
        if self.input_tty and self.guard is not None:
            self.guard.hang_up()

    def _run_input_thread(self) -> None:
        try:
            self.run_input_thread()
        except BaseException as exc:  # Textual's own version panics: no recovery, exit 0
            if self.guard is None:
                raise
            self.guard.thread_crashed(exc, threading.current_thread())

    def write(self, data: str) -> None:
        writer = self._writer_thread
        if writer is None:
            return super().write(data)
        # The output thread dies when the terminal goes away (EIO): its queue is then never
        # drained, and a put on the full queue blocked shutdown for good. Wait while it lives.
        while writer.is_alive():
            try:
                writer._queue.put(data, timeout=0.2)
                return
            except queue.Full:
                continue

    def close(self) -> None:
        writer = self._writer_thread
        if writer is None:
            return
        self.write(None)  # the writer's stop token (WriterThread.stop, without its unbounded put)
        writer.join(timeout=SHUTDOWN_SECONDS / 3)


class ProcessGuard:
    """Every way the editor process ends goes through recovery, in bounded time.

    `app` is the SharpenApp; `install` it from the main thread before `app.run()`.
    """

    def __init__(self, app, shutdown_seconds: float = SHUTDOWN_SECONDS) -> None:
        self.app = app
        self.shutdown_seconds = shutdown_seconds
        self.exit_code: int | None = None  # the code the process ends with, once it must end
        self._wake_read, self._wake_write = os.pipe()
        self._loop: asyncio.AbstractEventLoop | None = None

    def install(self) -> None:
        """Before app.run(): the driver, the thread hook and the watchdog thread."""
        threading.excepthook = self._excepthook
        SharpenDriver.guard = self
        self.app.driver_class = SharpenDriver
        threading.Thread(target=self._watch, name="sharpen-watchdog", daemon=True).start()

    def attach(self) -> None:
        """From the running app, after its own SIGTERM / SIGHUP handlers (recovery, then exit)
        are in place: crashes in other threads are handed to its loop, and those signals also
        start the watchdog's clock."""
        self._loop = asyncio.get_running_loop()
        for signum in (signal.SIGHUP, signal.SIGTERM):
            # A Python-level handler runs in the main thread between bytecodes, even while it
            # waits on a lock. asyncio's handler (the app's graceful path) still runs: the
            # signal module writes every signal with a Python handler to the loop's wakeup fd.
            signal.signal(signum, self._on_signal)

    # -- the three ways in ------------------------------------------------------------------

    def _on_signal(self, signum, frame) -> None:
        self._arm(128 + signum)

    def hang_up(self) -> None:
        """The terminal is gone (from the input thread): save, then end with HANGUP_EXIT."""
        if self._arm(HANGUP_EXIT):
            self._in_loop(self._end_app, HANGUP_EXIT, None)

    def thread_crashed(self, exc: BaseException, thread: threading.Thread | None) -> None:
        log.error("thread %s died", getattr(thread, "name", "?"), exc_info=(type(exc), exc, exc.__traceback__))
        if self._arm(CRASH_EXIT):
            name = getattr(thread, "name", "a thread")
            message = f"sharpen: {name} failed ({type(exc).__name__}: {exc}); unsaved work was written to recovery"
            self._in_loop(self._end_app, CRASH_EXIT, message)

    def _excepthook(self, args) -> None:
        if args.exc_type is SystemExit:
            return
        self.thread_crashed(args.exc_value, args.thread)

    # -- ending ---------------------------------------------------------------------------

    def _arm(self, code: int) -> bool:
        """Start the watchdog's clock; True the first time (the first reason decides the code)."""
        if self.exit_code is not None:
            return False
        self.exit_code = code
        os.write(self._wake_write, b"!")  # async-signal-safe: no lock, no allocation to speak of
        return True

    def _in_loop(self, callback, *args) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(callback, *args)
            except RuntimeError:  # the loop closed meanwhile: the watchdog ends the process
                pass

    def _end_app(self, code: int, message: str | None) -> None:
        try:
            self.app.recovery.write_recovery()
        finally:
            self.app.exit(return_code=code, message=message)

    def _watch(self) -> None:
        os.read(self._wake_read, 1)  # blocks until the process must end
        deadline = time.monotonic() + self.shutdown_seconds
        while time.monotonic() < deadline:
            time.sleep(0.05)
        # Still here: the app's shutdown is stuck (or never started). Save what can be saved,
        # within a bound of its own, then end the process.
        writer = threading.Thread(target=self._write_recovery, name="sharpen-last-recovery", daemon=True)
        writer.start()
        writer.join(RECOVERY_SECONDS)
        self._restore_terminal()
        os._exit(self.exit_code if self.exit_code is not None else CRASH_EXIT)

    def _restore_terminal(self) -> None:
        """A terminal that is still there (SIGTERM) gets its modes back: a shell left in raw
        mode on the alternate screen looks dead too. Nothing here may block: direct writes."""
        driver = getattr(self.app, "_driver", None)
        try:
            fileno = driver._file.fileno()
            attrs = getattr(driver, "attrs_before", None)
            if attrs is not None:
                termios.tcsetattr(fileno, termios.TCSANOW, attrs)
            os.set_blocking(fileno, False)
            os.write(fileno, b"\x1b[?2004l\x1b[?1000l\x1b[?1003l\x1b[?1006l\x1b[<u\x1b[?1049l\x1b[?25h")
        except (AttributeError, OSError, ValueError, termios.error):
            pass  # no driver, or no terminal any more

    def _write_recovery(self) -> None:
        try:
            self.app.recovery.write_recovery()
        except BaseException:  # the process ends next in any case
            log.exception("the watchdog's recovery write failed")
