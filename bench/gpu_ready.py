"""Is sharpen ready for its first GPU? One table of what a step costs the host, counted here.

    python bench/gpu_ready.py                  # any machine: counts, and GPU estimates from them (~2 min)
    python bench/gpu_ready.py --device cuda    # the first GPU session: the same table, measured

Rows (docs/speed.md, "The first GPU session", says what each must show):

- load peak / weights: bench/load_peak.py's four loads (float32, bfloat16, int8, int8 with a
  device map) of a ~180M-parameter Dream-layout checkpoint, each in a fresh process.
- launches per layer of a cached step (a block's rows against the KV cache, what every step
  but a block's first runs): eager float32, eager bfloat16, and the inductor-compiled step
  (bench/step_cost.py says how they are counted); the step's fixed part and the sampler's
  per-step launches beside them.
- host reads per step inside a block, fixed schedule and threshold schedule (each stalls a
  GPU's launch queue).
- graph breaks, compiled graphs and distinct step shapes over ten edits of different lengths
  (a CUDA graph is recorded per distinct shape: bucketing keeps that a handful).
- packed pass vs each pass alone: four runs' passes packed as `sharpen serve` packs concurrent
  clients' (core/batch.py), their logits against each pass run alone.
- compiled pack: a compiled server's pack of eight runs' cached steps (core/models/compiled_pack.py):
  its dynamo graphs and warm-up, its logits against the eager pack's, and (CUDA) both timed.
- the roofline estimate at LLaDA-8B and Qwen2-0.5B shapes for an H100 (3.35 TB/s) and an RTX
  4090 (1.0 TB/s): a cached step's bytes over the bandwidth against its launches times the host's
  cost per launch (5-8 us eager); with CUDA graphs the model's launches are one replay.
  With --device cuda these rows are measured (CUDA events, the profiler's kernel count,
  torch.cuda's sync debug mode) on random weights at the real shapes, in bfloat16.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
import traceback
import warnings

import torch

import step_cost  # bench/ is on the path: the script's own folder, or pytest's pythonpath
from synthetic import SHAPES

GPUS = {"H100 (3.35 TB/s)": 3.35e12, "RTX 4090 (1.0 TB/s)": 1.008e12}
LAUNCH_US = (5.0, 8.0)  # host cost of one eager kernel launch, PyTorch on a fast CPU
REPLAY_US = 15.0  # one CUDA graph replay
ROOFLINE_SHAPES = ("llada-8b", "qwen2-0.5b")
CANVAS = 512  # tokens of a typical edit's canvas: the cache a step reads
BLOCK = 32  # the GPU default block (core/settings.py)
EDIT_LENGTHS = (3, 9, 17, 26, 40, 55, 70, 88, 107, 130)  # ten edits' infill slot counts
MORE_EDIT_LENGTHS = (5, 12, 20, 33, 47, 60, 77, 95, 115, 125)  # ten more, between them
TEXT = "def add(a, b):\n    return a + b\n\n\nclass Point:\n    x = 1\n    y = 2\n" * 6


def launch_rows(compiled: bool = True) -> tuple[list[tuple[str, str, str, str]], dict]:
    rows, found = [], {}
    for label, dtype in (("eager float32", torch.float32), ("eager bfloat16", torch.bfloat16)):
        per_layer, fixed, _ = step_cost.layer_launches("llada", dtype)
        target = "<= 16.75 (half of 33.5)" if dtype == torch.bfloat16 else ""
        rows.append(("launches per layer, cached step", label, f"{per_layer:g}", target))
        rows.append(("launches outside the layers, cached step", label, str(fixed), ""))
        found[label] = (per_layer, fixed)
    if not compiled:
        return rows, found
    per_layer, fixed = step_cost.compiled_layer_launches("llada", torch.float32)
    rows.append(("kernels per layer, cached step", "compiled (inductor)", f"{per_layer:g}", "one CUDA graph per step with reduce-overhead"))
    found["compiled"] = (per_layer, fixed)
    return rows, found


def embedded():
    from sharpen.core.models.loading import load_denoiser

    return load_denoiser()


def loop_rows(denoiser) -> tuple[list[tuple[str, str, str, str]], int]:
    """Host reads per step inside blocks and at their starts (the loop's CUDA policy, "planned"),
    and the sampler's own launches per cached step."""
    from sharpen.core.settings import Sampling

    rows, sampler = [], 0
    for label, settings in (("fixed schedule", Sampling(schedule="fixed", block_size=8, steps=24)),
                            ("threshold 0.9", Sampling(block_size=8))):
        reads, launches = per_step_counts(denoiser, settings)
        inside = [n for i, n in enumerate(reads) if i % 8]  # steps 2.. of each block (24 slots, blocks of 8, 8 steps each)
        starts = [n for i, n in enumerate(reads) if i % 8 == 0]
        if label == "fixed schedule":
            rows.append(("host reads per step inside a block", label, f"{statistics.mean(inside):.2f} (max {max(inside)})", "0"))
            rows.append(("host reads at a block's start", label, f"{statistics.mean(starts[1:]):.2f} (first block {starts[0]}: the run's finite-logits check too)", "1"))
        else:
            rows.append(("host reads per step inside a block", label, f"{statistics.mean(inside):.2f} (max {max(inside)})",
                         "1, read one step late from pinned memory on CUDA: no stall"))
        sampler = max(sampler, round(statistics.median(launches)))
    rows.append(("sampler launches per step (outside the model)", "reference kernels", str(sampler), ""))
    return rows, sampler


def per_step_counts(denoiser, settings) -> tuple[list[int], list[int]]:
    """Per step of a run on the embedded model, reading as on CUDA: (host reads, launches outside the model's pass)."""
    from sharpen.core.canvas import build_canvas
    from sharpen.core.loops import LoopRules, run_loop
    from sharpen.core.spans import Span

    canvas = build_canvas(TEXT, [Span(40, 40, max_tokens=24)], denoiser.tokenizer, denoiser.spec.mask_id, 256, denoiser.max_len)
    model_launches = step_cost.Launches()
    real = denoiser._scores

    def counted(*args):
        with model_launches:  # nested: the model's own launches, subtracted from the step's
            return real(*args)

    denoiser._scores = counted
    marks = []
    try:
        with step_cost.counting() as (launches, explicit):
            for frame in run_loop(denoiser, canvas, settings, rules=LoopRules(expected_length=False, reads="planned")):
                marks.append((sum(explicit.reads.values()) + sum(launches.reads.values()), launches.total - model_launches.total))
                if frame.done:
                    break
    finally:
        denoiser._scores = real
    steps = list(zip(marks, marks[1:-1]))  # every step (the final frame adds none)
    return [b[0] - a[0] for a, b in steps], [b[1] - a[1] for a, b in steps]


def graph_rows(denoiser) -> list[tuple[str, str, str, str]]:
    """Ten edits of different lengths through the compiled step: graph breaks, graphs, shapes."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    from sharpen.core.engine import apply_edit
    from sharpen.core.settings import Sampling
    from sharpen.core.spans import Span

    torch._dynamo.reset()
    counters.clear()
    denoiser.compile("default", backend="eager")  # dynamo's graphs are the same whatever the backend
    step, shapes = denoiser._scores, set()
    inner = step.compiled

    def seen(ids, positions, cache, rows, attend):  # the shapes the compiled function meets (after bucketing)
        shapes.add((tuple(ids.shape), positions is None or tuple(positions.shape), cache and cache.length, tuple(rows.shape)))
        return inner(ids, positions, cache, rows, attend)

    step.compiled = seen
    counts = []
    for lengths in (EDIT_LENGTHS, MORE_EDIT_LENGTHS):
        for n in lengths:
            apply_edit(denoiser, TEXT, [Span(40, 40, max_tokens=n)], Sampling(block_size=8))
        counts.append((sum(counters["graph_break"].values()), counters["stats"]["unique_graphs"], len(shapes)))
    (breaks, graphs, seen_shapes), (_, more_graphs, more_shapes) = counts
    for n in EDIT_LENGTHS[:3]:  # sampled: the draw is inside the compiled sampling math
        apply_edit(denoiser, TEXT, [Span(40, 40, max_tokens=n)], Sampling(block_size=8, temperature=1.0, seed=n))
    sampled_breaks = sum(counters["graph_break"].values()) - breaks
    slots = f"slots {EDIT_LENGTHS[0]}..{EDIT_LENGTHS[-1]}"
    return [
        ("graph breaks over ten edits", slots + ", temperature 0", str(breaks), "0"),
        ("graph breaks over three edits", "temperature 1.0 (Gumbel draw)", str(sampled_breaks), "0 (issue 28: the generator draw broke it 5 times)"),
        ("compiled graphs over ten edits", "dynamo: the step and its sampling math", f"{graphs} (+{more_graphs - graphs} over ten more)", "bounded"),
        ("distinct step shapes over ten edits", "a CUDA graph each (reduce-overhead)", f"{seen_shapes} (+{more_shapes - seen_shapes} over ten more)", "bounded"),
    ]


def step_bytes(shape: str, canvas: int = CANVAS) -> int:
    """Bytes a bfloat16 cached step reads: every linear weight and the head once, the KV cache once."""
    from sharpen.core.models.memory_fit import parameter_split
    from sharpen.core.models.model import ModelConfig

    cfg = ModelConfig(**SHAPES[shape])
    embedding, linear = parameter_split(cfg)
    weights = linear + (embedding if cfg.tie_embeddings else 0)  # a tied head reads the embedding matrix whole
    cache = 2 * cfg.n_layers * canvas * cfg.n_kv_heads * cfg.head_dim
    return 2 * (weights + cache)


def roofline_rows(found: dict, sampler: int) -> list[tuple[str, str, str, str]]:
    rows = []
    per_layer, fixed = found["eager bfloat16"]
    for shape in ROOFLINE_SHAPES:
        layers = SHAPES[shape]["n_layers"]
        eager_launches = per_layer * layers + fixed + sampler
        for gpu, bandwidth in GPUS.items():
            floor = step_bytes(shape) / bandwidth * 1e3  # ms
            for mode, host in (("eager bf16", [eager_launches * us / 1e3 for us in LAUNCH_US]),
                               ("CUDA graphs", [(REPLAY_US + sampler * us) / 1e3 for us in LAUNCH_US])):
                low, high = (max(floor, h) for h in host)
                rate = ", ".join(f"{k}/step {_span(k * 1e3 / high, k * 1e3 / low, 0)} tok/s" for k in (1, 4))
                rows.append((f"est. ms per cached step, {shape}", f"{gpu}, {mode}",
                             f"{_span(low, high, 2)} (memory floor {floor:.2f}; host {_span(*host, 2)})", rate))
    return rows


def _span(low: float, high: float, digits: int) -> str:
    low_text, high_text = f"{low:.{digits}f}", f"{high:.{digits}f}"
    return low_text if low_text == high_text else f"{low_text}-{high_text}"


def step_rows(device: str = "cuda", shapes=ROOFLINE_SHAPES, repeats: int = 20, backend: str = "inductor") -> list[tuple[str, str, str, str]]:
    """Each shape's cached step timed eager and compiled ("reduce-overhead": CUDA graphs), its
    kernels counted by the profiler. Made for the GPU; a CPU runs the same code on a small shape
    (tests/test_gpu_ready.py), so the first GPU session is not this function's first run."""
    from torch.profiler import ProfilerActivity, profile

    from sharpen.core.models.model import ModelConfig, Transformer

    cuda = device == "cuda"

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    def timed_ms(step, args_) -> float:
        if not cuda:
            began = time.perf_counter()
            step(*args_)
            return (time.perf_counter() - began) * 1e3
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        step(*args_)
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end)

    where = torch.cuda.get_device_name() if cuda else device
    options = {"mode": "reduce-overhead"} if backend == "inductor" else {}
    rows = []
    for shape in shapes:
        cfg = ModelConfig(**SHAPES[shape])
        torch.manual_seed(0)
        previous = torch.get_default_dtype()
        torch.set_default_dtype(torch.bfloat16)  # built in bfloat16 on the GPU: never a float32 copy of 8B
        try:
            with torch.device(device):
                model = Transformer(cfg).eval()
        finally:
            torch.set_default_dtype(previous)
        with torch.no_grad():
            model.pack()
        model.rope(torch.device(device), cfg.max_seq_len, torch.bfloat16)
        canvas = min(CANVAS, cfg.max_seq_len)
        x = torch.randint(3, cfg.vocab_size, (1, canvas), device=device)
        cache = model.new_cache(1, canvas)
        run = torch.arange(canvas // 2, canvas // 2 + BLOCK, device=device)
        rows_ = torch.arange(BLOCK, device=device)
        for buffer in (*cache.k, *cache.v):
            torch._dynamo.mark_static_address(buffer, guard=False)
        with torch.inference_mode():
            model.scores(x, None, cache, torch.arange(canvas, device=device))  # the whole canvas: fills the cache
            for mode, step in (("eager bf16", model.scores), (f"compiled {options.get('mode', backend)}", torch.compile(model.scores, backend=backend, **options))):
                args_ = (x[:, run], run, cache, rows_)
                warm = time.perf_counter()
                for _ in range(3):
                    step(*args_)  # warm-up: compiling and recording (what a user's first edit waits for)
                sync()
                warm = time.perf_counter() - warm
                ms = statistics.median(timed_ms(step, args_) for _ in range(repeats))
                kernels = "n/a"
                if cuda:
                    with profile(activities=[ProfilerActivity.CUDA]) as prof:
                        step(*args_)
                        sync()
                    kernels = sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)
                floor = step_bytes(shape) / max(GPUS.values()) * 1e3
                rows.append((f"ms per cached step, {shape}", f"{where}, {mode}",
                             f"{ms:.2f} ({kernels} kernels; warm-up {warm:.1f} s)", f"{1e3 / ms:.0f}-{4e3 / ms:.0f} tok/s at 1-4/step; H100 floor {floor:.2f}"))
        del model, cache
        if cuda:
            torch.cuda.empty_cache()
    return rows


