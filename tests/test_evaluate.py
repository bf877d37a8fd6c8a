"""train/evaluate.py: the test runner, the baselines, the held-out fingerprint, an end-to-end run."""
from __future__ import annotations

import json

import pytest

from train import evaluate as E

PROBLEM = {
    "prompt": "def double(x):\n",
    "canonical_solution": "    return 2 * x\n",
    "suffix": "",
    "test": "def check(f):\n    assert f(3) == 6\n",
    "entry_point": "double",
}


def test_the_runner_passes_right_code_and_fails_wrong_broken_and_endless_code():
    assert E.passes(PROBLEM, PROBLEM["canonical_solution"])
    assert not E.passes(PROBLEM, "    return x\n")  # wrong answer
    assert not E.passes(PROBLEM, "    return (\n")  # does not parse
    assert not E.passes(PROBLEM, "    while True: pass\n", timeout=1.0)  # killed by the timeout


@pytest.mark.skipif(not E.HUMANEVAL_DIR.exists(), reason="shared HumanEval-Infilling data not present (../shared)")
def test_the_real_humaneval_solutions_pass():
    # The shared data and the runner agree: canonical middles pass, empty ones mostly do not.
    problems = E.evenly(E.load_humaneval("single"), 6)
    assert all(E.passes(p, p["canonical_solution"]) for p in problems)


def test_baselines_and_similarity():
    text = "class A:\n    def f(self):\n        return 1\n\n    x = 2\n"
    start = text.index("        return")
    assert E.previous_line(text, start) == "    def f(self):\n"
    assert E.reindent("else:", text, start) == "    else:\n"  # indented like the line above
    assert E.most_frequent_line(["else:\n  pass\nelse:\n", "else:\n"]) == "else:"
    assert E.edit_similarity("abc", "abc") == 1.0 and E.edit_similarity("abc", "xyz") == 0.0
    assert E.evenly(list(range(10)), 3) == [0, 3, 6] and E.evenly([1, 2], 5) == [1, 2]


def test_fingerprint_changes_with_any_held_out_file():
    rows = [{"path": "a.py", "text": "x = 1\n"}, {"path": "b.py", "text": "y = 2\n"}]
    same = E.heldout_fingerprint(list(reversed(rows)))
    assert E.heldout_fingerprint(rows) == same  # order does not matter
    assert E.heldout_fingerprint([rows[0], {"path": "b.py", "text": "y = 3\n"}]) != same
    assert E.heldout_fingerprint(rows[:1]) != same


def test_end_to_end_on_a_tiny_corpus(tmp_path, tiny_model_dir, capsys):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    texts = ["".join(f"def f{i}_{j}(a):\n    b = a + {j}\n    return b * 2\n\n" for j in range(40)) for i in range(12)]
    for split, chunk in (("train", texts[:8]), ("heldout", texts[8:])):
        with open(corpus / f"{split}.jsonl", "w", encoding="utf-8") as out:
            for i, text in enumerate(chunk):
                out.write(json.dumps({"path": f"{split}/{i}.py", "text": text}) + "\n")
    results = E.main(["--model", str(tiny_model_dir), "--corpus", str(corpus), "--lines", "4", "--tasks", "none",
                      "--threads", "1", "--json", str(tmp_path / "r.json")])
    assert results["line_infill"]["n"] == 4 and results["heldout_files"] == 4
    assert 0.0 <= results["masked_accuracy"]["unigram"] <= 1.0
    printed = capsys.readouterr().out
    assert f"fingerprint {results['heldout_fingerprint']}" in printed and "| held-out line infill exact match" in printed
    assert json.loads((tmp_path / "r.json").read_text())["heldout_fingerprint"] == results["heldout_fingerprint"]


def test_a_missing_corpus_is_one_clear_line(tmp_path):
    with pytest.raises(SystemExit, match="build it first: python -m train.corpus"):
        E.main(["--corpus", str(tmp_path / "nothing"), "--tasks", "none"])


@pytest.mark.skipif(not E.HUMANEVAL_DIR.exists(), reason="shared HumanEval-Infilling data not present (../shared)")
def test_syntax_eval_table_per_task_limits(tiny_model_dir, capsys):
    import syntax_eval

    results = syntax_eval.main(["--model", str(tiny_model_dir), "--limit", "2,1", "--methods", "fixed,candidates,candidates-no-syntax,oracle", "--threads", "1"])
    assert [results[k]["fixed"]["n"] for k in ("single", "multi")] == [2, 1]
    table = capsys.readouterr().out
    assert "single-line pass@1 (n=2)" in table and "multi-line pass@1 (n=1)" in table and "(same run)" in table


def test_syntax_eval_without_the_data_is_one_clear_error(monkeypatch, tmp_path, capsys):
    import syntax_eval

    monkeypatch.setattr(syntax_eval, "HUMANEVAL_DIR", tmp_path / "missing")
    with pytest.raises(SystemExit) as stop:
        syntax_eval.main(["--limit", "1"])
    assert stop.value.code == 2
    assert "HumanEval-Infilling data not found" in capsys.readouterr().err
