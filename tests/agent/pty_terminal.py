"""`nexus` on a real pseudo-terminal, for the tests that need one: Ctrl-C from the terminal driver,
keys typed ahead, and what reaches the screen byte for byte."""

from __future__ import annotations

import os
import pty
import select
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path


class Terminal:
    """`nexus` on a real pseudo-terminal: what it prints is read from the master side (`raw`, the
    bytes; `output`, the text with `\\r\\n` as `\\n`), keys are typed into it (Ctrl-C there is a
    real SIGINT from the terminal driver)."""

    def __init__(self, args: list[str], cwd: Path, env: dict[str, str]) -> None:
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: exec at once, nothing else
            try:
                os.chdir(cwd)
                os.execve(sys.executable, [sys.executable, "-m", "nexus_core.cli", *args], env)
            finally:
                os._exit(127)
        self.raw = b""

    @property
    def output(self) -> str:
        return self.raw.decode("utf-8", "replace").replace("\r\n", "\n")

    def read_until(self, text: str, timeout: float = 60) -> str:
        deadline = time.monotonic() + timeout
        while text not in self.output:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"{text!r} did not appear; the terminal shows:\n{self.output}")
            ready, _, _ = select.select([self.fd], [], [], min(left, 1))
            if ready:
                try:
                    chunk = os.read(self.fd, 4096)
                except OSError:  # the child is gone
                    chunk = b""
                if not chunk:
                    raise AssertionError(f"the terminal closed before {text!r}:\n{self.output}")
                self.raw += chunk
        return self.output

    def wait_for(self, ready: Callable[[], bool], what: str, timeout: float = 60) -> None:
        """Read what the terminal shows until `ready()` is true (an event outside it)."""
        deadline = time.monotonic() + timeout
        while not ready():
            if time.monotonic() > deadline:
                raise AssertionError(f"{what} did not happen; the terminal shows:\n{self.output}")
            readable, _, _ = select.select([self.fd], [], [], 0.05)
            if readable:
                try:
                    self.raw += os.read(self.fd, 4096)
                except OSError:
                    raise AssertionError(f"the terminal closed before {what}:\n{self.output}") from None

    def type(self, keys: bytes) -> None:
        os.write(self.fd, keys)

    def wait(self, timeout: float = 60) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                ready, _, _ = select.select([self.fd], [], [], 0.2)
                if ready:
                    self.raw += os.read(self.fd, 4096)
            except OSError:
                pass
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                os.close(self.fd)
                return os.waitstatus_to_exitcode(status)
        os.kill(self.pid, signal.SIGKILL)
        raise AssertionError(f"nexus did not end:\n{self.output}")

    def kill(self) -> None:
        """End the child if it is still there (a test's cleanup)."""
        try:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
