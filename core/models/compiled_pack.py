"""The compiled packed step: concurrent runs share one compiled pass (CUDA graphs) per step.

Under `--compile` (`auto` on CUDA: reduce-overhead, one CUDA graph per input shape) a server's
StepBatcher (core/batch.py) hands each pack of runs' passes here instead of running them eagerly.
A CUDA graph replays fixed shapes, and the eager pack's shapes change with every client (its
rows are laid end to end, and each run attends over its own cache at its own key length), so a
pack is laid out again on a fixed grid of buckets:

    ids, positions    [n, S]      n sequences (a run's samples are one each), S rows each
    key mask          [n, S, K]   row i of sequence j may see key k of that sequence's cache
    own mask          [n, S, S]   ... or row k of its own chunk (a block's read-only pass, no cache)

n, S and K are each rounded up to a power of two (n from 1, S from 8, K from 64), so a server meets
at most `len(buckets())` shapes, each recorded once. Every sequence's cache is one slot of a pool
the pack owns (`PooledCache`: a run's KVCache is a view of its slots, so the eager code that
writes or restores keys works on it unchanged), and inside the graph each sequence gathers its
slot's first K keys, writes its chunk's keys at its positions (a pass with `write=True`; other
rows write into a scratch slot nobody reads) and attends through the masks: over its own cache up
to its own key length, then (a read-only or uncached pass) its own chunk. Padding rows and padding
sequences see only their own key (no NaN), nobody sees them, and their logits are dropped; a real
row's keys and softmax are those of its eager pass, so its logits match up to rounding (the
masked-out keys add exact zeros, in another summation order) and its tokens are the same.

Dynamo compiles the pack with those three sizes dynamic: one or two graphs (a lone sequence,
n = 1, is specialised), whatever the clients; reduce-overhead then records one CUDA graph per
bucket the first time it is met (torch records a graph per distinct input size of a dynamic
graph), or all of them ahead in `warm_up`. The graphs run on one thread of their own: torch's
CUDA graph trees are per thread, and a pack runs in the thread of whichever run formed it.

What it does not take runs eagerly, packed as before (StepBatcher._run): a pass of more rows than
MAX_ROWS per sequence (a whole long canvas: compute-bound, where a graph saves little), and a run
whose cache is not in the pool (a canvas past `POOL_TOKENS`, or every slot taken).
"""
from __future__ import annotations

import logging
import threading
import weakref
from concurrent.futures import ThreadPoolExecutor
from itertools import product
from typing import Callable

import torch
import torch.nn.functional as F

from ..settings import default_block_size
from .compiled import raise_recompile_limit
from .kv_cache import KVCache
from .model import Transformer

log = logging.getLogger(__name__)

POOL_SLOTS = 16  # sequences whose caches the pool holds (8 runs, and a cache refresh's second cache each); fewer where memory is short (pool_slots)
POOL_TOKENS = 2048  # the longest canvas the pool holds (the model's max_seq_len if shorter)
# The pool takes at most this share of the device's free memory once the weights are loaded: at
# 16 slots it would be 18 GB for LLaDA-8B (no grouped keys), which on a 24 GB card leaves nothing
# for the passes themselves. Fewer slots cost only packing width (runs past them pack eagerly).
POOL_SHARE = 0.25
MAX_ROWS = 128  # rows per sequence a compiled pack takes (core/batch.py ROWS_PER_PASS)
FEWEST_ROWS = 8  # the smallest row bucket
FEWEST_KEYS = 64  # the smallest key bucket: attending over 64 keys costs no more than over 8


def up(n: int, low: int) -> int:
    """The bucket for n: the next power of two, at least `low`."""
    return max(low, 1 << max(0, n - 1).bit_length())


class PooledCache(KVCache):
    """A run's KV cache as a view of `batch` consecutive slots of a CompiledPack's pool: [b, Hkv, T, D] per layer."""

    def __init__(self, owner: "CompiledPack", slot: int, batch: int, length: int) -> None:
        self.k = [k[slot:slot + batch, :, :length] for k in owner.k]
        self.v = [v[slot:slot + batch, :, :length] for v in owner.v]
        self.length = length
        self.owner, self.slot = owner, slot


