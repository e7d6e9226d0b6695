"""A stdio server's whole process tree ends with it: a small supervisor between the MCP SDK's
stdio client and the server, that is the tree's subreaper.

The SDK starts a server in a session of its own and, to stop it, closes its stdin, waits, then
signals that process group. A process that leaves the group (`setsid()`, `setpgid()`, a daemon's
double fork) is out of reach of that signal, and one whose parent exits is re-parented to init:
it runs on after `nx.close()`. This module closes that gap on Linux, unprivileged:

- `supervised(...)`, in the host, turns a server's command line into one that starts this very
  file first: `python -I -S .../_reaper.py --parent <host pid> -- <command> <args...>`.
- `main()` is that supervisor. It marks itself a *child subreaper* (`prctl(PR_SET_CHILD_SUBREAPER)`,
  Linux 3.4+, no privilege needed), so every process of the server's tree whose parent exits is
  re-parented to it, whatever session or group it moved to. It starts the server with its own
  stdin, stdout and stderr, lets go of them (the protocol is between the SDK and the server), and
  waits. When the server exits, everything still running in its tree is killed (SIGKILL) at
  once; when the supervisor is asked to stop (the SDK's SIGTERM, or the host dying: its parent
  death signal), it passes SIGTERM on to the server, gives it `TERM_GRACE_SECONDS`, then kills
  the tree. What it killed is written to stderr (the server's log). It exits with the server's
  status.

Killing only ever signals the supervisor's own children, never a pid read from elsewhere: a
child is not reaped until the supervisor waits for it, so its pid cannot have been reused. A
killed child's children are re-parented to the supervisor, and are killed in the next round,
until it has no child left.

Why not the alternatives: a cgroup (`cgroup.kill`) needs a delegated cgroup, which an ordinary
user often does not have; a PID namespace needs user namespaces, which some distributions
restrict; a subreaper in the host process itself would collect every orphan of every library the
host uses; `tini -s` and `dumb-init` are subreapers too, but leave the tree running when the
main child exits, and are binaries pip does not bring.

This file runs as a script with `-I -S` (no site, no package, nothing from the working folder):
it imports only the standard library, nothing from nexus_mcp, and at the top only what the
interpreter has loaded anyway and `signal` (a start of a few milliseconds; `pathlib` alone would
cost more than the rest). What the host side needs is imported where it is used.
"""

from __future__ import annotations

import os
import signal
import sys
import time

TYPE_CHECKING = False  # `typing` itself is not imported: it would cost more than the rest of the start
if TYPE_CHECKING:
    from pathlib import Path

#: how long the server has between the supervisor's SIGTERM and SIGKILL for its whole tree. The
#: SDK sends SIGTERM, and SIGKILL 2 s later (FORCE_KILL_TIMEOUT): the tree must be gone before then
TERM_GRACE_SECONDS = 1.0
#: rounds of killing children (each round's children re-parent theirs to the supervisor); a bound
#: for children it may not signal (a setuid program), not for a tree of any ordinary depth
MAX_KILL_ROUNDS = 1000

PR_SET_PDEATHSIG = 1
PR_SET_NAME = 15
PR_SET_CHILD_SUBREAPER = 36
PR_GET_CHILD_SUBREAPER = 37

#: the name the supervisor shows in `ps -e` and `top` (its command line shows the server's)
PROCESS_NAME = b"nexus-mcp-reap"
SCRIPT = os.path.realpath(__file__)


# -- in the host ----------------------------------------------------------------------------


_unavailable: list[str | None] = []


def supervision_unavailable() -> str | None:
    """Why stdio servers cannot run under the supervisor here, or None when they can (found out
    once per process)."""
    if not _unavailable:
        _unavailable.append(_why_unavailable())
    return _unavailable[0]


def _why_unavailable() -> str | None:
    if not sys.platform.startswith("linux"):
        return f"child subreapers are a Linux feature (this is {sys.platform})"
    if not sys.executable or not os.access(sys.executable, os.X_OK):
        return f"this Python has no interpreter to start the supervisor with (sys.executable={sys.executable!r})"
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        flag = ctypes.c_int(0)
        # the GET form only reads this process's flag: the host itself is never made a subreaper
        if libc.prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(flag), 0, 0, 0) != 0:
            return f"prctl(PR_GET_CHILD_SUBREAPER) failed: {os.strerror(ctypes.get_errno())} (Linux 3.4+ has it)"
    except (OSError, AttributeError) as exc:
        return f"prctl is not callable: {exc}"
    return None


def resolve_command(command: str, cwd: Path | None, path: str | None) -> str:
    """The executable a server's `command` names, as the exec that starts it would find it (on
    `path`, or relative to `cwd` when it has a slash); FileNotFoundError when there is none, so a
    missing command fails to start with the same error as without the supervisor."""
    import shutil
    from pathlib import Path

    if os.sep in command:
        candidate = Path(command) if os.path.isabs(command) else (cwd or Path.cwd()) / command
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    else:
        found = shutil.which(command, path=path)
        if found is not None:
            return found if os.path.isabs(found) else str((cwd or Path.cwd()) / found)
    import errno

    raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), command)


def supervised(command: str, args: list[str], cwd: Path | None, path: str | None) -> tuple[str, list[str]]:
    """The command line that starts `command args...` under the supervisor."""
    executable = resolve_command(command, cwd, path)
    return sys.executable, ["-I", "-S", SCRIPT, "--parent", str(os.getpid()), "--exec", executable,
                            "--", command, *args]


# -- the supervisor -------------------------------------------------------------------------


