"""What weight-only quantization costs and buys: memory, logit drift, tokens/s, per precision.

    python bench/quantize.py                                   # CPU: tiny and Qwen2-0.5B shapes, float32 / bfloat16 / int8
    python bench/quantize.py --device cuda --shapes llada-8b   # GPU: adds int4

Random weights in the packed layout a loaded checkpoint has (bench/synthetic.py's shapes); each
precision is built from the same float32 weights, so the drift columns compare like with like:
the largest logit difference against float32, the share of positions whose top token agrees,
and the mean KL(float32 || precision) over the canvas. tokens/s: the denoising loop at fixed 4
tokens per step over one span, best of --repeats runs after a warm-up. A benchmark, not a
test: it prints a table and asserts nothing.
"""
from __future__ import annotations

import argparse
import copy
import sys
from typing import Iterator

import torch
from synthetic import SHAPES, make_canvas, timed  # bench/ is on the path: the script's own folder, or pytest's pythonpath


def build_precision(base, precision: str, device: torch.device):
    """A denoiser over a copy of `base`'s float32 backbone at `precision` (unpacked when quantized)."""
    from sharpen.core.models.denoiser import Denoiser
    from sharpen.core.models.model import Transformer
    from sharpen.core.models.quantize import check_quantization, quantize_backbone

    model = Transformer(base.model.cfg)
    model.load_state_dict(base.model.state_dict())
    model = model.to(device)
    with torch.no_grad():
        if precision in ("int8", "int4"):
            check_quantization(precision, device)
            quantize_backbone(model.to(torch.bfloat16 if device.type == "cuda" else torch.float32), precision)
        else:
            model = model.to(getattr(torch, precision)).pack()
    return Denoiser(model, base.tokenizer, base.spec)


def drift(reference: torch.Tensor, logits: torch.Tensor) -> tuple[float, float, float]:
    """(max |difference|, top-1 agreement, mean KL(reference || logits)) over [T, V] logits."""
    p = reference.log_softmax(-1)
    q = logits.log_softmax(-1)
    kl = (p.exp() * (p - q)).sum(-1).mean()
    return (reference - logits).abs().max().item(), (reference.argmax(-1) == logits.argmax(-1)).float().mean().item(), kl.item()


def rows_for_shape(shape: str, args) -> Iterator[dict]:
    """One row per precision, each as soon as it is measured (a run cut short keeps the rows before)."""
    from sharpen.core.models.denoiser import Denoiser, ModelSpec
    from sharpen.core.models.model import ModelConfig, Transformer
    from sharpen.core.models.quantize import weight_bytes
    from sharpen.core.loops.masked import denoise
    from sharpen.core.settings import Sampling
    from sharpen.core.tokenizer import train_byte_bpe

    device = torch.device(args.device)
    cfg = ModelConfig(**SHAPES[shape])
    torch.manual_seed(0)
    spec = ModelSpec(family=shape, mask_id=cfg.vocab_size - 1, pad_id=None, eos_id=None, name=f"{shape} (random)")
    base = Denoiser(Transformer(cfg), train_byte_bpe(["unused: the canvas ids are synthetic"], 300), spec)
    canvas = make_canvas(base, args.context, args.span)
    ids = torch.tensor(canvas.ids, device=device)[None]
    settings = Sampling(schedule="fixed", steps=max(1, args.span // 4), block_size=0, refresh="block")
    precisions = ["float32", "bfloat16", "int8"] + (["int4"] if device.type == "cuda" else [])
    reference = None
    for precision in precisions:
        den = build_precision(base, precision, device)
        with torch.inference_mode():
            logits = den.logits(ids)[0].float()  # [T, V]
        reference = logits if reference is None else reference
        worst, top1, kl = drift(reference, logits)

        def run() -> int:
            frame = None
            for frame in denoise(den, copy.copy(canvas), settings):
                pass
            return frame.step

        seconds, steps = timed(run, device, args.repeats)
        yield {"shape": shape, "precision": precision, "weights MiB": weight_bytes(den.model) / 2**20,
               "max |dlogit|": worst, "top-1 agree": top1, "KL": kl, "tokens/s": args.span / seconds, "steps": steps}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--shapes", default="tiny,qwen2-0.5b", help=f"comma list of {', '.join(SHAPES)}")
    parser.add_argument("--span", type=int, default=32)
    parser.add_argument("--context", type=int, default=96)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"| shape | precision | weights MiB | max abs logit diff vs float32 | top-1 agree | KL vs float32 | tokens/s ({args.span} slots, 4/step) |")
    print("|---|---|---|---|---|---|---|")
    for shape in args.shapes.split(","):
        for r in rows_for_shape(shape.strip(), args):
            print(f"| {r['shape']} | {r['precision']} | {r['weights MiB']:.1f} | {r['max |dlogit|']:.4f} | {r['top-1 agree']:.3f} | {r['KL']:.5f} | {r['tokens/s']:.1f} |")
            sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
