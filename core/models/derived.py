"""Backbone tensors that no single checkpoint tensor holds, declared as rows of checkpoint tensors.

Two releases need them: LLaDA2 fuses q, k and v into one `query_key_value` matrix (the
backbone's wq / wk / wv are row ranges of it), and mixture-of-experts releases store one
matrix per expert and projection (the backbone's experts are one [E, out, in] tensor each for
gate|up and down: the rows of 2E or E checkpoint matrices, concatenated). A family declares
them (`Family.derived`); the loader sees a derived tensor under its own name, exactly like a
stored one, and the tensors it consumed disappear from the checkpoint's table, so the strict
name and shape checks hold for both.

A derived tensor's rows are served a few at a time from its parts (`DerivedShards`, for the
streaming loader) or built whole from tensors already read (`derive_tensors`), so a load never
holds more than the rows in flight on top of the model.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..errors import ModelError
from .shards import RowSource


@dataclass(frozen=True)
class Derived:
    """Rows of checkpoint tensors, concatenated in order, shaped `shape`.

    Every part is 2-D [rows, width] (or 1-D) with the same width. The concatenation has
    prod(shape[:-1]) rows (1-D: prod(shape) elements); a 3-D shape [E, R, width] takes R rows
    per leading index: expert j's gate and up rows are rows j*R .. (j+1)*R.
    """

    parts: tuple[tuple[str, int, int], ...]  # (checkpoint tensor, first row, end row)
    shape: tuple[int, ...]

    @property
    def unit(self) -> int:
        """Concatenated rows per leading index of `shape`."""
        return math.prod(self.shape[1:-1]) if len(self.shape) > 1 else 1


def stacked_experts(template: str, n_experts: int, hidden: int, dim: int) -> tuple[Derived, Derived]:
    """One MoE layer's per-expert matrices as the backbone holds them: gate|up [E, 2F, dim] and
    down [E, dim, F]. `template` names one expert's matrix with {j} and {part} (gate_proj, ...)."""
    gate_up = tuple((template.format(j=j, part=p), 0, hidden) for j in range(n_experts) for p in ("gate_proj", "up_proj"))
    down = tuple((template.format(j=j, part="down_proj"), 0, dim) for j in range(n_experts))
    return Derived(gate_up, (n_experts, 2 * hidden, dim)), Derived(down, (n_experts, dim, hidden))


def derived_shapes(shapes: dict[str, tuple[int, ...]], derived: dict[str, Derived]) -> dict[str, tuple[int, ...]]:
    """The checkpoint's table as the loader sees it: derived tensors in, the tensors they consume out.

    Each part must exist, lie inside its tensor and match the derived width, and the parts
    must fill the shape exactly: otherwise one ModelError line naming the tensor.
    """
    out = dict(shapes)
    consumed = set()
    for name, d in derived.items():
        rows = 0
        for source, start, stop in d.parts:
            if source not in shapes:
                raise ModelError(f"weights lack tensor {source} (needed for {name})")
            shape = shapes[source]
            fits = len(shape) == 2 and shape[1] == d.shape[-1] if len(d.shape) > 1 else len(shape) == 1
            if not fits or not 0 <= start < stop <= shape[0]:
                raise ModelError(f"tensor {source} has shape {shape}, which does not give rows {start}:{stop} of width {d.shape[-1]} for {name}")
            rows += stop - start
            consumed.add(source)
        wanted = math.prod(d.shape[:-1]) if len(d.shape) > 1 else d.shape[0]
        if rows != wanted:
            raise ModelError(f"the parts of {name} hold {rows} rows, not the {wanted} of shape {d.shape}")
        out[name] = d.shape
    for source in consumed:
        out.pop(source, None)
    return out


def derive_tensors(tensors: dict[str, torch.Tensor], derived: dict[str, Derived]) -> dict[str, torch.Tensor]:
    """Build every derived tensor from tensors already read (in place in `tensors`), dropping each
    consumed tensor after its last use: a layer's experts are held twice at most, never the model."""
    last_use: dict[str, str] = {}
    for name, d in derived.items():
        for source, _, _ in d.parts:
            last_use[source] = name
    for name, d in derived.items():
        first = tensors[d.parts[0][0]]
        out = torch.empty(d.shape, dtype=first.dtype, device=first.device)
        flat = out.view(-1, d.shape[-1]) if len(d.shape) > 1 else out
        row = 0
        for source, start, stop in d.parts:
            flat[row:row + stop - start] = tensors[source][start:stop]
            row += stop - start
        tensors[name] = out
        for source, _, _ in d.parts:
            if last_use.get(source) == name:
                tensors.pop(source, None)
                last_use.pop(source)
    return tensors


@dataclass(frozen=True)
class _Entry:
    """What a loader reads of a table entry (core/models/shards.py Entry): dtype, shape, bytes per row."""

    dtype: torch.dtype
    shape: tuple[int, ...]

    @property
    def row_bytes(self) -> int:
        return math.prod(self.shape[1:]) * self.dtype.itemsize


class DerivedShards(RowSource):
    """A checkpoint's shards (core/models/shards.py Shards) with derived tensors added, read by rows like
    stored ones: `entries`, `shapes`, `rows`, `read`, `chunks` as Shards has them. Rows of a
    derived tensor are copied from its parts' rows into one reused buffer (valid until the next
    read, as Shards' own): a fresh allocation per chunk would leave the allocator's heap
    fragmented under the model being built, and the process's memory above it."""

    def __init__(self, shards, derived: dict[str, Derived]) -> None:
        self.shards = shards
        self.derived = derived
        table = derived_shapes(shards.shapes(), derived)
        self.entries = {}
        for name, shape in table.items():
            if name in derived:
                self.entries[name] = _Entry(shards.entries[derived[name].parts[0][0]].dtype, shape)
            else:
                self.entries[name] = shards.entries[name]
        self.chunk_bytes = shards.chunk_bytes
        self._buffer: torch.Tensor | None = None  # uint8, reused by every derived read

    def close(self) -> None:
        self.shards.close()

    def rows(self, name: str, start: int, stop: int) -> torch.Tensor:
        """Rows [start, stop) of `name` (leading index of a derived tensor), valid until the next read."""
        if name not in self.derived:
            return self.shards.rows(name, start, stop)
        d, entry = self.derived[name], self.entries[name]
        shape = (stop - start, *d.shape[1:])
        nbytes = math.prod(shape) * entry.dtype.itemsize
        if self._buffer is None or self._buffer.numel() < nbytes:
            self._buffer = torch.empty(max(nbytes, self.chunk_bytes), dtype=torch.uint8)
        out = self._buffer[:nbytes].view(entry.dtype).view(shape)
        flat = out.view(-1, d.shape[-1]) if len(d.shape) > 1 else out
        want_from, want_to = start * d.unit, stop * d.unit  # concatenated rows wanted
        row = 0  # concatenated row where the current part begins
        for source, a, b in d.parts:
            lo, hi = max(want_from, row), min(want_to, row + b - a)
            if lo < hi:
                flat[lo - want_from:hi - want_from] = self.shards.rows(source, a + lo - row, a + hi - row)
            row += b - a
        return out
