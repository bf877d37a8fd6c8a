"""Files on disk: atomic writes, permissions, symlinks, unwritable places, changes on disk, recovery."""
import os
import signal
import stat
from pathlib import Path

import pytest

from sharpen.core import files
from sharpen.core.errors import InputError
from sharpen.core.files import (
    TEMP_SUFFIX,
    atomic_write,
    changed_on_disk,
    check_writable,
    disk_change,
    ensure_unchanged,
    read_text_file,
    save_text_file,
)
from sharpen.app.recovery import RecoveryEntry, RecoveryStore, changed_since_recorded, decode_entry, encode_entry, worth_offering

AS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


def leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(TEMP_SUFFIX))


# --- reading ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "data",
    [b"a\r\nb\nc\r\n", b"\xef\xbb\xbfx\ty\r\n", b"no newline at end", b"", b"\r\n\r\n", b"lone\rcr\n", "東京\n☃".encode()],
)
def test_read_then_save_unchanged_is_byte_identical(tmp_path, data):
    path = tmp_path / "f.txt"
    path.write_bytes(data)
    source = read_text_file(path)
    assert source.size == len(data) and len(source.digest) == 64
    after = save_text_file(source, source.text)
    assert path.read_bytes() == data
    assert after.digest == source.digest and not changed_on_disk(after)