def cuda_sync_rows() -> list[tuple[str, str, str, str]]:
    """Syncs torch.cuda itself reports over a run of the embedded model on the GPU."""
    from sharpen.core.engine import apply_edit
    from sharpen.core.models.loading import load_denoiser
    from sharpen.core.settings import Sampling
    from sharpen.core.spans import Span

    denoiser = load_denoiser(device="cuda")
    rows = []
    for label, settings in (("fixed schedule", Sampling(schedule="fixed", block_size=8)), ("threshold 0.9", Sampling(block_size=8))):
        apply_edit(denoiser, TEXT, [Span(40, 60, max_tokens=40)], settings)  # warm
        torch.cuda.set_sync_debug_mode("warn")
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                result = apply_edit(denoiser, TEXT, [Span(40, 60, max_tokens=40)], settings)
        finally:
            torch.cuda.set_sync_debug_mode("default")
        syncs = sum("synchroniz" in str(w.message) for w in caught)
        rows.append(("host syncs per edit (torch.cuda sync debug)", label, f"{syncs} over {result.steps} steps", "a few per block"))
    return rows


def packed_rows(device: str) -> list[tuple[str, str, str, str]]:
    """Four runs' whole-canvas passes packed into one (core/batch.py, what `sharpen serve` runs for
    concurrent clients) against each pass alone: bit for bit on a CPU (tests/test_batching.py);
    a GPU's matmul kernels are chosen by shape, so there the difference is measured, not assumed."""
    from sharpen.core.batch import Pass, packed_scores
    from sharpen.core.models.loading import load_denoiser

    denoiser = load_denoiser(device=device)
    model = denoiser.model
    generator = torch.Generator().manual_seed(0)
    passes = []
    for length in (37, 64, 90, 128):
        ids = torch.randint(0, model.cfg.vocab_size, (1, length), generator=generator).to(device)
        positions = torch.arange(length, device=device)
        passes.append(Pass(ids, positions, None, torch.arange(length - 16, length, device=device)))
    with torch.inference_mode():
        alone = [model.scores(p.ids, p.positions, None, p.rows) for p in passes]
        packed = packed_scores(model, passes)
    gap = max((a - b).abs().max().item() for a, b in zip(alone, packed))
    same = sum(int((a.argmax(-1) == b.argmax(-1)).sum()) for a, b in zip(alone, packed))
    rows = sum(a.shape[1] for a in alone)
    dtype = str(model.embed.weight.dtype).replace("torch.", "")
    return [("packed pass vs each pass alone (4 runs)", f"{device}, {dtype}", f"max abs logit diff {gap:.3g}; argmax {same}/{rows} rows",
             "0 and all rows on a CPU; on a GPU, concurrent clients equal alone only to this")]


