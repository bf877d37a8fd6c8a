"""The compiled step: a denoising step's pass and projection through torch.compile, over a
handful of shapes, falling back to eager on any failure.

A CUDA graph (torch.compile's "reduce-overhead") is recorded per distinct input shape, and
every edit has its own canvas length, slot count and block rows: compiled as they come, a
session would record a graph (and often compile) per edit. So the compiled step sees
bucketed shapes only (`bucket`: powers of two and their halfway points, at most 1.5x the real
size): a canvas is padded at its end and a key mask hides the padding from every query; a
cached step's rows are padded by repeating its last position (the same token at the same
place writes the same keys and values twice); the projected rows are padded to a power of two
by repeating the last one, and cut off again after the call. The padding changes no real
row's result. Block-causal passes (their own masks and key counts) run as they come.

Compiling is new on every machine it meets, and no GPU has tested it here: if compiling or
recording fails, the step says so in one line (`notify`) and runs eagerly from then on, with
the same padded arguments; an edit never fails for it.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Callable

import torch

from .kv_cache import FULL, Attend, KVCache
from .model import Transformer

log = logging.getLogger(__name__)

SMALLEST_BUCKET = 8
RECOMPILE_LIMIT = 64  # dynamo's per-function budget while compiled (see CompiledStep)


def raise_recompile_limit() -> None:
    """Dynamo's recompile budget at RECOMPILE_LIMIT in the calling thread: torch's config
    overrides are thread-local (torch/utils/_config_module.py), and a server calls the compiled
    functions from each run's thread, where the default of 8 would run new shapes eagerly."""
    if torch._dynamo.config.recompile_limit < RECOMPILE_LIMIT:
        torch._dynamo.config.recompile_limit = RECOMPILE_LIMIT


def bucket(n: int, cap: int | None = None) -> int:
    """The padded size for `n`: the next of 8, 12, 16, 24, 32, 48, ... (at most `cap`)."""
    size = SMALLEST_BUCKET
    while size < n:
        size = size * 3 // 2 if size & (size - 1) == 0 else size * 4 // 3  # 2^k -> 1.5 * 2^k -> 2^(k+1)
    return size if cap is None else min(size, max(cap, n))