def packed_forward(model: Transformer, ids, positions, write_slot, read_slot, key_mask, own_mask, rows,
                   pool_k: list[torch.Tensor], pool_v: list[torch.Tensor], rope_table: torch.Tensor) -> torch.Tensor:
    """One pack on the fixed grid (see the module's notes) -> logits [n, S, V] at `rows` [n, S]."""
    n, S = ids.shape
    K = key_mask.shape[-1]
    x = model.embed(ids.reshape(1, n * S))  # [1, nS, dim]
    rope = rope_table[positions.reshape(-1)]  # [nS, 2, 2, D/2]
    mask = torch.cat([key_mask, own_mask], dim=-1)[:, None]  # [n, 1, S, K + S]
    for i, layer in enumerate(model.layers):
        attn = layer.attn
        q, k, v = attn.project(layer.attn_norm(x), rope)  # [1, H, nS, D], [1, Hkv, nS, D] x2
        q, k, v = (t.reshape(t.shape[1], n, S, t.shape[3]).transpose(0, 1) for t in (q, k, v))  # [n, H or Hkv, S, D]
        # Written before it is read: a writing pass attends to its own new keys in its cache.
        pool_k[i][write_slot, :, positions] = k.transpose(1, 2)  # [n, S, Hkv, D] into each row's slot (or the scratch)
        pool_v[i][write_slot, :, positions] = v.transpose(1, 2)
        keys = torch.cat([pool_k[i][:, :, :K][read_slot], k], dim=2)  # [n, Hkv, K + S, D]
        values = torch.cat([pool_v[i][:, :, :K][read_slot], v], dim=2)
        out = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, enable_gqa=attn.n_kv_heads != attn.n_heads)  # [n, H, S, D]
        x = layer.feed_forward(x + attn.output(out.transpose(1, 2).reshape(1, n * S, -1)))  # [1, nS, dim]
    hidden = x.view(n, S, -1)
    picked = hidden.gather(1, rows[..., None].expand(-1, -1, hidden.shape[-1]))  # [n, S, dim]
    return model.project(picked)  # [n, S, V]


