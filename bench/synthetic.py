"""Throughput of the denoising loop on real model shapes with random weights (GPU work).

    python bench/synthetic.py --device cuda --shapes llada-8b,qwen2-0.5b --compile reduce-overhead
    python bench/synthetic.py --device cpu --shapes tiny --span 64 --context 128   # a smoke run anywhere
    python bench/synthetic.py --device cuda --shapes diffusiongemma-26b-a4b --context 512   # DiffusionGemma, ~52 GB
    python bench/synthetic.py --device cpu --shapes diffusiongemma-small --context 128
    python bench/synthetic.py --device cuda --shapes sdar-8b,stable-diffcoder-8b --no-naive   # block diffusion, ~17 GB each
    python bench/synthetic.py --device cpu --shapes block-small --span 64 --context 128

Random weights never clear a confidence threshold, so the cached rows use fixed
tokens-per-step schedules (stated in the table): they measure the engine's cost per step
and per token at each shape, not model quality. Each shape is compared in one run with
the naive loop (LLaDA's: full forward and full-vocabulary logits every step, one token
per step) and with autoregressive decoding of a causal transformer of the same dimensions
(transformers' `generate` with its KV cache). Block-causal shapes (SDAR, Stable-DiffCoder) add
rows of the block loop (core/loops/block.py: the context prefilled once, each block of the
release's size against the read-only cache, the span after the context as in a prompted edit)
beside the masked loop on the same weights. Same canvas for every row: a context of
--context random tokens around one span of --span mask slots, batch 1. The model is in
the packed inference layout that loaded checkpoints use.
"""
from __future__ import annotations

import argparse
import sys
import time

import torch

from speed import build_causal_lm, naive_loop  # bench/ is on the path: the script's own folder, or pytest's pythonpath

SHAPES = {
    # LLaDA-8B: OLMo-style dims from its config.json.
    "llada-8b": dict(vocab_size=126464, dim=4096, n_layers=32, n_heads=32, n_kv_heads=32, ffn_hidden=12288, rope_theta=500000.0, max_seq_len=4096),
    # Qwen2.5-0.5B (Dream-style / Open-dCoder-0.5B backbone).
    "qwen2-0.5b": dict(vocab_size=151936, dim=896, n_layers=24, n_heads=14, n_kv_heads=2, ffn_hidden=4864, rope_theta=1000000.0, qkv_bias=True, tie_embeddings=True, max_seq_len=4096),
    "tiny": dict(vocab_size=4096, dim=256, n_layers=4, n_heads=4, n_kv_heads=2, max_seq_len=2048),
    # SDAR-8B-Chat (Qwen3-8B dims from its config.json: head_dim 128, q/k norms, block 4).
    "sdar-8b": dict(vocab_size=151936, dim=4096, n_layers=36, n_heads=32, n_kv_heads=8, head_dim=128, qk_norm=True, ffn_hidden=12288,
                    rope_theta=1000000.0, max_seq_len=4096),
    # Stable-DiffCoder-8B (Seed-Coder's Llama dims from its config.json, block 4).
    "stable-diffcoder-8b": dict(vocab_size=155136, dim=4096, n_layers=32, n_heads=32, n_kv_heads=8, ffn_hidden=14336,
                                rope_theta=500000.0, max_seq_len=4096),
    "block-small": dict(vocab_size=4096, dim=256, n_layers=4, n_heads=4, n_kv_heads=2, head_dim=64, qk_norm=True, max_seq_len=2048),
}
BLOCK_SHAPES = {"sdar-8b": 4, "stable-diffcoder-8b": 4, "block-small": 4}  # shape -> the release's block size


# DiffusionGemma (core/models/families/diffusion_gemma.py, core/loops/random_token.py): an encoder-decoder from random tokens, through
# transformers' own class. The release's text dimensions (Gemma 4 26B-A4B: 25.2B parameters,
# 128 experts of which 8 run per token) need a GPU with about 52 GB free in bfloat16; "small"
# keeps the layer pattern at a size any CPU runs. No vision tower: text edits never use it.
GEMMA_SHAPES = {
    "diffusiongemma-26b-a4b": dict(vocab_size=262144, hidden_size=2816, intermediate_size=2112, num_hidden_layers=30,
                                   num_attention_heads=16, num_key_value_heads=8, head_dim=256, global_head_dim=512,
                                   num_global_key_value_heads=2, sliding_window=1024, num_experts=128, top_k_experts=8,
                                   moe_intermediate_size=704, canvas_length=256),
    "diffusiongemma-small": dict(vocab_size=8192, hidden_size=256, intermediate_size=512, num_hidden_layers=6,
                                 num_attention_heads=4, num_key_value_heads=2, head_dim=64, global_head_dim=64,
                                 sliding_window=128, num_experts=8, top_k_experts=2, moe_intermediate_size=128, canvas_length=64),
}