class CompiledStep:
    """Stands in for `Transformer.scores` (same arguments, same results) in a compiled denoiser."""

    def __init__(self, model: Transformer, mode: str, backend: str, pad_id: int,
                 notify: Callable[[str], None] | None = None) -> None:
        self.model = model
        self.pad_id = pad_id
        self.notify = notify or log.warning
        self.backend = backend
        self.mode = mode  # core/models/compiled_pack.py compiles a server's packs the same way
        options = {"mode": mode} if backend == "inductor" else {}
        # Whole-canvas passes with and without a cache and cached steps are three graphs, each
        # recompiled once when its sizes turn dynamic: more than dynamo's default budget of 8,
        # after which it would run every new shape eagerly without a word. Buckets bound them.
        raise_recompile_limit()
        self.compiled: Callable | None = torch.compile(model.scores, backend=backend, **options)
        self.failure: str | None = None  # why the step runs eagerly, once it does
        self.valid_keys: int | None = None  # the real canvas length of the run using the kept cache
        self._masks: dict[tuple[int, int, torch.device], torch.Tensor] = {}

    def cache_length(self, length: int) -> int:
        """The length a bucketed run's KV cache is allocated with."""
        return bucket(length, self.model.cfg.max_seq_len)

    def __call__(self, ids: torch.Tensor, positions: torch.Tensor | None, cache: KVCache | None, rows: torch.Tensor,
                 attend: Attend = FULL) -> torch.Tensor:
        if attend is not FULL or rows.shape[0] == 0:  # block-causal passes bring their own masks and key counts: as they come
            return self._run(ids, positions, cache, rows, attend)
        W = rows.shape[0]
        # Rows to project: powers of two (a whole-canvas pass projects every slot, and slot
        # counts vary most; the head's rows are a small part of such a pass).
        rows = _pad_repeating(rows, 1 << max(3, (W - 1).bit_length()))  # [Wb]
        if positions is None:  # a whole-canvas pass: pad the canvas, hide the padding from every query
            T = ids.shape[1]
            padded = cache.length if cache is not None else bucket(T, self.model.cfg.max_seq_len)
            ids = torch.nn.functional.pad(ids, (0, padded - T), value=self.pad_id)  # [B, Tb]
            keys = padded
        else:  # a cached step: repeat its last position, as many times as the bucket needs
            T = self.valid_keys if self.valid_keys is not None else cache.length
            padded_rows = bucket(positions.shape[0])
            index = _pad_repeating(torch.arange(positions.shape[0], device=ids.device), padded_rows)  # [Sb]
            ids, positions = ids[:, index], positions[index]  # [B, Sb], [Sb]
            keys = cache.length
        # Always a mask, even where the canvas fills its bucket: one graph per shape, not two.
        attend = Attend(mask=self._key_mask(keys, T, ids.device))
        return self._run(ids, positions, cache, rows, attend)[:, :W]  # [B, W, V]

    def _key_mask(self, keys: int, valid: int, device) -> torch.Tensor:
        """[1, keys] bool: the real canvas's keys (kept per shape: one tensor per bucket and length)."""
        key = (keys, valid, device)
        if key not in self._masks:
            if len(self._masks) > 64:
                self._masks.clear()
            self._masks[key] = (torch.arange(keys, device=device) < valid)[None, :]
        return self._masks[key]

    def _run(self, *args) -> torch.Tensor:
        if self.compiled is not None:
            raise_recompile_limit()
            try:
                return self.compiled(*args)
            except torch.OutOfMemoryError:
                raise  # not the compiler's fault: the caller turns it into advice
            except Exception as exc:  # any failure to compile, trace or record: eager from now on
                self.fail(exc)
        return self.model.scores(*args)

    def fail(self, exc: Exception) -> None:
        """Run eagerly from now on (the step and its sampling math), saying why in one line, once."""
        self.compiled = None
        if self.failure is None:
            self.failure = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else 'no message'}"
            self.notify(f"sharpen: the compiled step failed ({self.failure}); running eagerly from now on")

    def warm_up(self, new_cache: Callable[[int, int], KVCache], progress: Callable[[str], None], batch: int = 1,
                canvas: int = 256, block: int = 32) -> None:
        """Compile (and record) the commonest shapes before the first edit: a whole-canvas pass
        and a cached step of `block` rows (the GPU default) at a typical canvas, in the cache
        `new_cache` keeps (the denoiser's: its buffers' addresses are part of a CUDA graph)."""
        progress("sharpen: compiling the model's step for this GPU (once per session; a minute or more for a big model)")
        started = time.perf_counter()
        device = self.model.embed.weight.device
        cache = new_cache(batch, canvas)
        ids = torch.zeros(batch, canvas, dtype=torch.long, device=device)
        run = torch.arange(canvas - block, canvas, device=device)
        with torch.inference_mode():
            for _ in range(3):  # CUDA graph trees record on the second or third call of a shape
                self(ids, None, cache, torch.arange(block, device=device))
                self(ids[:, run], run, cache, torch.arange(block, device=device))
        if self.compiled is not None:
            progress(f"sharpen: compiled step ready ({time.perf_counter() - started:.0f} s)")


class CompiledSampler:
    """A step's sampling math (core/loops/masked.py `_choose`) through torch.compile's default
    mode: softmax, the draw, scores and commits fuse into a few kernels instead of some forty
    launches. No CUDA graph: its shapes follow each block (the last one is shorter), and one
    graph per shape is not worth it for a few kernels. It shares its step's fate: the first
    failure of either runs both eagerly from then on, with one line."""

    def __init__(self, fn: Callable, step: CompiledStep) -> None:
        self.fn, self.step = fn, step
        self.compiled: Callable | None = torch.compile(fn, backend=step.backend, dynamic=None)
        # One caller at a time: a server's runs sample in their own threads, and dynamo, entered
        # from several at once, recompiled the same function again and again ("runtime guards
        # failed even though they passed": 25 recompiles over 24 batched requests, none with this).
        self._lock = threading.Lock()

    def __call__(self, *args):
        if self.compiled is not None and self.step.failure is None:
            raise_recompile_limit()
            try:
                with self._lock:
                    return self.compiled(*args)
            except torch.OutOfMemoryError:
                raise
            except Exception as exc:
                self.step.fail(exc)
        self.compiled = None
        return self.fn(*args)


def _pad_repeating(index: torch.Tensor, size: int) -> torch.Tensor:
    """index [n] -> [size]: its last entry repeated to fill (no host read: shapes are known)."""
    n = index.shape[0]
    if n == size:
        return index
    return torch.cat([index, index[-1:].expand(size - n)])
