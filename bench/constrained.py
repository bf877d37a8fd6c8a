"""Controllable generation (core/constraints/): satisfaction with and without steering, what the
steering costs per step, and what a grammar changes on HumanEval single-line infilling.

    .venv/bin/python bench/constrained.py                          # the embedded model, 20 seeds per kind, 40 HumanEval items
    .venv/bin/python bench/constrained.py --seeds 5 --humaneval 0  # quick: no HumanEval
    .venv/bin/python bench/constrained.py --model DIR --data ../shared/data/humaneval-infilling

Per constraint kind (patterns from real use: a date, a version, an identifier, a SQL fragment,
JSON schemas of real configuration files (package.json, tsconfig.json), a small expression
grammar), each seed infills the same span twice, with the constraint and without it (same seed,
same sampling), and counts how often the span's text matches. The steering's cost is timed
inside the loop (Steering.prepare, constrain and settle, wrapped) and set against the whole
run's time per step.

HumanEval-Infilling (single line; read from the shared data folder, never copied): the middle
line is removed and infilled at an insertion point, without and with a grammar of one line of
Python (indentation, words, operators, closed strings, brackets that balance, two levels deep,
then the line break); the completed program is parsed (ast) and run with its tests.
"""
from __future__ import annotations

import argparse
import ast
import json
import re
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sharpen.core.constraints import Constraint  # noqa: E402
from sharpen.core.constraints import steering as steering_module  # noqa: E402
from sharpen.core.engine import apply_edit  # noqa: E402
from sharpen.core.models.loading import embedded_model_path, load_denoiser  # noqa: E402
from sharpen.core.settings import Sampling  # noqa: E402
from sharpen.core.spans import Span  # noqa: E402
from train.evaluate import HUMANEVAL_DIR, evenly, load_humaneval, passes  # noqa: E402

EXPRESSION_GRAMMAR = r"""
start: expr
?expr: term (OP term)*
?term: NUMBER | NAME | NAME "(" expr ")" | "(" expr ")"
OP: " + " | " - " | " * " | " / "
%import common.INT -> NUMBER
%import common.CNAME -> NAME
"""

PYTHON_LINE_GRAMMAR = r"""
// One line of Python: indentation, then words, operators, closed strings and balanced brackets.
start: INDENT item+ NL
?item: WORD | OP | STRING | SP | "(" item* ")" | "[" item* "]" | "{" item* "}"
INDENT: /[ ]*/
SP: " "
NL: "\n"
WORD: /[A-Za-z0-9_.]+/
OP: /[-+*\/%=<>!&|^~:,@]+/
STRING: /"[^"\n\\]*"/ | /'[^'\n\\]*'/
"""

PACKAGE_JSON = {"type": "object", "properties": {
    "name": {"type": "string", "pattern": "^[a-z][a-z0-9-]{0,20}$"},
    "version": {"type": "string", "pattern": "^[0-9]+\\.[0-9]+\\.[0-9]+$"},
    "private": {"type": "boolean"}}, "required": ["name", "version", "private"], "additionalProperties": False}
TSCONFIG = {"type": "object", "properties": {"compilerOptions": {"type": "object", "properties": {
    "target": {"enum": ["es2017", "es2020", "esnext"]}, "strict": {"type": "boolean"}},
    "required": ["target", "strict"], "additionalProperties": False}}, "required": ["compilerOptions"], "additionalProperties": False}

# kind: (text with a "|" where the span goes, slots, constraint)
KINDS = {
    "date": ('released = "|"\n', 12, Constraint(regex=r"[0-9]{4}-[0-9]{2}-[0-9]{2}")),
    "version": ('__version__ = "|"\n', 10, Constraint(regex=r"[0-9]+\.[0-9]+\.[0-9]+")),
    "identifier": ("def |(items):\n    return sorted(items)\n", 8, Constraint(regex=r"[a-z_][a-z0-9_]*")),
    "SQL fragment": ('rows = db.execute("|")\n', 24, Constraint(regex=r"SELECT [a-z_]+(, [a-z_]+)* FROM [a-z_]+( WHERE [a-z_]+ = [0-9]+)?")),
    "package.json": ("package = |\n", 40, Constraint(json_schema=json.dumps(PACKAGE_JSON))),
    "tsconfig.json": ("config = |\n", 40, Constraint(json_schema=json.dumps(TSCONFIG))),
    "expression grammar": ("total = |\n", 16, Constraint(grammar=EXPRESSION_GRAMMAR)),
    "words (require return, forbid print)": ("def f(x):\n|\n", 16, Constraint(require=("return",), forbid=("print",))),
}


class SteeringClock:
    """Seconds spent inside Steering's methods (the only per-step cost steering adds)."""

    def __init__(self) -> None:
        self.seconds = 0.0

    @contextmanager
    def wrapped(self):
        cls = steering_module.Steering
        originals = {name: getattr(cls, name) for name in ("prepare", "constrain", "settle")}

        def timed(fn):
            def inner(*args, **kwargs):
                started = time.perf_counter()
                try:
                    return fn(*args, **kwargs)
                finally:
                    self.seconds += time.perf_counter() - started
            return inner

        for name, fn in originals.items():
            setattr(cls, name, timed(fn))
        try:
            yield self
        finally:
            for name, fn in originals.items():
                setattr(cls, name, fn)


