"""What a denoising step costs the host, counted on any machine: kernel launches and host reads.

    python bench/step_cost.py    # per layer of a cached step: launches by op name, per shape and dtype

bench/gpu_ready.py prints these counts; tests/test_step_cost.py holds them to bounds.

- `Launches` is a TorchDispatchMode that counts the aten ops that launch work on a device: a
  view (its output aliases an input and it is not in-place) and a bare allocation launch
  nothing and are left out. It runs under inference mode, where the engine runs, so an op
  that is one kernel on CUDA (`rms_norm`'s fused kernel, `matmul`'s one GEMM, SDPA's one
  attention kernel) counts once even where the CPU composes it from several.
- `HostReads` counts the reads that stall a GPU's launch queue: explicit ones seen at the
  Python level (`bool(t)`, `.item()`, `.tolist()`, ...) and implicit ones inside aten ops
  (`nonzero`, indexing with a bool mask, `unique`).
- `layer_launches` runs one cached step of the backbone (the block's rows against a KV cache,
  what every step but a block's first does) at two depths; the difference per layer is a
  layer's launches, the rest is the step's fixed part (embedding, rotary lookup, head).
- `compiled_layer_launches` does the same for the inductor-compiled step, counting its fused
  kernels and the extern ones it calls (GEMMs, attention) with the profiler.
"""
from __future__ import annotations

import collections
from contextlib import contextmanager

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

# Python-level reads of a tensor's value: each waits for the device to finish the queue.
EXPLICIT_READS = frozenset({"__bool__", "item", "tolist", "__int__", "__float__", "__index__", "numpy", "cpu"})
# aten ops whose output size depends on the data: the host must read a count first.
IMPLICIT_READS = frozenset({"nonzero", "unique", "_unique", "_unique2", "unique_consecutive", "unique_dim", "masked_select"})
ALLOCATIONS = frozenset({"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided"})
# Explicit reads dispatch these on the way (counted once, at the Python level, not twice).
READ_PLUMBING = frozenset({"item", "is_nonzero", "_local_scalar_dense", "resolve_conj", "resolve_neg"})

# Backbone shapes for counting (the counts do not depend on widths: these keep the run fast).
# "llada": multi-head attention, no biases, untied head (LLaDA-8B's layout);
# "qwen2": grouped-query attention, q/k/v biases, tied head (Qwen2.5-0.5B's, Dream's).
COUNT_SHAPES = {
    "llada": dict(vocab_size=512, dim=128, n_heads=4, n_kv_heads=4, max_seq_len=512),
    "qwen2": dict(vocab_size=512, dim=128, n_heads=4, n_kv_heads=2, qkv_bias=True, tie_embeddings=True, max_seq_len=512),
}


def _aliases(out, args) -> bool:
    inputs = {t.untyped_storage().data_ptr() for t in tree_flatten(args)[0] if isinstance(t, torch.Tensor) and t.device.type != "meta"}
    outs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
    return bool(outs) and all(t.untyped_storage().data_ptr() in inputs for t in outs)


class Launches(TorchDispatchMode):
    """Counts device-work ops (see the module's notes) by name, and implicit host reads."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: collections.Counter[str] = collections.Counter()
        self.reads: collections.Counter[str] = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = func.overloadpacket.__name__
        if name in IMPLICIT_READS or (name == "index" and _bool_index(args)):
            self.reads[name] += 1
        if name in ALLOCATIONS or name in READ_PLUMBING:
            return out
        in_place = name.endswith("_") or "out" in kwargs
        if not in_place and _aliases(out, (args, kwargs)):
            return out  # a view: no kernel
        self.ops[name] += 1
        return out

    @property
    def total(self) -> int:
        return sum(self.ops.values())


def _bool_index(args) -> bool:
    indices = args[1] if len(args) > 1 else ()
    return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in indices or ())


class HostReads(TorchFunctionMode):
    """Counts explicit Python-level reads of tensor values (see EXPLICIT_READS)."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: collections.Counter[str] = collections.Counter()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in EXPLICIT_READS:
            self.reads[name] += 1
        return func(*args, **(kwargs or {}))