def compiled_pack_rows(device: str, runs: int = 8, rows: int = BLOCK, keys: int = CANVAS, repeats: int = 20) -> list[tuple[str, str, str, str]]:
    """A compiled server's pack (core/models/compiled_pack.py): `runs` cached steps of `rows` rows
    against caches of `keys` keys, on the embedded model, compiled (reduce-overhead on CUDA; on a
    CPU the "eager" backend, counts only) against the eager pack of the same passes."""
    from torch._dynamo.utils import counters

    from sharpen.core.batch import Pass, packed_scores
    from sharpen.core.models.compiled_pack import CompiledPack
    from sharpen.core.models.loading import load_denoiser

    denoiser = load_denoiser(device=device)
    model = denoiser.model
    keys = min(keys, model.cfg.max_seq_len)  # the embedded model's canvas is 256 tokens at most
    cuda = device == "cuda"
    pack = CompiledPack(model, "reduce-overhead", "inductor" if cuda else "eager")
    graphs = counters["stats"]["unique_graphs"]
    started = time.perf_counter()
    warmed = [(n, rows, keys) for n in (1, 2, 4, 8)]
    pack.warm_up(warmed)  # a lone run, and 2-8 runs: the two dynamo graphs and four CUDA graphs
    warm = time.perf_counter() - started
    graphs = counters["stats"]["unique_graphs"] - graphs
    generator = torch.Generator().manual_seed(0)
    passes = []
    with torch.inference_mode():
        for _ in range(runs):
            ids = torch.randint(0, model.cfg.vocab_size, (1, keys), generator=generator).to(device)
            cache = pack.new_cache(1, keys)
            model.scores(ids, None, cache, torch.arange(1, device=device))  # its canvas written
            run = torch.arange(keys - rows, keys, device=device)
            passes.append(Pass(ids[:, run], run, cache, torch.arange(rows, device=device)))
        eager = packed_scores(model, passes)
    compiled = pack(passes)
    gap = max((a - b).abs().max().item() for a, b in zip(eager, compiled))
    same = sum(int((a.argmax(-1) == b.argmax(-1)).sum()) for a, b in zip(eager, compiled))

    def timed(fn) -> float:  # ms per call, median
        times = []
        for _ in range(repeats):
            if cuda:
                torch.cuda.synchronize()
            t = time.perf_counter()
            with torch.inference_mode():
                fn()
            if cuda:
                torch.cuda.synchronize()
            times.append((time.perf_counter() - t) * 1000)
        return statistics.median(times)

    setting = f"{device}, {runs} runs x {rows} rows, {keys} keys"
    out = [("compiled pack: dynamo graphs, warm-up", f"{device}, buckets (1-8, {rows}, {keys})",
            f"{graphs} graphs, {len(pack.shapes)} shapes, {warm:.0f} s", "2 graphs (a lone run, and 2-8); one CUDA graph per shape"),
           ("compiled pack vs eager pack", setting, f"max abs logit diff {gap:.3g}; argmax {same}/{runs * rows} rows",
            "argmax all rows (rounding only: padded keys are masked)")]
    if cuda:
        out.append(("compiled pack / eager pack, ms", setting, f"{timed(lambda: pack(passes)):.2f} / {timed(lambda: packed_scores(model, passes)):.2f}",
                    "compiled well under eager (one replay instead of a launch per kernel)"))
    return out


