"""bench/gpu_ready.py is the first GPU session's one command: its CPU form runs whole here, and
its table survives a group that fails or a spent time budget (that session has one try)."""
from __future__ import annotations

import gpu_ready  # bench/ is on pytest's pythonpath


def table(out: str) -> dict[str, list[list[str]]]:
    """measure -> its rows' cells, from the printed markdown table."""
    rows: dict[str, list[list[str]]] = {}
    for line in out.splitlines():
        if line.startswith("| ") and not line.startswith("| measure"):
            cells = [c.strip() for c in line.strip("|").split(" | ")]
            rows.setdefault(cells[0], []).append(cells[1:])
    return rows


def test_the_cpu_table_has_every_group_and_meets_its_targets(capsys):
    assert gpu_ready.main(["--no-load", "--no-compile-count"]) == 0
    out = capsys.readouterr().out
    rows = table(out)
    assert out.rstrip().endswith("0 group(s) failed") and "skipped" not in out
    assert all(len(cells) == 3 for found in rows.values() for cells in found)  # no cell holds a stray '|'
    assert rows["launches per layer, cached step"][1][:2] == ["eager bfloat16", "15"]
    assert rows["host reads per step inside a block"][0][1].startswith("0.00")  # the fixed schedule reads nothing inside a block
    assert rows["graph breaks over ten edits"][0][1] == "0"
    assert rows["packed pass vs each pass alone (4 runs)"][0][1] == "max abs logit diff 0; argmax 64/64 rows"
    assert len(rows["est. ms per cached step, llada-8b"]) == 4


def test_a_failing_group_is_a_row_and_the_rest_still_print(monkeypatch, capsys):
    def broken(device):
        raise RuntimeError("CUDA error: an illegal memory access | was encountered\nsecond line")

    quick = [("m", "s", "1", "")]
    monkeypatch.setattr(gpu_ready, "launch_rows", lambda compiled: (quick, {"eager bfloat16": (15, 6)}))
    monkeypatch.setattr(gpu_ready, "loop_rows", lambda denoiser: (quick, 69))
    monkeypatch.setattr(gpu_ready, "graph_rows", lambda denoiser: quick)
    monkeypatch.setattr(gpu_ready, "embedded", lambda: None)
    monkeypatch.setattr(gpu_ready, "packed_rows", broken)
    assert gpu_ready.main(["--no-load"]) == 1
    captured = capsys.readouterr()
    rows = table(captured.out)
    assert rows["packed pass"] == [["failed", "RuntimeError: CUDA error: an illegal memory access / was encountered", ""]]
    assert "est. ms per cached step, llada-8b" in rows  # the group after the failed one ran
    assert "second line" in captured.err  # the traceback goes to stderr
    assert captured.out.rstrip().endswith("1 group(s) failed")


def test_a_spent_budget_skips_the_groups_left(capsys):
    assert gpu_ready.main(["--no-load", "--budget", "0"]) == 0
    rows = table(capsys.readouterr().out)
    assert rows["launches"][0][0] == "skipped" and rows["roofline"][0][0] == "skipped"


def test_the_session_script_parses_and_runs_gpu_ready_with_a_budget():
    import subprocess
    from pathlib import Path

    script = Path(__file__).resolve().parent.parent / "bench" / "gpu_session.sh"
    subprocess.run(["bash", "-n", str(script)], check=True)  # a syntax error would cost the GPU session's one try
    text = script.read_text()
    assert "bench/gpu_ready.py --device \"$device\" --no-compile-count --budget" in text
    assert "set -u -o pipefail" in text  # a time limit's exit status reaches its line, not tee's


def test_the_gpu_step_rows_run_on_a_small_shape_here():
    """step_rows is the first GPU session's main measurement: the same code, eager and compiled
    (dynamo's eager backend here: inductor's CPU build is not what a GPU runs), on a small shape."""
    rows = gpu_ready.step_rows("cpu", shapes=("tiny",), repeats=2, backend="eager")
    assert [r[:2] for r in rows] == [("ms per cached step, tiny", "cpu, eager bf16"), ("ms per cached step, tiny", "cpu, compiled eager")]
    assert all(float(r[2].split()[0]) > 0 and "n/a kernels" in r[2] for r in rows)
