"""Safetensors shards read a few rows at a time, straight from the files into small buffers.

The loader never holds a checkpoint tensor whole: it asks for row ranges of a tensor and
writes each into its place in the model (a fused matrix, a quantized weight) before reading
the next. Reads go through plain file reads into one reused buffer, not through a memory
map: a mapped shard's pages count in the process's resident set for as long as the map is
open (the whole checkpoint, on top of the model built from it), while page-cache pages of
plain reads do not.

The format: 8 bytes of little-endian header length, a JSON header (name -> dtype, shape,
data_offsets relative to the end of the header), then the bytes. Every entry is checked
against the file before any is read: a known dtype, offsets inside the file, and a byte
count that equals the shape's, so a lying header is one ModelError line, not a wrong model.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Iterator

import torch

from . import untrusted
from ..errors import ModelError

# safetensors dtype names -> torch dtypes (the floating ones a checkpoint's weights come in).
DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}
MAX_HEADER = 100 * 2**20  # bytes; real headers are a few hundred KiB
CHUNK_BYTES = 8 * 2**20  # one read's worth of rows: the only full-precision bytes in flight during a load


@dataclass(frozen=True)
class Entry:
    file: Path
    dtype: torch.dtype
    shape: tuple[int, ...]
    offset: int  # absolute byte offset of the tensor's data in `file`

    @property
    def row_bytes(self) -> int:
        """Bytes of one row (the first dimension's step); a 1-D tensor's element, a scalar's whole."""
        return math.prod(self.shape[1:]) * self.dtype.itemsize


def read_header(file: Path, handle: BinaryIO) -> dict[str, Entry]:
    """The checked entries of one safetensors file."""
    size = file.stat().st_size
    try:
        length = int.from_bytes(handle.read(8), "little")
        if not 2 <= length <= min(MAX_HEADER, size - 8):
            raise ValueError(f"header length {length}")
        header = untrusted.parse_json(handle.read(length).decode("utf-8"), file.name)  # finite numbers, deep nesting one line
        if not isinstance(header, dict):
            raise ValueError("the header is not a JSON object")
        entries = {}
        for name, value in header.items():
            if name == "__metadata__":
                continue
            if value["dtype"] not in DTYPES:
                raise ValueError(f"tensor {name} has dtype {value['dtype']}, not a floating-point weight ({', '.join(DTYPES)})")
            dtype, shape = DTYPES[value["dtype"]], tuple(int(n) for n in value["shape"])
            start, end = (int(n) for n in value["data_offsets"])
            if any(n < 0 for n in shape) or not 0 <= start <= end or 8 + length + end > size:
                raise ValueError(f"tensor {name} lies outside the file")
            if end - start != math.prod(shape) * dtype.itemsize:
                raise ValueError(f"tensor {name}: {end - start} bytes for shape {list(shape)} in {value['dtype']}")
            entries[name] = Entry(file, dtype, shape, 8 + length + start)
        return entries
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ModelError(f"corrupt or truncated weights file {file.name}: {exc}") from None


class RowSource:
    """What a loader reads tensors through, by rows: `entries` (name -> dtype, shape, row_bytes),
    `chunk_bytes` and `rows()` / `close()` are the source's own; the rest is built on them, once
    for the stored tensors (Shards) and the derived ones (core/models/derived.py DerivedShards)."""

    entries: dict
    chunk_bytes: int

    def rows(self, name: str, start: int, stop: int) -> torch.Tensor:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def shapes(self) -> dict[str, tuple[int, ...]]:
        return {name: entry.shape for name, entry in self.entries.items()}

    def read(self, name: str) -> torch.Tensor:
        """A whole tensor, in a buffer of its own (for the small ones: norms, biases)."""
        shape = self.entries[name].shape
        return self.rows(name, 0, shape[0] if shape else 1).clone()

    def chunks(self, name: str, multiple: int = 1) -> Iterator[tuple[int, int, torch.Tensor]]:
        """(start, stop, rows) over tensor `name`, each about `chunk_bytes` and a multiple of
        `multiple` rows (a packed int4 layout tiles rows in blocks), the last one the rest."""
        entry = self.entries[name]
        n = entry.shape[0] if entry.shape else 1
        step = max(multiple, self.chunk_bytes // max(entry.row_bytes, 1) // multiple * multiple)
        for start in range(0, n, step):
            stop = min(n, start + step)
            yield start, stop, self.rows(name, start, stop)


class Shards(RowSource):
    """Every tensor of a checkpoint's files, by name, read in row ranges.

        with Shards(files) as shards:
            for start, stop, rows in shards.chunks("lm_head.weight"):  # rows [stop - start, dim], source dtype
                ...  # use them before the next chunk: the buffer is reused
    """

    def __init__(self, files: list[Path], chunk_bytes: int = CHUNK_BYTES) -> None:
        self.chunk_bytes = chunk_bytes
        self.entries: dict[str, Entry] = {}
        self._handles: dict[Path, BinaryIO] = {}
        self._buffer: torch.Tensor | None = None  # uint8, reused by every read
        try:
            for file in files:
                self.entries.update(read_header(file, self._open(file)))
        except BaseException:
            self.close()
            raise

    def _open(self, file: Path) -> BinaryIO:
        """The one place a weights file is opened."""
        if file not in self._handles:
            # Checked on its descriptor (core/models/untrusted.py): a FIFO or a device swapped in for a shard is refused.
            self._handles[file] = untrusted.open_regular(file)
        return self._handles[file]

    def close(self) -> None:
        for handle in self._handles.values():
            handle.close()
        self._handles.clear()
        self._buffer = None

    def rows(self, name: str, start: int, stop: int) -> torch.Tensor:
        """Rows [start, stop) of tensor `name` in its own dtype, in the shared buffer: valid until the next read."""
        entry = self.entries[name]
        shape = (stop - start, *entry.shape[1:]) if entry.shape else ()
        nbytes = max(stop - start, 1) * entry.row_bytes if entry.shape else entry.dtype.itemsize
        if self._buffer is None or self._buffer.numel() < nbytes:
            self._buffer = torch.empty(max(nbytes, min(self.chunk_bytes, 2**20)), dtype=torch.uint8)
        out = self._buffer[:nbytes]
        handle = self._open(entry.file)
        try:
            handle.seek(entry.offset + start * entry.row_bytes)
            view, done = memoryview(out.numpy()), 0
            while done < nbytes:  # a raw read may return fewer bytes than asked
                got = handle.readinto(view[done:])
                if not got:
                    raise EOFError(f"the file ends inside tensor {name}")
                done += got
        except (OSError, EOFError) as exc:
            raise ModelError(f"corrupt or truncated weights file {entry.file.name}: {exc}") from None
        return out.view(entry.dtype).view(shape)
