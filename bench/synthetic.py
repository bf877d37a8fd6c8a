"""Throughput of the denoising loop on real model shapes with random weights (GPU work).

    python bench/synthetic.py --device cuda --shapes llada-8b,qwen2-0.5b
    python bench/synthetic.py --device cpu --shapes tiny          # a smoke run anywhere

Random weights never clear a confidence threshold, so these rows use fixed
tokens-per-step schedules (stated in the table): they measure the engine's cost per
step and per token at each shape, not model quality. Same canvas per row: a context of
--context random tokens around one span of --span mask slots, batch 1.
"""
from __future__ import annotations

import argparse
import sys
import time

import torch

SHAPES = {
    # LLaDA-8B: OLMo-style dims from its config.json.
    "llada-8b": dict(vocab_size=126464, dim=4096, n_layers=32, n_heads=32, n_kv_heads=32, ffn_hidden=12288, rope_theta=500000.0, max_seq_len=4096),
    # Qwen2.5-0.5B (Dream-style / Open-dCoder-0.5B backbone).
    "qwen2-0.5b": dict(vocab_size=151936, dim=896, n_layers=24, n_heads=14, n_kv_heads=2, ffn_hidden=4864, rope_theta=1000000.0, qkv_bias=True, tie_embeddings=True, max_seq_len=4096),
    "tiny": dict(vocab_size=4096, dim=256, n_layers=4, n_heads=4, n_kv_heads=2, max_seq_len=2048),
}


def build(shape: str, device: str, dtype: torch.dtype):
    from sharpen.core.denoiser import Denoiser, ModelSpec
    from sharpen.core.model import ModelConfig, Transformer
    from sharpen.core.tokenizer import train_byte_bpe

    cfg = ModelConfig(**SHAPES[shape])
    with torch.device(device):
        model = Transformer(cfg).to(dtype)
    spec = ModelSpec(family=shape, mask_id=cfg.vocab_size - 1, pad_id=None, eos_id=None, name=f"{shape} (random)")
    tokenizer = train_byte_bpe(["unused: the canvas ids are synthetic"], 300)  # the loop never decodes here
    return Denoiser(model, tokenizer, spec)


def run(denoiser, context: int, span: int, settings, repeats: int) -> tuple[float, int]:
    from sharpen.core.canvas import Canvas
    from sharpen.core.sampler import denoise
    from sharpen.core.spans import Span

    g = torch.Generator().manual_seed(0)
    mask = denoiser.spec.mask_id
    before = torch.randint(0, mask, (context // 2,), generator=g).tolist()
    after = torch.randint(0, mask, (context - context // 2,), generator=g).tolist()
    ids = tuple(before + [mask] * span + after)
    canvas = Canvas(ids, (range(len(before), len(before) + span),), (Span(0, 0, max_tokens=span),), (0, 0), mask)
    best, steps = float("inf"), 0
    for _ in range(repeats + 1):  # the first run warms up (allocations, autotuning)
        if denoiser.device.type == "cuda":
            torch.cuda.synchronize()
        started = time.perf_counter()
        for frame in denoise(denoiser, canvas, settings):
            pass
        if denoiser.device.type == "cuda":
            torch.cuda.synchronize()
        best, steps = min(best, time.perf_counter() - started), frame.step
    return best, steps


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--shapes", default="llada-8b,qwen2-0.5b")
    parser.add_argument("--span", type=int, default=256)
    parser.add_argument("--context", type=int, default=512)
    parser.add_argument("--per-step", default="1,4,8,16", help="fixed tokens committed per step")
    parser.add_argument("--block-size", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--compile", default="off", help="torch.compile mode for the backbone: off, default, reduce-overhead (CUDA graphs), max-autotune")
    args = parser.parse_args()

    from sharpen.core.sampler import SamplerSettings

    dtype = torch.bfloat16 if args.device.startswith("cuda") else torch.float32
    print(f"# synthetic shapes, random weights, batch 1, context {args.context}, span {args.span}, {args.device}, {dtype}, torch {torch.__version__}, compile {args.compile}")
    if args.device.startswith("cuda"):
        print(f"# {torch.cuda.get_device_name()}")
    print("\n| model | span len | tokens/step (fixed) | cache | block | tokens/s | steps | wall s |")
    print("|---|---|---|---|---|---|---|---|")
    for shape in args.shapes.split(","):
        denoiser = build(shape, args.device, dtype)
        denoiser.compile(args.compile)
        for per_step in (int(v) for v in args.per_step.split(",")):
            for cache, block in (("none", None), ("dual", args.block_size)):
                settings = SamplerSettings(schedule="fixed", steps=max(1, args.span // per_step), cache=cache, block_size=block)
                wall, steps = run(denoiser, args.context, args.span, settings, args.repeats)
                print(f"| {shape} | {args.span} | {per_step} | {cache} | {block or '-'} | {args.span / wall:.1f} | {steps} | {wall:.3f} |")
                sys.stdout.flush()
        del denoiser
        if args.device.startswith("cuda"):
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
