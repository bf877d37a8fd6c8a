"""The terminal guards (app/tui/terminal.py): invalid UTF-8 from the terminal is replaced, an
exception in any thread saves recovery and fails the exit code, and after a hang-up the process
is gone in bounded time with its unsaved work in recovery. Through the real driver in a pty."""
from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from terminal_pty import Terminal
from pilot import make_app, wait_for

from sharpen.app.recovery import RecoveryStore
from sharpen.app.tui.terminal import CRASH_EXIT, HANGUP_EXIT, SHUTDOWN_SECONDS, ChordParser, ProcessGuard, replacing_decoder

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="pseudo-terminals and SIGHUP are POSIX")

BOUND = SHUTDOWN_SECONDS + 6.0  # the watchdog's deadline, its recovery write, and a loaded 2-core machine
CTRL_S, CTRL_Q = b"\x13", b"\x11"
PASTE_START, PASTE_END = b"\x1b[200~", b"\x1b[201~"


def editor(tmp_path: Path, text: str = "x = 1\n", config: str = "") -> tuple[Terminal, Path, Path]:
    path = tmp_path / "f.py"
    path.write_text(text)
    store = tmp_path / "recovery"
    args = [str(path)]
    if config:
        (tmp_path / "config.toml").write_text(config)
        args += ["--config", str(tmp_path / "config.toml")]
    terminal = Terminal(args, {"SHARPEN_RECOVERY_DIR": str(store)})
    terminal.wait_for("f.py")
    return terminal, path, store


def recovered(store: Path, path: Path) -> str | None:
    texts = [e.text for e in RecoveryStore(store).entries_for(path) if e.text is not None]
    return texts[0] if texts else None


@pytest.mark.parametrize("bracketed", [True, False], ids=["bracketed-paste", "typed"])
def test_bytes_that_are_not_utf8_are_replaced_and_the_editor_goes_on(tmp_path, bracketed):
    terminal, path, _ = editor(tmp_path)
    try:
        terminal.type(b"hello", pause=0.3)
        bad = b"a\xffb\xed\xa0\x80c"
        terminal.type(PASTE_START + bad + b"\r" + PASTE_END if bracketed else bad)
        terminal.type(b"Z", pause=0.5)  # typed after the bad bytes: the input thread still reads
        terminal.type(CTRL_S, pause=1.0)
        terminal.type(CTRL_Q)
        assert terminal.wait(BOUND) == 0
        saved = path.read_text()
        assert saved.startswith("helloa\ufffdb") and "c" in saved and saved.endswith("x = 1\n")
        assert "Z" in saved and "\ufffd\ufffd\ufffdc" in saved  # the three bytes of a UTF-16 surrogate: three replacements
    finally:
        terminal.close()


def test_keys_typed_while_the_editor_starts_land_in_the_buffer(tmp_path):
    """Typed at once after launch, before the first screen: the terminal is still in cooked mode
    (its Enter arrives as LF), then the editor's driver reads it."""
    path = tmp_path / "f.py"
    path.write_text("x = 1\n")
    terminal = Terminal([str(path)], {"SHARPEN_RECOVERY_DIR": str(tmp_path / "recovery")})
    try:
        terminal.type(b"abc")
        terminal.type(b"def\r", pause=0.2)
        terminal.type(b"ghi")
        terminal.wait_for("f.py")
        terminal.type(b"!", pause=1.0)  # typed once the editor is up: after the rest
        terminal.type(CTRL_S, pause=1.0)
        terminal.type(CTRL_Q)
        assert terminal.wait(BOUND) == 0
        assert path.read_text() == "abcdef\nghi!x = 1\n"
    finally:
        terminal.close()


def test_a_character_split_across_two_reads_is_kept():
    decode = replacing_decoder()
    assert decode("é€".encode()[:3]) + decode("é€".encode()[3:]) == "é€"
    assert decode(b"\xff") == "\ufffd"


def test_a_burst_of_alt_chords_is_parsed_as_alt_chords():
    """Textual's parser gave "^", "i" for every chord of a burst but the last (a held Alt+I)."""
    parser = ChordParser()
    keys = [e.key for e in parser.feed("\x1bi\x1bi\x1bi\x1b[A\x07")] + [e.key for e in parser.feed("")]
    assert keys == ["alt+i", "alt+i", "alt+i", "up", "ctrl+g"]
    parser = ChordParser()
    keys = [e.key for e in parser.feed("\x1bl\x0712\r")] + [e.key for e in parser.feed("")]
    assert keys == ["alt+l", "ctrl+g", "1", "2", "enter"]  # a Ctrl+G right after an Alt chord keeps its place


