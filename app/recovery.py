"""Recovery files: unsaved buffers kept on disk so a crash loses at most a few seconds of work.

One JSON file per edited file, in platformdirs' user_state_dir("sharpen")/recovery, named
by the SHA-256 of the file's absolute path. Each holds the unsaved text (JSON escapes keep
every CR, tab and odd character exact), whether the file had a BOM, and what the file on
disk looked like when the buffer was opened (mtime, size, digest), so the editor can tell
a stale recovery from a useful one. Writes are atomic and private (mode 0600).

    store = RecoveryStore()
    store.save(path, buffer_text, bom=False, original=text_file)   # on an interval, on crash
    entry = store.load(path)                                         # next launch
    if entry and worth_offering(entry, current_text):  ...offer to restore...
    store.discard(path)                                              # after a save or a refusal

See docs/safety.md for how the editor wires this in.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import InputError
from ..core.files import TextFile, atomic_write

log = logging.getLogger(__name__)

FORMAT = 2  # bump when the JSON layout changes; unknown versions are skipped, not misread
SUFFIX = ".recovery.json"


def _stat(pid: int) -> list[str]:
    """The fields of /proc/PID/stat after the command name (Linux); [] where the system does not say."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat_file:
            return stat_file.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return []


def _start_ticks(pid: int) -> str:
    """When process `pid` started (field 22), so a reused pid is not mistaken for the editor that
    wrote an entry; "" where the system does not say."""
    fields = _stat(pid)
    return fields[19] if len(fields) > 19 else ""


def _exited(pid: int) -> bool:
    """A zombie (Z) or dead (X) process: killed (kill -9) but not yet reaped by its parent, so
    os.kill(pid, 0) still succeeds. Its buffers are as orphaned as a vanished process's."""
    fields = _stat(pid)
    return bool(fields) and fields[0] in ("Z", "X")


def new_session() -> str:
    """This editor start's identity: its pid and start time. No two starts share one, so no start
    ever reuses (and overwrites) another's recovery entries."""
    return f"{os.getpid()}-{_start_ticks(os.getpid())}-{time.time_ns()}"


def session_alive(session: str) -> bool:
    """Whether the editor start that owns `session` is still running."""
    try:
        pid_text, ticks, _ = session.split("-", 2)
        pid = int(pid_text)
    except ValueError:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # alive, another user's
    if _exited(pid):
        return False
    return not ticks or _start_ticks(pid) in ("", ticks)


def default_recovery_dir() -> Path:
    """$SHARPEN_RECOVERY_DIR if set (tests, portable setups), else the platform state dir."""
    override = os.environ.get("SHARPEN_RECOVERY_DIR")
    if override:
        return Path(override)
    from platformdirs import user_state_dir

    return Path(user_state_dir("sharpen")) / "recovery"


def absolute(path: str | Path) -> Path:
    # Not resolve(): a symlink and its target are different buffers to the user; only `..` and
    # the working directory are normalised away.
    return Path(os.path.abspath(os.fspath(path)))


def recovery_key(path: str | Path) -> str:
    """The recovery file's stem for `path`: SHA-256 of its absolute path (surrogates kept)."""
    raw = os.fsencode(absolute(path))
    return hashlib.sha256(raw).hexdigest()


@dataclass(frozen=True)
class RecoveryEntry:
    path: Path  # the file the buffer belongs to (absolute); for an untitled buffer, a name in the working directory
    text: str | None  # the unsaved buffer text, BOM lifted off, newlines exact; None: open, nothing unsaved
    bom: bool  # the file's BOM, to write back on restore
    saved_at: float  # time.time() of the recovery write
    original_mtime_ns: int | None  # the file on disk when the buffer was opened (None: new file)
    original_size: int | None
    original_digest: str | None
    file: Path | None = None  # the recovery file itself
    session: str = ""  # the editor start that wrote it (new_session); "" for the older format
    untitled: bool = False  # the buffer had no file

    @property
    def pid(self) -> int | None:
        head = self.session.split("-", 1)[0]
        return int(head) if head.isdigit() else None


