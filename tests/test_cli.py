"""The headless contract, end to end in a subprocess: stdout, exit codes, untouched files."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "fizzbuzz.py"


def sharpen(*args, stdin=None, model=None, cwd=None, env=None):
    cmd = [sys.executable, "-m", "sharpen.app.cli", *map(str, args)]
    if model is not None:
        cmd += ["--model", str(model)]
    return subprocess.run(cmd, input=stdin, capture_output=True, cwd=cwd, timeout=300, env=env)


def one_line(stderr: bytes) -> str:
    lines = stderr.decode().strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("sharpen: ")
    return lines[0]


def test_infill_changes_only_the_span_on_the_embedded_model():
    original = EXAMPLE.read_text()
    out = sharpen(EXAMPLE, "--apply-edit", "3:5-3:20")
    assert out.returncode == 0, out.stderr
    lines = original.splitlines(keepends=True)
    start = sum(len(l) for l in lines[:2]) + 4
    end = sum(len(l) for l in lines[:2]) + 19
    new = out.stdout.decode()
    assert new.startswith(original[:start]) and new.endswith(original[end:])
    assert EXAMPLE.read_text() == original


def test_diff_and_json_outputs(tiny_model_dir):
    diff = sharpen(EXAMPLE, "--apply-edit", "6-6", "--diff", model=tiny_model_dir)
    assert diff.returncode == 0, diff.stderr
    text = diff.stdout.decode()
    assert text.startswith(f"--- {EXAMPLE}\n+++ {EXAMPLE}\n@@ -3,7 +3,7 @@")  # an absolute path: no a/ b/ (no "a//...")
    assert sum(1 for l in text.splitlines() if l.startswith("-") and not l.startswith("---")) == 1
    out = sharpen(EXAMPLE, "--apply-edit", "6-6,9:9-9:23", "--json", "--seed", "3", model=tiny_model_dir)
    assert out.returncode == 0, out.stderr
    payload = json.loads(out.stdout)
    assert [s["range"] for s in payload["spans"]] == ["6:1-6:26", "9:9-9:23"]
    for span in payload["spans"]:
        assert {"text", "steps", "tokens", "seconds", "mode"} <= set(span)
        assert span["steps"] >= 1 and span["tokens"] >= 0
    assert payload["text"].endswith('main()\n')
    assert isinstance(payload["prompt_tokens"], int) and 0 < payload["prompt_tokens"] < len(EXAMPLE.read_text())  # the text around the spans the model read


def test_in_place_keeps_crlf_bom_and_tail_exactly(tmp_path, tiny_model_dir):
    path = tmp_path / "crlf.py"
    original = b"\xef\xbb\xbfx = 1\r\ny = 2\r\n\tz = 3\r\nno_final_newline"
    path.write_bytes(original)
    os.chmod(path, 0o640)
    out = sharpen(path, "--apply-edit", "2:5-2:6", "--in-place", "--max-tokens", "4", model=tiny_model_dir)
    assert out.returncode == 0, out.stderr
    assert out.stdout == b""
    data = path.read_bytes()
    assert data.startswith(b"\xef\xbb\xbfx = 1\r\ny = ") and data.endswith(b"\r\n\tz = 3\r\nno_final_newline")
    middle = data[len(b"\xef\xbb\xbfx = 1\r\ny = "):-len(b"\r\n\tz = 3\r\nno_final_newline")]
    assert b"\n" not in middle.replace(b"\r\n", b"")
    assert oct(path.stat().st_mode & 0o777) == oct(0o640)
    assert [p.name for p in tmp_path.iterdir()] == ["crlf.py"]  # no temp file left behind


def test_stdin_file_and_json_edit_list(tmp_path, tiny_model_dir):
    out = sharpen("-", "--apply-edit", "1:5-1:6", stdin=b"a = 1\nb = 2\n", model=tiny_model_dir)
    assert out.returncode == 0 and out.stdout.startswith(b"a = ") and out.stdout.endswith(b"\nb = 2\n")
    edits = tmp_path / "edits.json"
    edits.write_text(json.dumps([{"range": "1:5-1:6", "max_tokens": 3}, {"range": "3-3", "mode": "rewrite", "strength": 1.0}]))
    out = sharpen(EXAMPLE, "--apply-edit", f"@{edits}", "--json", model=tiny_model_dir)
    assert out.returncode == 0, out.stderr
    assert [s["mode"] for s in json.loads(out.stdout)["spans"]] == ["infill", "rewrite"]
    out = sharpen(EXAMPLE, "--apply-edit", "-", "--json", stdin=edits.read_bytes(), model=tiny_model_dir)
    assert out.returncode == 0 and len(json.loads(out.stdout)["spans"]) == 2


BAD_SPECS = [
    ("99:1-99:3", "line 99 is outside"),
    ("3:5-3:99", "column 99 is outside"),
    ("3:20-3:5", "end is before start"),
    ("5-2", "end line is before start line"),
    ("3:5-3:20,3:10-3:30", "overlaps"),
    ("banana", "bad span"),
    ("", "empty SPEC"),
    ("0:1-1:1", "line 0 is outside"),
]


@pytest.mark.parametrize("spec, message", BAD_SPECS)
def test_bad_specs_exit_2_and_leave_the_file(tmp_path, spec, message):
    path = tmp_path / "f.py"
    path.write_bytes(EXAMPLE.read_bytes())
    out = sharpen(path, "--apply-edit", spec, "--in-place")
    assert out.returncode == 2
    assert message in one_line(out.stderr)
    assert out.stdout == b""
    assert path.read_bytes() == EXAMPLE.read_bytes()


@pytest.mark.parametrize(
    "content, message",
    [(None, "no such file"), (b"\x00\x01binary", "binary"), (b"caf\xe9\n", "not UTF-8"), (b"\xff\xfeh\x00i\x00", "UTF-16")],
)
def test_unreadable_inputs_exit_3(tmp_path, content, message):
    path = tmp_path / "input.txt"
    if content is not None:
        path.write_bytes(content)
    out = sharpen(path, "--apply-edit", "1-1", "--in-place")
    assert out.returncode == 3 and message in one_line(out.stderr)
    if content is not None:
        assert path.read_bytes() == content


def test_model_errors_exit_4(tmp_path):
    path = tmp_path / "f.py"
    path.write_bytes(EXAMPLE.read_bytes())
    out = sharpen(path, "--apply-edit", "1-1", "--in-place", model=tmp_path / "no-model")
    assert out.returncode == 4 and "model directory not found" in one_line(out.stderr)
    assert path.read_bytes() == EXAMPLE.read_bytes()


def test_usage_errors_exit_2(tmp_path):
    for args in (["--apply-edit", "1-1", "--steps", "0", str(EXAMPLE)], ["--apply-edit", "1-1", "--in-place", "-"], ["--bogus"], ["--diff", str(EXAMPLE)]):
        out = sharpen(*args, stdin=b"x\n")
        assert out.returncode == 2, (args, out.stderr)
        one_line(out.stderr)


def test_triton_kernels_on_a_cpu_exit_2_and_leave_the_file(tmp_path, tiny_model_dir):
    path = tmp_path / "f.py"
    path.write_bytes(EXAMPLE.read_bytes())
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}  # the kernel tests set it
    out = sharpen(path, "--apply-edit", "1-1", "--in-place", "--device", "cpu", "--kernels", "triton", model=tiny_model_dir, env=env)
    assert out.returncode == 2 and "run on CUDA, not cpu" in one_line(out.stderr)
    assert path.read_bytes() == EXAMPLE.read_bytes()


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP], ids=["SIGTERM", "SIGINT", "SIGHUP"])
def test_stop_signal_while_the_model_loads_exits_130_at_once(tmp_path, tiny_model_dir, stop):
    """Mid-load the process ends at once (a KeyboardInterrupt raised inside torch's C++ would abort
    it with -6): exit 130, one line, the file and its directory untouched."""
    path = tmp_path / "f.py"
    path.write_bytes(EXAMPLE.read_bytes())
    script = (
        "import os, sys, time\n"
        "from sharpen.core.models import load as model_choice\n"
        "real = model_choice.load_model\n"
        "def loading(*args, **kwargs):\n"
        f"    os.kill(os.getpid(), {int(stop)})\n"
        "    time.sleep(30)  # the handler ends the process long before this\n"
        "    return real(*args, **kwargs)\n"
        "model_choice.load_model = loading\n"
        "from sharpen.app.cli import main\n"
        f"sys.exit(main([{str(path)!r}, '--apply-edit', '1-1', '--in-place', '--model', {str(tiny_model_dir)!r}]))\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120)
    assert proc.returncode == 130, proc.stderr
    assert one_line(proc.stderr) == "sharpen: interrupted; nothing was written"
    assert path.read_bytes() == EXAMPLE.read_bytes() and [p.name for p in tmp_path.iterdir()] == ["f.py"]


def test_sigterm_during_in_place_leaves_the_file_and_exits_130(tmp_path, tiny_model_dir):
    path = tmp_path / "big.py"
    original = EXAMPLE.read_bytes() * 3
    path.write_bytes(original)
    cmd = [sys.executable, "-m", "sharpen.app.cli", str(path), "--apply-edit", "1:1-1:1", "--max-tokens", "400",
           "--schedule", "fixed", "--cache", "none", "--block-size", "0", "--samples", "16", "--in-place", "--model", str(tiny_model_dir)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    time.sleep(4)  # torch import and model load (~2.5 s), then the loop is running (16 samples x 400 steps: ~20 s)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "interrupted" in one_line(err)
    assert path.read_bytes() == original


def test_help_and_headless_import_no_heavy_modules(tiny_model_dir):
    probe = (
        "import sys, contextlib, io\n"
        "from sharpen.app.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    try: main(['--help'])\n"
        "    except SystemExit: pass\n"
        "assert 'torch' not in sys.modules and 'textual' not in sys.modules, 'help imported torch/textual'\n"
        f"rc = main([{str(EXAMPLE)!r}, '--apply-edit', '1-1', '--model', {str(tiny_model_dir)!r}, '--diff'])\n"
        "assert rc == 0 and 'textual' not in sys.modules and 'rich' not in sys.modules, 'headless imported textual'\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, timeout=300)
    assert out.returncode == 0, out.stderr.decode()