def build_gemma(shape: str, device: str, dtype: torch.dtype):
    """A random DiffusionGemma of `shape`, built straight on `device` (no checkpoint on disk)."""
    from transformers import DiffusionGemmaConfig, DiffusionGemmaForBlockDiffusion, DiffusionGemmaTextConfig

    from sharpen.core.models.denoiser import ModelSpec
    from sharpen.core.models.families.diffusion_gemma import GemmaDenoiser, Schedule
    from sharpen.core.tokenizer import train_byte_bpe

    dims = dict(GEMMA_SHAPES[shape])
    canvas = dims.pop("canvas_length")
    text = DiffusionGemmaTextConfig(**dims)
    config = DiffusionGemmaConfig(text_config=text, vision_config=None, canvas_length=canvas)
    torch.manual_seed(0)
    with torch.device(device):
        model = DiffusionGemmaForBlockDiffusion(config).to(dtype).eval()
    spec = ModelSpec(family="diffusion_gemma", mask_id=dims["vocab_size"] - 1, pad_id=0, eos_id=1, name=f"{shape} (random)")
    tokenizer = train_byte_bpe(["unused: the canvas ids are synthetic"], 300)
    return GemmaDenoiser(model, tokenizer, spec, Schedule())


def gemma_rows(shape: str, args, dtype) -> list[dict]:
    """sharpen's step-by-step loop against transformers' `generate` on one random DiffusionGemma:
    one canvas after --context prompt tokens, the release's schedule (48 steps at most). Random
    weights never stop early, so both run every step: the rows compare cost per step, and the
    decoder passes per token are the reference's own count (`tokens_per_forward`)."""
    from sharpen.core.loops.random_token import renoise

    denoiser = build_gemma(shape, args.device, dtype)
    device = denoiser.device
    C = denoiser.canvas_length
    prompt = torch.randint(2, denoiser.vocab_size, (1, max(args.context, 1)), generator=torch.Generator().manual_seed(0)).to(device)
    layout = _gemma_layout(denoiser, prompt[0].tolist(), C)
    rows = []

    def ours() -> int:
        before = denoiser.passes
        for _ in renoise(denoiser, layout):
            pass
        return denoiser.passes - before

    passes_seen = {}

    def reference() -> int:
        with torch.inference_mode():
            out = denoiser.model.generate(prompt, max_new_tokens=C)
        passes_seen["generate"] = round(C / float(out.tokens_per_forward[0]))
        return passes_seen["generate"]

    for method, fn in (("sharpen (renoise loop)", ours), ("transformers generate", reference)):
        wall, passes = timed(fn, device, args.repeats)
        rows.append({"shape": shape, "method": method, "per_step": "entropy bound", "cache": "encoder KV", "block": C,
                     "rate": C / wall, "steps": passes, "wall": wall, "span": C})
    del denoiser
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return rows


def _gemma_layout(denoiser, prompt: list[int], length: int):
    from sharpen.core.canvas import Canvas
    from sharpen.core.loops.random_token import NoiseCanvas
    from sharpen.core.spans import Span

    source = Canvas((), (range(0, length),), (Span(0, 0, max_tokens=length),), (0, 0), denoiser.spec.mask_id)
    return NoiseCanvas(tuple(prompt), (denoiser.spec.mask_id,) * length, (range(0, length),), source)


def materialise(model, device: str, dtype: torch.dtype):
    """A meta-built backbone allocated on `device` directly in `dtype` and initialised there
    (torch's own init per layer, norms at one): the 8B shape takes its 16 GB of bfloat16 on
    the GPU, never the 32 GB of a float32 model converted afterwards."""
    from sharpen.core.models.model import RMSNorm

    model = model.to(dtype).to_empty(device=device)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, (torch.nn.Linear, torch.nn.Embedding)):
                module.reset_parameters()
            elif isinstance(module, RMSNorm):
                module.weight.fill_(1.0)
    if model.cfg.tie_embeddings:
        model.output.weight = model.embed.weight  # to_empty gives each module its own tensor
    return model


