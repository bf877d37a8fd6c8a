"""Recovery in the editor: unsaved buffers go to app.recovery's store, and come back on open.

The app's RecoveryKeeper (see docs/safety.md, "Recovery"):

- every `recovery_interval` seconds each buffer with unsaved changes is written to the store
  (repeats of the same text are skipped by the store); also on an unhandled exception and on
  SIGTERM / SIGHUP (when the app was started from the command line);
- a successful save, a clean quit, or "Quit without saving" discards what this session wrote;
- opening a file with a recovery entry that differs from the file offers Restore / Discard;
  restoring puts the recovered text into the buffer as one unsaved edit (Ctrl+Z gives the
  file's text back). "Decide later" (or Esc) keeps the entry for the next launch.

Recovery never blocks editing: a store that cannot be written is reported once.
"""
from __future__ import annotations

import logging
import time
from pathlib import Path

from ...core.errors import SharpenError
from ...core.newlines import newline_style
from ..recovery import RecoveryStore, changed_since_recorded, worth_offering
from .buffer_file import split_endings
from .confirm_screen import ConfirmScreen

log = logging.getLogger(__name__)


class RecoveryKeeper:
    """Writes the app's unsaved buffers to the recovery store and offers entries back.

    One per app; `app` is the running SharpenApp (its panes, dialogs and timers).
    """

    def __init__(self, app) -> None:
        self.app = app
        self._recovery_store: RecoveryStore | None = None
        self._recovery_written: set[Path] = set()  # paths this session wrote an entry for
        self._recovery_failed = False

    def start(self, interval: float, handle_signals: bool) -> None:
        """Write every `interval` seconds; with `handle_signals`, SIGTERM / SIGHUP write first."""
        self.app.set_interval(interval, self.write_recovery, name="recovery")
        if handle_signals:
            self._install_signal_handlers()

    @property
    def recovery_store(self) -> RecoveryStore:
        if self._recovery_store is None:
            self._recovery_store = RecoveryStore()  # $SHARPEN_RECOVERY_DIR, else the platform state dir
        return self._recovery_store

    def recovery_path(self, pane) -> Path:
        """The buffer's file, or a stable pseudo path for an untitled buffer."""
        path = pane.editor.buffer.path
        return path if path is not None else Path.cwd() / f"untitled-{pane.id.rsplit('-', 1)[-1]}"

    # -- writing ------------------------------------------------------------------------

    def write_recovery(self) -> int:
        """Write every unsaved buffer to the store now; returns how many were written."""
        written = 0
        for pane in self.app.panes():
            editor = pane.editor
            path = self.recovery_path(pane)
            try:
                if editor.unsaved:
                    buffer = editor.buffer
                    # Joined with the file's usual line break: cheap on huge files (no diff against
                    # the original every interval); a save restores each line's own ending anyway.
                    text = newline_style(buffer.original).join(editor.document.lines)
                    if self.recovery_store.save(path, text, buffer.bom, buffer.source):
                        written += 1
                    self._recovery_written.add(path)
                elif path in self._recovery_written:  # undone back to the file's text
                    self.recovery_store.discard(path)
                    self._recovery_written.discard(path)
            except (SharpenError, OSError) as exc:
                if not self._recovery_failed:  # once: never nag while editing
                    self._recovery_failed = True
                    self.app.notify(f"recovery copies cannot be written: {exc}", title="Recovery", severity="warning", timeout=8)
        return written

    def recovery_saved(self, pane, old_path: Path | None) -> None:
        """After a successful save: the recovery for the buffer (and its untitled name) is obsolete."""
        paths = {self.recovery_path(pane)}
        if old_path is None:
            paths.add(Path.cwd() / f"untitled-{pane.id.rsplit('-', 1)[-1]}")
        elif old_path != pane.editor.buffer.path:
            paths.add(old_path)
        for path in paths:
            self._discard(path)

    def recovery_discard_all(self) -> None:
        """On quitting without unsaved changes (or discarding them): drop what this session wrote."""
        for path in list(self._recovery_written):
            self._discard(path)

    def _discard(self, path: Path) -> None:
        self._recovery_written.discard(path)
        try:
            self.recovery_store.discard(path)
        except OSError as exc:
            log.warning("could not discard the recovery for %s: %s", path, exc)

    def _install_signal_handlers(self) -> None:
        import asyncio
        import signal

        def terminated(signum: int) -> None:
            try:
                self.write_recovery()
            finally:
                self.app.exit(return_code=128 + signum)

        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, getattr(signal, "SIGHUP", None)):
            if signum is None:
                continue
            try:
                loop.add_signal_handler(signum, terminated, int(signum))
            except (NotImplementedError, RuntimeError, ValueError):  # not the main thread, or Windows
                pass

    # -- offering a restore -------------------------------------------------------------

    def offer_recovery(self, pane) -> bool:
        """Ask to restore the buffer's recovery entry, if it has one worth restoring."""
        buffer = pane.editor.buffer
        if buffer.path is None:
            return False
        try:
            entry = self.recovery_store.load(buffer.path)
        except OSError:
            return False
        current = buffer.original if buffer.source is not None else None
        if entry is None or not worth_offering(entry, current if current is not None else ""):
            return False
        if split_endings(entry.text)[0] == split_endings(current or "")[0]:
            return False  # the same lines: only line breaks differ, which a save keeps from the file anyway
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(entry.saved_at))
        question = f"{buffer.name} has unsaved changes from {when} that were never saved. Restore them into the buffer?"
        if changed_since_recorded(entry, buffer.source):
            question += " Note: the file on disk changed since then; restoring replaces its text in the buffer (nothing is written until you save)."

        def answered(answer: str) -> None:
            if answer == "restore":
                self.restore_recovery(pane, entry)
            elif answer == "discard":
                self._discard(buffer.path)
                self.app.notify(f"recovered changes to {buffer.name} discarded", timeout=3)

        choices = [("restore", "Restore", "primary"), ("discard", "Discard", "error"), ("cancel", "Decide later", "default")]
        self.app.push_screen(ConfirmScreen(question, choices), answered)
        return True

    def restore_recovery(self, pane, entry) -> None:
        """Put the recovered text into the buffer as one unsaved edit (one undo step back)."""
        editor = pane.editor
        lines, _ = split_endings(entry.text)
        editor.history.checkpoint()
        editor.replace("\n".join(lines), (0, 0), editor.document.end)
        editor.history.checkpoint()
        editor.move_cursor((0, 0))
        editor.buffer.bom = entry.bom
        self._recovery_written.add(self.recovery_path(pane))
        self.app.notify(f"restored unsaved changes to {editor.buffer.name} (not saved yet; Ctrl+Z shows the file's text)", timeout=4)
