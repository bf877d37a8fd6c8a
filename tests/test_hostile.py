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
    (["--device", "cuda"], "--device cuda: {why}; use --device cpu (or auto)"),
    (["--max-memory", "0=1GiB"], "--max-memory names a GPU, but no CUDA GPU is available; leave it out, or use only cpu=SIZE"),
])
def test_gpu_options_without_a_gpu_say_what_to_use(tmp_path, args, message):
    (tmp_path / "f.py").write_bytes(ORIGINAL)
    proc = run(["f.py", "--apply-edit", "1", *args], tmp_path)
    # A CUDA build of torch on a machine without a GPU (the GPU machine's torch, tested here too)
    # is told something else than a CPU build.
    why = "this torch is a CPU build" if __import__("torch").version.cuda is None else "no CUDA GPU is visible"
    assert proc.returncode == 2 and proc.stderr.decode() == f"sharpen: {message.format(why=why)}\n"


def test_a_torch_older_than_sharpen_needs_is_one_line_and_exit_4(tmp_path):
    """An environment made with --no-deps (or a conda torch pip left alone) may hold a torch older
    than pyproject's floor: one line saying which, not an AttributeError from inside a model."""
    (tmp_path / "f.py").write_bytes(ORIGINAL)
    code = ("import sys, torch; torch.__version__ = '2.6.0+cu124'; from sharpen.app.cli import main; "
            "sys.exit(main(sys.argv[1:]))")
    proc = subprocess.run([sys.executable, "-c", code, "f.py", "--apply-edit", "1", "--in-place"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 4, proc.stderr
    assert proc.stderr == "sharpen: torch 2.6.0+cu124 is too old: sharpen needs torch 2.11 or newer (pip install -U 'torch>=2.11')\n"
    assert (tmp_path / "f.py").read_bytes() == ORIGINAL


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
    before = {sig: signal.getsignal(sig) for sig in headless._STOP_SIGNALS}
    monkeypatch.setattr(headless, "_process_exits", True)
    try:
        with headless.signals_held() as check:
            save_text_file(read_text_file(path), "new\n", before_commit=check)
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        for sig, handler in before.items():  # all three: a SIGTERM left ignored would leak into later tests
            signal.signal(sig, handler)
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


# -- Round three (issue 29): files, locks, signals, options, the subcommands ----------------------------

CONSOLE_SCRIPT = [sys.executable, "-c", "import sys; from sharpen.app.start import main; sys.exit(main())"]  # as .venv/bin/sharpen


def test_a_file_replaced_by_a_symlink_during_the_run_is_not_written_through(tmp_path):
    """F18: same bytes behind the link, so only the inode tells; the other file must stay as it was."""
    path, other = tmp_path / "f.py", tmp_path / "other.py"
    path.write_bytes(ORIGINAL)
    other.write_bytes(ORIGINAL)
    source = read_text_file(path)
    path.unlink()
    path.symlink_to(other)
    with pytest.raises(InputError, match="replaced by a symbolic link to another file"):
        save_text_file(source, "new\n")
    assert other.read_bytes() == ORIGINAL and path.is_symlink() and no_temp_files(tmp_path)


def test_a_save_keeps_the_inode_it_wrote_as_its_base(tmp_path):
    path = tmp_path / "f.py"
    path.write_bytes(ORIGINAL)
    saved = save_text_file(read_text_file(path), "one\n")
    assert (saved.device, saved.inode) == (path.stat().st_dev, path.stat().st_ino)
    save_text_file(saved, "two\n")  # the file our own rename made is not "replaced"
    assert path.read_text() == "two\n"


def _hold_lock(directory: Path):
    """Another process holding the directory's flock (as `flock DIR sleep 600` would)."""
    code = f"import fcntl, os, sys, time; fd = os.open({str(directory)!r}, os.O_RDONLY); fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); time.sleep(600)"
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    assert holder.stdout.readline() == b"held\n"
    return holder


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_ends_the_wait_for_another_process_lock(tmp_path, tiny_model_dir, sig):
    """F8: --in-place waiting at the commit for a lock held elsewhere still honours Ctrl+C / SIGTERM."""
    path = tmp_path / "f.py"
    path.write_bytes(ORIGINAL)
    holder = _hold_lock(tmp_path)
    try:
        proc = subprocess.Popen([*CONSOLE_SCRIPT, "f.py", "--apply-edit", "2:12-2:17", "--in-place", "--steps", "2", "--model", tiny_model_dir],
                                cwd=tmp_path, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 120
        while not [p for p in tmp_path.iterdir() if p.name.endswith(TEMP_SUFFIX)] and time.monotonic() < deadline:
            time.sleep(0.05)  # the temp file exists: the run is done and waits for the lock
        time.sleep(0.3)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=30)
    finally:
        holder.kill()
    assert proc.returncode == 130 and err.decode() == "sharpen: interrupted; nothing was written\n"
    assert path.read_bytes() == ORIGINAL and no_temp_files(tmp_path)


def test_a_lock_held_too_long_is_refused_not_waited_on_forever(tmp_path, monkeypatch):
    monkeypatch.setattr(files, "LOCK_WAIT_SECONDS", 0.3)
    path = tmp_path / "f.py"
    path.write_bytes(ORIGINAL)
    holder = _hold_lock(tmp_path)
    try:
        with pytest.raises(InputError, match="held the save lock"):
            save_text_file(read_text_file(path), "new\n")
    finally:
        holder.kill()
    assert path.read_bytes() == ORIGINAL and no_temp_files(tmp_path)


def test_stop_signals_early_in_start_up_are_one_line_and_130(tmp_path, tiny_model_dir):
    """F13: from the console script's first instruction (app/start.py), a stop signal is never a
    KeyboardInterrupt traceback, never a death by the signal, never exit 0 with the edit written."""
    path = tmp_path / "f.py"
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        path.write_bytes(ORIGINAL)
        proc = subprocess.Popen([*CONSOLE_SCRIPT, "f.py", "--apply-edit", "2:12-2:17", "--in-place", "--model", tiny_model_dir],
                                cwd=tmp_path, stdin=subprocess.PIPE, stderr=subprocess.PIPE)
        proc.stdin.write(b"")  # the handlers are in place once start.py has run: wait for its import of cli
        time.sleep(0.4)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
        assert (proc.returncode, err.decode()) == (130, "sharpen: interrupted; nothing was written\n"), (sig, err)
        assert path.read_bytes() == ORIGINAL


def test_the_console_script_handles_stop_signals_before_importing_anything_else():
    from sharpen.app import stop

    code = ("import signal, sys; import sharpen.app.start; "
            "print(all(signal.getsignal(s) is sharpen.app.stop.stop_at_once for s in sharpen.app.stop.STOP_SIGNALS))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout == "True\n"
    assert signal.getsignal(signal.SIGINT) is not stop.stop_at_once  # importing the app installs nothing


def test_a_burst_of_ctrl_c_during_a_run_ends_in_130_without_a_traceback(tmp_path, tiny_model_dir):
    """F14: the second and later signals land while the first unwinds, in atexit or in teardown."""
    path = tmp_path / "f.py"
    path.write_bytes(ORIGINAL * 200)
    proc = subprocess.Popen([*CONSOLE_SCRIPT, "f.py", "--apply-edit", "1:1-1:1", "--max-tokens", "256", "--block-size", "0", "--in-place",
                             "--model", tiny_model_dir], cwd=tmp_path, stderr=subprocess.PIPE)
    time.sleep(6)  # loaded and denoising (the load is ~3 s here)
    for _ in range(40):
        if proc.poll() is not None:
            break
        proc.send_signal(signal.SIGINT)
        time.sleep(0.01)
    _, err = proc.communicate(timeout=60)
    text = err.decode()
    assert "Traceback" not in text and "Exception ignored" not in text, text
    assert proc.returncode in (0, 130), (proc.returncode, text)
    assert (path.read_bytes() == ORIGINAL * 200) == (proc.returncode == 130)


@pytest.mark.parametrize("content, message", [
    (b"\xef\xbb\xbf[sampling]\nsteps = 3\n", None),  # F21: a BOM is accepted
    (b"a = " + b"[" * 5000 + b"]" * 5000 + b"\n", "nested too deeply"),
    ("fifo", "is a FIFO, not a regular file"),
    ("dev-zero", "is a device, not a regular file"),
])
def test_config_files_are_read_as_untrusted_input(tmp_path, content, message):
    from sharpen.app.config import load_config
    from sharpen.core.errors import UsageError

    config = tmp_path / "config.toml"
    if content == "fifo":
        os.mkfifo(config)
    elif content == "dev-zero":
        config.symlink_to("/dev/zero")
    else:
        config.write_bytes(content)
    if message is None:
        assert load_config(config).sampling.steps == 3
    else:
        with pytest.raises(UsageError, match=message):
            load_config(config)


@pytest.mark.parametrize("args, message", [
    (["--device", "meta"], "--device must be auto, cpu, cuda, cuda:N or mps, not 'meta'"),
    (["--max-memory", "cpu=" + "9" * 400 + "TiB"], "--max-memory has a memory size beyond any machine"),
    (["--max-memory", "9" * 30 + "=1GiB"], "--max-memory has a GPU index beyond any machine"),
])
def test_options_no_model_can_use_are_usage_errors_before_torch(tmp_path, args, message):
    (tmp_path / "f.py").write_bytes(ORIGINAL)
    code = ("import sys; from sharpen.app.cli import main; code = main(sys.argv[1:]); "
            "sys.exit(90 if 'torch' in sys.modules else code)")
    proc = subprocess.run([sys.executable, "-c", code, "f.py", "--apply-edit", "1", *args], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stderr.startswith(f"sharpen: {message}") and proc.stderr.count("\n") == 1


def _zoo(tmp_path, tiny_model_dir) -> Path:
    """A folder of checkpoints: one good, the others broken in ways that used to be tracebacks."""
    import shutil

    zoo = tmp_path / "zoo"
    for name in ("good", "fifo-config", "bad-header", "config-list"):
        shutil.copytree(tiny_model_dir, zoo / name)
    (zoo / "fifo-config" / "config.json").unlink()
    os.mkfifo(zoo / "fifo-config" / "config.json")
    weights = zoo / "bad-header" / "model.safetensors"
    data = weights.read_bytes()
    n = int.from_bytes(data[:8], "little")
    header = data[8:8 + n].replace(b'"shape":[', b'"shape":["x",', 1)
    weights.write_bytes(len(header).to_bytes(8, "little") + header + data[8 + n:])
    (zoo / "config-list" / "config.json").write_text("[1, 2]")
    return zoo


def test_models_lists_broken_checkpoints_as_not_usable_with_why(tmp_path, tiny_model_dir, capsys):
    """F10: one broken checkpoint (here or in the HF cache) never takes the listing down."""
    from sharpen.app.cli import main

    zoo = _zoo(tmp_path, tiny_model_dir)
    assert main(["models", "--all", str(zoo)]) == 0
    out = capsys.readouterr().out
    broken = out.split("not usable:\n")[1]
    assert "fifo-config/config.json is a FIFO" in broken and "bad-header: corrupt weights file" in broken
    assert "config-list: " in broken and "is not a JSON object" in broken and "good" not in broken
    assert main(["models", "--json", str(zoo)]) == 0
    listed = {Path(c["path"]).name: c["usable"] for c in json.loads(capsys.readouterr().out) if c["source"] == "dir"}
    assert listed == {"good": True, "fifo-config": False, "bad-header": False, "config-list": False}


def test_models_survives_a_broken_checkpoint_in_the_hf_cache(tmp_path, tiny_model_dir):
    import shutil

    from sharpen.core.models.catalog import find_checkpoints

    cache = tmp_path / "hub"
    snapshot = cache / "models--someone--broken" / "snapshots" / ("a" * 40)
    shutil.copytree(tiny_model_dir, snapshot)
    (cache / "models--someone--broken" / "refs").mkdir()
    (cache / "models--someone--broken" / "refs" / "main").write_text("a" * 40)
    (snapshot / "tokenizer.json").unlink()
    (snapshot / "tokenizer.json").symlink_to("/dev/zero")
    found = [c for c in find_checkpoints([], cache_dir=cache, embedded=False)]
    assert [(c.name, c.usable) for c in found] == [("someone/broken", False)] and "is a device" in found[0].problem


def test_doctor_names_a_broken_model_in_one_report(tmp_path, tiny_model_dir, capsys):
    from sharpen.app.cli import main

    zoo = _zoo(tmp_path, tiny_model_dir)
    assert main(["doctor", "--model", str(zoo / "bad-header")]) == 4
    out = capsys.readouterr().out
    assert "cannot load: corrupt weights file model.safetensors" in out and "Traceback" not in out
