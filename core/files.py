"""Reading and writing people's files without losing a byte.

Text is decoded with no newline translation, so CRLF, mixed endings, tabs and the final
newline stay in the string exactly; only the UTF-8 BOM is lifted off and put back.
Writes go to a temporary file in the same directory as the real file (a symlink is
followed, never replaced), are fsynced, then renamed over it, keeping its permission
bits: a crash leaves either the old file or the new one. What was read is remembered
(mtime, size, SHA-256), so a save can refuse to overwrite a file changed since.
See docs/safety.md for the guarantees and the API the editor uses.
"""
from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import stat
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .errors import InputError

log = logging.getLogger(__name__)

BOM = "\ufeff"
_SNIFF = 8192  # bytes looked at for NUL when deciding a file is binary
MAX_FILE_BYTES = 64 * 1024 * 1024  # larger files are refused: everything is held in memory
TEMP_SUFFIX = ".sharpen-tmp"
NAME_MAX = 255  # bytes in one file name on Linux and macOS file systems


class NotRegularFile(InputError):
    """A FIFO, socket or device where a text file was expected (each front end says what to do instead)."""


@dataclass(frozen=True)
class TextFile:
    path: Path | None  # None for stdin
    text: str  # decoded, newlines untouched, BOM removed
    bom: bool  # had a UTF-8 BOM
    mtime_ns: int = 0  # when read, to notice a change on disk before saving over it
    size: int = 0  # bytes on disk when read
    digest: str = ""  # SHA-256 of the bytes read ("" for stdin): the decisive change check
    # Which file was read (0: unknown): a path that now names another file (a symlink put in its
    # place, a copy renamed over it) is a change even with the same bytes: a save would write there.
    device: int = 0
    inode: int = 0

    def encode(self, text: str | None = None) -> bytes:
        return encode_text(self.text if text is None else text, self.bom)


def decode_bytes(data: bytes, name: str) -> tuple[str, bool]:
    """bytes -> (text, had_bom); binary or non-UTF-8 input is an InputError naming the file."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise InputError(f"{name}: UTF-16 text is not supported; convert it to UTF-8")
    if b"\x00" in data[:_SNIFF]:
        raise InputError(f"{name}: looks like a binary file (contains NUL bytes)")
    bom = data.startswith(b"\xef\xbb\xbf")
    skip = 3 if bom else 0
    try:
        text = data[skip:].decode("utf-8")
    except UnicodeDecodeError as exc:
        at = exc.start + skip
        raise InputError(f"{name}: not UTF-8 (invalid byte 0x{data[at]:02x} at offset {at})") from None
    if "\x00" in text:  # a NUL past the sniffed head: still not a text file
        raise InputError(f"{name}: looks like a binary file (contains NUL bytes)")
    return text, bom


def encode_text(text: str, bom: bool) -> bytes:
    try:
        return (BOM.encode("utf-8") if bom else b"") + text.encode("utf-8")
    except UnicodeEncodeError as exc:  # a lone surrogate cannot be written as UTF-8
        raise InputError(f"text cannot be saved as UTF-8 (unpaired surrogate at character {exc.start})") from None


def read_text_file(path: str | Path) -> TextFile:
    """Read a regular UTF-8 text file; anything else is an InputError that names it."""
    if isinstance(path, str) and path.endswith(("/", os.sep)) and not os.path.isdir(path):
        # Path() drops a trailing slash, which would turn `f.py/` into the file f.py.
        raise InputError(f"{path}: not a directory, and a file name does not end in /")
    path = Path(path)
    try:
        _check_regular(path, os.stat(path))  # before open(): opening a FIFO would block
        with open(path, "rb") as handle:
            info = os.fstat(handle.fileno())
            _check_regular(path, info)
            data = handle.read()
    except FileNotFoundError:
        what = "broken symbolic link" if path.is_symlink() else "no such file"
        raise InputError(f"{path}: {what}") from None
    except IsADirectoryError:
        raise InputError(f"{path}: is a directory") from None
    except PermissionError:
        raise InputError(f"{path}: permission denied") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror or exc})") from None
    text, bom = decode_bytes(data, str(path))
    return TextFile(path, text, bom, info.st_mtime_ns, len(data), hashlib.sha256(data).hexdigest(), info.st_dev, info.st_ino)


def _check_regular(path: Path, info: os.stat_result) -> None:
    if stat.S_ISDIR(info.st_mode):
        raise InputError(f"{path}: is a directory")
    if not stat.S_ISREG(info.st_mode):
        # A FIFO or a device would block or never end.
        raise NotRegularFile(f"{path}: not a regular file (pipe, socket or device)")
    if info.st_size > MAX_FILE_BYTES:
        raise InputError(f"{path}: too large ({info.st_size // 2**20} MiB; the limit is {MAX_FILE_BYTES // 2**20} MiB)")


# --- noticing a change on disk -----------------------------------------------------------


def disk_change(original: TextFile, quick: bool = False) -> str | None:
    """Why the file on disk is no longer what `original` read, or None when it is the same.

    Size decides first, then the SHA-256 of the content: a `touch` alone is not a change.
    `quick` compares only mtime and size (no read), for polling big files often.
    Files read from stdin, or built without a digest, never count as changed.
    """
    if original.path is None or not original.digest:
        return None
    try:
        info = os.stat(original.path)
    except FileNotFoundError:
        return "it was deleted or moved"
    except OSError as exc:
        return f"it cannot be checked ({exc.strerror or exc})"
    if not stat.S_ISREG(info.st_mode):
        return "it is no longer a regular file"
    if original.inode and (info.st_dev, info.st_ino) != (original.device, original.inode):
        what = "a symbolic link to another file" if Path(original.path).is_symlink() else "another file"
        return f"it was replaced by {what}"
    if info.st_size != original.size:
        return f"its size changed ({original.size} -> {info.st_size} bytes)"
    if quick:
        return None if info.st_mtime_ns == original.mtime_ns else "its modification time changed"
    try:
        data = Path(original.path).read_bytes()
    except OSError as exc:
        return f"it cannot be read back ({exc.strerror or exc})"
    return None if hashlib.sha256(data).hexdigest() == original.digest else "its content changed"


def changed_on_disk(original: TextFile, quick: bool = False) -> bool:
    return disk_change(original, quick) is not None


def ensure_unchanged(original: TextFile) -> None:
    """Raise InputError when the file changed on disk since `original` was read."""
    reason = disk_change(original)
    if reason is not None:
        raise InputError(f"{original.path}: changed on disk since it was read ({reason}); not overwriting it")


# --- writing ------------------------------------------------------------------------------


def write_target(path: str | Path) -> Path:
    """The file a write to `path` lands in: a symlink's final target, so the link stays a link."""
    path = Path(path)
    return Path(os.path.realpath(path)) if path.is_symlink() else path


