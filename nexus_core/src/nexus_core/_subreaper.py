"""The supervisor program of `nexus_core.supervisor`: a small process between a host and a program
it runs (a shell command, an MCP server), which ends every process the program started when the
program ends or is stopped, and says what it killed.

A process group is not enough: `setsid cmd &`, a daemon that double-forks, or a program that calls
`setpgid` leaves the group and survives a group kill. So this process asks Linux to be a child
subreaper (`prctl(PR_SET_CHILD_SUBREAPER)`, Linux 3.4+, no privilege needed): an orphan anywhere
below it is re-parented to it, not to init, so every process the program starts stays its
descendant, whatever session or group it moves to. At the end it kills every descendant with
SIGKILL, round after round until none is left (a process forking meanwhile is caught by the next
round), reaps them, and reports what it killed; it never signals a pid that may have been
reused since it was read (see `send_kill`). A PID namespace would do the same but needs a user
namespace (unavailable on many systems, and setuid programs such as sudo stop working in one); a
cgroup needs a delegated cgroup tree, which unprivileged users rarely have; `tini -s` and
`dumb-init` are subreapers too, but let the tree run on when their main child exits, and are
binaries pip does not bring.

It runs as `python -I -S -B <this file> [options] -- ARGV...`: isolated (no PYTHON* variables,
no user site, neither this file's folder nor the working folder on sys.path, so a `signal.py` in
a workspace is not imported), without site-packages, importing only the standard library, and at
the top only what the interpreter has loaded anyway and C modules (a start of a few milliseconds:
no typing, no enum, no json). Options, all optional:

  --exec PATH      the executable (default: ARGV[0])
  --control FD     the host's pipe: first the program's environment (a byte count, a newline,
                   then NAME=VALUE entries separated by NUL), then `kill` to ask for the end; its
                   end of file (the host gone) asks the same. Without it the program gets the
                   environment this process was started with, as the kernel kept it
                   (/proc/self/environ: Python adds LC_CTYPE to os.environ when the locale is C).
                   Either way the environment is never on a command line, which every local
                   user can read.
  --report FD      one line per event, each a Python literal (`repr` of a dict, read back with
                   `ast.literal_eval`): {"started": pid, "subreaper": bool, "why": str} (or
                   {"error": str} when the program cannot start), then {"exit": status,
                   "killed": [(pid, name), ...], "left": [(pid, name, why), ...]} once nothing it
                   could kill is left. `exit` is the program's exit code, -N when signal N ended
                   it, None when it could not be reaped.
  --log LABEL      say on stderr what happened ("nexus: LABEL exited; stopped 2 processes of its
                   tree still running: 41 (sleep), 42 (sh)"), for a program whose stderr is a log
  --parent PID     stop (as SIGTERM would) when the host PID dies, even by SIGKILL
                   (PR_SET_PDEATHSIG; it fires when the host's *thread* that started this process
                   ends, so start it from a thread that lives as long as the program should)
  --name NAME      the name `ps -e` and `top` show for this process
  --new-session    run the program in a session (and process group) of its own
  --grace SECONDS  when asked to stop, send the program SIGTERM and give it this long to exit
                   before the tree is killed (default 0: killed at once)

The program is forked, its pid reported, and only then does it exec: the host knows its pid (and
with --new-session its process group) before it runs a single instruction of its own, so even a
program that kills this process at once leaves the host its group to kill. It gets the signals
Python ignores (SIGPIPE, SIGXFSZ) back at their defaults and an empty signal mask, and this
process lets go of stdin and stdout once it runs (the program alone holds them, so a reader sees
their end when the program's tree closes them). SIGTERM, SIGHUP and SIGINT ask this process to
stop: whoever stops it politely stops the program's whole tree. SIGKILL cannot be caught: a program
that kills its supervisor leaves its host only the process group to kill.

It exits with the program's status (128 + N when signal N ended it), 127 when the program could
not start.
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

PR_SET_PDEATHSIG = 1
PR_SET_NAME = 15
PR_SET_CHILD_SUBREAPER = 36
#: how long to go on killing (a process in uninterruptible sleep dies when its I/O ends)
KILL_GRACE_SECONDS = 5.0
#: the wait between rounds of killing, unless a child's exit wakes the supervisor sooner
ROUND_SECONDS = 0.01
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)
#: names of the signals that stop it, for the log (the `signal` module's enum is not loaded)
SIGNAL_NAMES = {signal.SIGTERM: "SIGTERM", signal.SIGHUP: "SIGHUP", signal.SIGINT: "SIGINT"}
USAGE = ("usage: python -I -S -B _subreaper.py [--exec PATH] [--control FD] [--report FD] [--log LABEL] "
         "[--parent PID] [--name NAME] [--new-session] [--grace SECONDS] -- ARGV...")


class Options:
    __slots__ = ("argv", "control", "executable", "grace", "label", "name", "new_session", "parent", "report")

    def __init__(self, args: list[str]) -> None:
        """The options of a command line (ValueError when it is not one)."""
        split = args.index("--")
        self.argv = args[split + 1:]
        if not self.argv:
            raise ValueError("no program to run")
        self.executable = self.argv[0]
        self.control: int | None = None
        self.report: int | None = None
        self.label = ""
        self.parent: int | None = None
        self.name = ""
        self.new_session = False
        self.grace = 0.0
        options = args[:split]
        i = 0
        while i < len(options):
            option = options[i]
            if option == "--new-session":
                self.new_session = True
                i += 1
                continue
            value = options[i + 1]
            if option == "--exec":
                self.executable = value
            elif option == "--control":
                self.control = int(value)
            elif option == "--report":
                self.report = int(value)
            elif option == "--log":
                self.label = value
            elif option == "--parent":
                self.parent = int(value)
            elif option == "--name":
                self.name = value
            elif option == "--grace":
                self.grace = float(value)
            else:
                raise ValueError(f"unknown option {option}")
            i += 2


def prctl(option: int, value: object) -> str:
    """Call prctl(option, value): "" when it worked, else why not."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(option, value, 0, 0, 0) != 0:
            return os.strerror(ctypes.get_errno())
    except (OSError, AttributeError, ImportError) as exc:
        return f"prctl is not reachable: {exc}"
    return ""


