"""Evaluate a sharpen checkpoint on held-out files and HumanEval-Infilling, beside baselines.

    python -m train.evaluate                         # the embedded model, full run
    python -m train.evaluate --model build/model --limit 100

Measures
- masked-token accuracy on held-out windows (corpus files never trained on) at mask
  ratios 0.15 / 0.5 / 0.9, against a unigram baseline (always the most frequent token);
- line-infill exact match on held-out files: one whole line removed, infilled through the
  real engine (core.engine.apply_edit) at oracle length (max_tokens = the line's token
  count) and at the model's own length (a fixed slot budget, cut to the model's expected
  length and pad trimmed, as the engine does by default);
- HumanEval-Infilling single-line and multi-line pass@1 (greedy), each candidate program
  run with its tests in a subprocess with a timeout, at oracle and own length.
Baselines: the empty infill (delete the span) and the most frequent training line
(re-indented to the line above): what a model must beat for its numbers to mean anything.
"""
from __future__ import annotations

import argparse
import collections
import difflib
import gzip
import hashlib
import json
import logging
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from sharpen.core.engine import apply_edit
from sharpen.core.models.loading import load_denoiser
from sharpen.core.settings import Sampling
from sharpen.core.spans import Span

from .data import read_jsonl, token_stream

log = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parents[1]
HUMANEVAL_DIR = REPO.parent / "shared" / "data" / "humaneval-infilling"
OWN_BUDGET = {"line": 32, "single": 32, "multi": 96}  # slots when the model picks the length