def test_fifo_and_directory_are_refused_without_blocking(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(InputError, match="not a regular file"):
        read_text_file(fifo)  # opening it would block forever
    with pytest.raises(InputError, match="is a directory"):
        read_text_file(tmp_path)
    with pytest.raises(InputError, match="broken symbolic link"):
        (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
        read_text_file(tmp_path / "dangling")


def test_nul_after_the_sniffed_head_is_still_binary(tmp_path):
    path = tmp_path / "late.bin"
    path.write_bytes(b"x" * 20000 + b"\x00")
    with pytest.raises(InputError, match="binary"):
        read_text_file(path)


def test_too_large_is_refused_before_reading(tmp_path, monkeypatch):
    monkeypatch.setattr(files, "MAX_FILE_BYTES", 10)
    path = tmp_path / "big.txt"
    path.write_bytes(b"x" * 11)
    with pytest.raises(InputError, match="too large"):
        read_text_file(path)


# --- atomic writes ------------------------------------------------------------------------


def test_atomic_write_keeps_mode_and_leaves_no_temp(tmp_path):
    path = tmp_path / "script.sh"
    path.write_bytes(b"old\n")
    os.chmod(path, 0o751)
    atomic_write(path, b"new\n")
    assert path.read_bytes() == b"new\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o751
    assert leftovers(tmp_path) == []


def test_atomic_write_new_file_mode(tmp_path):
    atomic_write(tmp_path / "private", b"x", new_file_mode=0o600)
    assert stat.S_IMODE((tmp_path / "private").stat().st_mode) == 0o600


def test_temp_file_is_in_the_target_directory(tmp_path, monkeypatch):
    seen = []
    real = files.tempfile.mkstemp
    monkeypatch.setattr(files.tempfile, "mkstemp", lambda **kw: seen.append(kw["dir"]) or real(**kw))
    (tmp_path / "sub").mkdir()
    atomic_write(tmp_path / "sub" / "f", b"x")
    assert [Path(d) for d in seen] == [tmp_path / "sub"]


def test_symlink_is_written_through_and_stays_a_link(tmp_path):
    real_dir = tmp_path / "real"
    real_dir.mkdir()
    target = real_dir / "target.txt"
    target.write_bytes(b"old\r\n")
    os.chmod(target, 0o640)
    link = tmp_path / "link.txt"
    link.symlink_to(target)
    source = read_text_file(link)
    save_text_file(source, "new\r\n")
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_bytes() == b"new\r\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert leftovers(tmp_path) == [] and leftovers(real_dir) == []


def test_failure_before_commit_leaves_original_and_no_temp(tmp_path):
    path = tmp_path / "f.txt"
    path.write_bytes(b"original")

    def refuse():
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        atomic_write(path, b"new", before_commit=refuse)
    assert path.read_bytes() == b"original" and leftovers(tmp_path) == []


def test_missing_directory_is_a_clear_input_error(tmp_path):
    gone = tmp_path / "gone"
    with pytest.raises(InputError, match="does not exist"):
        atomic_write(gone / "f.txt", b"x")
    with pytest.raises(InputError, match="does not exist"):
        check_writable(gone / "f.txt")


def test_directory_removed_during_the_run(tmp_path):
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "f.txt").write_bytes(b"x\n")
    source = read_text_file(sub / "f.txt")
    (sub / "f.txt").unlink()
    sub.rmdir()
    with pytest.raises(InputError, match="f.txt"):
        save_text_file(source, "y\n")
    assert not sub.exists()


def test_unwritable_directory_simulated(tmp_path, monkeypatch):
    # Root ignores permission bits, so the refusal is simulated at the OS call.
    path = tmp_path / "f.txt"
    path.write_bytes(b"keep")

    def denied(**kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(files.tempfile, "mkstemp", denied)
    with pytest.raises(InputError, match="permission denied"):
        atomic_write(path, b"new")
    assert path.read_bytes() == b"keep"


def test_disk_full_during_write_keeps_original(tmp_path, monkeypatch):
    path = tmp_path / "f.txt"
    path.write_bytes(b"keep")

    def full(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(files.os, "fsync", full)
    with pytest.raises(InputError, match="No space left"):
        atomic_write(path, b"new")
    assert path.read_bytes() == b"keep" and leftovers(tmp_path) == []


@pytest.mark.skipif(AS_ROOT, reason="root writes into read-only directories")
def test_read_only_directory(tmp_path):
    path = tmp_path / "ro" / "f.txt"
    path.parent.mkdir()
    path.write_bytes(b"keep")
    os.chmod(path.parent, 0o555)
    try:
        with pytest.raises(InputError, match="not writable"):
            check_writable(path)
        with pytest.raises(InputError, match="permission denied"):
            atomic_write(path, b"new")
        assert path.read_bytes() == b"keep"
    finally:
        os.chmod(path.parent, 0o755)


def test_read_only_file_is_refused_even_as_root(tmp_path):
    path = tmp_path / "f.txt"
    path.write_bytes(b"keep")
    os.chmod(path, 0o444)
    with pytest.raises(InputError, match="read-only"):
        check_writable(path)


# --- changed on disk ----------------------------------------------------------------------


def test_change_on_disk_is_noticed_by_content_not_by_touch(tmp_path):
    path = tmp_path / "f.txt"
    path.write_bytes(b"one\n")
    source = read_text_file(path)
    assert disk_change(source) is None
    os.utime(path, ns=(1, 1))  # touched only
    assert disk_change(source) is None
    assert disk_change(source, quick=True) == "its modification time changed"
    path.write_bytes(b"two\n")  # same size, other content
    assert disk_change(source) == "its content changed"
    path.write_bytes(b"three\n")
    assert "size changed" in disk_change(source)
    path.unlink()
    assert "deleted" in disk_change(source)
    with pytest.raises(InputError, match="changed on disk"):
        ensure_unchanged(source)


def test_save_refuses_a_file_changed_since_it_was_read(tmp_path):
    path = tmp_path / "f.txt"
    path.write_bytes(b"mine\n")
    source = read_text_file(path)
    path.write_bytes(b"theirs\n")
    with pytest.raises(InputError, match="changed on disk"):
        save_text_file(source, "edited\n")
    assert path.read_bytes() == b"theirs\n" and leftovers(tmp_path) == []
    save_text_file(source, "edited\n", check_disk=False)  # an explicit overwrite still works
    assert path.read_bytes() == b"edited\n"


# --- signals around the write (headless) -----------------------------------------------------


def test_signal_during_the_write_abandons_it(tmp_path, monkeypatch):
    from sharpen.app.headless import signals_held

    path = tmp_path / "f.txt"
    path.write_bytes(b"original\r\n")
    source = read_text_file(path)
    real_fsync = os.fsync

    def fsync_then_signal(fd):
        real_fsync(fd)
        os.kill(os.getpid(), signal.SIGINT)  # held: it must not cut the write short

    monkeypatch.setattr(files.os, "fsync", fsync_then_signal)
    with pytest.raises(KeyboardInterrupt):
        with signals_held() as check:
            save_text_file(source, "new\r\n", before_commit=check)
    assert path.read_bytes() == b"original\r\n" and leftovers(tmp_path) == []


def test_signal_after_the_commit_point_keeps_the_new_file(tmp_path, monkeypatch):
    from sharpen.app.headless import signals_held

    path = tmp_path / "f.txt"
    path.write_bytes(b"original\n")
    real_replace = os.replace

    def replace_then_signal(a, b):
        os.kill(os.getpid(), signal.SIGINT)
        real_replace(a, b)

    monkeypatch.setattr(files.os, "replace", replace_then_signal)
    with signals_held() as check:
        save_text_file(read_text_file(path), "new\n", before_commit=check)
    assert path.read_bytes() == b"new\n"  # no KeyboardInterrupt escaped: exit 0 <=> new text


# --- recovery -----------------------------------------------------------------------------


def test_recovery_round_trip(tmp_path):
    store = RecoveryStore(tmp_path / "state")
    doc = tmp_path / "doc.txt"
    doc.write_bytes(b"\xef\xbb\xbfa\r\n")
    original = read_text_file(doc)
    text = "a\r\n\tmixed\nend\r\u2028\udc80"  # CR, tab, odd separators, even a lone surrogate
    written = store.save(doc, text, bom=True, original=original)
    assert written is not None and stat.S_IMODE(written.stat().st_mode) == 0o600
    assert store.save(doc, text, bom=True, original=original) is None  # unchanged: skipped
    entry = store.load(doc)
    assert entry.text == text and entry.bom and entry.path == doc
    assert entry.original_digest == original.digest and entry.original_mtime_ns == original.mtime_ns
    assert worth_offering(entry, original.text) and not worth_offering(entry, text)
    assert not changed_since_recorded(entry, original)
    assert [e.path for e in store.entries()] == [doc]
    assert store.discard(doc) and store.load(doc) is None and not store.discard(doc)


def test_recovery_keys_by_absolute_path_and_lists_newest_first(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    store = RecoveryStore(tmp_path / "state")
    store.save("a.txt", "first")
    store.save(tmp_path / "b.txt", "second")
    assert store.load(tmp_path / "a.txt").text == "first"  # relative and absolute: one key
    assert [e.text for e in store.entries()] == ["second", "first"]
    assert store.load(tmp_path / "c.txt") is None


def test_recovery_skips_corrupt_files(tmp_path, caplog):
    store = RecoveryStore(tmp_path)
    store.save(tmp_path / "ok.txt", "fine")
    store.file_for(tmp_path / "bad.txt").write_bytes(b'{"format": 1, "text": 3}')
    (tmp_path / f"x{'.recovery.json'}").write_bytes(b"\xff garbage")
    assert [e.text for e in store.entries()] == ["fine"]
    assert store.load(tmp_path / "bad.txt") is None
    assert "unreadable recovery file" in caplog.text


def test_recovery_entry_codec_rejects_other_formats():
    entry = RecoveryEntry(Path("/x"), "t", False, 1.0, None, None, None)
    assert decode_entry(encode_entry(entry)) == entry
    with pytest.raises(ValueError):
        decode_entry(b'{"format": 99, "text": "t", "path": "/x"}')
    with pytest.raises(ValueError):
        decode_entry(b'{"format": 1, "text": "t", "path": "/x", "original_size": "big"}')


def test_recovery_dir_defaults_to_platform_state_dir(monkeypatch):
    from platformdirs import user_state_dir

    monkeypatch.delenv("SHARPEN_RECOVERY_DIR", raising=False)
    assert RecoveryStore().directory == Path(user_state_dir("sharpen")) / "recovery"
    monkeypatch.setenv("SHARPEN_RECOVERY_DIR", "/somewhere")
    assert RecoveryStore().directory == Path("/somewhere")


def test_recovery_directory_unwritable_is_an_input_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(InputError, match="recovery directory"):
        RecoveryStore(blocker / "state").save(tmp_path / "x", "t")


# --- huge files ---------------------------------------------------------------------------


def test_100k_line_file_infills_in_place_with_a_bounded_window(tmp_path, tiny_model_dir, capfd, monkeypatch):
    from sharpen.app.cli import main
    from sharpen.core.models.denoiser import Denoiser

    seen = []
    real_logits = Denoiser.logits

    def spy(self, x, *args, **kwargs):
        seen.append(x.shape[-1])  # canvas (or chunk) length the model is run on
        return real_logits(self, x, *args, **kwargs)

    monkeypatch.setattr(Denoiser, "logits", spy)
    lines = [f"value_{n} = {n} * 2\r\n" if n % 3 else f"\tvalue_{n} = {n}\n" for n in range(100_000)]
    data = b"\xef\xbb\xbf" + "".join(lines).encode()
    path = tmp_path / "huge.py"
    path.write_bytes(data)
    code = main([str(path), "--apply-edit", "50000:12-50000:20", "--in-place", "--max-tokens", "4", "--steps", "2",
                 "--context-tokens", "256", "--model", str(tiny_model_dir)])
    assert code == 0, capfd.readouterr().err
    new = path.read_bytes()
    head = b"\xef\xbb\xbf" + "".join(lines[:49_999]).encode() + lines[49_999][:11].encode()
    tail = lines[49_999][19:].encode() + "".join(lines[50_000:]).encode()
    assert new.startswith(head) and new.endswith(tail) and len(new) <= len(head) + len(tail) + 64
    assert seen and max(seen) <= 256 + 4 + 8  # the window, not the file


def test_a_killed_editor_left_as_a_zombie_is_not_alive():
    """kill -9 leaves the editor a zombie until its parent reaps it: os.kill(pid, 0) still works,
    and restarting right away offered nothing. State Z counts as exited."""
    import subprocess
    import time as clock

    from sharpen.app.recovery import _start_ticks, session_alive

    child = subprocess.Popen(["sleep", "30"])
    try:
        session = f"{child.pid}-{_start_ticks(child.pid)}-0"
        assert session_alive(session)
        child.kill()
        for _ in range(100):  # not reaped: a zombie
            if open(f"/proc/{child.pid}/stat").read().rsplit(")", 1)[1].split()[0] == "Z":
                break
            clock.sleep(0.01)
        assert not session_alive(session)
    finally:
        child.wait()
