"""The zygote launcher (runs in the host): the host's side of the warm zygote (zygote/main.py).

It starts a zygote on first use and a new one whenever the last has died. Each zygote process
has a `_Zygote` here: its socket, the spares it forked ahead (spares.py's `SparePool`),
the forks asked of it and the exits it reported. What a zygote leaves when it dies belongs to
its own `_Zygote` alone, so nothing of a dead zygote's state can touch its successor's, and a
child knows whether it died with its zygote (`died_with_its_maker`).

No thread of the host waits on the zygote's socket: its messages (a spare forked, a child's
exit) wait in the socket until a run needs them, and the thread that needs one reads whatever
has come (`_Zygote.wait_for`). So a run costs the host no thread wake-up for the zygote's sake,
and a host at rest has nothing of run_code's awake.
"""

from __future__ import annotations

import json
import logging
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable

import attrs

from .. import protocol
from .base import CHILD_ENV, Child, Launcher
from .cleanup import janitor, remove_logged
from .spares import SPARE_WAIT, SPARES, Spare, SparePool

log = logging.getLogger("nexus_tool_code_exec")

#: how long a launch waits for the child a FORK asked for
FORK_WAIT = 30.0

#: an exit as the zygote reports it: status as subprocess reports it, and CPU seconds
_Exit = tuple[int, float | None]


class ZygoteError(Exception):
    """The zygote could not be started or stopped answering."""


def _hung_up(pipe_end: int) -> bool:
    """Whether the other end of the pipe `pipe_end` reads is closed: the child that held it is
    gone (or closed it, which a child waiting for its script does not do)."""
    poller = select.poll()
    poller.register(pipe_end, select.POLLIN)
    return any(event & (select.POLLHUP | select.POLLERR | select.POLLNVAL) for _, event in poller.poll(0))


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
    if _hung_up(pipe_end):
        os.close(fd)
        return None
    return fd


@attrs.define(eq=False)
class ZygoteChild(Child):
    """A child the zygote forked: killed through the zygote (only it may signal its children
    under the uid layer, and it knows they are its own), waited for through the zygote's EXIT.
    Its scratch folder is the zygote's to keep or remove, once it has reaped it."""

    zygote: _Zygote | None = attrs.field(default=None, repr=False)
    spare: bool = False  # taken from the spares: the zygote forks a replacement once it ends

    def kill(self) -> None:
        if self.zygote is not None:
            self.zygote.kill(self.pid)

    def wait(self, timeout: float = 5.0) -> int | None:
        if self.zygote is None:
            return None
        ended = self.zygote.exit_of(self.pid, timeout)
        if ended is None:
            return None
        status, self.cpu_seconds = ended
        return int(status)

    def finished(self) -> None:
        if self.zygote is not None:
            self.zygote.let_go(self.pid, self.spare)

    def died_with_its_maker(self) -> bool:
        # its exit is known once the zygote reported it, or once the zygote is gone: a zygote
        # marks itself gone before it settles its children's exits
        return self.zygote is not None and not self.zygote.alive()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._close_fds()