def pool_slots(model: Transformer, device: torch.device, share: float = POOL_SHARE) -> int:
    """How many sequences' caches the pool holds on `device`: POOL_SLOTS, fewer where the pool
    would take more than `share` of the free memory (at least one, and the scratch slot)."""
    if device.type != "cuda":
        return POOL_SLOTS
    cfg = model.cfg
    per_slot = 2 * cfg.n_layers * cfg.n_kv_heads * min(cfg.max_seq_len, POOL_TOKENS) * cfg.head_dim * model.embed.weight.element_size()
    free, _ = torch.cuda.mem_get_info(device)
    return max(1, min(POOL_SLOTS, int(share * free // per_slot) - 1))


class CompiledPack:
    """Runs a StepBatcher's packs through one compiled function on bucketed shapes; None for a
    pack it does not take (the batcher runs that one eagerly)."""

    def __init__(self, model: Transformer, mode: str, backend, notify: Callable[[str], None] | None = None,
                 slots: int = POOL_SLOTS, tokens: int = POOL_TOKENS) -> None:
        self.model = model
        self.notify = notify or log.warning
        self.slots = slots
        self.length = min(model.cfg.max_seq_len, tokens)
        self.scratch = slots  # the pool's last slot: padding rows and read-only passes write there
        options = {"mode": mode} if backend == "inductor" else {}
        self.compiled: Callable | None = torch.compile(packed_forward, backend=backend, **options)
        self.failure: str | None = None
        self.packs = self.declined = 0  # packs run compiled; packs left to the eager pack (too long, a foreign cache)
        self.shapes: set[tuple[int, int, int]] = set()  # buckets (n, S, K) met: each a CUDA graph under reduce-overhead
        self.k: list[torch.Tensor] = []  # the pool, per layer [slots + 1, Hkv, length, D], allocated on first use
        self.v: list[torch.Tensor] = []
        self._free = [True] * slots
        self._lock = threading.RLock()  # reentrant: a cache's finalizer may run inside new_cache (a garbage collection)
        self._rope: torch.Tensor | None = None
        # CUDA graph trees are per thread, and so is dynamo's config (its recompile budget).
        self._worker = ThreadPoolExecutor(1, thread_name_prefix="sharpen-graphs", initializer=raise_recompile_limit)

    @classmethod
    def of(cls, denoiser) -> "CompiledPack | None":
        """The pack for a compiled Denoiser (its mode and backend), else None. With CUDA graphs
        (`--compile auto` on CUDA) the commonest buckets are compiled and recorded now, while the
        server starts, not in its first clients' requests (`warm_up`)."""
        step = getattr(denoiser, "_step", None)
        if step is None:
            return None
        pack = cls(denoiser.model, step.mode, step.backend, step.notify, slots=pool_slots(denoiser.model, denoiser.device))
        if step.mode == "reduce-overhead" and denoiser.device.type == "cuda":
            block = default_block_size("cuda", sum(p.numel() for p in denoiser.model.parameters()))
            keys = sorted({K for _, _, K in pack.buckets() if K <= 1024})
            log.info("compiling the packed step for up to 8 runs of %d rows (%d shapes)", block, 4 * len(keys))
            pack.warm_up([(n, up(block, FEWEST_ROWS), K) for n in (1, 2, 4, 8) for K in keys])
        return pack

    def buckets(self) -> list[tuple[int, int, int]]:
        """Every (n, S, K) a pack can be laid out as: the most shapes, and CUDA graphs, it records."""
        powers = [1 << i for i in range(16)]
        ns = [n for n in powers if n <= up(self.slots, 1)]
        rows = [r for r in powers if FEWEST_ROWS <= r <= MAX_ROWS]
        keys = sorted({min(up(k, FEWEST_KEYS), self.length) for k in powers if k <= up(self.length, 1)})
        return list(product(ns, rows, keys))

    # -- the pool ---------------------------------------------------------------------------

    def _pool(self) -> bool:
        """Whether the pool is there, allocating it on first use (none once compiling failed)."""
        with self._lock:
            if not self.k and self.compiled is not None:
                try:
                    self._allocate()
                except torch.OutOfMemoryError as exc:  # the pool is a convenience: pack eagerly, in ordinary caches
                    self.k, self.v = [], []
                    self.fail(exc)
            return bool(self.k)

    def _allocate(self) -> None:
        cfg, w = self.model.cfg, self.model.embed.weight
        shape = (self.slots + 1, cfg.n_kv_heads, self.length, cfg.head_dim)
        with torch.inference_mode(False):  # ordinary tensors: eager passes outside inference mode write them too
            self.k = [torch.zeros(shape, dtype=w.dtype, device=w.device) for _ in range(cfg.n_layers)]
            self.v = [torch.zeros(shape, dtype=w.dtype, device=w.device) for _ in range(cfg.n_layers)]
        for buffer in (*self.k, *self.v):  # a CUDA graph writes in place only into inputs at fixed addresses
            torch._dynamo.mark_static_address(buffer, guard=False)

    def new_cache(self, batch: int, length: int) -> KVCache:
        """`batch` consecutive slots of the pool, or (a canvas past the pool, every slot taken) an
        ordinary cache, whose passes then run eagerly."""
        with self._lock:
            start = self._find(batch) if self._pool() and length <= self.length else None
            if start is None:
                log.debug("no %d pool slots of %d tokens free: an ordinary cache, its passes eager", batch, length)
                return self.model.new_cache(batch, length)
            self._free[start:start + batch] = [False] * batch
        cache = PooledCache(self, start, batch, length)
        weakref.finalize(cache, self._release, start, batch)  # the slots come back when the run drops its cache
        return cache

    def _find(self, batch: int) -> int | None:
        for start in range(self.slots - batch + 1):
            if all(self._free[start:start + batch]):
                return start
        return None

    def _release(self, start: int, batch: int) -> None:
        with self._lock:
            self._free[start:start + batch] = [True] * batch

    # -- a pack -----------------------------------------------------------------------------

    def __call__(self, passes: list) -> list[torch.Tensor] | None:
        """Each pass's logits [b, W, V] (core/batch.py Pass), or None when it does not take the pack."""
        if self.compiled is None or not self.takes(passes):
            self.declined += 1
            return None
        with torch.inference_mode():  # as every call's inputs: dynamo guards on inference tensors apart
            inputs = self._layout(passes)
        try:
            logits = self._worker.submit(self._replay, inputs).result()  # [n, S, V]
        except torch.OutOfMemoryError:
            raise
        except Exception as exc:  # noqa: BLE001 - any failure to compile, trace or record: eager from now on
            self.fail(exc)
            return None
        self.packs += 1
        out, j = [], 0
        for p in passes:
            b = p.ids.shape[0]
            out.append(logits[j:j + b, :p.rows.shape[0]])  # [b, W, V]
            j += b
        return out

    def takes(self, passes: list) -> bool:
        """Whether every pass fits the grid: at most MAX_ROWS rows (and rows to project) each,
        all their sequences in the pool, each cache one of the pool's."""
        if sum(p.ids.shape[0] for p in passes) > self.slots:
            return False
        for p in passes:
            if max(p.ids.shape[1], p.rows.shape[0]) > MAX_ROWS:
                return False
            if p.cache is None:
                if p.ids.shape[1] > self.length:
                    return False
            elif not (isinstance(p.cache, PooledCache) and p.cache.owner is self):
                return False
        return True

    @staticmethod
    def _keys(p) -> int:
        """How many of its cache's keys a pass attends to (Attention.attend's rule)."""
        if p.cache is None:
            return 0
        return p.cache.length if p.attend.keys is None else p.attend.keys

    def _layout(self, passes: list) -> tuple[torch.Tensor, ...]:
        """The pack on its bucket's grid (the module's notes): ids, positions, write and read
        slots, key and own masks, rows to project."""
        n = up(sum(p.ids.shape[0] for p in passes), 1)
        S = up(max(max(p.ids.shape[1], p.rows.shape[0]) for p in passes), FEWEST_ROWS)
        K = min(up(max(self._keys(p) for p in passes), FEWEST_KEYS), self.length)
        device = self.k[0].device if self.k else self.model.embed.weight.device
        ids = torch.zeros(n, S, dtype=torch.long, device=device)  # [n, S]
        positions = torch.zeros(n, S, dtype=torch.long, device=device)
        write_slot = torch.full((n, S), self.scratch, dtype=torch.long, device=device)
        read_slot = torch.full((n,), self.scratch, dtype=torch.long, device=device)
        key_mask = torch.zeros(n, S, K, dtype=torch.bool, device=device)
        own_mask = torch.eye(S, dtype=torch.bool, device=device).repeat(n, 1, 1)  # padding rows see themselves only
        rows = torch.zeros(n, S, dtype=torch.long, device=device)
        j = 0
        for p in passes:
            b, s = p.ids.shape
            seqs = slice(j, j + b)
            ids[seqs, :s] = p.ids
            positions[seqs, :s] = p.positions
            rows[seqs, :p.rows.shape[0]] = p.rows
            mask = p.attend.mask  # [s, keys] (writing), [s, keys + s] (read-only), [s, s] (no cache), or None
            if p.cache is None:
                own_mask[seqs, :s, :s] = True if mask is None else mask
            else:
                slots = torch.arange(p.cache.slot, p.cache.slot + b, device=device)  # [b]
                read_slot[seqs] = slots
                keys = self._keys(p)
                key_mask[seqs, :s, :keys] = True if mask is None else mask[:, :keys]
                if p.attend.write:
                    write_slot[seqs, :s] = slots[:, None]
                    own_mask[seqs, :s] = False  # its keys are in its cache now: seen there
                else:
                    own_mask[seqs, :s, :s] = True if mask is None else mask[:, keys:]
            j += b
        self.shapes.add((n, S, K))
        return ids, positions, write_slot, read_slot, key_mask, own_mask, rows

    def _replay(self, inputs: tuple[torch.Tensor, ...]) -> torch.Tensor:
        """The compiled call, on the graphs' own thread; a copy of its logits (a CUDA graph's
        outputs are overwritten by its next replay, and the runs read theirs after it)."""
        ids, positions, write_slot, read_slot, key_mask, own_mask, rows = inputs
        for t in (ids, positions, write_slot, rows, key_mask, own_mask):  # n, S (and K): one graph for every bucket
            for dim in range(t.dim()):
                torch._dynamo.maybe_mark_dynamic(t, dim)
        torch._dynamo.maybe_mark_dynamic(read_slot, 0)
        rope = self.model.rope(ids.device, self.length, self.model.embed.weight.dtype)  # [L, 2, 2, D/2]
        if rope is not self._rope:  # at a fixed address: a CUDA graph would copy the whole table in per replay
            torch._dynamo.mark_static_address(rope, guard=False)
            self._rope = rope
        with torch.inference_mode():
            return self.compiled(self.model, *inputs, self.k, self.v, rope).clone()

    def warm_up(self, buckets: list[tuple[int, int, int]] | None = None, calls: int = 3) -> None:
        """Compile, and record each bucket's CUDA graph (on the second or third call of a shape),
        before the first client: every row writes the scratch slot and reads nothing else."""
        if not self._pool():
            return
        device = self.k[0].device
        for n, S, K in buckets if buckets is not None else self.buckets():
            with torch.inference_mode():  # inference tensors, as a pack's inputs (_layout): the same graphs
                inputs = self._dummy(n, S, K, device)
            self.shapes.add((n, S, K))
            for _ in range(calls):
                if self.compiled is None:
                    return
                try:
                    self._worker.submit(self._replay, inputs).result()
                except torch.OutOfMemoryError:
                    raise
                except Exception as exc:  # noqa: BLE001 - as in a pack: eager from now on, one line
                    self.fail(exc)

    def _dummy(self, n: int, S: int, K: int, device) -> tuple[torch.Tensor, ...]:
        """A pack of bucket (n, S, K) that writes only the scratch slot and reads nothing else."""
        ids = torch.zeros(n, S, dtype=torch.long, device=device)  # [n, S]
        scratch = torch.full((n, S), self.scratch, dtype=torch.long, device=device)
        read = torch.full((n,), self.scratch, dtype=torch.long, device=device)  # built as _layout builds them: same strides
        return (ids, ids.clone(), scratch, read, torch.zeros(n, S, K, dtype=torch.bool, device=device),
                torch.eye(S, dtype=torch.bool, device=device).repeat(n, 1, 1), ids.clone())

    def fail(self, exc: Exception) -> None:
        """Run every pack eagerly from now on, saying why in one line, once."""
        self.compiled = None
        if self.failure is None:
            self.failure = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else 'no message'}"
            self.notify(f"sharpen: the compiled packed step failed ({self.failure}); packing eagerly from now on")
