"""The editor in a pseudo-terminal: the real driver, its input thread and its signals.

`Terminal(args, env)` runs `sharpen ARGS` with a new pty as its controlling terminal (so
closing our end is a real hang-up: the kernel sends SIGHUP), drains what it draws in a
thread (a full pty would block its writer), and lets a test type bytes and wait for text.
"""
from __future__ import annotations

import fcntl
import os
import re
import struct
import subprocess
import sys
import termios
import threading
import time
from pathlib import Path

SHARPEN = str(Path(sys.executable).with_name("sharpen"))
ANSI = re.compile(rb"\x1b\[[0-9;?<>=]*[ -/]*[@-~]|\x1b[()][0-9A-Za-z]|\x1b[=>78]")


def _controlling_tty() -> None:
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)  # after setsid (start_new_session): the pty is this session's terminal


class Terminal:
    def __init__(self, args: list[str], env: dict[str, str], size: tuple[int, int] = (100, 30)) -> None:
        self.master, slave = os.openpty()
        columns, rows = size
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
        self.output = bytearray()
        self.process = subprocess.Popen(
            [SHARPEN, *args], stdin=slave, stdout=slave, stderr=slave, env={**os.environ, "TERM": "xterm-256color", **env},
            start_new_session=True, preexec_fn=_controlling_tty, close_fds=True)
        os.close(slave)
        self._closed = False
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self) -> None:
        while True:
            try:
                data = os.read(self.master, 65536)
            except OSError:  # EIO once the child closed its side, EBADF once we closed ours
                return
            if not data:
                return
            self.output.extend(data)

    def text(self) -> str:
        """What was drawn so far, escape sequences removed (cursor moves join words oddly; good for `in`)."""
        return ANSI.sub(b"", bytes(self.output)).decode("utf-8", "replace")

    def wait_for(self, needle: str, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while needle not in self.text():
            if time.monotonic() > deadline or self.process.poll() is not None:
                raise AssertionError(f"{needle!r} not drawn (exit {self.process.poll()}); last output: {self.text()[-800:]!r}")
            time.sleep(0.05)

    def type(self, data: bytes, pause: float = 0.0) -> None:
        os.write(self.master, data)
        if pause:
            time.sleep(pause)

    def hang_up(self) -> None:
        """Close the terminal's other end, as closing a terminal window or a tmux pane does."""
        if not self._closed:
            self._closed = True
            os.close(self.master)

    def wait(self, timeout: float) -> int | None:
        """The exit code, or None when the process is still running after `timeout` seconds."""
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.hang_up()
