"""HumanEval-Infilling pass@1 by how an infill's length is chosen: fixed, adaptive, syntax-filtered
candidates, and the oracle length, on one model.

    .venv/bin/python bench/syntax_eval.py --limit 25                  # the embedded model, 25 items per task
    .venv/bin/python bench/syntax_eval.py --limit 300,150 --threads 1  # the README table (single, multi)
    .venv/bin/python bench/syntax_eval.py --model DIR --limit 0       # every item (slow on a CPU)

Every method sees the same text: the problem's prompt and suffix with the middle removed and
the cursor between them, an insertion point, as in an editor where nothing says how long the
missing code is. Only `oracle` is told the middle's token count. Methods:

  fixed                 one run, the engine's default budget for an insertion point (pad trims it)
  adaptive              core/length.py: grow the budget while the span fills up with confident tokens
  candidates            core/candidates.py: exact lengths 4/6/8/11/16/23/32/45/64 as rows of one batch, ranked by
                        "the program still parses" (tree-sitter), then length-normalised confidence
  candidates-no-syntax  the same rows ranked by confidence only (what the parse check adds; taken
                        from the candidates run when both are asked for: greedy rows are identical)
  candidates-pad        the ladder as upper bounds (pad allowed inside a row), parse then confidence
  candidates+adaptive   the exact ladder, grown while the best row fills up
  oracle                one row of exactly the middle's token count (pad banned, as in the papers)

Each completed program (prompt + completion + suffix + tests) runs in a fresh interpreter with
a timeout (train/evaluate.py's runner). Items are an even spread over each task's file
(train/evaluate.py's `evenly`), read from ../shared/data/humaneval-infilling, never copied.
Prints one markdown table; --json keeps the per-item results.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import logging
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # train/ is a folder of the repo, not an installed package

from sharpen.core.candidates import CandidatePlan  # noqa: E402
from sharpen.core.canvas import DEFAULT_POINT_INFILL  # noqa: E402
from sharpen.core.engine import apply_edit  # noqa: E402
from sharpen.core.models.loading import load_denoiser  # noqa: E402
from sharpen.core.settings import Sampling  # noqa: E402
from sharpen.core.spans import Span  # noqa: E402
from speed import parses  # noqa: E402
from train.evaluate import HUMANEVAL_DIR, evenly, load_humaneval, passes  # noqa: E402

log = logging.getLogger("syntax_eval")

LADDER = CandidatePlan(language="python", exact=True)
METHODS = {  # name -> (run_edit options, what the table says about its length)
    "fixed": ({}, f"{DEFAULT_POINT_INFILL} slots, cut to the expected length, pad trimmed (the engine's default)"),
    "adaptive": ({"length": "adaptive"}, "16 slots, x2 while full, <= 3 runs"),
    "candidates": ({"candidates": LADDER}, "exactly 4..64 (9 rungs, x1.4) in one batch; parse, then confidence"),
    "candidates-no-syntax": ({"candidates": replace(LADDER, syntax=False)}, "the same 9 rows; confidence only"),
    "candidates-pad": ({"candidates": replace(LADDER, exact=False)}, "up to 4..64 (9 rungs), pad trimmed; parse, then confidence"),
    "candidates+adaptive": ({"candidates": LADDER, "length": "adaptive"}, "exact ladder around 16, grown"),
    "oracle": ({"candidates": CandidatePlan(scales=(1.0,), exact=True, syntax=False)}, "exactly the middle's token count"),
}
# The span-boundary rule (core/engine.py's leading_blank/narrowed: when the text before a span
# ends in blanks, the span's text starts at its first non-blank) turned off: what the model wrote,
# its own leading blanks included. "Before" for the fix, from the same engine in the same run.
for _name in ("fixed", "candidates"):
    METHODS[f"{_name}-unnarrowed"] = (METHODS[_name][0], METHODS[_name][1] + "; leading blanks kept")
DEFAULT_METHODS = "fixed,adaptive,candidates,candidates-no-syntax,oracle"


def complete(denoiser, problem: dict, method: str, settings: Sampling, context: int, runs: dict) -> str:
    """The method's infill for one problem's missing middle (`runs`: this problem's results so far)."""
    if method == "candidates-no-syntax" and "candidates" in runs:
        # The same batch as `candidates` (greedy, so identical rows), ranked by confidence alone:
        # rank() with syntax=False orders by (empty, -confidence, row); no second run needed.
        best = min(runs["candidates"].candidates, key=lambda c: (not any(c.texts), -c.confidence, c.row))
        return best.texts[0]
    text = problem["prompt"] + problem["suffix"]
    point = len(problem["prompt"])
    options, _ = METHODS[method]
    max_tokens = None
    if method == "oracle":
        max_tokens = max(1, len(denoiser.tokenizer.encode(problem["canonical_solution"])))
    with unnarrowed(method.endswith("-unnarrowed")):
        result = apply_edit(denoiser, text, [Span(point, point, max_tokens=max_tokens)], settings, context_tokens=context, **options)
    runs[method] = result
    return result.spans[0].text


@contextlib.contextmanager
def unnarrowed(active: bool):
    """The engine without its span-boundary rule, for this bench's "before" rows only."""
    if not active:
        yield
        return
    from sharpen.core import engine

    kept = engine.leading_blank
    engine.leading_blank = lambda text, span, floor: 0
    try:
        yield
    finally:
        engine.leading_blank = kept


def run_task(denoiser, kind: str, methods: list[str], limit: int | None, settings: Sampling, context: int) -> dict:
    problems = evenly(load_humaneval(kind), limit)
    out = {m: {"pass": 0, "parse": 0, "seconds": 0.0, "items": []} for m in methods}
    started = time.perf_counter()
    for i, problem in enumerate(problems):
        tested: dict[str, bool] = {}  # the same completion is run once
        runs: dict = {}
        for method in methods:
            t0 = time.perf_counter()
            completion = complete(denoiser, problem, method, settings, context, runs)
            out[method]["seconds"] += time.perf_counter() - t0
            if completion not in tested:
                tested[completion] = passes(problem, completion)
            ok = tested[completion]
            out[method]["pass"] += ok
            out[method]["parse"] += parses(problem["prompt"] + completion + problem["suffix"])
            out[method]["items"].append({"task_id": problem["task_id"], "completion": completion, "passed": ok})
        if (i + 1) % 5 == 0 or i + 1 == len(problems):
            log.info("%s %d/%d %.0fs %s", kind, i + 1, len(problems), time.perf_counter() - started,
                     {m: out[m]["pass"] for m in methods})
    for m in methods:
        out[m]["n"] = len(problems)
    return out


def table(results: dict, methods: list[str], model: str) -> str:
    kinds = [k for k in ("single", "multi", "random") if k in results]
    head = "| method | length | " + " | ".join(f"{k}-line pass@1 (n={results[k][methods[0]]['n']})" for k in kinds)
    head += " | " + " | ".join(f"{k}-line parses" for k in kinds) + " | s/item |"
    rows = [f"<!-- model: {model} -->", head, "|" + "---|" * (2 + 2 * len(kinds) + 1)]
    for m in methods:
        cells = [f"{results[k][m]['pass'] / results[k][m]['n']:.3f}" for k in kinds]
        cells += [f"{results[k][m]['parse'] / results[k][m]['n']:.2f}" for k in kinds]
        seconds = sum(results[k][m]["seconds"] for k in kinds) / sum(results[k][m]["n"] for k in kinds)
        shared = m == "candidates-no-syntax" and "candidates" in methods  # ranked from the candidates run
        rows.append(f"| {m} | {METHODS[m][1]} | " + " | ".join(cells) + (" | (same run) |" if shared else f" | {seconds:.2f} |"))
    return "\n".join(rows)


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=None, help="checkpoint directory (default: the embedded model)")
    p.add_argument("--limit", default="25", help="items per task, evenly spread (0: all); or one per task, e.g. 300,150")
    p.add_argument("--tasks", default="single,multi", help="single, multi, random (random spans: the span-boundary rule's test)")
    p.add_argument("--methods", default=DEFAULT_METHODS, help=f"comma list of: {', '.join(METHODS)}")
    p.add_argument("--context", type=int, default=1024, help="context tokens around the span")
    p.add_argument("--steps", type=int, default=None, help="cap denoising steps per run (default: the app's, up to one per slot)")
    p.add_argument("--threshold", type=float, default=Sampling.threshold, help="parallel-commit confidence (default: the app's)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", type=Path, default=None, help="also write per-item results here")
    args = p.parse_args(argv)
    if not HUMANEVAL_DIR.is_dir():
        p.error(f"HumanEval-Infilling data not found: {HUMANEVAL_DIR} (the shared folder beside the checkout)")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S", stream=sys.stderr)
    methods = args.methods.split(",")
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        p.error(f"unknown methods {unknown}; known: {', '.join(METHODS)}")
    torch.set_num_threads(args.threads)
    denoiser = load_denoiser(args.model)
    settings = Sampling(steps=args.steps, threshold=args.threshold)  # else the app's defaults: greedy, confidence order, threshold commits, dual cache
    kinds = args.tasks.split(",")
    limits = [int(v) for v in args.limit.split(",")]
    if len(limits) not in (1, len(kinds)):
        p.error(f"--limit takes one number or one per task ({len(kinds)})")
    results = {}
    for kind, limit in zip(kinds, limits * len(kinds) if len(limits) == 1 else limits):
        results[kind] = run_task(denoiser, kind, methods, limit or None, settings, args.context)
    model = f"{denoiser.spec.name or args.model or 'embedded'}"
    print(table(results, methods, model))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    return results


if __name__ == "__main__":
    main()
