"""Running one command: under a wall-clock timeout and a caller's stop, with stdout and stderr
captured up to a cap, and nothing it started left running afterwards.

Two ways to end everything a command started, by what the system offers (`kill_method` says which):

- **a supervisor** (Linux): the command runs below nexus_core's supervisor, a small Python
  process that is a child subreaper (`nexus_core.supervisor`, docs/supervisor.md), so every
  process the command starts stays its descendant, even one that calls `setsid` or
  double-forks; when the command ends, times out or is stopped, the supervisor kills them all
  and says which it killed.
- **the process group** (elsewhere, or where the interpreter cannot be started again): the
  command runs in its own session and process group, and the group is killed; a process that
  leaves the group survives.

Nothing here knows about Nexus; `run_command` is a plain function the plugin calls per tool call.

    host (run_command)                 supervisor                        command
    Supervised.start(argv, env)
                                       PR_SET_CHILD_SUBREAPER
                                       fork ─ report "started": pid ───► exec bash -c ... (new session)
    timeout, stop: stop() ───────────► kill every descendant, round ──► its children, setsid or not: gone
                                       after round, and reap them
    .ended ◄────────────────────────── exit, killed, left
"""

from __future__ import annotations

import functools
import os
import selectors
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from nexus_core.supervisor import Supervised, why_unavailable

#: how long to keep reading after everything was killed, for output still in the pipes. Only a
#: process that could not be killed (or that left the group, without a supervisor) can hold a
#: pipe open past that.
_DRAIN_SECONDS = 1.0
#: how often to look for the command's exit where the OS gives no exit notification (no pidfd)
_POLL_SECONDS = 0.02
#: how long the supervisor may take to report after it was told to kill (its own grace is 5 s)
_REPORT_SECONDS = 15.0


class Stoppable(Protocol):
    """What a caller can stop a command with: nexus_core's CancelToken, or anything like it."""

    @property
    def cancelled(self) -> bool: ...

    def on_cancel(self, fn: Callable[[], Any]) -> Callable[[], None]: ...


@dataclass(frozen=True)
class Completed:
    """How a command ended. `exit_code` is None when it timed out or was stopped (it was killed,
    it did not exit); a command killed by signal N reports 128 + N, as a shell does. `killed`
    are the (pid, name) of the processes killed at its end, `left` the (pid, name, why) of any
    that could not be."""

    stdout: str
    stderr: str
    exit_code: int | None
    timed_out: bool
    stdout_truncated: bool
    stderr_truncated: bool
    signal: int | None = None
    stopped: bool = False
    killed: tuple[tuple[int, str], ...] = ()
    left: tuple[tuple[int, str, str], ...] = ()
    #: what ended the command's processes: "supervisor", "process group", or why the
    #: supervisor could not (its death, or no subreaper)
    kill_note: str = ""


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


# -- which way -------------------------------------------------------------------------------


def _why_no_supervisor() -> str:
    """Why commands cannot run below a supervisor here ("" when they can)."""
    return why_unavailable() or ""


@functools.cache
def kill_method() -> tuple[bool, str]:
    """(True, how) when commands run below a subreaper supervisor here, else (False, why not and
    what is done instead): tried once per process, by running `true` below one."""
    why = _why_no_supervisor()
    if not why:
        try:
            done = _run_supervised(["/bin/sh", "-c", "true"], cwd=Path("/"), env={}, timeout=60,
                                   max_output_bytes=256, stop=None)
        except OSError as exc:
            why = f"the supervisor cannot start: {exc.strerror or exc}"
        else:
            if done.kill_note == "supervisor":
                return True, ("a supervisor that is PR_SET_CHILD_SUBREAPER kills every process the command started, "
                              "setsid or double-forked")
            why = done.kill_note
    return False, f"{why}; the command's process group is killed, a process that leaves it (setsid) is not"


# -- running ---------------------------------------------------------------------------------


def run_command(
    argv: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    timeout: float,
    max_output_bytes: int,
    stop: Stoppable | None = None,
) -> Completed:
    """Run `argv` and wait for it, at most `timeout` seconds, or until `stop` is cancelled.

    The command gets its own session and process group (no controlling terminal) and an empty
    stdin. When the shell exits, the timeout passes or the caller stops it, every process it
    started is killed (see the module docstring for how): nothing the command started outlives
    the call. Raises OSError when the command cannot be started.
    """
    if _why_no_supervisor():
        return _run_grouped(argv, cwd=cwd, env=env, timeout=timeout, max_output_bytes=max_output_bytes, stop=stop)
    return _run_supervised(argv, cwd=cwd, env=env, timeout=timeout, max_output_bytes=max_output_bytes, stop=stop)


