"""Running one command: in its own process group, under a wall-clock timeout that kills the whole
group, with stdout and stderr captured up to a cap.

Nothing here knows about Nexus; `run_command` is a plain function the plugin calls per tool call.
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

#: how long to keep reading after the command ended, for output still in the pipes. Only a
#: process that left the process group (setsid) can hold a pipe open past the group's kill.
_DRAIN_SECONDS = 1.0
#: how often to look for the command's exit where the OS gives no exit notification (no pidfd)
_POLL_SECONDS = 0.02


@dataclass(frozen=True)
class Completed:
    """How a command ended. `exit_code` is None when it timed out (it was killed, it did not
    exit); a command killed by signal N reports 128 + N, as a shell does."""

    stdout: str
    stderr: str
    exit_code: int | None
    timed_out: bool
    stdout_truncated: bool
    stderr_truncated: bool
    signal: int | None = None


class _Capture:
    """One output stream, kept within `limit` bytes however much the command writes.

    Keeps the first half and the last half and counts what falls between: the start of the
    output shows what ran, the end shows how it ended (the error message, the summary line).
    """

    def __init__(self, name: str, limit: int) -> None:
        self.name = name
        self.limit = limit
        self._head_limit = limit - limit // 2
        self._tail_limit = limit // 2
        self._head = bytearray()
        self._tail = bytearray()
        self.total = 0

    def add(self, data: bytes) -> None:
        self.total += len(data)
        room = self._head_limit - len(self._head)
        if room > 0:
            self._head += data[:room]
            data = data[room:]
        if data:
            self._tail += data
            excess = len(self._tail) - self._tail_limit
            if excess > 0:
                del self._tail[:excess]

    @property
    def truncated(self) -> bool:
        return self.total > self.limit

    def text(self) -> str:
        if not self.truncated:
            return (self._head + self._tail).decode("utf-8", "replace")
        omitted = self.total - len(self._head) - len(self._tail)
        marker = (f"\n[... {omitted} bytes of {self.name} omitted: the command wrote {self.total} bytes, "
                  f"more than max_output_bytes={self.limit} ...]\n")
        return self._head.decode("utf-8", "replace") + marker + self._tail.decode("utf-8", "replace")


def _has_exited(proc: subprocess.Popen[bytes]) -> bool:
    """Whether the command's shell has exited, without reaping it.

    Leaving it unreaped (a zombie) keeps its pid, which is also the process group's id, from
    being reused, so the group kill that follows cannot reach an unrelated process.
    """
    waitid = getattr(os, "waitid", None)
    if waitid is None:  # macOS before Python 3.13: reap, and accept the tiny reuse window
        return proc.poll() is not None
    try:
        return waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:  # already reaped
        return True


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # the group is already empty (or only holds processes we may not signal)


def _exit_notifier(pid: int) -> int | None:
    """A pidfd that becomes readable when `pid` exits (Linux 5.3+), or None: then we poll."""
    pidfd_open = getattr(os, "pidfd_open", None)
    if pidfd_open is None:
        return None
    try:
        return int(pidfd_open(pid))
    except OSError:
        return None


def run_command(
    argv: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    timeout: float,
    max_output_bytes: int,
) -> Completed:
    """Run `argv` and wait for it, at most `timeout` seconds.

    The command gets its own session and process group (so it has no controlling terminal and
    one signal reaches everything it started) and an empty stdin. When the shell exits, or the
    timeout passes, the whole group is killed: nothing the command started outlives the call.
    Raises OSError when the command cannot be started.
    """
    proc = subprocess.Popen(
        list(argv),
        cwd=cwd,
        env=dict(env),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    assert proc.stdout is not None and proc.stderr is not None
    out, err = _Capture("stdout", max_output_bytes), _Capture("stderr", max_output_bytes)
    captures = {proc.stdout.fileno(): out, proc.stderr.fileno(): err}
    pidfd = _exit_notifier(proc.pid)
    deadline = time.monotonic() + timeout
    timed_out = False
    ended_at: float | None = None  # when the shell exited or was killed

    with selectors.DefaultSelector() as selector:
        for fd in captures:
            os.set_blocking(fd, False)
            selector.register(fd, selectors.EVENT_READ)
        if pidfd is not None:
            selector.register(pidfd, selectors.EVENT_READ)
        try:
            while True:
                now = time.monotonic()
                if ended_at is None:
                    if _has_exited(proc):
                        ended_at = now
                        _kill_group(proc.pid)  # background jobs (`cmd &`) end with the command
                    elif now >= deadline:
                        ended_at, timed_out = now, True
                        _kill_group(proc.pid)
                    if ended_at is not None and pidfd is not None:
                        selector.unregister(pidfd)
                open_pipes = len(selector.get_map()) - (1 if pidfd is not None and ended_at is None else 0)
                if ended_at is not None and (open_pipes == 0 or now >= ended_at + _DRAIN_SECONDS):
                    break
                if ended_at is not None:
                    wait = ended_at + _DRAIN_SECONDS - now
                elif pidfd is not None:
                    wait = deadline - now
                else:
                    wait = min(_POLL_SECONDS, deadline - now)
                for key, _ in selector.select(timeout=max(wait, 0)):
                    if key.fd == pidfd:
                        continue  # the exit is handled at the top of the loop
                    try:
                        data = os.read(key.fd, 65536)
                    except BlockingIOError:
                        continue
                    if data:
                        captures[key.fd].add(data)
                    else:
                        selector.unregister(key.fd)
        finally:
            if pidfd is not None:
                os.close(pidfd)
            if ended_at is None:  # interrupted (KeyboardInterrupt): leave nothing running
                _kill_group(proc.pid)
            proc.stdout.close()
            proc.stderr.close()
            returncode = proc.wait()

    exit_code: int | None = returncode
    killed_by: int | None = None
    if returncode < 0:
        killed_by = -returncode
        exit_code = 128 + killed_by
    if timed_out:
        exit_code, killed_by = None, None
    return Completed(
        stdout=out.text(),
        stderr=err.text(),
        exit_code=exit_code,
        timed_out=timed_out,
        stdout_truncated=out.truncated,
        stderr_truncated=err.truncated,
        signal=killed_by,
    )
