"""Prompt reuse across runs for the block-causal families (SDAR, Stable-DiffCoder, Fast-dLLM v2, LLaDA2).

    prefix_cache.attach(denoiser, max_bytes=1 << 30)    # a server does it once per loaded model
    with prefix_cache.counting() as tally:              # around one run (core/run.py)
        ...                                             # the loops prefill through `prefill` below
    tally.tokens                                        # prompt tokens the run took from the cache

Why the keys are exactly reusable: a block-causal model's prompt blocks see only themselves and
the blocks before them (core/models/model.py block_causal_mask), always at the same canvas
positions from 0, so the keys and values of a prompt's first m whole blocks depend on those
blocks' tokens alone; nothing after them (the rest of the prompt, the slots, the suffix in a
FIM prompt) changes them. An editor sends the same file prefix again and again (llama.vim's
`input_extra` ring, then the lines above the cursor), so a run starts from the longest run of
whole blocks an earlier run prefilled and computes only the rest.

Entries are keyed by (block size, the prompt's tokens up to a whole-block boundary) and found
through a chain of per-block hashes, checked token for token on a hit; each holds the first
sample's keys/values of its whole prefill on the model's device and the prefill's last-row
logits, so an exact repeat runs no prefill pass. They are bounded in bytes, least recently used
out. A masked (bidirectional) model has nothing exactly reusable: docs/server.md says why.
"""
from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator

import torch

from .models.kv_cache import Attend, block_causal_mask

log = logging.getLogger(__name__)

DEFAULT_BYTES = 1 << 30  # `sharpen serve --prefix-cache-mb` (1 GiB: a few 2k-token prompts of a 1.7B model in bf16)


@dataclass(eq=False)
class Entry:
    """One prompt's prefilled whole blocks: first-sample keys/values per layer [1, Hkv, L, D]."""

    size: int  # the block size they were prefilled with (the mask depends on it)
    ids: tuple[int, ...]  # the L = blocks * size prompt tokens
    k: list[torch.Tensor]
    v: list[torch.Tensor]
    # want_shift -> the prefill's returned logits [1, 1, V] for exactly these L tokens (a repeat needs no pass)
    rows: dict[int, torch.Tensor] = field(default_factory=dict)

    @property
    def bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (*self.k, *self.v, *self.rows.values()))


def block_hashes(ids: list[int], size: int, blocks: int) -> list[int]:
    """The chain hash of each whole-block prefix: [h(block 0), h(blocks 0-1), ...] (O(n), not O(n^2))."""
    out, h = [], hash(("prefix", size))
    for j in range(blocks):
        h = hash((h, tuple(ids[j * size:(j + 1) * size])))
        out.append(h)
    return out