def build(shape: str, device: str, dtype: torch.dtype):
    from sharpen.core.models.denoiser import Denoiser, ModelSpec
    from sharpen.core.models.model import ModelConfig, Transformer, on_meta_device
    from sharpen.core.tokenizer import train_byte_bpe

    cfg = ModelConfig(**SHAPES[shape])
    torch.manual_seed(0)
    with on_meta_device():
        model = Transformer(cfg)
    model = materialise(model, device, dtype)
    with torch.no_grad():
        model.pack()  # the layout load_denoiser gives a checkpoint on one device
    spec = ModelSpec(family=shape, mask_id=cfg.vocab_size - 1, pad_id=None, eos_id=None, name=f"{shape} (random)")
    tokenizer = train_byte_bpe(["unused: the canvas ids are synthetic"], 300)  # the loop never decodes here
    return Denoiser(model, tokenizer, spec)


def make_canvas(denoiser, context: int, span: int):
    from sharpen.core.canvas import Canvas
    from sharpen.core.spans import Span

    g = torch.Generator().manual_seed(0)
    mask = denoiser.spec.mask_id
    before = torch.randint(0, mask, (context // 2,), generator=g).tolist()
    after = torch.randint(0, mask, (context - context // 2,), generator=g).tolist()
    ids = tuple(before + [mask] * span + after)
    return Canvas(ids, (range(len(before), len(before) + span),), (Span(0, 0, max_tokens=span),), (0, 0), mask)


def timed(fn, device: torch.device, repeats: int) -> tuple[float, int]:
    """Best wall time of `repeats` runs after one warm-up run (allocations, autotuning, graphs); fn returns its steps."""
    best, steps = float("inf"), 0
    for _ in range(repeats + 1):
        if device.type == "cuda":
            torch.cuda.synchronize()
        started = time.perf_counter()
        steps = fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - started)
    return best, steps


def run_sampler(denoiser, canvas, settings) -> int:
    from sharpen.core.loops.masked import denoise

    frame = None
    for frame in denoise(denoiser, canvas, settings):
        pass
    return frame.step


def run_block(denoiser, prompt_canvas, settings) -> int:
    from sharpen.core.loops.block import block_denoise

    frame = None
    for frame in block_denoise(denoiser, prompt_canvas, settings):
        pass
    return frame.step


def block_denoiser(denoiser, block: int):
    """The same weights seen as a block-causal release (a ModelSpec that declares the kind)."""
    from dataclasses import replace

    from sharpen.core.models.denoiser import BlockRule, Denoiser

    spec = replace(denoiser.spec, loop="block-causal", block=BlockRule(size=block, threshold=None))
    out = Denoiser.__new__(Denoiser)
    out.__dict__.update(denoiser.__dict__)
    out.spec = spec
    return out


def prompt_canvas(denoiser, context: int, span: int):
    """Context first, the span's slots after it: the layout of a prompted edit (core/prompted.py)."""
    from sharpen.core.canvas import Canvas
    from sharpen.core.spans import Span

    mask = denoiser.spec.mask_id
    before = torch.randint(0, mask, (context,), generator=torch.Generator().manual_seed(0)).tolist()
    return Canvas(tuple(before + [mask] * span), (range(context, context + span),), (Span(0, 0, max_tokens=span),), (0, 0), mask)


def run_naive(denoiser, canvas) -> int:
    return naive_loop(denoiser, torch.tensor(canvas.ids, device=denoiser.device), canvas.slots[0])[1]


def ar_options(compile_mode: str, device: torch.device) -> dict:
    """`generate` options that give the autoregressive baseline the same compiler as the denoiser:
    transformers compiles its decode step (CUDA graphs with "reduce-overhead") over a static cache."""
    if compile_mode == "off":
        return {}
    from transformers import CompileConfig

    config = CompileConfig(mode=compile_mode)
    if device.type != "cuda":
        config._compile_all_devices = True  # transformers compiles only on accelerators unless told
    return {"cache_implementation": "static", "compile_config": config}


def run_ar(twin, context: int, span: int, device, compile_mode: str = "off") -> int:
    prompt = torch.randint(0, twin.config.vocab_size - 1, (1, max(context, 1)), generator=torch.Generator().manual_seed(0)).to(device)
    with torch.inference_mode():
        twin.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=span, min_new_tokens=span, do_sample=False, use_cache=True,
                      **ar_options(compile_mode, device))
    return span


def rows_for_shape(shape: str, args, dtype) -> list[dict]:
    """Every method on one shape: naive, then each fixed schedule with and without the cache, then ar."""
    from sharpen.core.settings import Sampling

    denoiser = build(shape, args.device, dtype)
    denoiser.compile(args.compile)
    canvas = make_canvas(denoiser, args.context, args.span)
    device = denoiser.device
    rows = []

    def add(method: str, per_step, cache: str, block, wall: float, steps: int) -> None:
        rows.append({"shape": shape, "method": method, "per_step": per_step, "cache": cache, "block": block,
                     "rate": args.span / wall, "steps": steps, "wall": wall})

    if args.naive:
        add("naive", 1, "none (full logits)", None, *timed(lambda: run_naive(denoiser, canvas), device, args.repeats))
    for per_step in (int(v) for v in args.per_step.split(",")):
        for cache, block in (("none", 0), ("dual", args.block_size)):
            settings = Sampling(schedule="fixed", steps=max(1, args.span // per_step), cache=cache, block_size=block)
            add("sharpen", per_step, cache, block, *timed(lambda: run_sampler(denoiser, canvas, settings), device, args.repeats))
    if shape in BLOCK_SHAPES:  # the release's own loop: blocks against a read-only cache
        size = BLOCK_SHAPES[shape]
        blocked, prompted = block_denoiser(denoiser, size), prompt_canvas(denoiser, args.context, args.span)
        for per_step in sorted({min(int(v), size) for v in args.per_step.split(",")}):
            settings = Sampling(schedule="fixed", steps=max(1, size // per_step))
            add("block-causal", per_step, "prefill + read-only", size, *timed(lambda: run_block(blocked, prompted, settings), device, args.repeats))
        del blocked
    model_config = denoiser.model.cfg
    del denoiser, canvas
    if args.ar:
        if device.type == "cuda":
            torch.cuda.empty_cache()
        twin = build_causal_lm(model_config, device, dtype)
        cache = "KV cache (generate)" if args.compile == "off" else f"static KV cache (generate, compiled {args.compile})"
        add("ar", 1, cache, None, *timed(lambda: run_ar(twin, args.context, args.span, device, args.compile), device, args.repeats))
        del twin
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--shapes", default="llada-8b,qwen2-0.5b")
    parser.add_argument("--span", type=int, default=256)
    parser.add_argument("--context", type=int, default=512)
    parser.add_argument("--per-step", default="1,4,8,16", help="fixed tokens committed per step")
    parser.add_argument("--block-size", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--compile", default="off", help="torch.compile mode for the denoiser and the autoregressive baseline alike: off, default, reduce-overhead (CUDA graphs), max-autotune")
    parser.add_argument("--no-naive", dest="naive", action="store_false", help="skip the naive loop (slow on big shapes)")
    parser.add_argument("--no-ar", dest="ar", action="store_false", help="skip autoregressive decoding")
    args = parser.parse_args(argv)

    dtype = torch.bfloat16 if args.device.startswith("cuda") else torch.float32
    print(f"# synthetic shapes, random weights, batch 1, context {args.context}, span {args.span}, {args.device}, {dtype}, torch {torch.__version__}, compile {args.compile}")
    if args.device.startswith("cuda"):
        print(f"# {torch.cuda.get_device_name()}")
    print("\n| model | span len | method | tokens/step (fixed) | cache | block | tokens/s | steps | wall s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for shape in args.shapes.split(","):
        if shape in GEMMA_SHAPES:
            for r in gemma_rows(shape, args, dtype):
                print(f"| {shape} | {r['span']} (canvas) | {r['method']} | {r['per_step']} | {r['cache']} | - | {r['rate']:.1f} | {r['steps']} | {r['wall']:.3f} |")
            sys.stdout.flush()
            continue
        rows = rows_for_shape(shape, args, dtype)
        for r in rows:
            print(f"| {shape} | {args.span} | {r['method']} | {r['per_step']} | {r['cache']} | {r['block'] or '-'} | {r['rate']:.1f} | {r['steps']} | {r['wall']:.3f} |")
        rate = {(r["method"], r["per_step"], r["cache"]): r["rate"] for r in rows}
        baselines = {method: value for (method, _, _), value in rate.items() if method in ("naive", "ar")}
        for (method, per_step, cache), value in rate.items():
            if method in ("sharpen", "block-causal") and cache in ("dual", "prefill + read-only"):
                ratios = [f"vs {m}: {value / baselines[m]:.1f}x" for m in ("naive", "ar") if m in baselines]
                what = "dual cache" if method == "sharpen" else "block-causal"
                print(f"# {shape}, {what}, {per_step} per step: {value:.1f} tok/s" + (", " + ", ".join(ratios) if ratios else ""))
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