class _Stop(BaseException):
    """A signal asked the supervisor to stop the server."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _raise_stop(signum: int, frame: object) -> None:
    raise _Stop(signum)


def _say(text: str) -> None:
    try:
        os.write(2, f"nexus: {text}\n".encode(errors="replace"))
    except OSError:
        pass


def _children() -> list[int]:
    """The supervisor's live (not yet reaped, not zombie) children."""
    me = os.getpid()
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(b")") + 2:].split()
        if int(fields[1]) == me and fields[0] != b"Z":
            found.append(int(entry.name))
    return found


def _name(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm", "rb") as f:
            return f.read().decode(errors="replace").strip()
    except OSError:
        return "?"


#: wait statuses of the children reaped so far, by pid
_exited: dict[int, int] = {}


def _reap() -> bool:
    """Reap every child that has exited (into `_exited`); whether any child is left."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return False
        if pid == 0:
            return True
        _exited[pid] = status


def _wait(server: int, timeout: float | None) -> int | None:
    """Reap children (orphans of the tree included) until the server exits: its wait status, or
    None if `timeout` ran out first."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while server not in _exited:
        if deadline is None:
            try:
                pid, status = os.waitpid(-1, 0)
            except ChildProcessError:
                break
            _exited[pid] = status
            continue
        _reap()
        if server in _exited or time.monotonic() >= deadline:
            break
        time.sleep(0.01)
    return _exited.get(server)


def _kill_tree() -> tuple[list[str], list[str]]:
    """SIGKILL every child, round after round (a killed child's children become the
    supervisor's), until none is left: (what was killed, what could not be)."""
    killed: dict[int, str] = {}
    refused: dict[int, str] = {}
    for _ in range(MAX_KILL_ROUNDS):
        if not _reap():
            break
        children = [pid for pid in _children() if pid not in refused]
        if not children:
            if refused:
                break  # only children it may not signal are left
            time.sleep(0.01)  # exited, not reaped yet
            continue
        for pid in children:
            name = _name(pid)
            try:
                os.kill(pid, signal.SIGKILL)
                killed.setdefault(pid, name)
            except ProcessLookupError:
                pass
            except PermissionError:
                refused[pid] = name
        time.sleep(0.005)
    return [f"{pid} ({name})" for pid, name in killed.items()], [f"{pid} ({name})" for pid, name in refused.items()]


def _environment() -> dict[bytes, bytes]:
    """The environment this process was started with, which is the server's: as the kernel kept
    it (`/proc/self/environ`), not `os.environ`, to which Python adds `LC_CTYPE` when the locale
    is C (PEP 538's coercion), which `-I` cannot turn off."""
    try:
        with open("/proc/self/environ", "rb") as f:
            entries = f.read().split(b"\0")
    except OSError:
        return dict(os.environb)
    environment = {}
    for entry in entries:
        name, equals, value = entry.partition(b"=")
        if equals and name:
            environment[name] = value
    return environment


def _exit_code(status: int) -> int:
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code


def main(argv: list[str]) -> int:
    try:
        split = argv.index("--")
        options, command = argv[:split], argv[split + 1:]
        parent = int(options[options.index("--parent") + 1])
        executable = options[options.index("--exec") + 1]
    except (ValueError, IndexError):
        _say("usage: _reaper.py --parent PID --exec PATH -- COMMAND [ARGS...]")
        return 2
    if not command:
        _say("_reaper.py: no command to run")
        return 2
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_NAME, ctypes.c_char_p(PROCESS_NAME), 0, 0, 0)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        # the host checked that it can (`supervision_unavailable`): should it not, run the server as it would
        # have run without the supervisor, rather than not at all
        _say(f"cannot become a child subreaper ({os.strerror(ctypes.get_errno())}); running {command[0]} unsupervised")
        os.execv(executable, command)
    # the host dying (even by SIGKILL) stops the server too
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent:
        return 1  # the host died before the line above: nobody is left to serve
    for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(signum, _raise_stop)
    server: int | None = None
    try:
        try:
            # the signals Python ignores (SIGPIPE, SIGXFSZ) or catches go back to their defaults
            server = os.posix_spawn(executable, command, _environment(), setsigdef=(
                signal.SIGPIPE, signal.SIGXFSZ, signal.SIGTERM, signal.SIGHUP, signal.SIGINT))
        except OSError as exc:
            _say(f"cannot start {command[0]}: {exc}")
            return 127
        # let go of the protocol's pipes: the server alone holds them, so the SDK sees the end of
        # its stdout when it exits
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 0)
        os.dup2(null, 1)
        os.close(null)
        try:
            _wait(server, None)
            how = "exited"
        except _Stop as stop:
            for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
                signal.signal(signum, signal.SIG_IGN)
            how = f"was stopped ({signal.Signals(stop.signum).name})"
            try:
                os.kill(server, signal.SIGTERM)  # it may have left the group the SDK signals
            except ProcessLookupError:
                pass
            _wait(server, TERM_GRACE_SECONDS)
    except _Stop:  # a signal before the server ran, or while it was being let go of
        how = "was stopped"
    for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(signum, signal.SIG_IGN)
    killed, refused = _kill_tree()
    if killed:
        _say(f"the MCP server {how}; stopped {len(killed)} process{'es' if len(killed) != 1 else ''} of its tree "
             f"still running: {', '.join(killed)}")
    if refused:
        _say(f"could not stop {', '.join(refused)} (not permitted): still running")
    status = _exited.get(server) if server is not None else None
    return _exit_code(status) if status is not None else 128 + signal.SIGKILL


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
