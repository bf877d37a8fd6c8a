"""Recovery in the editor: unsaved buffers go to app.recovery's store, and come back after a crash.

The app's RecoveryKeeper (see docs/safety.md, "Recovery"):

- each buffer with unsaved changes is written to the store 4 s after typing stops (as Vim
  writes its swap file when idle), and at most every 10 s while typing goes on; also on an
  unhandled exception and on SIGTERM / SIGHUP (when the app was started from the command line);
- entries belong to this editor start (its session): another editor on the same file, or a
  later start's untitled buffer, never writes over them;
- a successful save, a clean quit, or "Quit without saving" discards what this start wrote;
- at start, work that crashed editors left and that belongs to no file being opened (untitled
  buffers, files not named) is offered as a list: restore all into buffers, or discard;
- opening a file with a crashed editor's entry that differs from the file offers Restore /
  Discard; restoring puts the text into the buffer as one unsaved edit (Ctrl+Z gives the
  file's text back). "Decide later" (or Esc) keeps the entry for the next start;
- opening a file that another running editor has open warns (as Vim's swap file does);
- files on disk are watched while the editor is idle (a cheap stat): a change is shown in the
  status bar, and a clean buffer is offered a reload.

Recovery never blocks editing: a store that cannot be written is reported once.
"""
from __future__ import annotations

import logging
import time
from pathlib import Path

from ...core.errors import SharpenError
from ...core.files import disk_change
from ...core.newlines import newline_style
from ..recovery import RecoveryEntry, RecoveryStore, absolute, changed_since_recorded, worth_offering
from .buffer_file import BufferFile, split_endings
from .confirm_screen import ConfirmScreen

log = logging.getLogger(__name__)

IDLE_SECONDS = 4.0  # typing stopped this long: write recovery (Vim: 4 s)
WATCH_SECONDS = 2.0  # how often open files are checked on disk (mtime and size only)