def check_writable(path: str | Path) -> None:
    """Fail early (before minutes of model time) if `path` could not be replaced."""
    target = write_target(path)
    directory = target.parent if str(target.parent) else Path(".")
    if not directory.is_dir():
        raise InputError(f"{path}: cannot write: directory {directory} does not exist")
    try:
        info = os.stat(target)
    except FileNotFoundError:
        info = None
    except OSError as exc:
        raise InputError(f"{path}: cannot write ({exc.strerror or exc})") from None
    # Honour a read-only file even where rename would allow replacing it (and even as root).
    if info is not None and (not info.st_mode & 0o222 or not os.access(target, os.W_OK)):
        raise InputError(f"{path}: file is read-only; not writing it")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise InputError(f"{path}: cannot write: directory {directory} is not writable")


def atomic_write(
    path: str | Path,
    data: bytes,
    *,
    new_file_mode: int | None = None,
    before_commit: Callable[[], None] | None = None,
    while_waiting: Callable[[], None] | None = None,
) -> Path:
    """Replace `path` with `data` atomically, keeping the file's permission bits and owner.

    A symlink is written through (its target is replaced, the link kept). `new_file_mode`
    is the mode of a file that does not exist yet (default 0o666 minus the umask).
    `before_commit` runs after the data is on disk in the temp file and just before the
    rename: if it raises, the temp file is removed and `path` is untouched. `while_waiting`
    runs every few milliseconds while another save holds the lock (raising ends the wait the
    same way). Returns the
    path actually written. Errors are InputError, with `path` untouched.
    """
    target = write_target(path)
    directory = target.parent if str(target.parent) else Path(".")
    try:
        info = os.stat(target)
    except FileNotFoundError:
        info = None
    except OSError as exc:
        raise InputError(f"{path}: cannot write ({exc.strerror or exc})") from None
    if info is not None and not stat.S_ISREG(info.st_mode):
        raise InputError(f"{path}: cannot write: not a regular file")
    if not directory.is_dir():
        raise InputError(f"{path}: cannot write: directory {directory} does not exist")
    mode = stat.S_IMODE(info.st_mode) if info else (new_file_mode if new_file_mode is not None else 0o666 & ~_umask())
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=temp_prefix(target.name), suffix=TEMP_SUFFIX, dir=directory)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
            if info is not None:
                _keep_owner(handle.fileno(), info)  # first: chown clears setuid/setgid, chmod then sets them
            os.fchmod(handle.fileno(), mode)
        # Check and replace under one lock, so two sharpen processes (or editors) saving the same
        # file cannot both pass the check and the second rename silently drop the first's edit.
        with directory_lock(directory, while_waiting):
            if before_commit is not None:
                before_commit()
            _still_writable(path, target)
            os.replace(tmp, target)
            tmp = None
            _fsync_dir(directory)
    except PermissionError:
        raise InputError(f"{path}: cannot write: permission denied in {directory}") from None
    except FileNotFoundError:
        raise InputError(f"{path}: cannot write: directory {directory} no longer exists") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot write ({exc.strerror or exc})") from None
    finally:
        if tmp is not None:  # also on KeyboardInterrupt: never leave a temp file behind
            try:
                os.unlink(tmp)
            except OSError:
                pass
    return target


