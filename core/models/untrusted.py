"""Reading a checkpoint's files as untrusted input: every file is checked before it is read.

A checkpoint directory is data someone else made. Its files are read only when they are
regular files (a FIFO would block forever, `/dev/zero` would be read until memory runs out),
named inside the directory (an index naming `../../etc/hostname` or `/dev/urandom` is
refused), and no larger than a bound chosen per kind of file. A name may still be a symlink:
the Hugging Face cache links every snapshot file to a blob beside it, and that is normal;
what the link reaches must be a regular file.

The check happens on the open descriptor (opened with O_NONBLOCK, so a FIFO cannot block
the open itself), so a file swapped between the check and the read is still caught. Where a
library would open a file by name, `checked_path` checks it first; where transformers opens a
whole directory (DiffusionGemma, remote code), `check_directory` checks every entry.
Safetensors headers are read and checked here too.
JSON is parsed with NaN, Infinity and overflowing numbers refused, and nesting too deep for
the parser is one line, not a RecursionError.

Every error is one line: ModelError (exit 4) by default, or the class the caller passes
(the config file's errors are usage errors, exit 2).
"""
from __future__ import annotations

import json
import math
import os
import stat
import struct
from pathlib import Path, PurePosixPath
from typing import Any

from ..errors import ModelError, SharpenError

# Bounds per kind of file: far above any release (Gemma's tokenizer.json is 33 MiB, a shard
# index a few hundred KiB), far below what would exhaust a machine's memory.
SMALL_JSON_BYTES = 64 * 2**20  # config.json, generation_config.json, tokenizer_config.json, the shard index
TOKENIZER_BYTES = 256 * 2**20  # tokenizer.json, vocab.json, merges.txt
TEMPLATE_BYTES = 4 * 2**20  # chat_template.jinja


def inside_name(root: Path, name: str, error: type[SharpenError] = ModelError) -> Path:
    """`root / name` for a relative name that stays inside `root`: no absolute path, no `..`."""
    if not isinstance(name, str) or not name or "\x00" in name:
        raise error(f"{root}: a file name in the checkpoint is not a plain name: {name!r}")
    parts = PurePosixPath(name).parts
    if PurePosixPath(name).is_absolute() or ".." in parts or "\\" in name:
        raise error(f"{root}: the file name {name!r} points outside the checkpoint directory; refusing to read it")
    return root / name


def _check_stat(info: os.stat_result, file: Path, limit: int | None, error: type[SharpenError]) -> None:
    if stat.S_ISDIR(info.st_mode):
        raise error(f"{file} is a directory, not a file")
    if not stat.S_ISREG(info.st_mode):
        device = stat.S_ISCHR(info.st_mode) or stat.S_ISBLK(info.st_mode)
        kind = "a FIFO" if stat.S_ISFIFO(info.st_mode) else "a device" if device else "a socket or other special file"
        raise error(f"{file} is {kind}, not a regular file; refusing to read it")
    if limit is not None and info.st_size > limit:
        raise error(f"{file} is too large ({info.st_size:,} bytes; at most {limit:,})")


def checked_path(file: Path, limit: int | None = None, error: type[SharpenError] = ModelError) -> Path:
    """`file` when it is (or links to) a regular file of at most `limit` bytes; for libraries that open it themselves."""
    try:
        info = os.stat(file)
    except FileNotFoundError:
        raise error(f"{file}: no such file") from None
    except OSError as exc:
        raise error(f"cannot read {file}: {exc.strerror or exc}") from None
    _check_stat(info, file, limit, error)
    return file


def open_regular(file: Path, limit: int | None = None, error: type[SharpenError] = ModelError):
    """A binary file object for `file`, checked on its descriptor: regular, at most `limit` bytes."""
    try:
        fd = os.open(file, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise error(f"{file}: no such file") from None
    except OSError as exc:
        raise error(f"cannot read {file}: {exc.strerror or exc}") from None
    try:
        _check_stat(os.fstat(fd), file, limit, error)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb", buffering=0)


def read_bytes(file: Path, limit: int, error: type[SharpenError] = ModelError) -> bytes:
    """The whole of a regular file of at most `limit` bytes (re-checked while reading: it may grow)."""
    with open_regular(file, limit, error) as handle:
        chunks, total = [], 0
        while chunk := handle.read(min(limit + 1 - total, 2**20) or 1):
            chunks.append(chunk)
            total += len(chunk)
            if total > limit:
                raise error(f"{file} is too large (more than {limit:,} bytes)")
    return b"".join(chunks)


def read_text(file: Path, limit: int, error: type[SharpenError] = ModelError) -> str:
    """A UTF-8 text file (a leading BOM is dropped), checked and bounded."""
    data = read_bytes(file, limit, error)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise error(f"{file} is not UTF-8 (invalid byte 0x{data[exc.start]:02x} at offset {exc.start})") from None


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:40]} is out of range")
    return value


