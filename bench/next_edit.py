"""Next-edit prediction benchmark: scenario files through a model, scored as cursortab.nvim scores providers.

    python bench/next_edit.py                              # the embedded model (proves the mechanics)
    python bench/next_edit.py --model DIR --steps 16       # a checkpoint
    python bench/next_edit.py --backend http://127.0.0.1:8012   # a running `sharpen serve`
    python bench/next_edit.py --only py-rename --verbose   # a few scenarios, each answer shown

Each scenario (bench/next_edit_scenarios/*.json) is a file with `<|cursor|>` in it, the edit the
user just made (the file before and after it), and the expected file after the next edit, or
null where the right answer is to stay quiet. The prediction runs through
core.next_edit.predict, the path the editor, `sharpen serve` and `sharpen lsp` use.

Printed, per scenario kind and overall (cursortab.nvim's README defines them):
  deltaChrF   chrF (character 6-grams, beta 2) of the changed lines only, predicted vs expected,
              over the scenarios with an expected edit (0-100)
  show rate   share of those where an edit was proposed
  quiet rate  share of the stay-quiet scenarios where nothing was proposed
  score       deltaChrF / 100 x F1(show rate, quiet rate)
  latency     p50 / p90 seconds to the first draft and to the final answer
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

SCENARIOS = Path(__file__).resolve().parent / "next_edit_scenarios"
CURSOR = "<|cursor|>"


def char_ngrams(text: str, n: int) -> Counter:
    return Counter(text[i:i + n] for i in range(len(text) - n + 1)) if len(text) >= n else Counter()


def chrf(candidate: str, reference: str, order: int = 6, beta: float = 2.0) -> float:
    """chrF as cursortab computes it: F-beta per n-gram order, averaged over orders either side has."""
    scores = []
    for n in range(1, order + 1):
        c, r = char_ngrams(candidate, n), char_ngrams(reference, n)
        if not c and not r:
            continue
        match = sum((c & r).values())
        p = match / sum(c.values()) if c else 0.0
        rec = match / sum(r.values()) if r else 0.0
        scores.append(0.0 if p + rec == 0 else (1 + beta ** 2) * p * rec / (beta ** 2 * p + rec))
    return 100.0 if not scores else 100.0 * sum(scores) / len(scores)


def delta(before: list[str], after: list[str]) -> str:
    """The lines of `after` that differ from `before` (common head and tail lines dropped)."""
    head = 0
    while head < min(len(before), len(after)) and before[head] == after[head]:
        head += 1
    tail = 0
    while tail < min(len(before), len(after)) - head and before[-1 - tail] == after[-1 - tail]:
        tail += 1
    return "\n".join(after[head:len(after) - tail])


def delta_chrf(before: str, candidate: str, reference: str) -> float:
    b = before.split("\n")
    return chrf(delta(b, candidate.split("\n")), delta(b, reference.split("\n")))


def load_scenarios(only: str | None) -> list[dict]:
    out = []
    for path in sorted(SCENARIOS.glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        if only and only not in data["name"]:
            continue
        out.append(data)
    return out


def request_of(scenario: dict, sampling):
    from sharpen.core.changes import ChangeSet
    from sharpen.core.next_edit.history import EditHistory
    from sharpen.core.next_edit.request import NextEditRequest

    marked = scenario["text"]
    cursor = marked.index(CURSOR)
    text = marked.replace(CURSOR, "")
    history = EditHistory()
    for i, edit in enumerate(scenario["history"]):
        before, after = edit["before"], edit["after"]
        head = 0
        while head < min(len(before), len(after)) and before[head] == after[head]:
            head += 1
        tail = 0
        while tail < min(len(before), len(after)) - head and before[-1 - tail] == after[-1 - tail]:
            tail += 1
        history.record(edit["path"], before, ChangeSet.of([(head, len(before) - tail, after[head:len(after) - tail])]), at=float(i * 60))
    return NextEditRequest.around(scenario["file"], text, cursor, history.events(), sampling=sampling), text


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="checkpoint (default: the embedded model)")
    parser.add_argument("--backend", metavar="URL", help="run on this server instead (sharpen serve)")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--steps", type=int, default=8, help="denoising steps per run")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", help="scenarios whose name contains this")
    parser.add_argument("--verbose", action="store_true", help="print each scenario's answer")
    args = parser.parse_args(argv)

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from sharpen.core.next_edit.predict import NextEditDone, NextEditDraft, predict
    from sharpen.core.settings import ModelRequest, Sampling

    if args.backend:
        from sharpen.app.config import Remote
        from sharpen.app.remote import RemoteBackend

        backend = RemoteBackend.from_config(Remote(backend=args.backend))
    else:
        from sharpen.app.backend import LocalBackend

        backend = LocalBackend(ModelRequest(model=args.model, device=args.device))
    info = backend.load()
    scenarios = load_scenarios(args.only)
    if not scenarios:
        print("no scenario matches", file=sys.stderr)
        return 2
    # A loop without a step count (LLaDA2.1's editing decode ends each block when it settles) refuses --steps.
    reads = getattr(backend, "reads", lambda sampling: None)(Sampling())
    steps = args.steps if reads is None or "steps" in reads else None
    sampling = Sampling(steps=steps, seed=args.seed)
    rows = []
    for scenario in scenarios:
        request, text = request_of(scenario, sampling)
        started = time.perf_counter()
        first = final = None
        answer = done = None
        for event in predict(backend, request, info.instruct):
            if isinstance(event, NextEditDraft) and first is None:
                first = time.perf_counter() - started
            elif isinstance(event, NextEditDone):
                final, answer, done = time.perf_counter() - started, event.answer, event
        predicted = answer.changes.apply(text)
        expected = scenario["expected"]
        row = {"name": scenario["name"], "kind": scenario["kind"], "quiet_case": expected is None, "shown": not answer.quiet,
               "first": first if first is not None else final, "final": final}
        if expected is not None:
            row["dchrf"] = delta_chrf(text, predicted, expected)
        rows.append(row)
        if args.verbose:
            hunks = ", ".join(f"{h.start}-{h.end}->{h.text!r} ({h.confidence:.2f})" for h in answer.hunks) or "quiet"
            if done.drafts:  # hunks drafted from the edit history, and how many the model kept
                hunks += f"  [drafts kept {done.drafts_kept}/{done.drafts}]"
            print(f"{scenario['name']:32} {'quiet ' if expected is None else 'edit  '} {hunks}", file=sys.stderr)
    path = ("self-editing from the window's text" if info.edits else "instruct") if info.instruct or info.edits else "masked rewrite"
    steps_read = steps if steps is not None else "the loop's own"
    print(f"model: {info.name} ({info.family}, {info.device}, {path}), steps {steps_read}, seed {args.seed}, {len(rows)} scenarios")
    print(f"{'kind':12} {'n':>3} {'deltaChrF':>9} {'show':>6} {'quiet':>6} {'score':>6} {'first p50/p90 s':>16} {'final p50/p90 s':>16}")
    for kind in sorted({r["kind"] for r in rows}) + ["all"]:
        group = [r for r in rows if kind == "all" or r["kind"] == kind]
        edits = [r for r in group if not r["quiet_case"]]
        quiets = [r for r in group if r["quiet_case"]]
        dchrf = statistics.mean(r["dchrf"] for r in edits) if edits else float("nan")
        show = sum(r["shown"] for r in edits) / len(edits) if edits else float("nan")
        quiet = sum(not r["shown"] for r in quiets) / len(quiets) if quiets else float("nan")
        if edits and quiets:
            f1 = 0.0 if show + quiet == 0 else 2 * show * quiet / (show + quiet)
            score = f"{dchrf / 100 * f1:6.2f}"
        else:
            score = f"{'-':>6}"
        firsts, finals = [r["first"] for r in group], [r["final"] for r in group]

        def pct(v: float) -> str:
            return "-" if v != v else f"{v * 100:.0f}%"

        shown_dchrf = f"{dchrf:9.1f}" if edits else f"{'-':>9}"  # the stay-quiet kind has no edit to compare
        print(f"{kind:12} {len(group):3d} {shown_dchrf} {pct(show):>6} {pct(quiet):>6} {score} "
              f"{percentile(firsts, 0.5):7.3f}/{percentile(firsts, 0.9):<8.3f} {percentile(finals, 0.5):7.3f}/{percentile(finals, 0.9):<8.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