def temp_prefix(name: str) -> str:
    """`.NAME.` for the temp file, NAME shortened so that the whole temp name (prefix, 8 random
    characters, suffix) stays within NAME_MAX bytes; a UTF-8 name is cut between characters."""
    room = NAME_MAX - 2 - 8 - len(TEMP_SUFFIX)
    whole = os.fsencode(name)
    cut = whole[:room]
    while cut and _utf8(whole) and not _utf8(cut):
        cut = cut[:-1]
    return f".{os.fsdecode(cut)}."


def _utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


LOCK_WAIT_SECONDS = 30.0  # a save holds the lock for milliseconds; longer means a stuck or hostile holder
_LOCK_POLL_SECONDS = 0.02


@contextmanager
def directory_lock(directory: Path, while_waiting: Callable[[], None] | None = None):
    """An exclusive advisory lock (flock) on `directory`, held by one sharpen save at a time.

    It orders sharpen processes among themselves: another program that ignores it can still
    write the file between the check and the rename (docs/safety.md says so). No lock file is
    created: the directory itself is locked. The wait is polled, never a blocking flock: a
    blocked flock cannot be ended by a stop signal whose handler only records it, so
    `while_waiting` runs between tries (it raises to give up), and after LOCK_WAIT_SECONDS
    the save is refused (InputError) instead of hanging.
    """
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        yield  # cannot open the directory for locking: the save goes on without the lock
        return
    try:
        deadline = time.monotonic() + LOCK_WAIT_SECONDS
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if while_waiting is not None:
                    while_waiting()
                if time.monotonic() > deadline:
                    raise InputError(f"{directory}: another process has held the save lock for over "
                                     f"{LOCK_WAIT_SECONDS:.0f} s; nothing was written") from None
                time.sleep(_LOCK_POLL_SECONDS)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def _still_writable(path, target: Path) -> None:
    """At the commit point: a file made read-only while the model ran is not overwritten."""
    try:
        info = os.stat(target)
    except FileNotFoundError:
        return  # deleted meanwhile: the change check (before_commit) decides about that
    if not info.st_mode & 0o222 or not os.access(target, os.W_OK):
        raise InputError(f"{path}: file became read-only while sharpen worked; not writing it")


def save_text_file(original: TextFile, text: str, *, check_disk: bool = True, before_commit: Callable[[], None] | None = None) -> TextFile:
    """Write `text` over the file `original` came from, with its BOM; return what is now on disk.

    With `check_disk`, a file changed on disk since `original` was read is refused
    (InputError) right before the rename. The returned TextFile is the base for the next save.
    `before_commit` also runs while the save waits for another save's lock, so a stop signal
    it checks for ends the wait too.
    """
    if original.path is None:
        raise InputError("cannot save text read from stdin")
    data = encode_text(text, original.bom)

    def commit() -> None:
        if before_commit is not None:
            before_commit()
        if check_disk:
            ensure_unchanged(original)

    target = atomic_write(original.path, data, before_commit=commit, while_waiting=before_commit)
    try:
        info = os.stat(target)
        mtime_ns, device, inode = info.st_mtime_ns, info.st_dev, info.st_ino
    except OSError:
        mtime_ns = device = inode = 0
    return TextFile(original.path, text, original.bom, mtime_ns, len(data), hashlib.sha256(data).hexdigest(), device, inode)


def _keep_owner(fd: int, info: os.stat_result) -> None:
    # Only root (or the owner, for the group) may do this; otherwise the new file is ours.
    current = os.fstat(fd)
    if (current.st_uid, current.st_gid) != (info.st_uid, info.st_gid):
        try:
            os.fchown(fd, info.st_uid, info.st_gid)
        except OSError:
            log.info("could not keep owner %s:%s", info.st_uid, info.st_gid)


def _umask() -> int:
    # Read it without os.umask(0), which would briefly change it for every thread.
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    current = os.umask(0o022)
    os.umask(current)
    return current


def _fsync_dir(directory: Path) -> None:
    # The rename itself is durable only once the directory entry is on disk.
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