def counted(count: int, noun: str) -> str:
    """"1 line", "3 lines"."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def shown_path(entry: RecoveryEntry) -> str:
    """Where a recovered buffer belongs, with its directory: two files of one name (src/a.py,
    tests/a.py) are told apart. Relative to the working directory when inside it, else from ~."""
    path = entry.path.parent if entry.untitled else entry.path
    try:
        shown = str(path.relative_to(Path.cwd())) if path != Path.cwd() else "."
    except ValueError:
        home = Path.home()
        shown = "~/" + str(path.relative_to(home)) if path.is_relative_to(home) else str(path)
    return f"untitled (started in {shown})" if entry.untitled else shown


class RecoveryKeeper:
    """Writes the app's unsaved buffers to the recovery store and offers entries back.

    One per app; `app` is the running SharpenApp (its panes, dialogs and timers).
    """

    def __init__(self, app) -> None:
        self.app = app
        self._recovery_store: RecoveryStore | None = None
        self._recovery_written: set[Path] = set()  # paths this session wrote an entry for
        self._recovery_failed = False
        self._idle_timer = None
        self._disk_seen: dict[str, str | None] = {}  # pane id -> the disk change last reported

    def start(self, interval: float, handle_signals: bool) -> None:
        """Write at most every `interval` seconds while typing goes on, and once typing stops for
        IDLE_SECONDS; watch the open files; with `handle_signals`, SIGTERM / SIGHUP write first."""
        self.app.set_interval(interval, self.write_recovery, name="recovery")
        self.app.set_interval(WATCH_SECONDS, self.watch_files, name="watch-files")
        if handle_signals:
            self._install_signal_handlers()

    def typed(self) -> None:
        """The buffer changed: write recovery once the typing pauses."""
        if self._idle_timer is not None:
            self._idle_timer.stop()
        self._idle_timer = self.app.set_timer(IDLE_SECONDS, self.write_recovery, name="recovery-idle")

    @property
    def recovery_store(self) -> RecoveryStore:
        if self._recovery_store is None:
            self._recovery_store = RecoveryStore()  # $SHARPEN_RECOVERY_DIR, else the platform state dir
        return self._recovery_store

    def recovery_path(self, pane) -> Path:
        """The buffer's file, or a pseudo path for an untitled buffer (unique within this start;
        the store keys it by the start's session too)."""
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
                    if self.recovery_store.save(path, text, buffer.bom, buffer.source, untitled=buffer.path is None):
                        written += 1
                    self._recovery_written.add(path)
                elif path in self._recovery_written:  # undone back to the file's text
                    self._forget(pane, path)
            except (SharpenError, OSError) as exc:
                if not self._recovery_failed:  # once: never nag while editing
                    self._recovery_failed = True
                    self.app.notify(f"recovery copies cannot be written: {exc}", title="Recovery", severity="warning", timeout=8)
        return written

    def _forget(self, pane, path: Path) -> None:
        """Nothing unsaved any more: a file buffer keeps only its "open" marker, an untitled one nothing."""
        self._discard(path)
        if pane.editor.buffer.path is not None:
            self._claim(pane)

    def _claim(self, pane) -> None:
        buffer = pane.editor.buffer
        if buffer.path is None:
            return
        try:
            self.recovery_store.claim(buffer.path, buffer.source)
            self._recovery_written.add(buffer.path)
        except (SharpenError, OSError) as exc:
            log.info("cannot mark %s as open: %s", buffer.path, exc)

    def recovery_saved(self, pane, old_path: Path | None) -> None:
        """After a successful save: the recovery for the buffer (and its untitled name) is obsolete."""
        paths = {self.recovery_path(pane)}
        if old_path is None:
            paths.add(Path.cwd() / f"untitled-{pane.id.rsplit('-', 1)[-1]}")
        elif old_path != pane.editor.buffer.path:
            paths.add(old_path)
        for path in paths:
            self._discard(path)
        self._claim(pane)
        self._disk_seen.pop(pane.id, None)

    def closed(self, pane) -> None:
        """A tab closed (saved, or its changes discarded by the user): its entry and "open" marker go."""
        self._discard(self.recovery_path(pane))
        self._disk_seen.pop(pane.id, None)

    def recovery_discard_all(self) -> None:
        """On quitting without unsaved changes (or discarding them): drop what this start wrote,
        and only that: other starts' entries stay for their own recovery."""
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

    # -- opening: another editor, a crashed one --------------------------------------------

    def opened(self, pane) -> bool:
        """A file buffer was opened: mark it as ours, warn if another running editor has it,
        and offer a crashed editor's unsaved changes to it. True when a dialog was shown."""
        buffer = pane.editor.buffer
        if buffer.path is None:
            return False
        try:
            others = self.recovery_store.open_elsewhere(buffer.path)
        except OSError:
            others = []
        if others:
            pids = ", ".join(str(e.pid) for e in others if e.pid is not None)
            self.app.notify(f"{buffer.name} is also open in another sharpen (pid {pids}): saves in one overwrite the other's "
                            "changes unless the file changed check stops them", title="Open elsewhere", severity="warning", timeout=12)
        self._claim(pane)
        return self.offer_recovery(pane)

    def crashed_entries(self, path: Path | None = None) -> list[RecoveryEntry]:
        try:
            orphans = self.recovery_store.orphans()
        except OSError:
            return []
        if path is None:
            return orphans
        target = absolute(path)
        return [e for e in orphans if e.path == target and not e.untitled]

    def offer_recovery(self, pane) -> bool:
        """Ask to restore a crashed editor's entry for this buffer's file, if one is worth restoring."""
        buffer = pane.editor.buffer
        if buffer.path is None:
            return False
        current = buffer.original if buffer.source is not None else None
        for entry in self.crashed_entries(buffer.path):
            if not worth_offering(entry, current if current is not None else "") or \
                    split_endings(entry.text)[0] == split_endings(current or "")[0]:
                self.recovery_store.discard_entry(entry)  # nothing it would change: the same lines
                continue
            when = time.strftime("from %Y-%m-%d %H:%M:%S", time.localtime(entry.saved_at)) if entry.saved_at else "of an unknown time"
            question = f"{buffer.name} has unsaved changes {when} that were never saved. Restore them into the buffer?"
            if changed_since_recorded(entry, buffer.source):
                question += " Note: the file on disk changed since then; restoring replaces its text in the buffer (nothing is written until you save)."

            def answered(answer: str, entry: RecoveryEntry = entry) -> None:
                if answer == "restore":
                    self.restore_recovery(pane, entry)
                    self.recovery_store.discard_entry(entry)  # this start writes its own entry from now on
                elif answer == "discard":
                    self.recovery_store.discard_entry(entry)
                    self.app.notify(f"recovered changes to {buffer.name} discarded", timeout=3)

            choices = [("restore", "Restore", "primary"), ("discard", "Discard", "error"), ("cancel", "Decide later", "default")]
            self.app.push_screen(ConfirmScreen(question, choices), answered)
            return True
        return False

    def offer_the_rest(self, open_paths: set[Path]) -> bool:
        """At start: crashed editors' unsaved work that belongs to no file being opened (untitled
        buffers, other files), as one list to restore into buffers or discard."""
        entries = [e for e in self.crashed_entries() if e.untitled or e.path not in open_paths]
        if not entries:
            return False
        names = ", ".join(shown_path(e) + f" ({counted(len(e.text.splitlines()), 'line')})" for e in entries[:6])
        more = f" and {len(entries) - 6} more" if len(entries) > 6 else ""
        them = "it into a buffer" if len(entries) == 1 else "them into buffers"
        question = (f"sharpen did not close cleanly last time: unsaved work in {counted(len(entries), 'buffer')} was kept: {names}{more}. "
                    f"Restore {them} (nothing is written until you save)?")

        def answered(answer: str) -> None:
            if answer == "restore":
                for entry in entries:
                    self.app.call_later(self._restore_as_buffer, entry)
            elif answer == "discard":
                for entry in entries:
                    self.recovery_store.discard_entry(entry)
                self.app.notify(f"discarded {counted(len(entries), 'recovered buffer')}", timeout=3)

        choices = [("restore", "Restore all", "primary"), ("discard", "Discard all", "error"), ("cancel", "Decide later", "default")]
        self.app.push_screen(ConfirmScreen(question, choices), answered)
        return True

    async def _restore_as_buffer(self, entry: RecoveryEntry) -> None:
        if entry.untitled:
            buffer = BufferFile(None, "")
        else:
            try:
                buffer = BufferFile.open(entry.path)
            except SharpenError:  # the file is gone: its text comes back as an untitled buffer
                buffer = BufferFile(None, "")
        pane = await self.app.add_buffer(buffer, offer=False)
        self.restore_recovery(pane, entry)
        self.recovery_store.discard_entry(entry)

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

    # -- watching the files on disk -------------------------------------------------------

    def watch_files(self) -> None:
        """A cheap stat of every open file (mtime and size): a change is said once per change."""
        for pane in self.app.panes():
            buffer = pane.editor.buffer
            if buffer.source is None or not buffer.source.digest:
                continue
            change = disk_change(buffer.source, quick=True)
            if change == self._disk_seen.get(pane.id):
                continue
            self._disk_seen[pane.id] = change
            pane.disk_notice = "" if change is None else "changed on disk"
            self.app.update_status()
            if change is None:
                continue
            if pane.editor.unsaved:
                self.app.notify(f"{buffer.name} changed on disk ({change}); saving will ask before overwriting it",
                                title="Changed on disk", severity="warning", timeout=8)
            else:
                self._offer_reload(pane, change)

    def _offer_reload(self, pane, change: str) -> None:
        buffer = pane.editor.buffer
        question = f"{buffer.name} changed on disk ({change}). The buffer has no unsaved changes: reload it from disk?"

        def answered(answer: str) -> None:
            if answer == "reload":
                try:
                    fresh = BufferFile.open(buffer.path)
                except SharpenError as exc:
                    self.app.notify(str(exc), title="Cannot reload", severity="error")
                    return
                pane.reload(fresh)
                self._disk_seen.pop(pane.id, None)
                pane.disk_notice = ""
                self.app.update_status()

        choices = [("reload", "Reload", "primary"), ("cancel", "Keep the buffer", "default")]
        self.app.push_screen(ConfirmScreen(question, choices), answered)