def matches(constraint: Constraint, text: str) -> bool:
    pattern = constraint.pattern()
    if pattern is not None and not re.fullmatch(pattern, text):
        return False
    return all(w in text for w in constraint.require) and not any(w in text for w in constraint.forbid)


def run_kind(denoiser, template: str, slots: int, constraint: Constraint, seeds: int, temperature: float) -> dict:
    at = template.index("|")
    text = template.replace("|", "", 1)
    out = {"free": 0, "steered": 0, "steps": 0, "seconds": 0.0, "steer_seconds": 0.0, "free_seconds": 0.0, "free_steps": 0}
    apply_edit(denoiser, text, [Span(at, at, max_tokens=slots, constraint=constraint)], Sampling(seed=0, steps=1))  # builds (caches) the automaton
    for seed in range(seeds):
        settings = Sampling(seed=seed, temperature=temperature)
        started = time.perf_counter()
        free = apply_edit(denoiser, text, [Span(at, at, max_tokens=slots)], settings)
        out["free_seconds"] += time.perf_counter() - started
        out["free_steps"] += free.steps
        clock = SteeringClock()
        with clock.wrapped():
            started = time.perf_counter()
            steered = apply_edit(denoiser, text, [Span(at, at, max_tokens=slots, constraint=constraint)], settings)
            out["seconds"] += time.perf_counter() - started
        out["steer_seconds"] += clock.seconds
        out["steps"] += steered.steps
        out["free"] += matches(constraint, free.spans[0].text)
        out["steered"] += matches(constraint, steered.spans[0].text)
    return out


def parses(program: str) -> bool:
    try:
        ast.parse(program)
        return True
    except (SyntaxError, ValueError):
        return False


def run_humaneval(denoiser, limit: int, data: Path) -> dict:
    problems = evenly(load_humaneval("single", data), limit)
    constraint = Constraint(grammar=PYTHON_LINE_GRAMMAR)
    scores = {"free_parse": 0, "steered_parse": 0, "free_pass": 0, "steered_pass": 0, "line_ok": 0, "n": len(problems)}
    for p in problems:
        text = p["prompt"] + p["suffix"]
        at = len(p["prompt"])
        scores["line_ok"] += matches(constraint, p["canonical_solution"])  # how often the grammar admits the true line
        for name, c in (("free", None), ("steered", constraint)):
            completion = apply_edit(denoiser, text, [Span(at, at, constraint=c)], Sampling()).spans[0].text
            scores[f"{name}_parse"] += parses(p["prompt"] + completion + p["suffix"])
            scores[f"{name}_pass"] += passes(p, completion)
    return scores


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=None, help="checkpoint directory (default: the embedded model)")
    parser.add_argument("--seeds", type=int, default=20, help="seeds per constraint kind")
    parser.add_argument("--temperature", type=float, default=0.8)
    parser.add_argument("--humaneval", type=int, default=40, help="HumanEval single-line items, evenly spread (0: skip)")
    parser.add_argument("--data", type=Path, default=HUMANEVAL_DIR, help="the humaneval-infilling folder")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    denoiser = load_denoiser(args.model or embedded_model_path())
    print(f"model {denoiser.spec.name or denoiser.spec.family}, {args.seeds} seeds per kind, temperature {args.temperature}, "
          f"{args.threads} thread(s), {torch.__version__}\n")
    print("| constraint | satisfied, free | satisfied, steered | step, free (ms) | step, steered (ms) | steering per step (ms) | steering share of a step |")
    print("|---|---|---|---|---|---|---|")
    for kind, (template, slots, constraint) in KINDS.items():
        r = run_kind(denoiser, template, slots, constraint, args.seeds, args.temperature)
        n = args.seeds
        free_step = 1e3 * r["free_seconds"] / max(r["free_steps"], 1)
        step = 1e3 * r["seconds"] / max(r["steps"], 1)
        steer = 1e3 * r["steer_seconds"] / max(r["steps"], 1)
        print(f"| {kind} | {r['free']}/{n} | {r['steered']}/{n} | {free_step:.2f} | {step:.2f} | {steer:.2f} | {steer / step:.0%} |", flush=True)
    if args.humaneval:
        h = run_humaneval(denoiser, args.humaneval, args.data)
        n = h["n"]
        print(f"\nHumanEval single-line infilling, {n} items, greedy, grammar: one line of Python "
              f"(admits {h['line_ok']}/{n} of the true lines)\n")
        print("| | program parses | tests pass |\n|---|---|---|")
        print(f"| free | {h['free_parse']}/{n} | {h['free_pass']}/{n} |")
        print(f"| steered by the grammar | {h['steered_parse']}/{n} | {h['steered_pass']}/{n} |")


if __name__ == "__main__":
    main()