def become_subreaper() -> tuple[bool, str]:
    """(True, "") once this process is a child subreaper, else (False, why not)."""
    if not sys.platform.startswith("linux"):
        return False, f"PR_SET_CHILD_SUBREAPER is Linux-only (this is {sys.platform})"
    failed = prctl(PR_SET_CHILD_SUBREAPER, 1)
    return (False, f"prctl(PR_SET_CHILD_SUBREAPER) failed: {failed}") if failed else (True, "")


class Proc:
    __slots__ = ("name", "parent", "pid", "start", "state")

    def __init__(self, pid: int, name: str, state: str, parent: int, start: int) -> None:
        self.pid, self.name, self.state, self.parent, self.start = pid, name, state, parent, start


def read_stat(pid: int) -> Proc | None:
    """The process `pid` from /proc/<pid>/stat (None when it is gone): its name, state, parent
    and start time (which tells a process from a later one given the same pid)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    head, _, rest = data.rpartition(b")")
    fields = rest.split()
    name = head.partition(b"(")[2].decode("utf-8", "replace")
    return Proc(pid, name, fields[0].decode(), int(fields[1]), int(fields[19]))


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
        proc = read_stat(pid)
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
            proc = read_stat(int(entry))
            if proc is not None:
                kids.setdefault(proc.parent, []).append(proc)
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


def send_kill(proc: Proc, me: int) -> bool:
    """SIGKILL to `proc`, and only to it; False when it must wait until it is this process's
    child. A pid read from /proc may have been reused since, so: this process's own child is
    signalled by pid (it is not reaped until this process waits for it, so its pid is still
    its own); any other descendant through a pidfd checked to be the same process (the pid's
    start time unchanged), or, where there are no pidfds (Linux before 5.3, or refused), not
    yet: once its parent is killed it is re-parented here, and the next round kills it."""
    if proc.parent == me:
        os.kill(proc.pid, signal.SIGKILL)
        return True
    pidfd_open = getattr(os, "pidfd_open", None)
    if pidfd_open is None:
        return False
    try:
        pidfd = pidfd_open(proc.pid)
    except OSError as exc:
        if exc.errno == 3:  # ESRCH: gone already
            raise ProcessLookupError from None
        return False
    try:
        now = read_stat(proc.pid)
        if now is None or now.start != proc.start:
            raise ProcessLookupError
        signal.pidfd_send_signal(pidfd, signal.SIGKILL)
    finally:
        os.close(pidfd)
    return True


def own_environment() -> dict[bytes, bytes]:
    """The environment this process was started with, as the kernel kept it: not os.environ, to
    which Python adds LC_CTYPE when the locale is C (PEP 538's coercion, which -I cannot turn
    off)."""
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


class Supervisor:
    def __init__(self, options: Options) -> None:
        self.options = options
        self.me = os.getpid()
        self.program = 0
        self.status: int | None = None  # the program's wait status, once reaped
        self.stop = ""  # why it was asked to stop ("" until it is)
        self.wake_r, wake_w = os.pipe()
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w)
        for sig in (signal.SIGCHLD, *STOP_SIGNALS):
            signal.signal(sig, lambda signum, frame: None)  # the wakeup fd tells the loop
        self.watched = [self.wake_r] if options.control is None else [self.wake_r, options.control]

    def report(self, message: dict[str, object]) -> None:
        if self.options.report is None:
            return
        data = (repr(message) + "\n").encode()
        while data:
            try:
                data = data[os.write(self.options.report, data):]
            except BrokenPipeError:
                return  # the host is gone: nobody to tell

    def say(self, text: str) -> None:
        if self.options.label:
            try:
                os.write(2, f"nexus: {text}\n".encode(errors="replace"))
            except OSError:
                pass

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
            if pid == self.program:
                self.status = status

    def woken(self, timeout: float | None) -> None:
        """Wait for a signal, a request or `timeout`; note a request or a signal to stop."""
        ready, _, _ = select.select(self.watched, [], [], timeout)
        if self.wake_r in ready:
            signals = os.read(self.wake_r, 4096)
            asked = [sig for sig in STOP_SIGNALS if sig in signals]
            if asked and not self.stop:
                self.stop = SIGNAL_NAMES[asked[0]]
        control = self.options.control
        if control is not None and control in ready:
            try:
                data = os.read(control, 4096)
            except OSError:
                data = b""
            if not data:  # the host went away: nobody is left to want the program
                self.stop = self.stop or "its host went away"
                self.watched.remove(control)
            elif b"kill" in data:
                self.stop = self.stop or "its host asked"

    def read_env(self, fd: int) -> dict[bytes, bytes] | None:
        """The program's environment, as the host sent it (None when the host went away)."""
        header = b""
        while not header.endswith(b"\n"):
            byte = os.read(fd, 1)
            if not byte:
                return None
            header += byte
        blob = b""
        size = int(header)
        while len(blob) < size:
            chunk = os.read(fd, size - len(blob))
            if not chunk:
                return None
            blob += chunk
        return dict(entry.split(b"=", 1) for entry in blob.split(b"\0") if b"=" in entry)

    def start(self, env: dict[bytes, bytes], subreaper: bool, why: str) -> None:
        """Fork the program, report its pid, then let it exec. An exec that fails raises
        OSError."""
        for fd in (self.options.control, self.options.report):
            if fd is not None:
                os.set_inheritable(fd, False)
        go_r, go_w = os.pipe()
        errors_r, errors_w = os.pipe()  # close-on-exec: end of file once the exec succeeded
        argv = self.options.argv
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child, until exec (this process has one thread)
            try:
                for sig in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGCHLD, *STOP_SIGNALS):
                    signal.signal(sig, signal.SIG_DFL)  # Python ignores SIGPIPE and SIGXFSZ
                signal.set_wakeup_fd(-1)
                signal.pthread_sigmask(signal.SIG_SETMASK, [])
                if self.options.new_session:
                    os.setsid()
                os.close(go_w)
                os.close(errors_r)
                os.read(go_r, 1)
                os.execve(self.options.executable, argv, env)
            except OSError as exc:
                os.write(errors_w, f"{exc.errno}".encode())
            finally:
                os._exit(127)
        os.close(go_r)
        os.close(errors_w)
        self.program = pid
        self.report({"started": pid, "subreaper": subreaper, "why": why})
        os.write(go_w, b"!")
        os.close(go_w)
        failed = os.read(errors_r, 64)
        os.close(errors_r)
        if failed:
            code = int(failed)
            raise OSError(code, os.strerror(code), self.options.executable)

    def let_go_of_stdio(self) -> None:
        """stdin and stdout are the program's alone from here: whoever reads its stdout sees the
        end when the program's tree closes it, not when this process exits."""
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 0)
        os.dup2(null, 1)
        os.close(null)

    def run(self) -> int:
        options = self.options
        if options.name:
            prctl(PR_SET_NAME, options.name.encode()[:15])
        subreaper, why = become_subreaper()
        if options.parent is not None:
            prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
            if os.getppid() != options.parent:
                return 1  # the host died before the line above: nobody is left to serve
        env = self.read_env(options.control) if options.control is not None else own_environment()
        if env is None:
            return 1
        try:
            self.start(env, subreaper, why)
        except OSError as exc:
            self.reap_all()
            self.report({"error": f"{exc.strerror or exc}"})
            self.say(f"cannot start {options.argv[0]}: {exc.strerror or exc}")
            return 127
        self.let_go_of_stdio()
        while not self.stop and self.status is None:
            self.reap()
            if self.status is None and not self.stop:
                self.woken(None)
        how = "exited" if self.status is not None else f"was stopped ({self.stop})"
        if self.status is None and options.grace > 0:
            self.terminate(options.grace)
        killed, left = self.kill_all(subreaper)
        exit_code = os.waitstatus_to_exitcode(self.status) if self.status is not None else None
        self.report({"exit": exit_code, "killed": killed, "left": left})
        if killed:
            self.say(f"{options.label} {how}; stopped {len(killed)} process{'es' if len(killed) != 1 else ''} of "
                     f"its tree still running: {', '.join(f'{pid} ({name})' for pid, name in killed)}")
        elif how != "exited":
            self.say(f"{options.label} {how}")
        if left:
            self.say(f"could not stop {', '.join(f'{pid} ({name}: {why})' for pid, name, why in left)}: still running")
        if exit_code is None:
            return 128 + signal.SIGKILL
        return 128 - exit_code if exit_code < 0 else exit_code

    def terminate(self, grace: float) -> None:
        """SIGTERM to the program (it may have left the group its host signals), then up to
        `grace` seconds for it to exit, reaping what exits meanwhile."""
        try:
            os.kill(self.program, signal.SIGTERM)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + grace
        while self.status is None and self.reap():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            self.woken(min(left, 0.05))

    def kill_all(self, subreaper: bool) -> tuple[list[tuple[int, str]], list[tuple[int, str, str]]]:
        """Kill every descendant, round after round, until none is left, none left can be killed,
        or KILL_GRACE_SECONDS pass. Returns (killed, left): (pid, name) of each process killed,
        and (pid, name, why) of each still running.

        Only "no children at all" means nothing is left: as a subreaper, this process becomes
        the parent of every descendant whose parent dies, so while a dying process hands its
        children over (a scan can see none of them for a moment) there is still a child to
        wait for."""
        if not subreaper and self.options.new_session:
            # what went to init is out of sight: the group is all that reaches it
            try:
                os.killpg(self.program, signal.SIGKILL)
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
                    if send_kill(proc, self.me):
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
            if read_stat(proc.pid) is None:
                continue
            why = "it runs as another user" if proc.pid in refused else "it did not die of SIGKILL in time"
            left.append((proc.pid, proc.name, why))
        return list(killed.items()), left


def main(args: list[str]) -> int:
    try:
        options = Options(args)
    except (ValueError, IndexError) as exc:
        os.write(2, f"nexus: {exc}\n{USAGE}\n".encode(errors="replace"))
        return 2
    return Supervisor(options).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