@dataclass
class _Pipes:
    """The command's stdout and stderr, read into their captures while the call waits."""

    selector: selectors.BaseSelector
    captures: dict[int, _Capture]
    out: _Capture
    err: _Capture

    @classmethod
    def of(cls, proc: subprocess.Popen[bytes], selector: selectors.BaseSelector, limit: int) -> _Pipes:
        assert proc.stdout is not None and proc.stderr is not None
        out, err = _Capture("stdout", limit), _Capture("stderr", limit)
        captures = {proc.stdout.fileno(): out, proc.stderr.fileno(): err}
        for fd in captures:
            os.set_blocking(fd, False)
            selector.register(fd, selectors.EVENT_READ)
        return cls(selector, captures, out, err)

    @property
    def open(self) -> int:
        return sum(1 for key in self.selector.get_map().values() if key.fd in self.captures)

    def read(self, fd: int) -> None:
        try:
            data = os.read(fd, 65536)
        except BlockingIOError:
            return
        if data:
            self.captures[fd].add(data)
        else:
            self.selector.unregister(fd)


class _Waker:
    """A pipe a caller's stop writes to, so the waiting loop wakes at once; safe to poke from
    another thread after the loop ended (it is then closed, and a poke does nothing)."""

    def __init__(self) -> None:
        self.read_fd, self._write_fd = os.pipe()
        os.set_blocking(self._write_fd, False)
        self._lock = threading.Lock()
        self._closed = False

    def poke(self) -> None:
        with self._lock:
            if not self._closed:
                try:
                    os.write(self._write_fd, b"!")
                except BlockingIOError:
                    pass  # already poked

    def close(self) -> None:
        with self._lock:
            self._closed = True
            os.close(self._write_fd)
            os.close(self.read_fd)


def _exit_code(returncode: int | None, timed_out: bool, stopped: bool) -> tuple[int | None, int | None]:
    """(exit_code, signal) as the result reports them."""
    if returncode is None or timed_out or stopped:
        return None, None
    if returncode < 0:
        return 128 - returncode, -returncode
    return returncode, None


