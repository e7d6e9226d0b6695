"""Run a program so that nothing it starts outlives it: below a small supervisor process that is a
Linux child subreaper, which kills the program's whole process tree when the program ends or is
stopped (setsid'd and double-forked processes too) and says what it killed. See
docs/supervisor.md.

Two ways to use it, by who starts the process:

- `Supervised.start(argv, ...)`: this process starts the supervisor and talks to it over two
  pipes: the program's environment and a request to stop go one way, what happened (the
  program's pid, its exit, what was killed) comes back. The shell tool runs each command so.
- `supervised_command(argv, ...)`: the command line that starts `argv` below a supervisor, for a
  library that starts the process itself (the MCP SDK's stdio client starts a server so). The
  program gets the environment the process is started with; stopping it is SIGTERM (passed on,
  with a grace period) or its host dying (`parent_death`).

`why_unavailable()` says whether this machine has what it needs (Linux, an interpreter to start
again); where it does not, a caller falls back to its process group. The supervisor program
itself is `_subreaper.py`, run by path, isolated (`python -I -S -B`), standard library only.
"""

from __future__ import annotations

import ast
import functools
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import attrs

__all__ = ["PROGRAM", "Ended", "Started", "Supervised", "resolve_executable", "supervised_command",
           "why_unavailable"]

#: the supervisor program (standard library only, run as a script)
PROGRAM = str(Path(__file__).resolve().with_name("_subreaper.py"))

PR_GET_CHILD_SUBREAPER = 37


@functools.cache
def why_unavailable() -> str | None:
    """Why programs cannot run below a supervisor here, or None when they can (found out once
    per process; the check only reads this process's own subreaper flag, it never sets it)."""
    if not sys.platform.startswith("linux"):
        return f"a child subreaper is Linux-only (this is {sys.platform})"
    if not sys.executable or not os.access(sys.executable, os.X_OK):
        return f"the Python interpreter cannot be started again (sys.executable={sys.executable!r})"
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        flag = ctypes.c_int(0)
        if libc.prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(flag), 0, 0, 0) != 0:
            return f"prctl(PR_GET_CHILD_SUBREAPER) failed: {os.strerror(ctypes.get_errno())} (Linux 3.4+ has it)"
    except (OSError, AttributeError) as exc:
        return f"prctl is not callable: {exc}"
    return None


def resolve_executable(command: str, cwd: str | os.PathLike[str] | None = None, path: str | None = None) -> str:
    """The executable `command` names, as an exec would find it: on `path` (default: $PATH) when
    it has no slash, else relative to `cwd`. FileNotFoundError when there is none, so a missing
    program fails to start with the same error as it would without the supervisor."""
    import errno
    import shutil

    base = Path(cwd) if cwd is not None else Path.cwd()
    if os.sep in command:
        candidate = Path(command) if os.path.isabs(command) else base / command
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    else:
        found = shutil.which(command, path=path if path is not None else os.environ.get("PATH"))
        if found is not None:
            return found if os.path.isabs(found) else str(base / found)
    raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), command)


def _interpreter() -> list[str]:
    # isolated (no PYTHON* variables, no user site, nothing from the working folder on sys.path),
    # no site-packages, no bytecode written
    return [sys.executable, "-I", "-S", "-B", PROGRAM]


def supervised_command(argv: Sequence[str], *, cwd: str | os.PathLike[str] | None = None, path: str | None = None,
                       name: str = "", log: str = "", parent_death: bool = True, grace_seconds: float = 0.0,
                       new_session: bool = False) -> list[str]:
    """The command line that runs `argv` below a supervisor, for a caller that starts the process
    itself. `argv[0]` is looked up as an exec would (on `path`, relative to `cwd`:
    FileNotFoundError when it is missing). The program gets the supervisor's starting
    environment and its stdin, stdout and stderr.

    `name` is what `ps -e` shows for the supervisor (15 bytes at most); `log` a label, and
    what happened goes to stderr ("nexus: <log> exited; stopped 2 processes of its tree still
    running: ..."); `parent_death` stops the program when this process dies (start the
    supervisor from a thread that lives as long as the program should: Linux ties the signal
    to the thread); `grace_seconds` is how long the program has between the SIGTERM the
    supervisor passes on and the kill of its tree; `new_session` runs it in a session of its
    own (leave it off when the caller stops the supervisor's process group)."""
    if not argv:
        raise ValueError("supervised_command needs a program to run")
    options = ["--exec", resolve_executable(argv[0], cwd, path)]
    if name:
        options += ["--name", name]
    if log:
        options += ["--log", log]
    if parent_death:
        options += ["--parent", str(os.getpid())]
    if grace_seconds > 0:
        options += ["--grace", repr(float(grace_seconds))]
    if new_session:
        options.append("--new-session")
    return [*_interpreter(), *options, "--", *argv]


@attrs.frozen
class Started:
    """The program runs: its pid (with a session of its own, also its process group's id), and
    whether the supervisor is a subreaper (when not, `why`)."""

    pid: int
    subreaper: bool
    why: str = ""


@attrs.frozen
class Ended:
    """The program ended and nothing the supervisor could kill is left. `exit_code` is the
    program's exit status (-N when signal N ended it, None when it could not be reaped);
    `killed` the (pid, name) of each process killed, the program's own among them when it was
    stopped; `left` the (pid, name, why) of each that could not be."""

    exit_code: int | None
    killed: tuple[tuple[int, str], ...] = ()
    left: tuple[tuple[int, str, str], ...] = ()