class _Zygote:
    """One zygote process, and the host's side of its socket.

    Whichever thread needs something from the zygote (a spare, a forked child, an exit) reads
    the socket itself, one thread at a time, and files every message it reads for whoever it is
    for (`wait_for`)."""

    def __init__(self, python: str, allowed: list[str], policy: protocol.ChildPolicy) -> None:
        self.policy = policy
        self.seccomp = "seccomp" in policy.get("layers", ())
        self.spares = SparePool(SPARES)
        self.gone = False  # its socket was closed: it is dead, or as good as
        self.preloaded_key: str | None = None
        self._cond = threading.Condition()  # guards the state below, and who reads the socket
        self._reading = False
        self._send_lock = threading.Lock()
        self._forks: dict[int, ZygoteChild | None] = {}  # by request number: None until it came
        self._watched: dict[int, _Exit | None] = {}  # pid -> its exit, for the children runs have
        self._req = 0
        # every scratch folder of this zygote's children lives below one folder the host made,
        # so the host can remove them all even if the zygote dies without a word
        self.scratch_root = tempfile.mkdtemp(prefix="nexus-run-")
        os.chmod(self.scratch_root, 0o711)  # children of another uid reach their own folder
        host_end, zygote_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.proc = subprocess.Popen(
                [python, "-I", "-m", "nexus_tool_code_exec.zygote", str(zygote_end.fileno()),
                 json.dumps(allowed), json.dumps(policy), self.scratch_root, str(SPARES)],
                pass_fds=(zygote_end.fileno(),),
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                process_group=0, env=CHILD_ENV, close_fds=True,
            )
        finally:
            zygote_end.close()
        self.sock = host_end
        self._lines = protocol.LineReader(1 << 20)
        self._passed: list[list[int]] = []
        self._receive = protocol.fd_receiver(host_end, self._passed, socket.MSG_DONTWAIT)
        self._poll = select.poll()
        self._poll.register(host_end, select.POLLIN)
        try:
            first = self._lines.read(lambda: self.sock.recv(1 << 16) if self._poll.poll(30_000) else b"")
            ready = protocol.read_zygote(first) if first is not None else None
        except (OSError, protocol.ProtocolError):
            ready = None
        if ready is None or ready["t"] != protocol.READY:
            self.stop()
            raise ZygoteError("the zygote did not start")
        self.pid = ready["pid"]

    def alive(self) -> bool:
        return not self.gone and self.proc.poll() is None

    # -- asking ---------------------------------------------------------------------------------

    def send(self, msg: protocol.ZygoteRequest) -> None:
        with self._send_lock:
            protocol.send_with_fds(self.sock, msg)

    def preload(self, key: str, bindings: protocol.BindingsPayload) -> None:
        if self.preloaded_key != key:
            self.send({"t": protocol.PRELOAD, "key": key, "bindings": bindings})
            self.preloaded_key = key

    def hurry(self) -> None:
        """Lift SCHED_IDLE off the zygote: a run now waits for what it is doing. It forks spares
        under SCHED_IDLE, on CPU time nobody else wants (zygote/main.py), and a busy machine has
        none: there the fork took seconds, and the answers queued behind it (a child's exit the
        host waits 2 s for, so a script that exited was reported as "ended" without its status;
        the spare or the fork a run waits for) with it. The zygote returns to SCHED_OTHER after
        each fork by itself; a spare forked meanwhile keeps the policy it was forked with."""
        pid = self.pid
        if pid is None or not hasattr(os, "SCHED_IDLE"):
            return
        try:
            if os.sched_getscheduler(pid) == os.SCHED_IDLE:
                os.sched_setscheduler(pid, os.SCHED_OTHER, os.sched_param(0))
        except OSError:  # gone, or not ours to change (not root: it never went idle)
            pass

    def take_spare(self) -> ZygoteChild | None:
        """A spare for a run: one held, or the one being forked (waited for up to SPARE_WAIT);
        None where none is coming (more runs at once than spares)."""
        self.wait_for(lambda: False, 0)  # what it said since the last run (a spare, folders to remove)
        while True:
            key = self.preloaded_key
            if not self.spares.held():
                self.hurry()  # the spare coming is being forked under SCHED_IDLE
            if not self.wait_for(lambda: bool(self.spares.held()) or not self.spares.coming, SPARE_WAIT):
                with self._cond:
                    self.spares.coming.clear()  # it did not come: do not wait for it again
            with self._cond:
                spare = self.spares.take(key)
                if spare is None:
                    return None
                self._watched[spare.pid] = None
            if _hung_up(spare.host_read):  # it died waiting (the zygote reports only the exits it is asked for)
                self.let_go(spare.pid, spare=True)
                spare.drop()
                continue
            if spare.idle:  # a script waits for it now: no longer only the CPU nobody wants
                try:
                    os.sched_setscheduler(spare.pid, os.SCHED_OTHER, os.sched_param(0))
                except OSError:
                    pass
            child = ZygoteChild(spare.pid, spare.host_read, spare.host_write, scratch=spare.scratch,
                                bindings_key=spare.key, zygote=self, spare=True)
            if self.seccomp:
                child.pidfd = _pidfd_of(spare.pid, spare.host_read)
            return child

    def fork(self) -> ZygoteChild:
        """A child forked now (no spare at hand: more runs at once than spares)."""
        self.hurry()  # the FORK waits behind a spare's fork under SCHED_IDLE, if one is going on
        with self._cond:
            if self.gone:
                raise ZygoteError("the zygote is gone")
            self._req += 1
            req = self._req
            self._forks[req] = None
        try:
            try:
                self.send({"t": protocol.FORK, "req": req})
            except OSError as exc:
                raise ZygoteError(f"the zygote is gone ({exc.strerror})") from None
            if not self.wait_for(lambda: self._forks.get(req) is not None or self.gone, FORK_WAIT):
                raise ZygoteError(f"the zygote did not fork a child within {FORK_WAIT:g} s")
            with self._cond:
                child = self._forks.pop(req, None)
            if child is None:
                raise ZygoteError("the zygote died")
            return child
        finally:
            with self._cond:
                late = self._forks.pop(req, None)
            if late is not None:  # it came after all, too late for this launch
                self.let_go(late.pid, spare=False)
                late.close()

    def kill(self, pid: int) -> None:
        try:
            self.send({"t": protocol.KILL, "pid": pid})
        except OSError:
            pass  # it is gone, and its children with it

    def exit_of(self, pid: int, timeout: float) -> _Exit | None:
        """How child `pid` (which a run has) ended, once the zygote reported it, waiting up to
        `timeout` seconds; None if that did not come."""
        # The zygote may be forking a spare under SCHED_IDLE, the report queued behind it; and it
        # may go idle only after this call began (the KILL that asks for the report also starts
        # the replacement's fork, before the child's reap): so lifted at each poll, not once.
        deadline = time.monotonic() + timeout
        while self._watched.get(pid) is None:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            self.hurry()
            self.wait_for(lambda: self._watched.get(pid) is not None, min(left, 0.05))
        with self._cond:
            return self._watched.get(pid)

    def let_go(self, pid: int, spare: bool) -> None:
        """A run is done with child `pid`: its exit is nobody's business any more, and if it was
        a spare, the zygote forks its replacement."""
        with self._cond:
            self._watched.pop(pid, None)
            if spare and not self.gone:
                self.spares.replacement_coming(pid)

    def stop(self) -> None:
        """Close the socket (the zygote then kills its children and exits), wait for it, and
        remove every scratch folder of its children."""
        with self._cond:
            dropped = self.spares.close()
        for spare in dropped:
            spare.drop()
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        janitor.drain()  # the scratch folders of its children that are on their way out
        remove_logged(self.scratch_root)

    # -- what it says ---------------------------------------------------------------------------

    def wait_for(self, ready: Callable[[], bool], timeout: float) -> bool:
        """Read the zygote's messages until `ready()` (called with the lock held) is true, or
        `timeout` seconds have passed, or the zygote is gone; whether it is. With timeout 0,
        what has come already is read, without waiting."""
        deadline = time.monotonic() + timeout
        while True:
            with self._cond:
                if ready():
                    return True
                if self.gone:
                    return False
                left = deadline - time.monotonic()
                if self._reading:  # another thread reads: it files what comes, and wakes us
                    if left <= 0:
                        return False
                    self._cond.wait(left)
                    continue
                self._reading = True
            try:
                self._read(max(left, 0.0))
            finally:
                with self._cond:
                    self._reading = False
                    self._cond.notify_all()
            if left <= 0:
                with self._cond:
                    return ready()

    def _read(self, timeout: float) -> None:
        """Wait up to `timeout` seconds for the socket to have something, then read everything
        it has and file each message. The caller is the only reader."""
        if not self._poll.poll(int(timeout * 1000) if timeout > 0 else 0):
            return
        while True:
            try:
                data = self._receive()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                data = b""
            if not data:
                self._died()
                return
            self._lines.feed(data)
            try:
                while (msg := self._lines.next()) is not None:
                    self._file(protocol.read_zygote(msg))
            except protocol.ProtocolError:  # the zygote is trusted: this is a bug, and it is as good as dead
                log.error("run_code: the zygote broke the protocol", exc_info=True)
                self._died()
                return

    def _file(self, msg: protocol.ZygoteMessage) -> None:
        """One message from the zygote, where it belongs. SPARE and FORKED come with the child's
        two pipe ends, passed with the message's bytes, so `_passed` holds them in the order of
        the messages."""
        dropped: list[Spare] = []
        if msg["t"] == protocol.SPARE or msg["t"] == protocol.FORKED:
            fds = self._passed.pop(0) if self._passed else []
            with self._cond:
                dropped = self._child_came(msg, fds)
        elif msg["t"] == protocol.TRASH:  # folders its scripts changed: removed off this thread
            for path in msg["paths"]:
                if os.path.dirname(path) == self.scratch_root:
                    janitor.remove(path)
        elif msg["t"] == protocol.EXIT:
            pid = msg["pid"]
            with self._cond:
                if pid in self._watched:
                    self._watched[pid] = (msg["status"], float(msg["cpu"]))
                dropped = self.spares.died(pid)  # if it was a spare no script took
        for spare in dropped:
            spare.drop()

    def _child_came(self, msg: protocol.SpareMessage | protocol.ForkedMessage, fds: list[int]) -> list[Spare]:
        """A SPARE, or the FORKED a launch waits for: the host holds its pipe ends from now on."""
        req = msg["req"] if msg["t"] == protocol.FORKED else None
        waited = req is not None and req in self._forks
        if len(fds) != 2 or (req is not None and not waited):
            for fd in fds:  # nobody to give it to (its launch gave up): it reads EOF and exits
                os.close(fd)
            return []
        pid = msg["pid"]
        if req is not None:
            self._watched[pid] = None  # registered before any later message is read: its exit can come next
            self._forks[req] = ZygoteChild(pid, fds[0], fds[1], scratch=msg["scratch"], zygote=self)
            return []
        assert msg["t"] == protocol.SPARE
        return self.spares.add(Spare(pid, msg["scratch"], fds[0], fds[1], msg["key"], msg["idle"]), msg["replaces"])

    def _died(self) -> None:
        """The socket closed: nobody will answer what is pending, and its children died with it."""
        with self._cond:
            self.gone = True
            for pid, ended in self._watched.items():
                if ended is None:
                    self._watched[pid] = (-signal.SIGKILL, None)
            dropped = self.spares.close()
            self._cond.notify_all()
        for spare in dropped:
            spare.drop()


