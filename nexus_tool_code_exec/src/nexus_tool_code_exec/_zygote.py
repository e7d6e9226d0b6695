"""The warm zygote: a helper process that imports the runtime once and forks one child per script.

Host and zygote talk over a Unix socket pair (JSON lines, plus file descriptors passed with
SCM_RIGHTS). The zygote keeps SPARES (two) children forked ahead of time: each with its own
scratch folder and two pipes, already isolated (sandbox.enter), waiting for a script. It hands a
spare's pipe ends to the host as soon as it has forked it, so a run takes a child without asking
the zygote anything: it does not wait for a fork, for the sandbox to be set up, or for a message
to go round. The host speaks the run_code protocol with the child directly, exactly as with a
spawned child. The zygote stays single-threaded (forking from a threaded process is unsafe, and a user namespace can only
be entered by a single-threaded process); it reaps its children and reports how each ended.

The zygote forks a spare's replacement once that spare has ended (its run is over: the host kills
it, or it exits), not while the run goes on: a fork and a sandbox set-up are a few ms of CPU,
largely in the kernel, and this kernel does not preempt them, so next to a run they delayed the
run's wake-ups by up to a millisecond on a 2-vCPU VM (measured; with the refill at the start of
each run, the 100-call benchmark took a fifth longer). With two spares, a run that follows
another within those few ms still finds one ready. As root the refill runs under SCHED_IDLE, so
that it only takes CPU time nobody else wants (the zygote is started in the host's session, so
in its scheduler autogroup, where a policy counts against the host's own threads); the host lifts
SCHED_IDLE off the spare it gives a script. A run that finds no spare waits for one being forked,
or, when none is (more runs at the same time than spares), asks for a fork.

zygote -> host: {"t": "ready", "pid": p}
                {"t": "spare", "pid": p, "scratch": dir, "key": k, "idle": b}  + fds [host reads, host writes]
                {"t": "forked", "req": n, "pid": p, "scratch": dir}  + fds   (the answer to "fork")
                {"t": "exit", "pid": p, "status": s, "cpu": seconds}   (s as subprocess reports it)
host -> zygote: {"t": "fork", "req": n}                  no spare at hand: a child now
                {"t": "kill", "pid": p}                  kill that child's process group
                {"t": "preload", "key": k, "bindings": src}   compile `tools` once, ahead
"""

from __future__ import annotations

import gc
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import attrs

from . import protocol
from ._launch import CHILD_ENV, Child



# -- the zygote process -----------------------------------------------------------------------

#: children the zygote keeps forked ahead, held by the host: two, so that a run that follows
#: another within a few ms (before that one's replacement has set itself up) still finds one
SPARES = 2


def _preimport(allowed: list[str]) -> int | None:
    """Import what every script needs and work out the sandbox's programs once, so a forked
    child starts warm. Returns the fd of a network namespace children share (root only)."""
    import attrs  # noqa: F401
    import cattrs  # noqa: F401

    from . import _child, _parallel  # noqa: F401

    for name in allowed:
        try:
            __import__(name)
        except ImportError:
            pass
    net_fd = None
    try:
        from . import sandbox

        sandbox.prepare()
        net_fd = sandbox.make_shared_netns()
    except Exception:  # noqa: BLE001 - each child's enter() reports what is wrong, with its layer
        pass
    gc.collect()
    gc.freeze()  # children then do not touch (and copy) the zygote's objects when they collect
    return net_fd


def _status_of(wait_status: int) -> int:
    if os.WIFSIGNALED(wait_status):
        return -os.WTERMSIG(wait_status)
    return os.WEXITSTATUS(wait_status)


def _close_all_but(keep: set[int]) -> None:
    """Close every fd above 2 except `keep`: a child must not hold another child's pipe ends
    (its EOF would never come) nor the zygote's socket."""
    low = 3
    for fd in sorted(keep):
        if fd >= low:
            os.closerange(low, fd)
            low = fd + 1
    os.closerange(low, 1 << 20)


class _Spare:
    """A child just forked: it isolates itself, then waits on its pipe for a script."""

    def __init__(self, pid: int, scratch: str, host_read: int, host_write: int) -> None:
        self.pid, self.scratch, self.host_read, self.host_write = pid, scratch, host_read, host_write