class Supervised:
    """One program running below a supervisor that this process started (`start`).

    Read `fileno()` with a selector (or call `read()` in a loop): `read()` takes in what the
    supervisor reported, setting `started`, then `ended` (or `error` when the program could not
    start), and returns False once the supervisor has closed its end. `stop()` asks it to end the
    program and its tree; `close()` (always call it) lets go of the pipes, which also stops
    whatever still runs, and waits for the supervisor. If `ended` never comes, the supervisor
    died: with a session of its own, the program's process group (`started.pid`) is what is
    left to kill."""

    def __init__(self, process: subprocess.Popen[bytes], control: int, report: int) -> None:
        self.process = process
        self._control: int | None = control
        self._report: int | None = report
        self._pending = b""
        self.started: Started | None = None
        self.ended: Ended | None = None
        self.error: str | None = None

    @classmethod
    def start(cls, argv: Sequence[str], *, cwd: str | os.PathLike[str], env: Mapping[str, str],
              stdin: int | IO[Any] | None = subprocess.DEVNULL, stdout: int | IO[Any] | None = None,
              stderr: int | IO[Any] | None = None, new_session: bool = True, grace_seconds: float = 0.0,
              name: str = "") -> Supervised:
        """Start the supervisor, and through it `argv` (`argv[0]` a path) in `cwd` with exactly
        `env` (sent through a pipe: never on a command line). stdin, stdout and stderr are as
        for `subprocess.Popen` (the program inherits them); the supervisor itself runs in a
        session of its own, and so does the program with `new_session`. Raises OSError when the
        supervisor cannot start; the program's own failure to start is `error`."""
        control_r, control_w = os.pipe()
        report_r, report_w = os.pipe()
        options = ["--control", str(control_r), "--report", str(report_w)]
        if new_session:
            options.append("--new-session")
        if grace_seconds > 0:
            options += ["--grace", repr(float(grace_seconds))]
        if name:
            options += ["--name", name]
        try:
            process = subprocess.Popen(
                [*_interpreter(), *options, "--", *argv], cwd=cwd, env={}, stdin=stdin, stdout=stdout,
                stderr=stderr, start_new_session=True, pass_fds=(control_r, report_w))
        except BaseException:
            os.close(control_w)
            os.close(report_r)
            raise
        finally:
            os.close(control_r)
            os.close(report_w)
        supervised = cls(process, control_w, report_r)
        blob = b"\0".join(os.fsencode(f"{key}={value}") for key, value in env.items())
        try:
            supervised._send(f"{len(blob)}\n".encode() + blob)
        except BrokenPipeError:
            pass  # the supervisor died at once: `read` finds its end
        return supervised

    def fileno(self) -> int:
        """The report pipe, for a selector (readable when `read` has something to take in)."""
        if self._report is None:
            raise ValueError("this Supervised is closed")
        return self._report

    def read(self) -> bool:
        """Take in what the supervisor reported since the last call (blocks when nothing is
        there: call it when `fileno()` is readable). False once the supervisor closed its end."""
        data = os.read(self.fileno(), 65536)
        if not data:
            return False
        self._pending += data
        *lines, self._pending = self._pending.split(b"\n")
        for line in lines:
            if line.strip():
                self._take(_parse(line))
        return True

    def _take(self, message: dict[str, Any]) -> None:
        if "started" in message and isinstance(message["started"], int):
            self.started = Started(message["started"], bool(message.get("subreaper")), str(message.get("why") or ""))
        elif "error" in message:
            self.error = str(message["error"])
        elif "exit" in message:
            code = message["exit"]
            self.ended = Ended(
                exit_code=code if isinstance(code, int) else None,
                killed=tuple((int(pid), str(name)) for pid, name in message.get("killed", ())),
                left=tuple((int(pid), str(name), str(why)) for pid, name, why in message.get("left", ())))

    @property
    def done(self) -> bool:
        """The supervisor said its last word: the program ended (or never started)."""
        return self.ended is not None or self.error is not None

    def stop(self) -> None:
        """Ask the supervisor to end the program (SIGTERM first, with `grace_seconds`) and then
        every process it started. Safe to call more than once, or after the supervisor died."""
        try:
            self._send(b"kill\n")
        except OSError:
            pass  # the supervisor is gone: whoever waits finds its end

    def _send(self, data: bytes) -> None:
        if self._control is None:
            raise BrokenPipeError("this Supervised is closed")
        view = memoryview(data)
        while view:
            view = view[os.write(self._control, view):]

    def close(self, timeout: float = 15.0) -> None:
        """Let go of the control pipe (a supervisor still running then ends the program and its
        tree), wait for the supervisor up to `timeout` seconds (then kill it), and close the
        report pipe."""
        if self._control is not None:
            os.close(self._control)
            self._control = None
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        if self._report is not None:
            os.close(self._report)
            self._report = None


def _parse(line: bytes) -> dict[str, Any]:
    """One report line of the supervisor: a Python literal (see _subreaper), never code."""
    try:
        message = ast.literal_eval(line.decode("utf-8", "replace"))
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return {}
    return message if isinstance(message, dict) else {}