def encode_entry(entry: RecoveryEntry) -> bytes:
    payload = {
        "format": FORMAT,
        "path": str(entry.path),
        "saved_at": entry.saved_at,
        "bom": entry.bom,
        "original_mtime_ns": entry.original_mtime_ns,
        "original_size": entry.original_size,
        "original_digest": entry.original_digest,
        "text": entry.text,
        "session": entry.session,
        "untitled": entry.untitled,
    }
    # ensure_ascii: even a lone surrogate typed into a buffer survives as a \\udXXX escape.
    return json.dumps(payload, ensure_ascii=True).encode("ascii")


LATEST_TIME = 253402300799.0  # 9999-12-31: the last second time.localtime formats everywhere


def _saved_at(value) -> float:
    """The entry's write time; 0 (unknown) when it is not a finite time a clock can format. A bad
    time never makes the entry unreadable: the text is what matters."""
    try:
        seconds = float(value)
    except (TypeError, ValueError, OverflowError):
        return 0.0
    return seconds if 0.0 <= seconds <= LATEST_TIME else 0.0  # NaN fails both comparisons


def decode_entry(data: bytes, file: Path | None = None) -> RecoveryEntry:
    """Recovery bytes -> entry; anything malformed is a ValueError."""
    payload = json.loads(data.decode("ascii"))
    if not isinstance(payload, dict) or payload.get("format") not in (1, FORMAT):
        raise ValueError("not a sharpen recovery file of a known format")
    text = payload.get("text")
    if not (isinstance(text, str) or (text is None and payload.get("format") == FORMAT)) or not isinstance(payload.get("path"), str):
        raise ValueError("recovery file without text or path")
    try:
        return RecoveryEntry(
            path=Path(payload["path"]),
            text=payload["text"],
            bom=bool(payload.get("bom", False)),
            saved_at=_saved_at(payload.get("saved_at", 0.0)),
            original_mtime_ns=_optional_int(payload.get("original_mtime_ns")),
            original_size=_optional_int(payload.get("original_size")),
            original_digest=payload.get("original_digest") if isinstance(payload.get("original_digest"), str) else None,
            file=file,
            session=payload.get("session") if isinstance(payload.get("session"), str) else "",
            untitled=bool(payload.get("untitled", False)),
        )
    except (TypeError, OverflowError) as exc:
        raise ValueError(f"malformed recovery file: {exc}") from None


def _optional_int(value) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"expected an integer, got {value!r}")
    return value


def worth_offering(entry: RecoveryEntry, current_text: str | None) -> bool:
    """Offer a restore only when it would change something: the file's text differs."""
    return entry.text != current_text


def changed_since_recorded(entry: RecoveryEntry, current: TextFile | None) -> bool:
    """The file on disk is not the one the buffer was opened from (worth a warning on restore)."""
    if current is None:
        return entry.original_digest is not None  # the file was deleted since
    return entry.original_digest is not None and entry.original_digest != current.digest