def zygote_main(ctrl_fd: int, allowed: list[str], policy: dict[str, Any], scratch_root: str) -> None:
    ctrl = socket.socket(fileno=ctrl_fd)
    net_fd = _preimport(allowed)
    from . import _child

    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    os.set_blocking(wake_r, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    children: set[int] = set()
    preloaded: dict[str, Any] = {}

    def send(msg: Any, fds: list[int] | None = None) -> None:
        protocol.send_with_fds(ctrl, msg, fds)

    def reap() -> None:
        while children:
            try:
                pid, status, usage = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            children.discard(pid)
            send({"t": protocol.EXIT, "pid": pid, "status": _status_of(status),
                  "cpu": round(usage.ru_utime + usage.ru_stime, 3)})

    def fork_child() -> _Spare:
        """A new child with its own scratch folder and pipes; it isolates itself at once and
        then waits for its script. The zygote keeps only the host's ends of the pipes."""
        scratch = tempfile.mkdtemp(prefix="run-", dir=scratch_root)
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            _close_all_but({to_child_r, from_child_w} | ({net_fd} if net_fd is not None else set()))
            _child_after_fork(to_child_r, from_child_w, {**policy, "scratch": scratch, "net_fd": net_fd},
                              preloaded)
        os.close(to_child_r)
        os.close(from_child_w)
        children.add(pid)
        return _Spare(pid, scratch, from_child_r, to_child_w)

    key = ""  # of the bindings preloaded (spares forked since have them compiled)
    spares: list[int] = []  # the pids of the spares forked (held by the host, or running), newest last
    # Spares are forked and set themselves up under SCHED_IDLE (root only: the host must be able
    # to lift it off the spare it gives a script), so that this work only gets CPU time nobody
    # else wants; the zygote itself stays at the host's priority for everything else (a kill
    # the watchdog asks for must not wait for an idle CPU).
    idle = os.geteuid() == 0 and hasattr(os, "SCHED_IDLE")

    def push_spare() -> None:
        """Fork the next spare and hand its pipe ends to the host, which keeps them until a
        script needs a child (the zygote keeps nothing of it but its pid)."""
        if idle:
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
            try:
                child = fork_child()  # the child keeps SCHED_IDLE while it sets itself up
            finally:
                os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
        else:
            child = fork_child()
        spares.append(child.pid)
        del spares[:-SPARES]  # older ones (of older bindings) the host drops
        send({"t": protocol.SPARE, "pid": child.pid, "scratch": child.scratch, "key": key, "idle": idle},
             [child.host_read, child.host_write])
        os.close(child.host_read)
        os.close(child.host_write)

    send({"t": protocol.READY, "pid": os.getpid()})
    for _ in range(SPARES):
        push_spare()
    lines = protocol.LineReader(1 << 30)  # the host is trusted
    while True:
        readable, _, _ = select.select([ctrl, wake_r], [], [])  # type: ignore[type-var]
        if wake_r in readable:
            try:
                os.read(wake_r, 4096)
            except BlockingIOError:
                pass
            reap()
            for pid in [pid for pid in spares if pid not in children]:  # its run is over (or it died)
                spares.remove(pid)
                push_spare()
        if ctrl not in readable:
            continue
        try:
            data = ctrl.recv(1 << 16)
        except InterruptedError:
            continue
        if not data:
            break  # the host went away: stop, and take the children with us
        lines.feed(data)
        while (msg := lines.next()) is not None:
            kind = msg.get("t")
            if kind == protocol.FORK:  # the host has no spare at hand (concurrent runs)
                child = fork_child()
                send({"t": protocol.FORKED, "req": msg.get("req"), "pid": child.pid, "scratch": child.scratch},
                     [child.host_read, child.host_write])
                os.close(child.host_read)
                os.close(child.host_write)
            elif kind == protocol.PRELOAD:
                try:
                    preloaded.clear()
                    preloaded[msg["key"]] = tools = _child.compile_bindings(msg["bindings"])
                    _child.warm_bindings(tools)
                    key = str(msg["key"])
                    gc.collect()
                    gc.freeze()
                except Exception:  # a child will compile it itself and report the error
                    preloaded.clear()
                    key = ""
                for _ in range(SPARES):  # spares with these bindings; the host drops older ones
                    push_spare()
            elif kind == protocol.KILL:
                pid = int(msg["pid"])
                if pid in children:  # only our own, not yet reaped: no pid-reuse race
                    for target in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
                        try:
                            target()
                        except (ProcessLookupError, PermissionError):
                            pass
                if pid in spares:  # its run is over: the next spare now
                    spares.remove(pid)
                    push_spare()
    for pid in list(children):
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    os._exit(0)


def _child_after_fork(rfd: int, wfd: int, policy: dict[str, Any], preloaded: dict[str, Any]) -> None:
    """In the forked child: isolate, wait for the script, run it, exit."""
    from . import _child

    code = 0
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        if policy.get("layers"):
            try:
                from ._launch import enter_sandbox

                enter_sandbox(policy, keep_fds=(rfd, wfd))
            except Exception as exc:
                _child.Channel(rfd, wfd).send({"t": protocol.ERROR, "kind": protocol.SANDBOX,
                                               "message": _child._describe(exc)})
                os._exit(1)
        else:
            os.setpgid(0, 0)
            os.chdir(policy["scratch"])
        _child.PRELOADED_BINDINGS.update(preloaded)
        _child.serve(rfd, wfd)
    except BaseException:
        code = 1
    finally:
        os._exit(code)


# -- the host side ------------------------------------------------------------------------------

#: what the zygote's answer to a fork request gives a launch: pid, scratch folder, the host's
#: read and write ends of the child's pipes, and the future of its exit (status, CPU seconds)
_Forked = tuple[int, str, int, int, "Future[tuple[int, float | None]]"]

#: how long a launch waits for the spare the zygote is forking before it asks for a fork itself
SPARE_WAIT = 0.25


def _pidfd_of(pid: int, pipe_end: int) -> int | None:
    """A pidfd of our child `pid`, or None. A pid names our child only while the zygote has not
    reaped it: after opening, the child's end of its pipe still being open (no POLLHUP on ours)
    proves it was alive, so the pidfd is of it and not of a process that reused the pid."""
    if not hasattr(os, "pidfd_open"):
        return None
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        return None
    poller = select.poll()
    poller.register(pipe_end, select.POLLIN)
    if any(event & (select.POLLHUP | select.POLLERR | select.POLLNVAL) for _, event in poller.poll(0)):
        os.close(fd)
        return None
    return fd


@attrs.define(eq=False)
class _HeldSpare:
    """The host's hold on the zygote's spare child: its pipe ends, until a script takes it."""

    pid: int
    scratch: str
    host_read: int
    host_write: int
    key: str  # the bindings it has compiled
    idle: bool  # it runs under SCHED_IDLE, like the zygote, until the host lifts that
    exit_future: Future[tuple[int, float | None]]

    def drop(self) -> None:
        """Let it go unused: it reads EOF and exits, the zygote reaps it; its scratch folder is
        removed now."""
        for fd in (self.host_read, self.host_write):
            try:
                os.close(fd)
            except OSError:
                pass
        shutil.rmtree(self.scratch, ignore_errors=True)


class ZygoteError(Exception):
    """The zygote could not be started or stopped answering."""


class ZygoteLauncher:
    """Forks run_code children from a warm zygote, started lazily and restarted if it dies."""

    kind = "zygote"

    def __init__(self, allowed_packages: list[str], policy: dict[str, Any], python: str | None = None) -> None:
        self.python = python or sys.executable
        self.allowed = list(allowed_packages)
        self.policy = policy
        self._lock = threading.Lock()
        self._send_lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._sock: socket.socket | None = None
        self._reader: threading.Thread | None = None
        self._pending: dict[int, Future[_Forked]] = {}
        self._exits: dict[int, Future[tuple[int, float | None]]] = {}
        self._spares: list[_HeldSpare] = []  # the children the zygote forked ahead, newest last
        self._spare_came = threading.Condition(self._lock)
        self._coming = 0  # spares the zygote is forking (one for each taken spare whose run is over)
        self._req = 0
        self._preloaded_key: str | None = None
        self._scratch_root: str | None = None
        self.pid: int | None = None

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        """Start the zygote now rather than on the first launch."""
        self._ensure()

    def _ensure(self) -> socket.socket:
        with self._lock:
            if self._sock is not None and self._proc is not None and self._proc.poll() is None:
                return self._sock
            self._stop_locked()
            # every scratch folder of this zygote's children lives below one folder the host
            # made, so the host can remove them all even if the zygote dies without a word
            self._scratch_root = tempfile.mkdtemp(prefix="nexus-run-")
            os.chmod(self._scratch_root, 0o711)  # children of another uid reach their own folder
            host_end, zygote_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                self._proc = subprocess.Popen(
                    [self.python, "-I", "-m", "nexus_tool_code_exec._zygote", str(zygote_end.fileno()),
                     json.dumps(self.allowed), json.dumps(self.policy), self._scratch_root],
                    pass_fds=(zygote_end.fileno(),),
                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                    process_group=0, env=CHILD_ENV, close_fds=True,
                )
            finally:
                zygote_end.close()
            host_end.settimeout(30)
            lines, passed = protocol.LineReader(1 << 20), list[list[int]]()
            receive = protocol.fd_receiver(host_end, passed)
            try:
                ready = lines.read(receive)
            except (OSError, protocol.FramingError):
                ready = None
            if ready is None or ready.get("t") != protocol.READY:
                host_end.close()
                raise ZygoteError("the zygote did not start")
            host_end.settimeout(None)
            self.pid = ready["pid"]
            self._sock = host_end
            self._preloaded_key = None
            self._reader = threading.Thread(target=self._read_ctrl, args=(host_end, lines, receive, passed),
                                            daemon=True, name="run_code-zygote")
            self._reader.start()
            return host_end

    def _read_ctrl(self, sock: socket.socket, lines: protocol.LineReader, receive: Callable[[], bytes],
                   passed: list[list[int]]) -> None:
        """Answers from the zygote. SPARE and FORKED come with the child's two pipe ends, passed
        with the message's bytes, so `passed` holds them in the order of the messages."""
        try:
            while True:
                msg = lines.read(receive)
                if msg is None:
                    raise EOFError
                kind = msg.get("t")
                if kind == protocol.SPARE:
                    got = passed.pop(0) if passed else []
                    if len(got) != 2:
                        for fd in got:
                            os.close(fd)
                        continue
                    pid = int(msg["pid"])
                    spare = _HeldSpare(pid, str(msg["scratch"]), got[0], got[1], str(msg.get("key") or ""),
                                       bool(msg.get("idle")), Future())
                    with self._lock:
                        self._exits[pid] = spare.exit_future
                        self._spares.append(spare)
                        dropped = self._spares[:-SPARES]  # the oldest go (older bindings)
                        del self._spares[:-SPARES]
                        self._coming = max(0, self._coming - 1)
                        self._spare_came.notify_all()
                    for old in dropped:
                        old.drop()
                elif kind == protocol.FORKED:
                    got = passed.pop(0) if passed else []
                    fut = self._pending.pop(int(msg["req"]), None)
                    if fut is None or len(got) != 2:
                        for fd in got:
                            os.close(fd)
                        if fut is not None:
                            fut.set_exception(ZygoteError("the zygote answered without the child's pipes"))
                        continue
                    pid = int(msg["pid"])
                    # registered here, before any later message is read: its exit can come next
                    exit_future: Future[tuple[int, float | None]] = Future()
                    with self._lock:
                        self._exits[pid] = exit_future
                    fut.set_result((pid, str(msg["scratch"]), got[0], got[1], exit_future))
                elif kind == protocol.EXIT:
                    with self._lock:
                        done = self._exits.pop(int(msg["pid"]), None)
                        dead = [sp for sp in self._spares if sp.pid == int(msg["pid"])]
                        for sp in dead:  # a spare died before a script took it
                            self._spares.remove(sp)
                    for sp in dead:
                        sp.drop()
                    if done is not None and not done.done():
                        done.set_result((int(msg["status"]), msg.get("cpu")))
        except Exception:  # noqa: BLE001 - whatever broke the channel, the zygote is unusable
            pass
        # the zygote is gone: nobody will answer what is pending
        with self._lock:
            for pending in list(self._pending.values()):
                if not pending.done():
                    pending.set_exception(ZygoteError("the zygote died"))
            self._pending.clear()
            for ending in self._exits.values():
                if not ending.done():
                    ending.set_result((-signal.SIGKILL, None))
            self._exits.clear()
            left, self._spares = self._spares, []
            self._coming = 0
            self._spare_came.notify_all()  # none is coming: a waiting launch asks for a fork
        for sp in left:
            sp.drop()
        with self._lock:
            if self._sock is sock:
                self._sock = None  # the next launch starts a new zygote
                sock.close()

    def _send(self, sock: socket.socket, msg: Any, fds: list[int] | None = None) -> None:
        with self._send_lock:
            protocol.send_with_fds(sock, msg, fds)

    def preload(self, key: str, bindings: str) -> None:
        """Have the zygote compile these bindings once, so children skip it."""
        sock = self._ensure()
        if self._preloaded_key != key:
            self._send(sock, {"t": protocol.PRELOAD, "key": key, "bindings": bindings})
            self._preloaded_key = key

    def launch(self) -> Child:
        try:
            return self._launch()
        except ZygoteError:  # it died since the last run: one new zygote, one more try
            with self._lock:
                self._stop_locked()
            return self._launch()

    def lost(self) -> bool:
        """Whether the zygote is gone (and with it every child it made that was still waiting)."""
        with self._lock:
            proc, sock = self._proc, self._sock
        return sock is None or proc is None or proc.poll() is not None

    def held_fds(self) -> set[int]:
        """The fds of the spares the host holds (two pipe ends each). They are the only fds the
        launcher keeps between runs, and they change with every run."""
        with self._lock:
            return {fd for sp in self._spares for fd in (sp.host_read, sp.host_write)}

    def _take(self, sock: socket.socket) -> Child | None:
        """A spare, if the host holds one or the zygote is about to send one (it forks one when
        a spare's run is over: back to back, the next run waits for that one rather than ask for
        a fork of its own). None: ask for a fork."""
        with self._lock:
            if not self._spares and self._coming > 0:
                self._spare_came.wait_for(lambda: bool(self._spares) or self._coming == 0, timeout=SPARE_WAIT)
            if not self._spares:
                self._coming = 0  # it did not come: do not wait for it again
                return None
            # the oldest: it has had the longest to set itself up (unless it has older bindings)
            fitting = [sp for sp in self._spares if sp.key == self._preloaded_key] or self._spares
            spare = fitting[0]
            self._spares.remove(spare)
        if spare.idle:  # a script waits for it now: no longer only the CPU nobody wants
            try:
                os.sched_setscheduler(spare.pid, os.SCHED_OTHER, os.sched_param(0))
            except OSError:
                pass
        child = self._child(sock, spare.pid, spare.scratch, spare.host_read, spare.host_write,
                            spare.exit_future, spare.key)
        child.on_finished = self._replacement_coming
        if "seccomp" in self.policy.get("layers", ()):
            child.pidfd = _pidfd_of(spare.pid, spare.host_read)
        return child

    def _replacement_coming(self) -> None:
        """A spare's run is over: its child is ending, and the zygote forks a new spare once it
        has reaped it. A launch that finds no spare meanwhile waits for that one."""
        with self._lock:
            self._coming += 1

    def _launch(self) -> Child:
        sock = self._ensure()
        taken = self._take(sock)
        if taken is not None:
            return taken
        fut: Future[_Forked] = Future()
        with self._lock:
            self._req += 1
            req = self._req
            self._pending[req] = fut
        try:
            try:
                self._send(sock, {"t": protocol.FORK, "req": req})
            except OSError as exc:  # it died since _ensure looked
                raise ZygoteError(f"the zygote is gone ({exc.strerror})") from None
            pid, scratch, rfd, wfd, exit_future = fut.result(timeout=30)
        except Exception:
            with self._lock:
                self._pending.pop(req, None)
            raise
        return self._child(sock, pid, scratch, rfd, wfd, exit_future, None)

    def _child(self, sock: socket.socket, pid: int, scratch: str, rfd: int, wfd: int,
               exit_future: Future[tuple[int, float | None]], key: str | None) -> Child:
        def wait(timeout: float) -> int | None:
            try:
                status, cpu = exit_future.result(timeout=timeout)
            except TimeoutError:
                return None
            child.cpu_seconds = cpu
            return int(status)

        def on_exit(callback: Callable[[], None]) -> None:
            exit_future.add_done_callback(lambda _: callback())

        child = Child(pid, rfd, wfd, scratch=scratch, waiter=wait, killer=lambda: self._kill(sock, pid),
                      on_exit=on_exit, bindings_key=key)
        return child

    def _kill(self, sock: socket.socket, pid: int) -> None:
        try:
            self._send(sock, {"t": protocol.KILL, "pid": pid})
        except OSError:
            pass

    def _stop_locked(self) -> None:
        left, self._spares = self._spares, []
        for sp in left:
            sp.drop()
        if self._sock is not None:
            try:
                self._sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self._sock.close()
            self._sock = None
        if self._proc is not None:
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            self._proc = None
        if self._scratch_root is not None:
            shutil.rmtree(self._scratch_root, ignore_errors=True)
            self._scratch_root = None

    def close(self) -> None:
        with self._lock:
            self._stop_locked()


if __name__ == "__main__":
    zygote_main(int(sys.argv[1]), json.loads(sys.argv[2]), json.loads(sys.argv[3]), sys.argv[4])