def _run_supervised(argv: Sequence[str], *, cwd: Path, env: Mapping[str, str], timeout: float,
                    max_output_bytes: int, stop: Stoppable | None) -> Completed:
    """The command below a supervisor (`nexus_core.supervisor`): it reports when the command
    started, and once it ended and everything it started was killed; this asks it to kill on a
    timeout or a stop, and closing its control pipe (this process ending) asks the same."""
    supervised = Supervised.start(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc = supervised.process
    deadline = time.monotonic() + timeout
    waker = _Waker()
    timed_out = stopped = asked = False
    ended_at: float | None = None  # when the last report came, or the supervisor was given up on

    def ask_to_kill() -> None:
        nonlocal asked
        asked = True
        supervised.stop()

    try:
        forget = stop.on_cancel(waker.poke) if stop is not None else (lambda: None)
        with selectors.DefaultSelector() as selector:
            pipes = _Pipes.of(proc, selector, max_output_bytes)
            selector.register(supervised.fileno(), selectors.EVENT_READ)
            selector.register(waker.read_fd, selectors.EVENT_READ)
            try:
                while True:
                    now = time.monotonic()
                    if ended_at is None and not asked:
                        if stop is not None and stop.cancelled:
                            stopped = True
                        elif now >= deadline:
                            timed_out = True
                        if stopped or timed_out:
                            ask_to_kill()
                            deadline = now + _REPORT_SECONDS  # for the report, from here
                    elif ended_at is None and now >= deadline:  # asked, and no report came
                        proc.kill()
                        ended_at = now
                    if ended_at is not None and (pipes.open == 0 or now >= ended_at + _DRAIN_SECONDS):
                        break
                    wait = deadline - now if ended_at is None else ended_at + _DRAIN_SECONDS - now
                    for key, _ in selector.select(timeout=max(wait, 0)):
                        if key.fd == waker.read_fd:
                            selector.unregister(waker.read_fd)  # stopped: seen at the top
                        elif key.fd != supervised.fileno():
                            pipes.read(key.fd)
                        elif supervised.read():
                            if ended_at is None and supervised.done:
                                ended_at = time.monotonic()
                        else:  # the supervisor exited (after its last report, or killed)
                            selector.unregister(supervised.fileno())
                            if ended_at is None:
                                ended_at = time.monotonic()
            finally:
                forget()
                if ended_at is None:  # interrupted (KeyboardInterrupt): leave nothing running
                    ask_to_kill()
    finally:
        waker.close()
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.close()
        proc.stderr.close()
        supervised.close(timeout=_REPORT_SECONDS)  # if it still runs, it kills what is left now
    return _supervised_result(supervised, pipes, timed_out, stopped)


def _supervised_result(supervised: Supervised, pipes: _Pipes, timed_out: bool, stopped: bool) -> Completed:
    if supervised.error is not None:
        raise OSError(0, supervised.error)
    started = supervised.started
    if started is None:
        tail = pipes.err.text().strip().splitlines()[-1:] or ["it printed nothing"]
        raise OSError(0, f"the supervisor did not start the command ({tail[0]})")
    final = supervised.ended
    if final is None:
        # the supervisor died (a command can `kill -9 $PPID`): the command's process group is all
        # that can still be reached
        _kill_group(started.pid)
        note = "the supervisor was killed before the command ended: only its process group was killed"
    elif not started.subreaper:
        note = f"no subreaper ({started.why or 'prctl failed'}): processes that left it may be left"
    else:
        note = "supervisor"
    exit_code, killed_by = _exit_code(final.exit_code if final is not None else None, timed_out, stopped)
    return Completed(
        stdout=pipes.out.text(), stderr=pipes.err.text(), exit_code=exit_code, timed_out=timed_out,
        stdout_truncated=pipes.out.truncated, stderr_truncated=pipes.err.truncated, signal=killed_by,
        stopped=stopped, killed=final.killed if final is not None else (),
        left=final.left if final is not None else (), kill_note=note,
    )


def _run_grouped(argv: Sequence[str], *, cwd: Path, env: Mapping[str, str], timeout: float,
                 max_output_bytes: int, stop: Stoppable | None) -> Completed:
    """The command in its own session and process group, the group killed at its end."""
    proc = subprocess.Popen(
        list(argv), cwd=cwd, env=dict(env), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, start_new_session=True,
    )
    pidfd = _exit_notifier(proc.pid)
    deadline = time.monotonic() + timeout
    timed_out = stopped = False
    ended_at: float | None = None  # when the shell exited or was killed
    waker = _Waker()
    forget = stop.on_cancel(waker.poke) if stop is not None else (lambda: None)

    try:
        with selectors.DefaultSelector() as selector:
            pipes = _Pipes.of(proc, selector, max_output_bytes)
            if pidfd is not None:
                selector.register(pidfd, selectors.EVENT_READ)
            selector.register(waker.read_fd, selectors.EVENT_READ)
            try:
                while True:
                    now = time.monotonic()
                    if ended_at is None:
                        if _has_exited(proc):
                            ended_at = now
                            _kill_group(proc.pid)  # background jobs (`cmd &`) end with the command
                        elif stop is not None and stop.cancelled:
                            ended_at, stopped = now, True
                            _kill_group(proc.pid)
                        elif now >= deadline:
                            ended_at, timed_out = now, True
                            _kill_group(proc.pid)
                        if ended_at is not None and pidfd is not None:
                            selector.unregister(pidfd)
                    if ended_at is not None and (pipes.open == 0 or now >= ended_at + _DRAIN_SECONDS):
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
                        if key.fd == waker.read_fd:
                            selector.unregister(waker.read_fd)  # stopped: handled at the top
                            continue
                        pipes.read(key.fd)
            finally:
                forget()
                if pidfd is not None:
                    os.close(pidfd)
                if ended_at is None:  # interrupted (KeyboardInterrupt): leave nothing running
                    _kill_group(proc.pid)
                assert proc.stdout is not None and proc.stderr is not None
                proc.stdout.close()
                proc.stderr.close()
                returncode = proc.wait()
    finally:
        waker.close()

    exit_code, killed_by = _exit_code(returncode, timed_out, stopped)
    return Completed(
        stdout=pipes.out.text(), stderr=pipes.err.text(), exit_code=exit_code, timed_out=timed_out,
        stdout_truncated=pipes.out.truncated, stderr_truncated=pipes.err.truncated, signal=killed_by,
        stopped=stopped, kill_note="process group",
    )


