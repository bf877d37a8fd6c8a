"""A mixture-of-experts step against a dense step of the same active size, random weights (GPU work).

    python bench/moe.py --device cuda --shapes llada2-mini      # LLaDA2.0-mini's shape: ~33 GB of bfloat16 on one GPU
    python bench/moe.py --device cuda --shapes sdar-30b-a3b     # SDAR-30B-A3B's: ~61 GB (an 80 GB card)
    python bench/moe.py --device cpu --shapes small             # a CPU-sized shape with the same proportions

Per shape, in one run, the cost of the two passes a block-causal step makes (core/loops/block.py,
core/loops/editing.py): the open block of --block tokens against a read-only cache of --context
tokens, and the pass that writes a finished block, for

- moe: the release's layout, experts run by one grouped GEMM (torch._grouped_mm);
- moe-looped: the same model, one product per active expert (the fallback on CUDA without
  sm90 bfloat16);
- dense: a dense model whose feed-forward is the active width (top-k + shared experts times the
  expert width: 9 x 512 = 4608 at LLaDA2.0-mini, 8 x 768 = 6144 at SDAR-30B-A3B), the same
  multiply-adds per token.

`weights` is what a model holds, `per step` what one block step must read at the least (dense:
everything; MoE: attention, norms, routers, the experts the block's tokens chose, the head).
Then tokens per step of the LLaDA2.1 decode with editing off, in quality and in speed mode on
the tiny checkpoint of tests/moe_checkpoints.py (random weights: a mechanics check, not quality).
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
from pathlib import Path

import torch

from synthetic import materialise, timed  # bench/ is on the path

# Shapes: the releases' own (core/models/memory_fit.py KNOWN_RELEASES, from their config.json files), and
# "small", LLaDA2's proportions (top 8 of many experts in groups, one shared, one dense layer) at a CPU's size.
RELEASE_SHAPES = {"llada2-mini": "LLaDA2.0-mini", "sdar-30b-a3b": "SDAR-30B-A3B-Chat"}


def configs(shape: str):
    """(MoE config, dense config of the same active width: top-k + shared experts of the expert width)."""
    from sharpen.core.models.memory_fit import KNOWN_RELEASES
    from sharpen.core.models.model import ModelConfig
    from sharpen.core.models.moe import MoESpec

    if shape in RELEASE_SHAPES:
        cfg = dataclasses.replace(KNOWN_RELEASES[RELEASE_SHAPES[shape]][1], max_seq_len=4096)
    elif shape == "small":
        moe = MoESpec(n_experts=64, top_k=8, expert_hidden=128, scoring="sigmoid", selection_bias=True, n_group=8, topk_group=4,
                      scaling=2.5, n_shared=1, first_dense=1, router_float32=True)
        cfg = ModelConfig(dim=512, n_layers=6, n_heads=8, n_kv_heads=2, head_dim=64, rotary_dim=32, ffn_hidden=1280, vocab_size=8192,
                          qk_norm=True, rope_theta=600000.0, max_seq_len=4096, moe=moe)
    else:
        raise SystemExit(f"unknown shape {shape!r}; known: {', '.join([*RELEASE_SHAPES, 'small'])}")
    active = (cfg.moe.top_k + cfg.moe.n_shared) * cfg.moe.expert_hidden
    return cfg, dataclasses.replace(cfg, moe=None, ffn_hidden=active)


def build(cfg, device: str, dtype: torch.dtype):
    """A random backbone of `cfg` on `device` (meta-built, allocated there), packed as loaded models are."""
    from sharpen.core.models.denoiser import Denoiser, ModelSpec
    from sharpen.core.models.model import Transformer, on_meta_device
    from sharpen.core.models.moe import MoEFeedForward
    from sharpen.core.tokenizer import train_byte_bpe

    torch.manual_seed(0)
    with on_meta_device():
        model = Transformer(cfg)
    model = materialise(model, device, dtype)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, MoEFeedForward):
                for name in ("router", "gate_up", "down"):
                    torch.nn.init.normal_(getattr(module, name), std=0.02)
                if module.expert_bias is not None:
                    module.expert_bias.normal_(std=0.01)
                if module.shared is not None:
                    for lin in (module.shared.w1, module.shared.w3, module.shared.w2):
                        lin.reset_parameters()
        model.pack()
    spec = ModelSpec(family="bench", mask_id=cfg.vocab_size - 1, pad_id=None, eos_id=None)
    return Denoiser(model, train_byte_bpe(["unused: the ids are synthetic"], 300), spec)


def weight_bytes(model) -> tuple[int, int]:
    """(bytes held, bytes a block step reads at the least: all but the experts no token chose)."""
    from sharpen.core.models.moe import MoEFeedForward

    held = sum(p.numel() * p.element_size() for p in {id(p): p for p in model.parameters()}.values())
    read = held
    for module in model.modules():
        if isinstance(module, MoEFeedForward) and module.last_routing is not None:
            used = module.last_routing.unique().numel()
            per_expert = (module.gate_up[0].numel() + module.down[0].numel()) * module.gate_up.element_size()
            read -= (module.spec.n_experts - used) * per_expert
    return held, read


def _time_passes(den, cfg, args) -> tuple[float, float]:
    """(open-block step, block write) seconds: the open block against a read-only cache of the
    prompt, and the pass that writes it."""
    from sharpen.core.models.kv_cache import Attend

    device = den.device
    total = args.context + args.block
    x = torch.randint(0, cfg.vocab_size - 1, (1, total), generator=torch.Generator().manual_seed(1)).to(device)
    cache = den.new_cache(1, total)
    prompt, block = torch.arange(args.context, device=device), torch.arange(args.context, total, device=device)
    with torch.inference_mode():
        den.logits(x, want=prompt[-1:], run=prompt, cache=cache)  # the prompt, once
        step_s, _ = timed(lambda: den.logits(x, want=block, run=block, cache=cache, attend=Attend(keys=args.context, write=False)) is None or 1,
                          device, args.repeats)
        write_s, _ = timed(lambda: den.logits(x, want=block[-1:], run=block, cache=cache, attend=Attend(keys=total)) is None or 1,
                           device, args.repeats)
    return step_s, write_s


def step_rows(shape: str, args, dtype) -> list[dict]:
    from sharpen.core.models.moe import MoEFeedForward

    moe_cfg, dense_cfg = configs(shape)
    rows = []

    def add(name: str, den, times: tuple[float, float]) -> None:
        held, read = weight_bytes(den.model)
        rows.append({"shape": shape, "model": name, "step_ms": 1000 * times[0], "write_ms": 1000 * times[1],
                     "held_gb": held / 1e9, "read_gb": read / 1e9})

    den = build(moe_cfg, args.device, dtype)
    layers = [m for m in den.model.modules() if isinstance(m, MoEFeedForward)]
    for layer in layers:
        layer.record_routing = True  # the experts the block chose: what a step reads
    add("moe", den, _time_passes(den, moe_cfg, args))
    for layer in layers:
        layer.grouped = False
    add("moe-looped", den, _time_passes(den, moe_cfg, args))
    del den, layers
    if args.device == "cuda":
        torch.cuda.empty_cache()
    den = build(dense_cfg, args.device, dtype)
    add("dense", den, _time_passes(den, dense_cfg, args))
    del den
    if args.device == "cuda":
        torch.cuda.empty_cache()
    return rows


def editing_rows() -> list[dict]:
    """Tokens per step of the LLaDA2.1 decode on the tiny checkpoint: editing off, quality, speed."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from moe_checkpoints import write_llada2

    from sharpen.core.canvas import Canvas
    from sharpen.core.models.loading import load_denoiser
    from sharpen.core.loops.block import block_denoise
    from sharpen.core.loops.editing import edit_denoise
    from sharpen.core.settings import Sampling
    from sharpen.core.spans import Span

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        den = load_denoiser(write_llada2(Path(tmp) / "llada2", version="2.1", head_scale=3.0))
        den.spec = dataclasses.replace(den.spec, block=dataclasses.replace(den.spec.block, size=8))
        mask = den.spec.mask_id
        prompt = torch.randint(0, 300, (16,), generator=torch.Generator().manual_seed(2)).tolist()
        canvas = Canvas(tuple(prompt) + (mask,) * 32, (range(16, 48),), (Span(0, 0),), (0, 0), mask)
        for mode in ("off", "quality", "speed"):
            run = block_denoise(den, canvas, Sampling()) if mode == "off" else edit_denoise(den, canvas, Sampling(), mode=mode)
            frames = list(run)
            commits, edits = frames[-1].edit_counts[0] if frames[-1].edit_counts else (32, 0)
            steps = frames[-1].step
            rows.append({"mode": mode, "steps": steps, "commits": commits, "edits": edits, "per_step": 32 / max(steps, 1)})
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--shapes", default="llada2-mini" if torch.cuda.is_available() else "small")
    parser.add_argument("--dtype", default=None, help="bfloat16 on CUDA, float32 on CPU by default")
    parser.add_argument("--context", type=int, default=512, help="cached prompt tokens before the open block")
    parser.add_argument("--block", type=int, default=32, help="tokens in the open block (LLaDA2: 32)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-editing", dest="editing", action="store_false", help="skip the tokens-per-step rows")
    args = parser.parse_args(argv)
    dtype = getattr(torch, args.dtype) if args.dtype else (torch.bfloat16 if args.device == "cuda" else torch.float32)
    print(f"device {args.device}, {dtype}, open block {args.block} tokens against {args.context} cached, best of {args.repeats}")
    print(f"{'shape':<12} {'model':<11} {'block step ms':>13} {'write ms':>9} {'weights GB':>10} {'per step GB':>11}")
    for shape in args.shapes.split(","):
        for r in step_rows(shape, args, dtype):
            print(f"{r['shape']:<12} {r['model']:<11} {r['step_ms']:>13.2f} {r['write_ms']:>9.2f} {r['held_gb']:>10.3f} {r['read_gb']:>11.3f}")
    if args.editing:
        print("\nLLaDA2.1 decode, tiny checkpoint (random weights), 32 slots in blocks of 8")
        print(f"{'editing':<8} {'steps':>6} {'commits':>8} {'edits':>6} {'slots per step':>15}")
        for r in editing_rows():
            print(f"{r['mode']:<8} {r['steps']:>6} {r['commits']:>8} {r['edits']:>6} {r['per_step']:>15.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