class RecoveryStore:
    """The recovery directory: this editor start's entries (one per buffer path and session),
    and what other starts left behind.

    Entries are keyed by the session (new_session) and the path, so two editors on one file,
    or a new start's untitled buffer, never write over another start's entry.
    """

    def __init__(self, directory: str | Path | None = None, session: str | None = None) -> None:
        self.directory = Path(directory) if directory is not None else default_recovery_dir()
        self.session = session or new_session()
        self._last: dict[str, str] = {}  # key -> digest of the last text written (skip repeats)

    def _key(self, path: str | Path) -> str:
        return recovery_key(f"{self.session}\0{absolute(path)}")

    def file_for(self, path: str | Path) -> Path:
        return self.directory / f"{self._key(path)}{SUFFIX}"

    def claim(self, path: str | Path, original: TextFile | None = None) -> None:
        """Mark `path` as open in this editor (an entry without text), so another editor opening
        it can say so, as Vim's swap file does. Nothing to recover from it after a crash."""
        self._write(path, None, False, original, untitled=False)

    def save(self, path: str | Path, text: str, bom: bool = False, original: TextFile | None = None, untitled: bool = False) -> Path | None:
        """Write `text` as the recovery for `path` (atomically); skipped if unchanged since the last save.

        `original` is the TextFile the buffer was opened from (None for a new file).
        Returns the recovery file, or None when the write was skipped. Errors are InputError.
        """
        return self._write(path, text, bom, original, untitled)

    def _write(self, path, text: str | None, bom: bool, original: TextFile | None, untitled: bool) -> Path | None:
        key = self._key(path)
        digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest() if text is not None else "open"
        target = self.directory / f"{key}{SUFFIX}"
        if self._last.get(key) == digest and target.exists():
            return None
        entry = RecoveryEntry(
            path=absolute(path),
            text=text,
            bom=bom,
            saved_at=time.time(),
            original_mtime_ns=original.mtime_ns if original else None,
            original_size=original.size if original else None,
            original_digest=(original.digest or None) if original else None,
            session=self.session,
            untitled=untitled,
        )
        try:
            self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError as exc:
            raise InputError(f"cannot create the recovery directory {self.directory}: {exc.strerror or exc}") from None
        atomic_write(target, encode_entry(entry), new_file_mode=0o600)
        self._last[key] = digest
        log.debug("recovery for %s written to %s", path, target)
        return target

    def load(self, path: str | Path) -> RecoveryEntry | None:
        """This session's entry for `path`, or None (also for an unreadable one, which is logged)."""
        return self._read(self.file_for(path))

    def discard(self, path: str | Path) -> bool:
        """Remove this session's entry for `path` (after a save, or when the user declines); True if one existed."""
        self._last.pop(self._key(path), None)
        try:
            self.file_for(path).unlink()
            return True
        except FileNotFoundError:
            return False

    def discard_entry(self, entry: RecoveryEntry) -> None:
        """Remove an entry another start left (restored, or declined by the user)."""
        if entry.file is not None:
            try:
                entry.file.unlink()
            except FileNotFoundError:
                pass

    def entries_for(self, path: str | Path) -> list[RecoveryEntry]:
        """Every start's entries for `path`, newest first."""
        target = absolute(path)
        return [e for e in self.entries() if e.path == target]

    def orphans(self) -> list[RecoveryEntry]:
        """Unsaved work of editor starts that are no longer running (crashed, killed), newest
        first; their "open" markers, which hold nothing to recover, are cleared on the way."""
        found = []
        for entry in self.entries():
            if entry.session == self.session or session_alive(entry.session):
                continue
            if entry.text is None:
                self.discard_entry(entry)
            else:
                found.append(entry)
        return found

    def open_elsewhere(self, path: str | Path) -> list[RecoveryEntry]:
        """Entries for `path` of other editor starts that are running now."""
        target = absolute(path)
        return [e for e in self.entries() if e.path == target and e.session != self.session and session_alive(e.session)]

    def entries(self) -> list[RecoveryEntry]:
        """Every readable entry, newest first."""
        if not self.directory.is_dir():
            return []
        found = [self._read(f) for f in self.directory.glob(f"*{SUFFIX}")]
        return sorted((e for e in found if e is not None), key=lambda e: -e.saved_at)

    def _read(self, file: Path) -> RecoveryEntry | None:
        try:
            return decode_entry(file.read_bytes(), file)
        except FileNotFoundError:
            return None
        except (OSError, ValueError, UnicodeDecodeError) as exc:
            # Left in place for a person to look at; never guessed at or deleted here.
            log.warning("skipping unreadable recovery file %s: %s", file, exc)
            return None