class PrefixCache:
    """A model's cached prompt prefixes, bounded in bytes, least recently used out (thread-safe)."""

    def __init__(self, max_bytes: int = DEFAULT_BYTES) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[int, Entry] = OrderedDict()  # id(entry) -> entry, least recent first
        self._by_prefix: dict[int, list[Entry]] = {}  # chain hash of each whole-block prefix -> the entries holding it
        self._lock = threading.Lock()
        self.bytes = 0
        self.hits = self.misses = self.evictions = 0

    def __len__(self) -> int:
        return len(self._entries)

    def longest(self, ids: list[int], size: int, blocks: int) -> tuple[Entry | None, int]:
        """The entry holding the most of `ids`' first `blocks` whole blocks, and how many it holds."""
        hashes = block_hashes(ids, size, blocks)
        with self._lock:
            for j in range(blocks, 0, -1):
                for entry in reversed(self._by_prefix.get(hashes[j - 1], ())):
                    if entry.size == size and entry.ids[:j * size] == tuple(ids[:j * size]):  # not a hash collision
                        self._entries.move_to_end(id(entry))
                        self.hits += 1
                        return entry, j
            self.misses += 1
        return None, 0

    def put(self, entry: Entry) -> None:
        """Keep `entry`; entries it covers go, then the least recently used ones until it fits."""
        if entry.bytes > self.max_bytes:
            return
        hashes = block_hashes(list(entry.ids), entry.size, len(entry.ids) // entry.size)
        with self._lock:
            for h in hashes:  # an entry whose every block this one holds is covered by it
                for old in list(self._by_prefix.get(h, ())):
                    if old.size == entry.size and len(old.ids) <= len(entry.ids) and entry.ids[:len(old.ids)] == old.ids:
                        self._drop(old)
            self._entries[id(entry)] = entry
            self.bytes += entry.bytes
            for h in hashes:
                self._by_prefix.setdefault(h, []).append(entry)
            while self.bytes > self.max_bytes:
                self._drop(next(iter(self._entries.values())))
                self.evictions += 1

    def add_row(self, entry: Entry, want_shift: int, row: torch.Tensor) -> None:
        with self._lock:
            if id(entry) in self._entries and want_shift not in entry.rows:
                entry.rows[want_shift] = row
                self.bytes += row.numel() * row.element_size()

    def _drop(self, entry: Entry) -> None:
        if self._entries.pop(id(entry), None) is None:
            return
        self.bytes -= entry.bytes
        for h in block_hashes(list(entry.ids), entry.size, len(entry.ids) // entry.size):
            holders = self._by_prefix.get(h, [])
            if entry in holders:
                holders.remove(entry)
            if not holders:
                self._by_prefix.pop(h, None)


def attach(denoiser, max_bytes: int = DEFAULT_BYTES) -> PrefixCache | None:
    """Give `denoiser` a prefix cache (its runs then start from earlier prompts); 0 bytes: none."""
    cache = PrefixCache(max_bytes) if max_bytes > 0 else None
    denoiser.prefix_cache = cache
    return cache


def of(denoiser) -> PrefixCache | None:
    """The model's prefix cache, None when it has none (a batch member's view forwards the attribute)."""
    return getattr(denoiser, "prefix_cache", None)


@dataclass
class Tally:
    tokens: int = 0  # prompt tokens runs on this thread took from the cache since `counting` began


_local = threading.local()


@contextmanager
def counting() -> Iterator[Tally]:
    """Count what the prefills on this thread take from the cache (a run's loop runs on its caller's thread)."""
    tally, previous = Tally(), getattr(_local, "tally", None)
    _local.tally = tally
    try:
        yield tally
    finally:
        _local.tally = previous


def _note(tokens: int) -> None:
    tally = getattr(_local, "tally", None)
    if tally is not None:
        tally.tokens += tokens


def prefill(denoiser, x: torch.Tensor, cache, prefill: int, size: int, want_shift: int = 0) -> torch.Tensor:
    """The prompt's `prefill` tokens (whole blocks) into `cache`, bidirectional inside each block
    and causal across them, starting from the longest prefix the model's prefix cache holds; the
    logits of the prefill's last row (`want_shift` 1: the row a token-shifted model predicts the
    next position from) [B, 1, V]. Without a prefix cache: one pass over the whole prefill."""
    store = of(denoiser)
    if store is None:
        return _compute(denoiser, x, cache, 0, prefill, size, want_shift)
    ids = x[0, :prefill].tolist()
    blocks = prefill // size
    entry, held = store.longest(ids, size, blocks)
    B = x.shape[0]
    if entry is not None:
        if held == blocks and want_shift not in entry.rows:
            held -= 1  # the last block is computed again for the logits this call returns
        _restore(entry, cache, held * size)
        _note(held * size)
        if held == blocks:
            return entry.rows[want_shift].expand(B, -1, -1)
    logits = _compute(denoiser, x, cache, held * size if entry is not None else 0, prefill, size, want_shift)
    if entry is not None and len(entry.ids) == prefill:  # the same prompt again: only its logits were missing
        store.add_row(entry, want_shift, logits[:1].clone())
    elif prefill > 0:
        _keep(store, cache, ids, size, want_shift, logits)
    return logits


def _compute(denoiser, x, cache, start: int, prefill: int, size: int, want_shift: int) -> torch.Tensor:
    """Positions [start, prefill) written into `cache` against the keys before them (all of them at start 0)."""
    run = torch.arange(start, prefill, device=x.device)  # [S]
    return denoiser.logits(x, want=run[-1:] + want_shift, run=run, cache=cache,
                           attend=Attend(mask=block_causal_mask(run, prefill, size), keys=prefill))  # [B, 1, V]


def _restore(entry: Entry, cache, length: int) -> None:
    """The entry's first `length` positions' keys/values into every sample row of `cache`."""
    for layer, (k, v) in enumerate(zip(entry.k, entry.v)):
        cache.k[layer][:, :, :length] = k[:, :, :length]  # [B, Hkv, L, D] <- [1, Hkv, L, D]
        cache.v[layer][:, :, :length] = v[:, :, :length]


def _keep(store: PrefixCache, cache, ids: list[int], size: int, want_shift: int, logits: torch.Tensor) -> None:
    """The run's prefilled blocks (first sample: every sample's prompt is the same) as a new entry."""
    length = len(ids)
    try:
        entry = Entry(size, tuple(ids), [k[:1, :, :length].clone() for k in cache.k], [v[:1, :, :length].clone() for v in cache.v],
                      {want_shift: logits[:1].clone()})
    except torch.OutOfMemoryError:  # the cache is a convenience: a run never fails for it
        log.info("no memory to keep a %d-token prompt prefix; the run goes on without caching it", length)
        return
    store.put(entry)