class ZygoteLauncher(Launcher):
    """Forks run_code children from a warm zygote, started lazily and restarted if it dies."""

    def __init__(self, allowed_packages: Iterable[str], policy: protocol.ChildPolicy, python: str | None = None) -> None:
        self.python = python or sys.executable
        self.allowed = list(allowed_packages)
        self.policy = policy
        self._lock = threading.Lock()
        self._zygote: _Zygote | None = None
        self.pid: int | None = None

    def start(self) -> None:
        self._current()

    def launch(self) -> Child:
        try:
            return self._launch()
        except ZygoteError:  # it died since the last run: one new zygote, one more try
            return self._launch()

    def preload(self, key: str, bindings: protocol.BindingsPayload) -> None:
        """Have the zygote compile these bindings once, so children skip it."""
        self._current().preload(key, bindings)

    def held_fds(self) -> set[int]:
        """The pipe ends of the spares the host holds (two each): the only fds the launcher
        keeps between runs, and they change with every run."""
        return {fd for sp in self.spares() for fd in (sp.host_read, sp.host_write)}

    def spares(self) -> list[Spare]:
        """The spares held now, oldest first (and what the zygote has said meanwhile read)."""
        zygote = self._zygote
        if zygote is None:
            return []
        zygote.wait_for(lambda: False, 0)
        with zygote._cond:
            return zygote.spares.held()

    @property
    def preloaded_key(self) -> str | None:
        """The bindings the current zygote has compiled (spares forked since have them too)."""
        zygote = self._zygote
        return zygote.preloaded_key if zygote is not None else None

    def close(self) -> None:
        with self._lock:
            zygote, self._zygote = self._zygote, None
        if zygote is not None:
            zygote.stop()

    def _launch(self) -> Child:
        zygote = self._current()
        child = zygote.take_spare()
        if child is None:
            try:
                child = zygote.fork()
            except ZygoteError:
                self._forget(zygote)
                raise
        return child

    def _current(self) -> _Zygote:
        """The live zygote, started if there is none."""
        with self._lock:
            zygote = self._zygote
            if zygote is not None and zygote.alive():
                return zygote
            self._zygote = None
            if zygote is not None:
                zygote.stop()
            self._zygote = zygote = _Zygote(self.python, self.allowed, self.policy)
            self.pid = zygote.pid
            return zygote

    def _forget(self, zygote: _Zygote) -> None:
        with self._lock:
            if self._zygote is zygote:
                self._zygote = None
        zygote.stop()