def _no_constant(name: str):
    raise ValueError(f"{name} is not a number JSON allows")


def parse_json(text: str, where: str, error: type[SharpenError] = ModelError) -> Any:
    """JSON with every number finite; too deep a nesting is one line naming `where`, not a RecursionError."""
    try:
        return json.loads(text, parse_float=_finite_float, parse_constant=_no_constant)
    except RecursionError:
        raise error(f"cannot read {where}: nested too deeply") from None
    except ValueError as exc:
        raise error(f"cannot read {where}: {str(exc).splitlines()[0]}") from None


def read_json(file: Path, limit: int = SMALL_JSON_BYTES, error: type[SharpenError] = ModelError) -> Any:
    return parse_json(read_text(file, limit, error), str(file), error)


def read_json_object(file: Path, limit: int = SMALL_JSON_BYTES, missing_ok: bool = True) -> dict:
    """The JSON object in `file`: {} when it is absent (and `missing_ok`) or holds no object."""
    if missing_ok and not os.path.exists(file):  # a broken link is absent, as for Path.exists
        return {}
    loaded = read_json(file, limit)
    return loaded if isinstance(loaded, dict) else {}


MAX_SAFETENSORS_HEADER = 100_000_000  # bytes; real headers are a few hundred KiB


def safetensors_header(file: Path, dtypes) -> dict:
    """The JSON header of a safetensors file: every entry a known dtype (one of `dtypes`), a shape
    and offsets of non-negative integers, the data inside the file (shorter is truncated)."""
    try:
        with open_regular(file) as handle:  # a FIFO or /dev/zero named as a shard is refused here
            size = os.fstat(handle.fileno()).st_size
            (n,) = struct.unpack("<Q", handle.read(8))
            if n > MAX_SAFETENSORS_HEADER:
                raise ValueError("implausible header size")
            header = parse_json(handle.read(n).decode("utf-8"), file.name)
        if not isinstance(header, dict):
            raise ValueError("the header is not a JSON object")
        end = 0
        for name, entry in header.items():
            if name == "__metadata__":
                continue
            if entry.get("dtype") not in dtypes:
                raise ValueError(f"tensor {name} has the unknown dtype {entry.get('dtype')!r}")
            shape, offsets = entry.get("shape"), entry.get("data_offsets")
            if not (_counts(shape) and _counts(offsets) and len(offsets) == 2 and 0 <= offsets[0] <= offsets[1]):
                raise ValueError(f"tensor {name} has a bad shape or offsets")
            end = max(end, offsets[1])
    except (OSError, ValueError, struct.error, AttributeError) as exc:
        raise ModelError(f"corrupt weights file {file.name}: {exc}") from None
    if size < 8 + n + end:
        raise ModelError(f"truncated weights file {file.name}: {size} of {8 + n + end} bytes")
    return header


def _counts(values) -> bool:
    return isinstance(values, list) and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values)


def check_numbers(config: Any, where: str) -> None:
    """Every epsilon in (0, 1) and every rope_theta positive, at any depth of a config.

    JSON parsing already refuses NaN and infinities; these are the ranges a norm's epsilon
    (-1 makes RMSNorm divide by the square root of a negative) and a rotary base must have.
    Walked with a list, not recursion: the parser accepts nesting deeper than a recursive walk could follow.
    """
    pending: list[tuple[str, Any]] = [("", config)]
    while pending:
        path, node = pending.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for key, value in items:
            name = f"{path}[{key}]" if isinstance(key, int) else f"{path}.{key}" if path else key
            if isinstance(value, (dict, list)):
                pending.append((name, value))
                continue
            if not isinstance(key, str):
                continue
            number = isinstance(value, (int, float)) and not isinstance(value, bool)
            if value is None:
                continue  # unset: the library's default applies
            if key.endswith(("_eps", "_epsilon")) or key == "eps":
                if not number or not 0 < value < 1:
                    raise ModelError(f"{where}: {name}={value!r} must be a number between 0 and 1")
            elif key.endswith("rope_theta"):
                if not number or not 0 < value < 1e12:
                    raise ModelError(f"{where}: {name}={value!r} must be a positive number (below 1e12)")


def check_directory(root: Path) -> None:
    """Every entry of a checkpoint directory is a regular file or a directory: for loaders that
    open files on their own (transformers), so a FIFO or a device among them is refused first."""
    try:
        entries = sorted(root.iterdir())
    except OSError as exc:
        raise ModelError(f"cannot read model directory {root}: {exc.strerror or exc}") from None
    for entry in entries:
        try:
            info = entry.stat()
        except FileNotFoundError:
            continue  # a broken link: nothing can open it, the loader names what it misses
        except OSError as exc:
            raise ModelError(f"cannot read {entry}: {exc.strerror or exc}") from None
        if not stat.S_ISDIR(info.st_mode):
            _check_stat(info, entry, None, ModelError)
