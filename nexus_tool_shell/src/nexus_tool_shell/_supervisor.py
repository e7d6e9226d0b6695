"""The supervisor: a small process between the shell tool and a command, which ends every process
the command started when the command ends, times out or is stopped.

A process group is not enough: `setsid cmd &`, a daemon that double-forks, or a program that calls
`setpgid` leaves the command's group and survives a group kill. So this process asks Linux to be
a child subreaper (`prctl(PR_SET_CHILD_SUBREAPER)`): an orphan anywhere below it is re-parented to
it, not to init, so every process the command starts stays its descendant, whatever session or
group it moves to. When the command's shell exits, or the host asks (`kill` on the request pipe,
or the pipe closing because the host went away), it kills every descendant with SIGKILL, round
after round until none is left (a process forking meanwhile is caught by the next round), reaps
them, and reports what it killed. A PID namespace would do the same but needs a user namespace
(unavailable on many systems, and it changes what the command sees: setuid programs such as sudo
stop working); a cgroup needs a delegated cgroup tree, which unprivileged users rarely have. A
subreaper needs neither, and Linux has it since 3.4.

It runs as `python -I -S -c <this file's source> REQUEST_FD REPORT_FD ARGV...`, and reads the
command's environment from REQUEST_FD first (a byte count, a newline, then `NAME=VALUE` entries
separated by NUL): not on its own command line, which every local user can read, nor as its own
environment, to which Python adds `LC_CTYPE` when the locale is C. It runs isolated (no PYTHON*
variables, no user site, and neither the script's folder nor the working folder on sys.path, so
a `signal.py` in the workspace is not imported), without site-packages, importing only what the
interpreter has loaded anyway, C modules and ctypes (a few milliseconds: no json, no enum). It writes
lines to REPORT_FD, each a Python literal (`repr` of a dict, read back with
`ast.literal_eval`): `{"started": pid, "subreaper": bool, "why": str}` (or `{"error": str}`
when the command cannot start), then `{"exit": status, "killed": [(pid, name), ...], "left":
[(pid, name, why), ...]}` once nothing it could kill is left, and exits. `exit` is the command's
exit code, `-N` when signal N ended it, None when it could not be reaped. REQUEST_FD carries
`kill` from the host; its end of file (the host gone) means the same.

The command itself runs in a new session and process group (as it did without a supervisor),
with the signals Python ignores (SIGPIPE, SIGXFSZ) back at their defaults; it is forked, its pid
reported, and only then does it exec. The supervisor takes
SIGTERM, SIGHUP and SIGINT as a request to stop: whoever stops it politely stops the command's
whole tree. SIGKILL cannot be caught: a command that kills its own supervisor (`kill -9 $PPID`)
leaves the host only the command's process group to kill, which the host then does, and says.
"""

from __future__ import annotations

import os
import select
import sys
import time

TYPE_CHECKING = False  # typing itself is not imported: it costs more than the rest of the start
if TYPE_CHECKING:
    import signal
else:  # the C module itself: `signal` would import enum, another few milliseconds
    import _signal as signal

PR_SET_CHILD_SUBREAPER = 36
#: how long to go on killing (a process in uninterruptible sleep dies when its I/O ends)
KILL_GRACE_SECONDS = 5.0
#: the wait between rounds of killing, unless a child's exit wakes the supervisor sooner
ROUND_SECONDS = 0.01
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)


def become_subreaper() -> tuple[bool, str]:
    """(True, "") once this process is a child subreaper, else (False, why not)."""
    if not sys.platform.startswith("linux"):
        return False, f"PR_SET_CHILD_SUBREAPER is Linux-only (this is {sys.platform})"
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
            return False, f"prctl(PR_SET_CHILD_SUBREAPER) failed: {os.strerror(ctypes.get_errno())}"
    except (OSError, AttributeError, ImportError) as exc:
        return False, f"prctl is not reachable: {exc}"
    return True, ""


class Proc:
    __slots__ = ("name", "pid", "start", "state")

    def __init__(self, pid: int, name: str, state: str, start: int) -> None:
        self.pid, self.name, self.state, self.start = pid, name, state, start


