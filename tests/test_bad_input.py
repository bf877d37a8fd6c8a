"""Hostile input on the headless path: every case ends in its exit code, exactly one stderr
line starting with "sharpen: ", nothing on stdout, the file's bytes unchanged and no temp
file left. Every case passes --in-place where it can, so a bug would show as a write.

Cases that fail before the model loads run the real CLI in a subprocess (no torch: fast).
Cases that need the model run `main()` in this process, so torch is imported once.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from sharpen.core.files import TEMP_SUFFIX

# A BOM, CRLF and LF mixed, a tab, a blank line and no final newline: every byte matters.
ORIGINAL = b"\xef\xbb\xbfdef f(x):\r\n\treturn x + 1\r\n\r\nprint(f(2))\nlast line, no newline"
NAME = "f.py"


@dataclass
class Case:
    id: str
    args: list  # "{f}" is the file, "{d}" the test's directory
    code: int
    message: str  # a piece of the stderr line
    content: bytes | None = ORIGINAL  # the file's bytes; None: no file
    extra: dict = field(default_factory=dict)  # more files in the directory: name -> bytes
    stdin: bytes = b""
    promise: str = ""  # the section of docs/safety.md whose promise the case checks


def spec(s, *more):
    return ["{f}", "--apply-edit", s, "--in-place", *more]


def edits(payload):
    data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    return {"args": ["{f}", "--apply-edit", "@{d}/edits.json", "--in-place"], "extra": {"edits.json": data}}


FAST = [
    # input/output: exit 3  (docs/safety.md: "Refused, with one clear line")
    Case("missing-file", spec("1-1"), 3, "no such file", content=None, promise="Refused, with one clear line"),
    Case("directory", ["{d}", "--apply-edit", "1-1", "--in-place"], 3, "is a directory", content=None, promise="Refused, with one clear line"),
    Case("nul-bytes", spec("1-1"), 3, "binary", content=b"\x7fELF\x00\x01\x02", promise="Refused, with one clear line"),
    Case("nul-after-8k", spec("1-1"), 3, "binary", content=b"x" * 9000 + b"\x00", promise="Refused, with one clear line"),
    Case("latin-1", spec("1-1"), 3, "not UTF-8 (invalid byte 0xe9 at offset 3)", content=b"caf\xe9\n", promise="Refused, with one clear line"),
    Case("utf-16-le", spec("1-1"), 3, "UTF-16", content=b"\xff\xfeh\x00i\x00", promise="Refused, with one clear line"),
    Case("utf-16-be", spec("1-1"), 3, "UTF-16", content=b"\xfe\xff\x00h\x00i", promise="Refused, with one clear line"),
    Case("bad-utf8-after-bom", spec("1-1"), 3, "not UTF-8", content=b"\xef\xbb\xbfok\n\xc3\x28\n", promise="Refused, with one clear line"),
    Case("truncated-utf8-at-end", spec("1-1"), 3, "not UTF-8", content=b"ok\n\xe6\x9d", promise="Refused, with one clear line"),
    Case("newline-in-missing-name", ["{d}/a\nb.py", "--apply-edit", "1-1", "--in-place"], 3, "a\\x0ab.py: no such file", content=None, promise="Refused, with one clear line"),
    # SPEC: exit 2  (docs/safety.md: "Spans")
    Case("line-out-of-range", spec("99:1-99:3"), 2, "span 99:1-99:3: line 99 is outside the file (1-5)", promise="Spans"),
    Case("column-out-of-range", spec("2:1-2:99"), 2, "column 99 is outside line 2 (1-14)", promise="Spans"),
    Case("column-inside-crlf", spec("1:11-1:11"), 2, "column 11 is outside line 1 (1-10)", promise="Spans"),
    Case("reversed-range", spec("2:9-2:3"), 2, "span 2:9-2:3: end is before start", promise="Spans"),
    Case("reversed-lines", spec("4-2"), 2, "end line is before start line", promise="Spans"),
    Case("overlapping", spec("2:1-2:9,2:5-2:12"), 2, "span 2:5-2:12 overlaps span 2:1-2:9", promise="Spans"),
    Case("same-insertion-twice", spec("3:1-3:1,3:1-3:1"), 2, "the same insertion point twice", promise="Spans"),
    Case("garbage", spec("banana"), 2, "bad span 'banana'", promise="Spans"),
    Case("empty", spec(""), 2, "empty SPEC", promise="Spans"),
    Case("line-zero", spec("0:1-1:1"), 2, "line 0 is outside", promise="Spans"),
    Case("column-zero", spec("1:0-1:2"), 2, "column 0 is outside", promise="Spans"),
    Case("negative", ["{f}", "--apply-edit=-1:1-1:2", "--in-place"], 2, "bad span '-1:1-1:2'", promise="Spans"),
    Case("trailing-comma", spec("1-1,"), 2, "bad span ''", promise="Spans"),
    Case("huge-number", spec("9" * 5000 + ":1-1:1"), 2, "number too large", promise="Spans"),
    Case("non-ascii-digits", spec("١:1-1:2"), 2, "bad span", promise="Spans"),
    Case("empty-rewrite", spec("2:3-2:3", "--mode", "rewrite"), 2, "a rewrite needs a non-empty span", promise="Spans"),
    Case("max-tokens-zero", spec("2:1-2:3", "--max-tokens", "0"), 2, "max_tokens must be between 1 and 4096", promise="Spans"),
    Case("max-tokens-huge", spec("2:1-2:3", "--max-tokens", "100000"), 2, "max_tokens must be between 1 and 4096", promise="Spans"),
    Case("strength-too-big", spec("2:1-2:3", "--mode", "rewrite", "--strength", "1.5"), 2, "strength must be between 0 and 1", promise="Spans"),
    Case("strength-nan", spec("2:1-2:3", "--mode", "rewrite", "--strength", "nan"), 2, "strength must be between 0 and 1", promise="Spans"),
    # options, checked before torch loads: exit 2  (docs/safety.md: "Models and options")
    Case("steps-zero", spec("1-1", "--steps", "0"), 2, "--steps must be at least 1", promise="Models and options"),
    Case("temperature-negative", spec("1-1", "--temperature", "-1"), 2, "--temperature", promise="Models and options"),
    Case("temperature-inf", spec("1-1", "--temperature", "inf"), 2, "--temperature", promise="Models and options"),
    Case("top-p-out-of-range", spec("1-1", "--top-p", "1.5"), 2, "--top-p must be in (0, 1]", promise="Models and options"),
    Case("top-k-zero", spec("1-1", "--top-k", "0"), 2, "--top-k must be at least 1", promise="Models and options"),
    Case("samples-zero", spec("1-1", "--samples", "0"), 2, "--samples must be between 1 and 64", promise="Models and options"),
    Case("samples-huge", spec("1-1", "--samples", "100000"), 2, "--samples must be between 1 and 64", promise="Models and options"),
    Case("threshold-zero", spec("1-1", "--threshold", "0"), 2, "--threshold must be in (0, 1]", promise="Models and options"),
    Case("context-negative", spec("1-1", "--context-tokens", "-5"), 2, "--context-tokens must be at least 0", promise="Models and options"),
    Case("block-size-negative", spec("1-1", "--block-size", "-1"), 2, "--block-size must be at least 0", promise="Models and options"),
    Case("steps-not-a-number", spec("1-1", "--steps", "many"), 2, "invalid int value", promise="Models and options"),
    # usage: exit 2  (docs/safety.md: "Exit codes")
    Case("in-place-stdin", ["-", "--apply-edit", "1-1", "--in-place"], 2, "--in-place needs a file", stdin=b"x = 1\n", promise="Exit codes"),
    Case("two-files", ["{f}", "{f}", "--apply-edit", "1-1", "--in-place"], 2, "exactly one FILE", promise="Exit codes"),
    Case("stdin-twice", ["-", "--apply-edit", "-"], 2, "cannot both be read from stdin", stdin=b"x\n", promise="Exit codes"),
    Case("in-place-and-diff", spec("1-1", "--diff"), 2, "not allowed with argument", promise="Exit codes"),
    Case("unknown-option", spec("1-1", "--frobnicate"), 2, "unrecognized arguments", promise="Exit codes"),
    Case("bad-mode", spec("1-1", "--mode", "delete"), 2, "invalid choice", promise="Exit codes"),
    # JSON edit lists: exit 2  (docs/safety.md: "Spans")
    Case("json-invalid", **edits(b"[{"), code=2, message="not valid JSON", promise="Spans"),
    Case("json-empty-list", **edits([]), code=2, message="non-empty JSON list", promise="Spans"),
    Case("json-object", **edits({"range": "1-1"}), code=2, message="non-empty JSON list", promise="Spans"),
    Case("json-range-int", **edits([{"range": 3}]), code=2, message='edit 1 needs a "range" string', promise="Spans"),
    Case("json-unknown-key", **edits([{"range": "1-1", "colour": "red"}]), code=2, message="unknown keys: colour", promise="Spans"),
    Case("json-bad-mode", **edits([{"range": "1-1", "mode": "erase"}]), code=2, message="unknown mode 'erase'", promise="Spans"),
    Case("json-max-tokens-string", **edits([{"range": "1-1", "max_tokens": "8"}]), code=2, message="max_tokens must be an integer", promise="Spans"),
    Case("json-max-tokens-bool", **edits([{"range": "1-1", "max_tokens": True}]), code=2, message="max_tokens must be an integer", promise="Spans"),
    Case("json-max-tokens-huge", **edits([{"range": "1-1", "max_tokens": 10**30}]), code=2, message="max_tokens must be between", promise="Spans"),
    Case("json-strength-string", **edits([{"range": "1-1", "strength": "high"}]), code=2, message="strength must be a number", promise="Spans"),
    Case("json-strength-400-digits", **edits(b'[{"range": "1-1", "strength": ' + b"9" * 400 + b"}]"), code=2, message="strength must be in [0, 1]", promise="Spans"),
    Case("json-instruction-number", **edits([{"range": "1-1", "instruction": 7}]), code=2, message="instruction must be a string", promise="Spans"),
    Case("json-overlap", **edits([{"range": "2-2"}, {"range": "2:3-2:5"}]), code=2, message="span 2:3-2:5 overlaps span 2-2", promise="Spans"),
    Case("json-range-with-newline", **edits([{"range": "1:1-\n9:9"}]), code=2, message="bad span '1:1-\\n9:9'", promise="Spans"),
    Case("json-deep-nesting", **edits(b"[" * 100000), code=2, message="nested too deeply", promise="Spans"),
    Case("json-not-utf8", **edits(b'[{"range": "1-1", "instruction": "caf\xe9"}]'), code=2, message="is not UTF-8", promise="Spans"),
    Case("json-missing-file", ["{f}", "--apply-edit", "@{d}/nope.json", "--in-place"], 2, "cannot read edit list", promise="Spans"),
    Case("json-endless", ["{f}", "--apply-edit", "@/dev/zero", "--in-place"], 2, "not a regular file", promise="Spans"),
]


def run_cli(args, stdin=b"", cwd=None):
    return subprocess.run([sys.executable, "-m", "sharpen.app.cli", *args], input=stdin, capture_output=True, timeout=60, cwd=cwd)


def assert_one_line(stderr: bytes, message: str) -> str:
    lines = stderr.decode("utf-8", "replace").splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("sharpen: "), lines[0]
    assert message in lines[0], lines[0]
    return lines[0]


def assert_untouched(directory: Path, path: Path, content: bytes | None) -> None:
    if content is not None:
        assert path.read_bytes() == content
    assert not [p for p in directory.iterdir() if p.name.endswith(TEMP_SUFFIX)]


@pytest.mark.parametrize("case", FAST, ids=[f"{c.promise}: {c.id}" for c in FAST])
def test_bad_input_before_the_model(tmp_path, case):
    path = tmp_path / NAME
    if case.content is not None:
        path.write_bytes(case.content)
    for name, data in case.extra.items():
        (tmp_path / name).write_bytes(data)
    args = [a.replace("{f}", str(path)).replace("{d}", str(tmp_path)) for a in case.args]
    out = run_cli(args, case.stdin)
    assert out.returncode == case.code, out.stderr
    assert_one_line(out.stderr, case.message)
    assert out.stdout == b""
    assert_untouched(tmp_path, path, case.content)


def test_special_files_are_refused_without_hanging(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    (tmp_path / "ro.py").write_bytes(ORIGINAL)
    os.chmod(tmp_path / "ro.py", 0o444)
    with open(tmp_path / "sparse.txt", "wb") as handle:
        handle.truncate(100 * 2**20)  # 100 MiB, no blocks on disk
    for name, message in [("fifo", "not a regular file"), ("dangling", "broken symbolic link"), ("ro.py", "read-only"), ("sparse.txt", "too large")]:
        out = run_cli([str(tmp_path / name), "--apply-edit", "1-1", "--in-place"])
        assert out.returncode == 3, (name, out.stderr)
        assert_one_line(out.stderr, message)
    assert (tmp_path / "ro.py").read_bytes() == ORIGINAL


def test_an_edit_list_that_is_a_fifo_is_refused_without_hanging(tmp_path):
    """@FIFO waited for a writer for ever (the FILE itself is refused the same way)."""
    os.mkfifo(tmp_path / "edits.json")
    (tmp_path / "f.py").write_bytes(ORIGINAL)
    out = run_cli([str(tmp_path / "f.py"), "--apply-edit", f"@{tmp_path / 'edits.json'}", "--in-place"])
    assert out.returncode == 2, out.stderr
    assert_one_line(out.stderr, "not a regular file")
    assert (tmp_path / "f.py").read_bytes() == ORIGINAL


# --- cases that need the model: in this process, torch imported once ---------------------------


@pytest.fixture
def cli(tmp_path, capfd):
    """Run main() on a fresh copy of ORIGINAL; returns (exit code, the stderr line)."""
    from sharpen.app.cli import main

    path = tmp_path / NAME
    path.write_bytes(ORIGINAL)

    def run(*args, model=None, expect_untouched=True):
        argv = [str(a).replace("{f}", str(path)) for a in args] + (["--model", str(model)] if model else [])
        capfd.readouterr()
        code = main(argv)
        out, err = capfd.readouterr()
        if expect_untouched:
            assert out == ""
            assert_untouched(tmp_path, path, ORIGINAL)
        lines = err.splitlines()
        assert len(lines) == 1 and lines[0].startswith("sharpen: "), lines
        return code, lines[0]

    run.path = path
    return run


def broken_model(tiny_model_dir, tmp_path, how):
    """A copy of the tiny checkpoint, broken one way."""
    model = tmp_path / f"model-{how}"
    shutil.copytree(tiny_model_dir, model)
    weights, config = model / "model.safetensors", model / "config.json"
    if how == "no-weights":
        weights.unlink()
    elif how == "truncated":
        weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    elif how == "garbage-weights":
        weights.write_bytes(b"\x00" * 64)
    elif how == "unknown-family":
        config.write_text(json.dumps({**json.loads(config.read_text()), "model_type": "gpt2"}))
    elif how == "config-not-json":
        config.write_text("{ this is not json")
    elif how == "no-config":
        config.unlink()
    elif how == "shape-mismatch":
        config.write_text(json.dumps({**json.loads(config.read_text()), "dim": 128, "ffn_hidden": 384}))
    elif how == "no-tokenizer":
        (model / "tokenizer.json").unlink()
    elif how == "no-mask-token":
        tok = json.loads((model / "tokenizer.json").read_text())
        tok["added_tokens"] = [t for t in tok["added_tokens"] if t["content"] != "<|mask|>"]
        del tok["model"]["vocab"]["<|mask|>"]
        (model / "tokenizer.json").write_text(json.dumps(tok))
    return model


MODEL_ERRORS = [
    ("no-weights", "no *.safetensors weights"),
    ("truncated", "corrupt or truncated weights file model.safetensors"),
    ("garbage-weights", "corrupt or truncated weights file"),
    ("unknown-family", "unknown model family"),
    ("config-not-json", "cannot read"),
    ("no-config", "no config.json"),
    ("shape-mismatch", "shape"),
    ("no-tokenizer", "neither tokenizer.json nor vocab.json + merges.txt"),
    ("no-mask-token", "no mask token"),
]


@pytest.mark.parametrize("how, message", MODEL_ERRORS, ids=[m[0] for m in MODEL_ERRORS])
def test_broken_models_exit_4(cli, tiny_model_dir, tmp_path, how, message):
    code, line = cli("{f}", "--apply-edit", "2:1-2:3", "--in-place", model=broken_model(tiny_model_dir, tmp_path, how))
    assert code == 4 and message in line, line


def test_missing_model_directory_exits_4(cli, tmp_path):
    code, line = cli("{f}", "--apply-edit", "2:1-2:3", "--in-place", model=tmp_path / "no-model")
    assert code == 4 and "not found" in line


def _remote_code_checkpoint(tiny_model_dir, tmp_path, model_type):
    model = tmp_path / f"remote-{model_type}"
    shutil.copytree(tiny_model_dir, model)
    marker = tmp_path / "EXECUTED"
    (model / "modeling_evil.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    (model / "configuration_evil.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    config = json.loads((model / "config.json").read_text())
    config.update(model_type=model_type, auto_map={"AutoConfig": "configuration_evil.EvilConfig", "AutoModel": "modeling_evil.EvilModel"})
    (model / "config.json").write_text(json.dumps(config))
    return model, marker


def test_remote_code_is_refused_and_never_imported(cli, tiny_model_dir, tmp_path):
    model, marker = _remote_code_checkpoint(tiny_model_dir, tmp_path, "evil")
    code, line = cli("{f}", "--apply-edit", "2:1-2:3", "--in-place", model=model)
    assert code == 4 and "evil" in line
    assert not marker.exists() and "modeling_evil" not in sys.modules


def test_native_family_with_auto_map_loads_without_running_its_code(cli, tiny_model_dir, tmp_path):
    model, marker = _remote_code_checkpoint(tiny_model_dir, tmp_path, "sharpen")
    from sharpen.core.models.load import load_model
    from sharpen.core.settings import ModelRequest

    load_model(ModelRequest(model=str(model)))
    assert not marker.exists()


def test_instruction_without_chat_template_exits_2(cli, tiny_model_dir):
    code, line = cli("{f}", "--apply-edit", "2:2-2:8", "--mode", "rewrite", "--instruction", "make it shorter", "--in-place", model=tiny_model_dir)
    assert code == 2 and "chat template" in line


def test_instruction_on_the_embedded_model_exits_2_and_says_it_takes_none(cli):
    """Its chat template serves the chat endpoints; it was never tuned on instructions."""
    code, line = cli("{f}", "--apply-edit", "2:2-2:8", "--mode", "rewrite", "--instruction", "make it shorter", "--in-place")
    assert code == 2 and line == ("sharpen: an instruction needs an instruct checkpoint; sharpen-embedded was not tuned to follow "
                                  "instructions (its chat template only writes a conversation down)")


def test_spans_bigger_than_the_canvas_exit_2(cli, tiny_model_dir):
    code, line = cli("{f}", "--apply-edit", "2:1-2:3,4:1-4:3", "--max-tokens", "4000", "--in-place", model=tiny_model_dir)
    assert code == 2 and "canvas holds 512" in line


def _raise_in_logits(monkeypatch, error):
    from sharpen.core.models.denoiser import Denoiser

    def boom(self, *args, **kwargs):
        raise error

    monkeypatch.setattr(Denoiser, "logits", boom)


def test_out_of_memory_exits_4_with_a_smaller_setting(cli, tiny_model_dir, monkeypatch):
    _raise_in_logits(monkeypatch, MemoryError())
    code, line = cli("{f}", "--apply-edit", "2:1-2:3", "--in-place", "--context-tokens", "512", model=tiny_model_dir)
    assert code == 4 and "out of memory; try --context-tokens 256" in line


def test_gpu_out_of_memory_exits_4(cli, tiny_model_dir, monkeypatch):
    import torch

    oom = getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError
    _raise_in_logits(monkeypatch, oom("CUDA out of memory. Tried to allocate 20.00 GiB"))
    code, line = cli("{f}", "--apply-edit", "2:1-2:3", "--in-place", "--samples", "4", model=tiny_model_dir)
    assert code == 4 and "out of GPU memory; try --context-tokens 512, --samples 1, or --device cpu" in line


def test_unexpected_runtime_error_is_one_line_exit_4(cli, tiny_model_dir, monkeypatch):
    _raise_in_logits(monkeypatch, RuntimeError("shape '[1, -1]' is invalid\nsecond line of a torch message"))
    code, line = cli("{f}", "--apply-edit", "2:1-2:3", "--in-place", model=tiny_model_dir)
    assert code == 4 and "internal error: RuntimeError" in line


def _during_run(monkeypatch, action):
    """Run `action` after the first denoising step, as another program (or the user) would."""
    import sharpen.core.engine as engine

    real = engine.run_request  # the Runner's door into the engine

    def wrapped(*args, **kwargs):
        for n, update in enumerate(real(*args, **kwargs)):
            if n == 0:
                action()
            yield update

    monkeypatch.setattr(engine, "run_request", wrapped)


def test_file_changed_during_the_run_is_not_overwritten(cli, tiny_model_dir, monkeypatch):
    theirs = b"someone else's edit\n"
    _during_run(monkeypatch, lambda: cli.path.write_bytes(theirs))
    code, line = cli("{f}", "--apply-edit", "2:1-2:3", "--in-place", "--steps", "2", model=tiny_model_dir, expect_untouched=False)
    assert code == 3 and "changed on disk since it was read" in line
    assert cli.path.read_bytes() == theirs


def test_file_deleted_during_the_run_is_not_recreated(cli, tiny_model_dir, monkeypatch):
    _during_run(monkeypatch, lambda: cli.path.unlink())
    code, line = cli("{f}", "--apply-edit", "2:1-2:3", "--in-place", "--steps", "2", model=tiny_model_dir, expect_untouched=False)
    assert code == 3 and "deleted" in line
    assert not cli.path.exists()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_signal_during_the_run_exits_130(cli, tiny_model_dir, monkeypatch, signum):
    _during_run(monkeypatch, lambda: os.kill(os.getpid(), signum))
    code, line = cli("{f}", "--apply-edit", "2:1-2:3", "--in-place", "--steps", "4", model=tiny_model_dir)
    assert code == 130 and "interrupted; nothing was written" in line


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_signal_during_the_write_exits_130_with_the_original(cli, tiny_model_dir, monkeypatch, signum):
    import sharpen.core.files as files

    real_fsync = os.fsync

    def fsync_then_signal(fd):
        real_fsync(fd)
        os.kill(os.getpid(), signum)

    monkeypatch.setattr(files.os, "fsync", fsync_then_signal)
    before = signal.getsignal(signal.SIGTERM)  # SIG_DFL, or what an earlier test in this process left
    code, line = cli("{f}", "--apply-edit", "2:1-2:3", "--in-place", "--steps", "2", "--max-tokens", "3", model=tiny_model_dir)
    assert code == 130 and "interrupted" in line
    assert signal.getsignal(signal.SIGTERM) is before  # the handlers are put back as they were


def test_unwritable_target_after_the_run_exits_3(cli, tiny_model_dir, monkeypatch):
    import sharpen.core.files as files

    def denied(**kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(files.tempfile, "mkstemp", denied)
    code, line = cli("{f}", "--apply-edit", "2:1-2:3", "--in-place", "--steps", "2", model=tiny_model_dir)
    assert code == 3 and "permission denied" in line


def test_sigint_to_a_real_process_leaves_the_file(tmp_path, tiny_model_dir):
    """One real process (torch import included), interrupted with Ctrl+C's signal mid-run."""
    path = tmp_path / NAME
    path.write_bytes(ORIGINAL * 20)
    proc = subprocess.Popen(
        [sys.executable, "-m", "sharpen.app.cli", str(path), "--apply-edit", "1:1-1:1", "--max-tokens", "400",
         "--schedule", "fixed", "--cache", "none", "--block-size", "0", "--samples", "16", "--in-place", "--model", str(tiny_model_dir)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    try:
        proc.wait(timeout=5)  # it should still be running: torch import, load, 16 samples x 400 steps (~25 s)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert_one_line(err, "interrupted")
    assert out == b""
    assert_untouched(tmp_path, path, ORIGINAL * 20)


def test_every_case_names_the_promise_it_checks():
    headings = Path(__file__).resolve().parents[1].joinpath("docs", "safety.md").read_text()
    for case in FAST:
        assert case.promise and f"**{case.promise}" in headings or f"## {case.promise}" in headings, case.id
