"""Reading and writing people's files without losing a byte.

Text is decoded with no newline translation, so CRLF, mixed endings, tabs and the final
newline stay in the string exactly; only the UTF-8 BOM is lifted off and put back.
Writes go to a temporary file in the same directory, are fsynced, then renamed over the
original, keeping its permission bits: a crash leaves either the old file or the new one.
"""
from __future__ import annotations

import os
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .errors import InputError

BOM = "\ufeff"
_SNIFF = 8192  # bytes looked at for NUL when deciding a file is binary


@dataclass(frozen=True)
class TextFile:
    path: Path | None  # None for stdin
    text: str  # decoded, newlines untouched, BOM removed
    bom: bool  # had a UTF-8 BOM
    mtime_ns: int = 0  # when read, to notice a change on disk before saving over it
    size: int = 0

    def encode(self, text: str | None = None) -> bytes:
        return encode_text(self.text if text is None else text, self.bom)


def decode_bytes(data: bytes, name: str) -> tuple[str, bool]:
    """bytes -> (text, had_bom); binary or non-UTF-8 input is an InputError naming the file."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise InputError(f"{name}: UTF-16 text is not supported; convert it to UTF-8")
    if b"\x00" in data[:_SNIFF]:
        raise InputError(f"{name}: looks like a binary file (contains NUL bytes)")
    bom = data.startswith(b"\xef\xbb\xbf")
    try:
        text = data[3:].decode("utf-8") if bom else data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{name}: not UTF-8 (invalid byte 0x{data[exc.start + (3 if bom else 0)]:02x} at offset {exc.start + (3 if bom else 0)})") from None
    return text, bom


def encode_text(text: str, bom: bool) -> bytes:
    return (BOM.encode("utf-8") if bom else b"") + text.encode("utf-8")


def read_text_file(path: str | Path) -> TextFile:
    path = Path(path)
    try:
        info = path.stat()
        if stat.S_ISDIR(info.st_mode):
            raise InputError(f"{path}: is a directory")
        data = path.read_bytes()
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except PermissionError:
        raise InputError(f"{path}: permission denied") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror or exc})") from None
    text, bom = decode_bytes(data, str(path))
    return TextFile(path, text, bom, info.st_mtime_ns, info.st_size)


def newline_style(text: str) -> str:
    """The document's line ending: '\\r\\n' when every newline is CRLF, else '\\n'."""
    lf = text.count("\n")
    return "\r\n" if lf and text.count("\r\n") == lf else "\n"


def match_newlines(piece: str, newline: str) -> str:
    """Generated text follows the document's line endings (a CRLF file stays CRLF)."""
    if newline == "\r\n":
        return piece.replace("\r\n", "\n").replace("\n", "\r\n")
    return piece


def atomic_write(path: str | Path, data: bytes) -> None:
    """Replace `path` with `data` atomically, keeping the file's permission bits."""
    path = Path(path)
    directory = path.parent if str(path.parent) else Path(".")
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        mode = 0o666 & ~_umask()
    except OSError as exc:
        raise InputError(f"{path}: cannot write ({exc.strerror or exc})") from None
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".sharpen-tmp", dir=directory)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
        tmp = None
        _fsync_dir(directory)
    except OSError as exc:
        raise InputError(f"{path}: cannot write ({exc.strerror or exc})") from None
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass


def _umask() -> int:
    current = os.umask(0)
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
