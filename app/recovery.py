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

FORMAT = 1  # bump when the JSON layout changes; other versions are skipped, not misread
SUFFIX = ".recovery.json"


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
    path: Path  # the file the buffer belongs to (absolute)
    text: str  # the unsaved buffer text, BOM lifted off, newlines exact
    bom: bool  # the file's BOM, to write back on restore
    saved_at: float  # time.time() of the recovery write
    original_mtime_ns: int | None  # the file on disk when the buffer was opened (None: new file)
    original_size: int | None
    original_digest: str | None
    file: Path | None = None  # the recovery file itself


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
    }
    # ensure_ascii: even a lone surrogate typed into a buffer survives as a \\udXXX escape.
    return json.dumps(payload, ensure_ascii=True).encode("ascii")


def decode_entry(data: bytes, file: Path | None = None) -> RecoveryEntry:
    """Recovery bytes -> entry; anything malformed is a ValueError."""
    payload = json.loads(data.decode("ascii"))
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise ValueError("not a sharpen recovery file of a known format")
    if not isinstance(payload.get("text"), str) or not isinstance(payload.get("path"), str):
        raise ValueError("recovery file without text or path")
    try:
        return RecoveryEntry(
            path=Path(payload["path"]),
            text=payload["text"],
            bom=bool(payload.get("bom", False)),
            saved_at=float(payload.get("saved_at", 0.0)),
            original_mtime_ns=_optional_int(payload.get("original_mtime_ns")),
            original_size=_optional_int(payload.get("original_size")),
            original_digest=payload.get("original_digest") if isinstance(payload.get("original_digest"), str) else None,
            file=file,
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
    """The recovery directory: save, load, list and discard entries keyed by file path."""

    def __init__(self, directory: str | Path | None = None) -> None:
        self.directory = Path(directory) if directory is not None else default_recovery_dir()
        self._last: dict[str, str] = {}  # key -> digest of the last text written (skip repeats)

    def file_for(self, path: str | Path) -> Path:
        return self.directory / f"{recovery_key(path)}{SUFFIX}"

    def save(self, path: str | Path, text: str, bom: bool = False, original: TextFile | None = None) -> Path | None:
        """Write `text` as the recovery for `path` (atomically); skipped if unchanged since the last save.

        `original` is the TextFile the buffer was opened from (None for a new file).
        Returns the recovery file, or None when the write was skipped. Errors are InputError.
        """
        key = recovery_key(path)
        digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
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
        """The recovery entry for `path`, or None (also for an unreadable one, which is logged)."""
        return self._read(self.file_for(path))

    def discard(self, path: str | Path) -> bool:
        """Remove the recovery for `path` (after a save, or when the user declines); True if one existed."""
        self._last.pop(recovery_key(path), None)
        try:
            self.file_for(path).unlink()
            return True
        except FileNotFoundError:
            return False

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
