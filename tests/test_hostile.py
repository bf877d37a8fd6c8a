"""The second round of hostile cases, each under the promise of docs/safety.md it checks.

Every case ends in the documented exit code, one plain line on stderr, and the file's bytes
intact (or written whole, with exit 0).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from sharpen.core import files
from sharpen.core.errors import InputError
from sharpen.core.files import TEMP_SUFFIX, read_text_file, save_text_file

ORIGINAL = b"def f(x):\n    return x + 1\n"
SHARPEN = [sys.executable, "-c", "import sys; from sharpen.app.cli import main; sys.exit(main())"]  # main() as the process


def run(args, cwd, **kwargs):
    return subprocess.run([*SHARPEN, *map(str, args)], cwd=cwd, capture_output=kwargs.pop("capture", True), timeout=300, **kwargs)


def no_temp_files(directory: Path) -> bool:
    return not [p for p in directory.iterdir() if p.name.endswith(TEMP_SUFFIX)]


# -- "Writes are atomic" -------------------------------------------------------------------


def test_check_and_replace_are_one_step_against_other_sharpen_saves(tmp_path):
    """Two saves of one file read at the same time: the second must see the first's rename and
    refuse (exit 3 in the CLI), never rename over it (the lost update)."""
    path = tmp_path / "f.py"
    path.write_bytes(ORIGINAL)
    first, second = read_text_file(path), read_text_file(path)
    inside = threading.Event()

    def slow_commit():  # the first save sits between its check and its rename
        inside.set()
        time.sleep(0.5)

    writer = threading.Thread(target=save_text_file, args=(first, "first\n"), kwargs={"before_commit": slow_commit})
    writer.start()
    inside.wait(5)
    with pytest.raises(InputError, match="changed on disk"):
        save_text_file(second, "second\n")
    writer.join()
    assert path.read_text() == "first\n" and no_temp_files(tmp_path)


def test_a_file_made_read_only_while_the_model_ran_is_not_overwritten(tmp_path):
    path = tmp_path / "f.py"
    path.write_bytes(ORIGINAL)
    original = read_text_file(path)
    with pytest.raises(InputError, match="became read-only"):
        save_text_file(original, "new\n", before_commit=lambda: path.chmod(0o444))
    assert path.read_bytes() == ORIGINAL and no_temp_files(tmp_path)


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another owner needs root")
def test_setuid_and_setgid_bits_survive_a_save_that_keeps_the_owner(tmp_path):
    path = tmp_path / "tool.sh"
    path.write_bytes(b"#!/bin/sh\necho hi\n")
    os.chown(path, 1234, 1234)
    path.chmod(0o6755)
    save_text_file(read_text_file(path), "#!/bin/sh\necho bye\n")
    info = path.stat()
    assert (info.st_mode & 0o7777, info.st_uid, info.st_gid) == (0o6755, 1234, 1234)


def test_names_up_to_255_bytes_save(tmp_path):
    for name in ("x" * 252 + ".py", "é" * 126 + ".p"):  # 255 bytes; two-byte characters
        path = tmp_path / name
        path.write_bytes(ORIGINAL)
        save_text_file(read_text_file(path), "new\n")
        assert path.read_text() == "new\n" and no_temp_files(tmp_path)
    assert len(files.temp_prefix("é" * 126 + ".p").encode()) + 8 + len(TEMP_SUFFIX) <= files.NAME_MAX


# -- "Refused, with one clear line" ---------------------------------------------------------


def test_a_trailing_slash_is_not_the_file(tmp_path):
    (tmp_path / "f.py").write_bytes(ORIGINAL)
    proc = run(["f.py/", "--apply-edit", "1", "--in-place"], tmp_path)
    assert proc.returncode == 3 and proc.stderr.decode().count("\n") == 1 and "not a directory" in proc.stderr.decode()
    assert (tmp_path / "f.py").read_bytes() == ORIGINAL


def test_a_fifo_is_refused_with_advice_that_fits_the_front_end(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    proc = run([fifo, "--apply-edit", "1"], tmp_path)
    assert proc.returncode == 3 and "pipe text in with FILE -" in proc.stderr.decode()
    with pytest.raises(files.NotRegularFile) as error:  # what the editor shows: no advice it cannot follow
        read_text_file(fifo)
    assert " - " not in str(error.value) and "stdin" not in str(error.value)


@pytest.mark.parametrize("args, message", [
    (["--seed", str(10**23)], "--seed must be between 0 and 18446744073709551615"),
    (["--candidates", "99"], "--candidates must be between 1 and 16"),
    (["--max-memory", "0=lots"], "--max-memory has a bad memory size 'lots' (use e.g. 20GiB, 512MB)"),
])
def test_options_are_checked_before_torch_loads(tmp_path, args, message):
    (tmp_path / "f.py").write_bytes(ORIGINAL)
    code = ("import sys; from sharpen.app.cli import main; code = main(sys.argv[1:]); "
            "sys.exit(90 if 'torch' in sys.modules else code)")
    proc = subprocess.run([sys.executable, "-c", code, "f.py", "--apply-edit", "1", *args], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stderr == f"sharpen: {message}\n"


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="checks a machine without CUDA")
@pytest.mark.parametrize("args, message", [
    (["--device", "cuda"], "--device cuda: this torch is a CPU build; use --device cpu (or auto)"),
    (["--max-memory", "0=1GiB"], "--max-memory names a GPU, but no CUDA GPU is available; leave it out, or use only cpu=SIZE"),
])
def test_gpu_options_without_a_gpu_say_what_to_use(tmp_path, args, message):
    (tmp_path / "f.py").write_bytes(ORIGINAL)
    proc = run(["f.py", "--apply-edit", "1", *args], tmp_path)
    assert proc.returncode == 2 and proc.stderr.decode() == f"sharpen: {message}\n"


@pytest.mark.parametrize("field, value", [("n_layers", 10**6), ("max_seq_len", 10**12), ("n_heads", 0), ("dim", 10**7)])
def test_absurd_config_sizes_stop_before_anything_is_built(tmp_path, tiny_model_dir, field, value):
    import shutil

    model = tmp_path / "model"
    shutil.copytree(tiny_model_dir, model)
    config = json.loads((model / "config.json").read_text())
    config[field] = value
    (model / "config.json").write_text(json.dumps(config))
    (tmp_path / "f.py").write_bytes(ORIGINAL)
    started = time.perf_counter()
    proc = run(["f.py", "--apply-edit", "1", "--in-place", "--model", model], tmp_path)
    assert proc.returncode == 4 and proc.stderr.decode().count("\n") == 1 and field in proc.stderr.decode()
    assert time.perf_counter() - started < 60 and (tmp_path / "f.py").read_bytes() == ORIGINAL


# -- "Interruption" and exit codes -------------------------------------------------------------


def test_after_the_commit_a_process_ignores_stop_signals(tmp_path, monkeypatch):
    """exit 0 means written: once the rename is done in a process about to exit, a Ctrl+C in its
    teardown is ignored instead of killing it by the signal."""
    from sharpen.app import headless

    path = tmp_path / "f.py"
    path.write_bytes(ORIGINAL)
    previous = signal.getsignal(signal.SIGINT)
    monkeypatch.setattr(headless, "_process_exits", True)
    try:
        with headless.signals_held() as check:
            save_text_file(read_text_file(path), "new\n", before_commit=check)
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)
    monkeypatch.setattr(headless, "_process_exits", False)
    with headless.signals_held() as check:  # a caller that goes on (bench/soak.py): handlers come back
        save_text_file(read_text_file(path), "again\n", before_commit=check)
    assert signal.getsignal(signal.SIGINT) is previous


def test_with_stderr_closed_a_good_run_exits_0_and_writes(tmp_path, tiny_model_dir):
    path = tmp_path / "f.py"
    path.write_bytes(ORIGINAL)
    proc = subprocess.run([*SHARPEN, "f.py", "--apply-edit", "2:12-2:17", "--in-place", "--steps", "2", "--model", tiny_model_dir],
                          cwd=tmp_path, stdout=subprocess.PIPE, preexec_fn=lambda: os.close(2), timeout=300)
    assert proc.returncode == 0 and path.read_bytes() != ORIGINAL and path.read_bytes().startswith(b"def f(x):\n    return ")
    assert no_temp_files(tmp_path)


@pytest.mark.parametrize("how", ["stdout-closed", "stdout-full", "stdin-closed"])
def test_closed_or_full_standard_streams_are_io_errors(tmp_path, tiny_model_dir, how):
    path = tmp_path / "f.py"
    path.write_bytes(ORIGINAL)
    args = [*SHARPEN, "-" if how == "stdin-closed" else "f.py", "--apply-edit", "2:12-2:17", "--steps", "2", "--model", tiny_model_dir]
    kwargs = {"stderr": subprocess.PIPE, "cwd": tmp_path, "timeout": 300}
    if how == "stdout-full":
        with open("/dev/full", "wb") as full:
            proc = subprocess.run(args, stdout=full, **kwargs)
    else:
        fd = 1 if how == "stdout-closed" else 0
        proc = subprocess.run(args, stdout=subprocess.PIPE if fd == 0 else None, preexec_fn=lambda: os.close(fd), **kwargs)
    err = proc.stderr.decode()
    assert proc.returncode == 3 and err.count("\n") == 1 and err.startswith("sharpen: "), err
    assert path.read_bytes() == ORIGINAL


def test_json_output_is_valid_utf8_whatever_the_file_name(tmp_path, tiny_model_dir):
    name = b"bad\xffname.py"
    with open(os.path.join(os.fsencode(tmp_path), name), "wb") as handle:
        handle.write(ORIGINAL)
    proc = subprocess.run([*SHARPEN, os.fsdecode(name), "--apply-edit", "2:12-2:17", "--json", "--steps", "2", "--model", tiny_model_dir],
                          cwd=tmp_path, capture_output=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    payload = json.loads(proc.stdout.decode("utf-8"))  # strict UTF-8: raises on a lone surrogate or a raw 0xff
    assert payload["file"] == "bad\\xffname.py"


def test_download_without_network_says_so_in_one_line(monkeypatch, capsys):
    import huggingface_hub

    from sharpen.app.cli import main

    class ConnectError(Exception):  # what httpx raises when the name does not resolve
        pass

    def offline(*args, **kwargs):
        raise ConnectError("[Errno -2] Name or service not known")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", offline)
    assert main(["download", "GSAI-ML/LLaDA-8B-Instruct"]) == 4
    err = capsys.readouterr().err.splitlines()
    assert "about 14.9 GiB" in err[0] and err[1].startswith("sharpen: cannot reach the Hugging Face hub") and len(err) == 2