@pytest.mark.parametrize("during", ["burst", "dialog", "run"])
def test_a_hang_up_ends_the_editor_in_bounded_time_with_its_work_in_recovery(tmp_path, during):
    config = "min_step_ms = 200\n[sampling]\nsteps = 64\n" if during == "run" else ""  # a run that lasts
    terminal, path, store = editor(tmp_path, "def f():\n    return 1\n", config)
    try:
        terminal.type(b"# kept", pause=0.3)
        terminal.wait_for("# kept")  # on screen, so in the buffer (a loaded machine starts the editor late)
        if during == "burst":
            terminal.type(b"abc\x1bi\x1bi\x1bi\x07" * 20)  # typing, Alt chords, Ctrl+G prompts, all in flight
        elif during == "dialog":
            terminal.type(CTRL_Q)
            terminal.wait_for("Save before quitting")
        else:
            terminal.wait_for("embedded", timeout=90)  # the model is loaded
            terminal.type(b"\x1b[B\x1b[1;2F")  # Down, Shift+End: select the body line
            terminal.type(b"\x1bOQ")  # F2: Infill
            terminal.wait_for("cancels")  # the run's status line
        started = time.monotonic()
        terminal.hang_up()
        code = terminal.wait(BOUND)
        elapsed = time.monotonic() - started
        assert code is not None, f"still running {BOUND} s after the hang-up"
        assert code in (HANGUP_EXIT, -1), code  # 129, or killed by SIGHUP before the guard was in place
        assert recovered(store, path).startswith("# kept")
        assert path.read_text() == "def f():\n    return 1\n"  # nothing written to the file itself
        print(f"{during}: gone {elapsed:.2f} s after the hang-up")
    finally:
        terminal.close()


@pytest.mark.parametrize("signum", [1, 15], ids=["SIGHUP", "SIGTERM"])
def test_a_stop_signal_with_the_terminal_still_open_ends_the_editor_through_recovery(tmp_path, signum):
    import os

    terminal, path, store = editor(tmp_path)
    try:
        terminal.type(b"# kept", pause=0.3)
        terminal.type(b"\x1bi\x1bi\x07")  # a burst in flight: Alt chords, a prompt opening
        os.kill(terminal.process.pid, signum)
        code = terminal.wait(BOUND)
        assert code == 128 + signum
        assert recovered(store, path).startswith("# kept")
        assert path.read_text() == "x = 1\n"
        assert "\x1b[?1049l" in terminal.output.decode("utf-8", "replace")  # left the alternate screen
    finally:
        terminal.close()


WATCHDOG_SCRIPT = textwrap.dedent("""
    import queue, sys, threading
    from sharpen.app.tui.terminal import ProcessGuard

    class Recovery:
        def write_recovery(self):
            open(sys.argv[1], "w").write("written")

    class App:  # the part of SharpenApp the watchdog uses
        recovery = Recovery()
        driver_class = None

    guard = ProcessGuard(App(), shutdown_seconds=1.0)
    guard.install()
    guard._arm(129)  # what SIGHUP does
    stuck = queue.Queue(1)
    stuck.put(None)
    stuck.put(None)  # the shutdown deadlock that was seen: a put on a full queue nobody drains
""")


def test_the_watchdog_ends_a_stuck_shutdown_after_writing_recovery(tmp_path):
    marker = tmp_path / "recovery-written"
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", WATCHDOG_SCRIPT, str(marker)], timeout=30)
    assert done.returncode == HANGUP_EXIT
    assert marker.read_text() == "written"
    assert time.monotonic() - started < 1.0 + 10  # its deadline, plus an interpreter start on a loaded machine


RESTORE_SCRIPT = textwrap.dedent("""
    import queue, sys, termios, tty
    from sharpen.app.tui.terminal import ProcessGuard

    class Recovery:
        def write_recovery(self):
            pass

    class Driver:  # the part of LinuxDriver the watchdog uses
        _file = sys.__stderr__
        attrs_before = termios.tcgetattr(2)

    class App:
        recovery, driver_class, _driver = Recovery(), None, Driver()

    tty.setraw(2)  # what the editor's driver does
    guard = ProcessGuard(App(), shutdown_seconds=0.5)
    guard.install()
    guard._arm(143)  # SIGTERM, and a shutdown that never finishes
    queue.Queue(1).get()
""")


def test_the_watchdog_gives_a_terminal_that_is_still_there_its_modes_back(tmp_path):
    import os
    import pty
    import termios

    master, slave = pty.openpty()
    before = termios.tcgetattr(slave)
    process = subprocess.Popen([sys.executable, "-c", RESTORE_SCRIPT], stdin=slave, stdout=slave, stderr=slave)
    assert process.wait(30) == 143
    after = termios.tcgetattr(master)
    os.close(slave)
    output = os.read(master, 65536)
    os.close(master)
    assert after[3] & (termios.ECHO | termios.ICANON) == before[3] & (termios.ECHO | termios.ICANON) != 0
    assert b"\x1b[?1049l" in output and b"\x1b[?25h" in output  # off the alternate screen, cursor shown


async def test_an_exception_in_any_thread_writes_recovery_and_fails_the_exit_code(tmp_path):
    path = tmp_path / "f.py"
    path.write_text("x = 1\n")
    store = RecoveryStore(tmp_path / "recovery")
    app = make_app([path])
    app.recovery._recovery_store = store
    guard = ProcessGuard(app)  # not installed: its watchdog would end the test process
    async with app.run_test() as pilot:
        guard.attach()
        editor = app.active_pane().editor
        editor.insert("typed ")
        previous, threading.excepthook = threading.excepthook, guard._excepthook
        try:
            thread = threading.Thread(target=lambda: 1 / 0, name="textual-input")
            thread.start()
            thread.join()
            await wait_for(pilot, lambda: app._exit, timeout=10)
        finally:
            threading.excepthook = previous
    assert app.return_code == CRASH_EXIT and guard.exit_code == CRASH_EXIT
    assert store.entries_for(path)[0].text == "typed x = 1\n"
