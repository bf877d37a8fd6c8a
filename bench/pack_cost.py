"""What packing costs against running the same passes one after another, on one model.

    python bench/pack_cost.py                                   # Qwen2-0.5B shape, random weights, float32
    python bench/pack_cost.py --shape embedded --repeats 5          # the embedded model

For each canvas length and run count: `runs` whole-canvas passes (each writing its own KV cache,
32 slot rows projected to the vocabulary, as a masked-loop refresh does) run one after another
(`Transformer.scores` each), then packed as one pass (`core.batch.packed_scores`), and the same for
cached steps (8 rows each against a cache of the canvas). Each cell is the best of --repeats of
the process's CPU seconds and wall seconds; "packed / alone" under 1 means the pack costs less
than the passes one after another. core/batch.py sets its packing policy from these numbers.
Prints a table; asserts nothing.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))


def best(fn, repeats: int) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of fn, the best of `repeats` after one warm-up."""
    fn()
    cpu = wall = float("inf")
    for _ in range(repeats):
        c, w = time.process_time(), time.perf_counter()
        fn()
        cpu, wall = min(cpu, time.process_time() - c), min(wall, time.perf_counter() - w)
    return cpu, wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="qwen2-0.5b", help="a bench/synthetic.py shape, or embedded (the embedded model)")
    parser.add_argument("--rows", default="100,200,300", help="canvas lengths")
    parser.add_argument("--runs", default="2,4", help="passes packed")
    parser.add_argument("--slots", type=int, default=32, help="rows projected to the vocabulary per canvas")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()

    from synthetic import build

    from sharpen.core.batch import Pass, packed_scores

    if args.shape == "embedded":
        from sharpen.core.models.loading import load_denoiser

        model = load_denoiser().model
    else:
        model = build(args.shape, "cpu", torch.float32).model
    vocab = model.cfg.vocab_size - 1
    print(f"# {args.shape}, {torch.get_num_threads()} torch threads; best of {args.repeats}; seconds")
    print(f"{'kind':>6} {'rows':>5} {'runs':>4} {'alone cpu':>9} {'packed cpu':>10} {'ratio':>6} {'alone wall':>10} {'packed wall':>11} {'ratio':>6}")
    for T in (int(r) for r in args.rows.split(",")):
        for runs in (int(n) for n in args.runs.split(",")):
            g = torch.Generator().manual_seed(T * 100 + runs)
            canvases = [torch.randint(0, vocab, (1, T), generator=g) for _ in range(runs)]  # [1, T] each
            slots = torch.arange(T // 3, T // 3 + args.slots)  # [W]
            whole = [Pass(ids, torch.arange(T), model.new_cache(1, T), slots) for ids in canvases]
            block = torch.arange(T // 3, T // 3 + 8)  # [8] a cached step's rows
            steps = [Pass(w.ids[:, block], block, w.cache, torch.arange(8)) for w in whole]  # against each canvas's cache
            for kind, passes in (("canvas", whole), ("step", steps)):
                def alone():
                    with torch.inference_mode():
                        for p in passes:
                            model.scores(p.ids, p.positions, p.cache, p.rows, p.attend)

                def packed():
                    with torch.inference_mode():
                        packed_scores(model, passes)

                (ac, aw), (pc, pw) = best(alone, args.repeats), best(packed, args.repeats)
                rows = T if kind == "canvas" else 8
                print(f"{kind:>6} {rows:>5} {runs:>4} {ac:>9.3f} {pc:>10.3f} {pc / ac:>6.2f} {aw:>10.3f} {pw:>11.3f} {pw / aw:>6.2f}")
                sys.stdout.flush()


if __name__ == "__main__":
    main()