def read_stat(pid: int) -> tuple[Proc | None, int]:
    """The process `pid` from /proc/<pid>/stat (None when it is gone): its name, state, parent
    and start time (which tells a process from a later one given the same pid)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None, 0
    head, _, rest = data.rpartition(b")")
    fields = rest.split()
    name = head.partition(b"(")[2].decode("utf-8", "replace")
    return Proc(pid, name, fields[0].decode(), int(fields[19])), int(fields[1])


def children(pid: int) -> list[int]:
    """The children of `pid`, from each of its threads' /proc/<pid>/task/<tid>/children."""
    found: list[int] = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                found.extend(int(p) for p in f.read().split())
        except OSError:
            continue
    return found


def descendants_by_children(root: int) -> list[Proc]:
    out: list[Proc] = []
    todo = children(root)
    while todo:
        pid = todo.pop(0)
        proc, _ = read_stat(pid)
        if proc is not None:
            out.append(proc)
            todo.extend(children(pid))
    return out


def descendants_by_scan(root: int) -> list[Proc]:
    """Every process below `root`, from a scan of all of /proc (where the children files are
    missing: a kernel without CONFIG_PROC_CHILDREN)."""
    kids: dict[int, list[Proc]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            proc, parent = read_stat(int(entry))
            if proc is not None:
                kids.setdefault(parent, []).append(proc)
    out: list[Proc] = []
    todo = list(kids.get(root, ()))
    while todo:
        proc = todo.pop(0)
        out.append(proc)
        todo.extend(kids.get(proc.pid, ()))
    return out


def descendants(root: int) -> list[Proc]:
    if os.path.exists(f"/proc/{root}/task/{root}/children"):
        return descendants_by_children(root)
    return descendants_by_scan(root)


def send_kill(proc: Proc) -> None:
    """SIGKILL to `proc`, and only to it: through a pidfd checked to be the same process (the
    pid's start time unchanged), so a pid reused since the scan is never hit."""
    pidfd_open = getattr(os, "pidfd_open", None)
    if pidfd_open is None:
        os.kill(proc.pid, signal.SIGKILL)
        return
    try:
        pidfd = pidfd_open(proc.pid)
    except OSError as exc:
        if exc.errno == 3:  # ESRCH: gone already
            raise ProcessLookupError from None
        os.kill(proc.pid, signal.SIGKILL)  # pidfd_open refused (seccomp, old kernel)
        return
    try:
        now, _ = read_stat(proc.pid)
        if now is None or now.start != proc.start:
            raise ProcessLookupError
        signal.pidfd_send_signal(pidfd, signal.SIGKILL)
    finally:
        os.close(pidfd)


class Supervisor:
    def __init__(self, request_fd: int, report_fd: int) -> None:
        self.request_fd = request_fd
        self.report_fd = report_fd
        self.me = os.getpid()
        self.command = 0
        self.status: int | None = None  # the command's wait status, once reaped
        self.stop = False
        self.wake_r, wake_w = os.pipe()
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w)
        for sig in (signal.SIGCHLD, *STOP_SIGNALS):
            signal.signal(sig, lambda signum, frame: None)  # the wakeup fd tells the loop

    def report(self, message: dict[str, object]) -> None:
        data = (repr(message) + "\n").encode()
        while data:
            try:
                data = data[os.write(self.report_fd, data):]
            except BrokenPipeError:
                return  # the host is gone: nobody to tell

    def reap_all(self) -> None:
        """Wait for every child (after a failed exec: the one that failed)."""
        while True:
            try:
                os.waitpid(-1, 0)
            except ChildProcessError:
                return

    def reap(self) -> bool:
        """Reap every child that has exited; False once there are no children at all."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return False
            if pid == 0:
                return True
            if pid == self.command:
                self.status = status

    def woken(self, timeout: float | None) -> None:
        """Wait for a signal, a request or `timeout`; note a request or a signal to stop."""
        ready, _, _ = select.select([self.wake_r, self.request_fd], [], [], timeout)
        if self.wake_r in ready:
            signals = os.read(self.wake_r, 4096)
            if any(sig in signals for sig in STOP_SIGNALS):
                self.stop = True
        if self.request_fd in ready:
            try:
                data = os.read(self.request_fd, 4096)
            except OSError:
                data = b""
            if not data or b"kill" in data:  # asked to, or the host went away
                self.stop = True

    def read_env(self) -> dict[bytes, bytes] | None:
        """The command's environment, as the host sent it (None when the host went away)."""
        header = b""
        while not header.endswith(b"\n"):
            byte = os.read(self.request_fd, 1)
            if not byte:
                return None
            header += byte
        blob = b""
        size = int(header)
        while len(blob) < size:
            chunk = os.read(self.request_fd, size - len(blob))
            if not chunk:
                return None
            blob += chunk
        return dict(entry.split(b"=", 1) for entry in blob.split(b"\0") if b"=" in entry)

    def start(self, argv: list[str], env: dict[bytes, bytes], subreaper: bool, why: str) -> None:
        """Fork the command, report its pid, then let it exec: the host knows the pid (its
        process group and session) before the command runs a single instruction of its own,
        so even a command that kills this process at once leaves the host its group to kill.
        An exec that fails is reported as an error."""
        os.set_inheritable(self.request_fd, False)
        os.set_inheritable(self.report_fd, False)
        go_r, go_w = os.pipe()
        errors_r, errors_w = os.pipe()  # close-on-exec: end of file once the exec succeeded
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child, until exec (this process has one thread)
            try:
                for sig in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGCHLD, *STOP_SIGNALS):
                    signal.signal(sig, signal.SIG_DFL)  # Python ignores SIGPIPE and SIGXFSZ
                signal.set_wakeup_fd(-1)
                signal.pthread_sigmask(signal.SIG_SETMASK, [])
                os.setsid()
                os.close(go_w)
                os.close(errors_r)
                os.read(go_r, 1)
                os.execve(argv[0], argv, env)
            except OSError as exc:
                os.write(errors_w, f"{exc.errno}".encode())
            finally:
                os._exit(127)
        os.close(go_r)
        os.close(errors_w)
        self.command = pid
        self.report({"started": pid, "subreaper": subreaper, "why": why})
        os.write(go_w, b"!")
        os.close(go_w)
        failed = os.read(errors_r, 64)
        os.close(errors_r)
        if failed:
            code = int(failed)
            raise OSError(code, os.strerror(code), argv[0])

    def run(self, argv: list[str]) -> None:
        env = self.read_env()
        if env is None:
            return
        subreaper, why = become_subreaper()
        try:
            self.start(argv, env, subreaper, why)
        except OSError as exc:
            self.reap_all()
            self.report({"error": f"{exc.strerror or exc}"})
            return
        while not self.stop and self.status is None:
            self.reap()
            if self.status is None and not self.stop:
                self.woken(None)
        killed, left = self.kill_all(subreaper)
        exit_code = os.waitstatus_to_exitcode(self.status) if self.status is not None else None
        self.report({"exit": exit_code, "killed": killed, "left": left})

    def kill_all(self, subreaper: bool) -> tuple[list[tuple[int, str]], list[tuple[int, str, str]]]:
        """Kill every descendant, round after round, until none is left, none left can be killed,
        or KILL_GRACE_SECONDS pass. Returns (killed, left): (pid, name) of each process killed,
        and (pid, name, why) of each still running.

        Only "no children at all" means nothing is left: as a subreaper, this process becomes
        the parent of every descendant whose parent dies, so while a dying process hands its
        children over (a scan can see none of them for a moment) there is still a child to
        wait for."""
        if not subreaper:  # what went to init is out of sight: the group is all that reaches it
            try:
                os.killpg(self.command, signal.SIGKILL)
            except OSError:
                pass
        killed: dict[int, str] = {}
        refused: dict[int, str] = {}
        deadline = time.monotonic() + KILL_GRACE_SECONDS
        live: list[Proc] = []
        while self.reap():
            live = [p for p in descendants(self.me) if p.state not in ("Z", "X")]
            for proc in live:
                if proc.pid in killed or proc.pid in refused:
                    continue
                try:
                    send_kill(proc)
                    killed[proc.pid] = proc.name
                except ProcessLookupError:
                    pass
                except PermissionError:
                    refused[proc.pid] = proc.name
            if (live and all(p.pid in refused for p in live)) or time.monotonic() >= deadline:
                break
            self.woken(ROUND_SECONDS)  # a child's exit wakes this at once
        left: list[tuple[int, str, str]] = []
        for proc in live:
            if read_stat(proc.pid)[0] is None:
                continue
            why = "it runs as another user" if proc.pid in refused else "it did not die of SIGKILL in time"
            left.append((proc.pid, proc.name, why))
        return list(killed.items()), left


def main(argv: list[str]) -> None:
    Supervisor(int(argv[1]), int(argv[2])).run(argv[3:])


if __name__ == "__main__":
    main(sys.argv)