def load_rows(device: str) -> list[tuple[str, str, str, str]]:
    """bench/load_peak.py's rows: a ~180M-parameter Dream-layout checkpoint loaded per precision
    in a fresh process (peak RSS above the RSS before the load; GPU allocator peak on CUDA)."""
    import tempfile
    from pathlib import Path

    import load_peak

    with tempfile.TemporaryDirectory(prefix="sharpen-gpu-ready-") as tmp:
        measured = load_peak.rows(load_peak.write_dream_checkpoint(Path(tmp) / "dream-180m"), device)
    out = []
    for r in measured:
        quantized = r["row"].startswith("int8")
        value = f"{r['vs_float32']:.2f}x the float32 weights" if quantized else f"{r['vs_weights']:.2f}x the weights"
        out.append(("load peak / weights, 180M Dream layout", r["row"], value, "<= 0.5x" if quantized else "<= 1.25x"))
    return out


def print_header(title: str) -> None:
    print(title)
    print()
    print("| measure | setting | value | target / note |")
    print("|---|---|---|---|", flush=True)


def print_rows(rows) -> None:
    for row in rows:
        print("| " + " | ".join(row) + " |")
    sys.stdout.flush()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"), help="cuda: measure the GPU rows instead of estimating them")
    parser.add_argument("--repeats", type=int, default=20, help="timed steps per row (--device cuda)")
    parser.add_argument("--no-compile-count", action="store_true", help="skip the compiled kernel count (it compiles twice: a minute on 2 cores)")
    parser.add_argument("--no-load", action="store_true", help="skip the load rows (they write a 700 MB checkpoint and load it four times)")
    parser.add_argument("--budget", type=float, default=None, metavar="SECONDS",
                        help="start no further group of rows once this much time has passed (a lent GPU's minutes are few)")
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("error: --device cuda needs a CUDA GPU (torch.cuda.is_available() is False)", file=sys.stderr)
        return 2
    torch.set_num_threads(max(1, torch.get_num_threads()))
    started = time.perf_counter()
    where = torch.cuda.get_device_name() if args.device == "cuda" else "cpu (GPU rows estimated)"
    print_header(f"# gpu_ready: {where}, torch {torch.__version__}")
    found, sampler = {}, 0

    def launches():
        rows, counted = launch_rows(compiled=not args.no_compile_count)
        found.update(counted)
        return rows

    def loop():
        nonlocal sampler
        rows, sampler = loop_rows(embedded())
        return rows

    # Each group prints its rows as soon as it has them, and one that fails prints its error as a
    # row and the rest go on: the first GPU session has one try, and a table cut off by a time
    # limit or an exception must still hold every row measured before it. On CUDA what only a GPU
    # can show comes first (syncs, step times, the allocator's load peak, packed rounding); the
    # counts that are the same on any device (launches, host reads, graphs) come last.
    counted = [("launches", launches), ("host reads", loop), ("graphs", lambda: graph_rows(embedded()))]  # a fresh denoiser: compiling replaces its step
    loads = [] if args.no_load else [("load peak", lambda: load_rows(args.device))]
    if args.device == "cuda":
        groups = [("host syncs", cuda_sync_rows), ("step on the GPU", lambda: step_rows("cuda", repeats=args.repeats)), *loads,
                  ("packed pass", lambda: packed_rows(args.device)), ("compiled pack", lambda: compiled_pack_rows(args.device)), *counted]
    else:
        groups = [*counted, ("packed pass", lambda: packed_rows(args.device)), ("compiled pack", lambda: compiled_pack_rows(args.device)),
                  ("roofline", lambda: roofline_rows(found, sampler)), *loads]
    failed, took = 0, []
    for name, rows_of in groups:
        took.append(f"{name} {time.perf_counter() - started:.0f}")
        elapsed = time.perf_counter() - started
        if args.budget is not None and elapsed > args.budget:
            print_rows([(name, "skipped", f"the budget of {args.budget:.0f} s was spent ({elapsed:.0f} s)", "")])
            continue
        try:
            print_rows(rows_of())
        except Exception as exc:  # noqa: BLE001  (a row that cannot be measured says why; the others still run)
            failed += 1
            first = (str(exc).strip().splitlines() or [""])[0][:300]
            print_rows([(name, "failed", f"{type(exc).__name__}: {first}".replace("|", "/"), "")])
            traceback.print_exc(file=sys.stderr)
    print(f"\nstarted at (s): {', '.join(took)}; {time.perf_counter() - started:.0f} s in all; {failed} group(s) failed", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