def evenly(items: list, limit: int | None) -> list:
    """A deterministic subset spread over the whole list (not just its head)."""
    if limit is None or limit >= len(items):
        return items
    return [items[i * len(items) // limit] for i in range(limit)]


# ---- masked-token accuracy ---------------------------------------------------------------

@torch.no_grad()
def masked_accuracy(denoiser, texts: list[str], ratios=(0.15, 0.5, 0.9), seq_len: int = 256, windows: int = 64, seed: int = 0) -> dict:
    tok, spec = denoiser.tokenizer, denoiser.spec
    stream = token_stream(tok, texts, spec.eos_id).long()
    seq_len = min(seq_len, denoiser.max_len)
    starts = evenly(list(range(0, len(stream) - seq_len, seq_len)), windows)
    batch = torch.stack([stream[s:s + seq_len] for s in starts])  # [W, L]
    generator = torch.Generator().manual_seed(seed)
    out = {}
    for ratio in ratios:
        masked = torch.rand(batch.shape, generator=generator) < ratio  # [W, L]
        noisy = batch.masked_fill(masked, spec.mask_id)
        hits = total = 0
        for i in range(0, len(batch), 8):
            logits = denoiser.logits(noisy[i:i + 8].to(denoiser.device)).cpu()  # [b, L, V]
            m = masked[i:i + 8]
            hits += (logits.argmax(-1)[m] == batch[i:i + 8][m]).sum().item()
            total += m.sum().item()
        out[ratio] = hits / max(1, total)
    return out


def unigram_accuracy(denoiser, train_stream: torch.Tensor, texts: list[str]) -> float:
    """Accuracy of always guessing the training corpus's most frequent token."""
    top = torch.bincount(train_stream.long()).argmax().item()
    held = token_stream(denoiser.tokenizer, texts, denoiser.spec.eos_id)
    return (held == top).float().mean().item()


# ---- infill through the engine -----------------------------------------------------------

def infill(denoiser, text: str, start: int, end: int, max_tokens: int, settings: Sampling) -> str:
    span = Span(start, end, "infill", max_tokens=max(1, min(max_tokens, denoiser.max_len // 2)))
    return apply_edit(denoiser, text, [span], settings).spans[0].text


def heldout_lines(texts: list[str], n: int, seed: int = 0) -> list[tuple[str, int, int]]:
    """(text, start, end) of n whole non-blank lines (newline included) from held-out files."""
    rng = random.Random(seed)
    out = []
    while len(out) < n:
        text = texts[rng.randrange(len(texts))]
        starts = [0] + [i + 1 for i, ch in enumerate(text) if ch == "\n"][:-1]
        start = starts[rng.randrange(len(starts))]
        end = text.find("\n", start) + 1 or len(text)
        if len(text[start:end].strip()) >= 4 and start > 0:
            out.append((text, start, end))
    return out


def most_frequent_line(train_texts: list[str]) -> str:
    counts = collections.Counter(line.strip() for text in train_texts for line in text.splitlines() if len(line.strip()) > 3)
    return counts.most_common(1)[0][0]


def edit_similarity(a: str, b: str) -> float:
    """Character-level similarity in [0, 1] (difflib ratio), as CodeXGLUE's edit similarity."""
    return difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()


def previous_line(text: str, start: int) -> str:
    """Baseline: repeat the nearest non-blank line above the span."""
    above = [l for l in text[:start].splitlines() if l.strip()]
    return (above[-1] if above else "") + "\n"


def reindent(line: str, text: str, start: int) -> str:
    """The baseline line, indented like the nearest non-blank line above `start`."""
    above = [l for l in text[:start].splitlines() if l.strip()]
    indent = (len(above[-1]) - len(above[-1].lstrip())) if above else 0
    return " " * indent + line + "\n"


def line_infill(denoiser, texts: list[str], n: int, frequent: str, settings: Sampling) -> dict:
    """Exact match (em_*) and edit similarity (es_*) of infilled held-out lines."""
    cases = heldout_lines(texts, n)
    scores = collections.Counter()
    for i, (text, start, end) in enumerate(cases):
        if i and i % 50 == 0:
            log.info("line infill %d/%d", i, len(cases))
        truth = text[start:end]
        candidates = {
            "oracle": infill(denoiser, text, start, end, len(denoiser.tokenizer.encode(truth)), settings),
            "own": infill(denoiser, text, start, end, OWN_BUDGET["line"], settings),
            "baseline_line": reindent(frequent, text, start),
            "baseline_previous": previous_line(text, start),
        }
        for name, candidate in candidates.items():
            scores[f"em_{name}"] += candidate == truth
            scores[f"es_{name}"] += edit_similarity(candidate, truth)
    return {k: v / len(cases) for k, v in scores.items()} | {"n": len(cases)}


# ---- HumanEval-Infilling -----------------------------------------------------------------

def load_humaneval(kind: str, data_dir: Path = HUMANEVAL_DIR) -> list[dict]:
    name = {"single": "HumanEval-SingleLineInfilling", "multi": "HumanEval-MultiLineInfilling",
            "random": "HumanEval-RandomSpanInfilling"}[kind]  # random spans: a third start mid-line, after blanks
    with gzip.open(data_dir / f"{name}.jsonl.gz", "rt", encoding="utf-8") as handle:
        return [json.loads(line) for line in handle]


def passes(problem: dict, completion: str, timeout: float = 5.0) -> bool:
    """Run prompt + completion + suffix with the problem's tests in a fresh interpreter."""
    program = problem["prompt"] + completion + problem["suffix"] + "\n" + problem["test"] + f"\ncheck({problem['entry_point']})\n"
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "candidate.py"
        path.write_text(program, encoding="utf-8")
        try:
            result = subprocess.run([sys.executable, str(path)], cwd=tmp, capture_output=True, timeout=timeout,
                                    env={"PATH": os.environ.get("PATH", ""), "PYTHONHASHSEED": "0"})
        except subprocess.TimeoutExpired:
            return False
    return result.returncode == 0


def humaneval(denoiser, kind: str, limit: int | None, frequent: str, settings: Sampling) -> dict:
    problems = evenly(load_humaneval(kind), limit)
    scores = collections.Counter()
    started = time.perf_counter()
    for i, p in enumerate(problems):
        text = p["prompt"] + p["canonical_solution"] + p["suffix"]
        start, end = len(p["prompt"]), len(p["prompt"]) + len(p["canonical_solution"])
        oracle = len(denoiser.tokenizer.encode(p["canonical_solution"]))
        oracle_text = infill(denoiser, text, start, end, oracle, settings)
        own_text = infill(denoiser, text, start, end, OWN_BUDGET[kind], settings)
        oracle_pass = passes(p, oracle_text)
        scores["oracle"] += oracle_pass
        scores["own"] += oracle_pass if own_text == oracle_text else passes(p, own_text)
        scores["oracle_exact"] += oracle_text == p["canonical_solution"]
        scores["es_oracle"] += edit_similarity(oracle_text, p["canonical_solution"])
        scores["es_baseline_line"] += edit_similarity(reindent(frequent, text, start), p["canonical_solution"])
        scores["baseline_empty"] += passes(p, "")
        scores["baseline_line"] += passes(p, reindent(frequent, text, start))
        if (i + 1) % 25 == 0:
            log.info("%s %d/%d %.0fs %s", kind, i + 1, len(problems), time.perf_counter() - started, dict(scores))
    return {k: v / len(problems) for k, v in scores.items()} | {"n": len(problems)}


# ---- report ------------------------------------------------------------------------------

def heldout_fingerprint(rows: list[dict]) -> str:
    """SHA-256 over the held-out files' paths and texts: equal fingerprints, comparable numbers.

    The corpus is rebuilt from the interpreter and the installed packages, so another
    machine (or a newer package) can hold other files; the card names the fingerprint.
    """
    digest = hashlib.sha256()
    for row in sorted(rows, key=lambda r: r["path"]):
        digest.update(row["path"].encode() + b"\0" + hashlib.sha256(row["text"].encode()).digest())
    return digest.hexdigest()[:16]


def table(results: dict) -> str:
    rows = [f"held-out set: {results['heldout_files']} files, fingerprint {results['heldout_fingerprint']}", "",
            "| measure | model | baselines |", "|---|---|---|"]
    acc = results["masked_accuracy"]
    for ratio, value in acc["model"].items():
        rows.append(f"| held-out masked-token accuracy, mask ratio {ratio} | {value:.3f} | {acc['unigram']:.3f} (unigram) |")
    line = results["line_infill"]
    base = lambda m: f"{line[m + '_baseline_line']:.3f} (most frequent line) / {line[m + '_baseline_previous']:.3f} (previous line)"
    for metric, label in (("em", "exact match"), ("es", "edit similarity")):
        rows.append(f"| held-out line infill {label}, oracle length (n={line['n']}) | {line[metric + '_oracle']:.3f} | {base(metric)} |")
        rows.append(f"| held-out line infill {label}, own length ({OWN_BUDGET['line']} slots, expected-length cut) | {line[metric + '_own']:.3f} | |")
    for kind in ("single", "multi"):
        if kind not in results:
            continue
        r = results[kind]
        label = f"HumanEval-Infilling {kind}-line"
        rows.append(f"| {label} pass@1, oracle length (n={r['n']}) | {r['oracle']:.3f} | {r['baseline_empty']:.3f} (empty) / {r['baseline_line']:.3f} (most frequent line) |")
        rows.append(f"| {label} pass@1, own length ({OWN_BUDGET[kind]} slots, expected-length cut) | {r['own']:.3f} | |")
        rows.append(f"| {label} exact match, oracle length | {r['oracle_exact']:.3f} | |")
        rows.append(f"| {label} edit similarity, oracle length | {r['es_oracle']:.3f} | {r['es_baseline_line']:.3f} (most frequent line) |")
    return "\n".join(rows)


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description="Evaluate a sharpen checkpoint (default: the embedded model).")
    p.add_argument("--model", type=Path, default=None, help="checkpoint directory (default: core/embedded)")
    p.add_argument("--corpus", type=Path, default=REPO / "build" / "corpus", help="built by train.corpus")
    p.add_argument("--limit", type=int, default=None, help="at most N items per HumanEval task (evenly spread)")
    p.add_argument("--lines", type=int, default=300, help="held-out line-infill cases")
    p.add_argument("--tasks", default="single,multi", help="HumanEval tasks: single, multi, or none")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S", stream=sys.stderr)
    torch.set_num_threads(args.threads)
    denoiser = load_denoiser(args.model)
    settings = Sampling()  # the app's defaults: greedy, confidence order, threshold commits
    if not (args.corpus / "heldout.jsonl").exists():
        sys.exit(f"evaluate: no corpus in {args.corpus}; build it first: python -m train.corpus")
    train_texts = [r["text"] for r in read_jsonl(args.corpus / "train.jsonl")]
    held_rows = read_jsonl(args.corpus / "heldout.jsonl")
    held_texts = [r["text"] for r in held_rows]
    frequent = most_frequent_line(train_texts)
    log.info("most frequent training line (baseline): %r", frequent)

    results: dict = {"model": str(args.model or "core/embedded"), "limit": args.limit,
                     "heldout_files": len(held_rows), "heldout_fingerprint": heldout_fingerprint(held_rows)}
    log.info("held-out set: %d files, fingerprint %s", len(held_rows), results["heldout_fingerprint"])
    train_stream = token_stream(denoiser.tokenizer, train_texts[::20], denoiser.spec.eos_id)  # a 5% sample is plenty for a mode
    results["masked_accuracy"] = {"model": masked_accuracy(denoiser, held_texts), "unigram": unigram_accuracy(denoiser, train_stream, held_texts)}
    log.info("masked accuracy: %s", results["masked_accuracy"])
    results["line_infill"] = line_infill(denoiser, held_texts, args.lines, frequent, settings)
    log.info("line infill: %s", results["line_infill"])
    for kind in [k for k in args.tasks.split(",") if k in ("single", "multi")]:
        results[kind] = humaneval(denoiser, kind, args.limit, frequent, settings)
        log.info("%s: %s", kind, results[kind])
    print(table(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    return results


if __name__ == "__main__":
    main()