@contextmanager
def counting():
    """Both counters at once: yields (launches, explicit_reads); implicit reads are in launches.reads."""
    launches, explicit = Launches(), HostReads()
    with explicit, launches:
        yield launches, explicit


def build_backbone(shape: str, n_layers: int, dtype: torch.dtype, seed: int = 0):
    """A random backbone of COUNT_SHAPES[shape] in the packed inference layout, as loaders leave it."""
    from sharpen.core.models.model import ModelConfig, Transformer

    torch.manual_seed(seed)
    model = Transformer(ModelConfig(n_layers=n_layers, **COUNT_SHAPES[shape])).to(dtype).eval()
    return model.pack()


def _cached_step_inputs(model, canvas: int = 64, block: int = 8):
    """A canvas written to a fresh cache by a full pass, and one cached step's arguments."""
    x = torch.randint(3, model.cfg.vocab_size, (1, canvas))
    cache = model.new_cache(1, canvas)
    with torch.inference_mode():
        model.scores(x, None, cache, torch.arange(canvas))
    run = torch.arange(canvas // 2, canvas // 2 + block)
    return x[:, run], run, cache, torch.arange(block)


def step_launches(model, step=None) -> Launches:
    """Launches of one cached step of `model` (or of `step`, a compiled `model.scores`), after a warm call."""
    step = step or model.scores
    args = _cached_step_inputs(model)
    with torch.inference_mode():
        step(*args)  # warm: lazily built tables, a compiled function's first call
        with Launches() as launches:
            step(*args)
    return launches


def layer_launches(shape: str, dtype: torch.dtype) -> tuple[float, int, collections.Counter]:
    """(launches per layer, the step's fixed launches, per-layer ops by name) of an eager cached step."""
    shallow = step_launches(build_backbone(shape, 2, dtype))
    deep = step_launches(build_backbone(shape, 4, dtype))
    per_layer = (deep.total - shallow.total) / 2
    ops = collections.Counter({k: (deep.ops[k] - shallow.ops[k]) // 2 for k in deep.ops if deep.ops[k] != shallow.ops[k]})
    return per_layer, int(shallow.total - 2 * per_layer), ops


def compiled_layer_launches(shape: str, dtype: torch.dtype, mode: str = "default") -> tuple[float, int]:
    """(kernels per layer, the step's fixed kernels) of the inductor-compiled cached step (slow: compiles twice)."""
    import torch._inductor.config as inductor_config
    from torch.profiler import ProfilerActivity, profile

    inductor_config.cpp.enable_kernel_profile = True  # the fused C++ kernels show in the profiler
    totals = []
    for depth in (2, 4):
        model = build_backbone(shape, depth, dtype)
        model.rope(torch.device("cpu"), model.cfg.max_seq_len, dtype)
        step = torch.compile(model.scores, mode=mode)
        args = _cached_step_inputs(model)
        with torch.inference_mode():
            step(*args)
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                step(*args)
        totals.append(sum(1 for e in prof.events() if _is_kernel(e) and not (e.cpu_parent and _is_kernel(e.cpu_parent))))
    per_layer = (totals[1] - totals[0]) / 2
    return per_layer, int(totals[0] - 2 * per_layer)


def _is_kernel(event) -> bool:
    """A kernel the compiled wrapper runs: a fused one it generated, or an aten op it calls (GEMM, attention)."""
    return "cpp_fused" in event.name or "triton_" in event.name or event.name.startswith("aten::")


def main() -> int:
    """Per layer of a cached step, launches by op name, for each counted shape and dtype."""
    print("| shape | dtype | launches per layer | outside the layers | per layer, by op |")
    print("|---|---|---|---|---|")
    for shape in COUNT_SHAPES:
        for dtype in (torch.float32, torch.bfloat16, torch.float16):
            per_layer, fixed, ops = layer_launches(shape, dtype)
            by_op = ", ".join(f"{name} {n}" for name, n in sorted(ops.items(), key=lambda kv: -kv[1]))
            print(f"| {shape} | {str(dtype).removeprefix('torch.')} | {per_layer:g} | {fixed} | {by_op} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
