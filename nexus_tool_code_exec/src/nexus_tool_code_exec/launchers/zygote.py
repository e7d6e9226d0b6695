"""The zygote launcher (runs in the host): the host's side of the warm zygote (zygote/main.py).

It starts a zygote on first use and a new one whenever the last has died. Each zygote process
has a `_Zygote` here: its socket, the thread that reads it, the spares it forked ahead (host/
fastpath.py's `SparePool`), the forks asked of it and the exits it reported. What a zygote leaves
when it dies belongs to its own `_Zygote` alone, so nothing of a dead zygote's state can touch
its successor's, and a child knows whether it died with its zygote (`died_with_its_maker`).
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from concurrent.futures import Future

import attrs

from .. import protocol
from ..host.cleanup import janitor, remove_logged
from ..host.fastpath import SPARES, Spare, SparePool
from .base import CHILD_ENV, Child, Launcher

#: how long a launch waits for the child a FORK asked for
FORK_WAIT = 30.0

#: an exit as the zygote reports it: status as subprocess reports it, and CPU seconds
_Exit = tuple[int, float | None]


class ZygoteError(Exception):
    """The zygote could not be started or stopped answering."""


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
class ZygoteChild(Child):
    """A child the zygote forked: killed through the zygote (only it may signal its children
    under the uid layer, and it knows they are its own), waited for through the zygote's EXIT."""

    zygote: _Zygote | None = attrs.field(default=None, repr=False)
    exit_future: Future[_Exit] | None = attrs.field(default=None, repr=False)
    spare: bool = False  # taken from the spares: the zygote forks a replacement once it ends

    def kill(self) -> None:
        if self.zygote is not None:
            self.zygote.kill(self.pid)

    def wait(self, timeout: float = 5.0) -> int | None:
        if self.exit_future is None:
            return None
        try:
            status, cpu = self.exit_future.result(timeout=timeout)
        except TimeoutError:
            return None
        self.cpu_seconds = cpu
        return int(status)

    def finished(self) -> None:
        if self.spare and self.zygote is not None:
            self.zygote.spares.replacement_coming()

    def died_with_its_maker(self) -> bool:
        # its exit is known once the zygote reported it, or once the zygote is gone: a zygote
        # marks itself gone before it settles its children's exits
        return self.zygote is not None and not self.zygote.alive()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._close_fds()
        scratch, future = self.scratch, self.exit_future
        if scratch and future is not None:
            # only once the process is gone: a script still writing (it was killed, not
            # waited for) would otherwise make the removal fail and leave the folder behind
            future.add_done_callback(lambda _: janitor.remove(scratch))
        elif scratch:
            janitor.remove(scratch)


class _Zygote:
    """One zygote process, and the host's side of its socket."""

    def __init__(self, python: str, allowed: list[str], policy: protocol.ChildPolicy) -> None:
        self.policy = policy
        self.spares = SparePool(SPARES)
        self.gone = False  # its socket was closed: it is dead, or as good as
        self.preloaded_key: str | None = None
        self._lock = threading.Lock()
        self._send_lock = threading.Lock()
        self._forks: dict[int, Future[ZygoteChild]] = {}  # by request number
        self._exits: dict[int, Future[_Exit]] = {}  # by pid, for every child not reaped yet
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
        host_end.settimeout(30)
        lines, passed = protocol.LineReader(1 << 20), list[list[int]]()
        receive = protocol.fd_receiver(host_end, passed)
        try:
            ready = lines.read(receive)
        except (OSError, protocol.FramingError):
            ready = None
        if ready is None or ready.get("t") != protocol.READY:
            self.stop()
            raise ZygoteError("the zygote did not start")
        host_end.settimeout(None)
        self.pid = int(ready["pid"])
        threading.Thread(target=self._read, args=(lines, receive, passed), daemon=True,
                         name="run_code-zygote").start()

    def alive(self) -> bool:
        return not self.gone and self.proc.poll() is None

    # -- asking ---------------------------------------------------------------------------------

    def send(self, msg: object) -> None:
        with self._send_lock:
            protocol.send_with_fds(self.sock, msg)

    def preload(self, key: str, bindings: str) -> None:
        if self.preloaded_key != key:
            self.send({"t": protocol.PRELOAD, "key": key, "bindings": bindings})
            self.preloaded_key = key

    def take_spare(self) -> ZygoteChild | None:
        spare = self.spares.take(self.preloaded_key)
        if spare is None:
            return None
        child = self._child(spare.pid, spare.scratch, spare.host_read, spare.host_write, spare.exit_future,
                            bindings_key=spare.key, spare=True)
        if "seccomp" in self.policy.get("layers", ()):
            child.pidfd = _pidfd_of(spare.pid, spare.host_read)
        return child

    def fork(self) -> ZygoteChild:
        """A child forked now (no spare at hand: more runs at once than spares)."""
        fut: Future[ZygoteChild] = Future()
        with self._lock:
            if self.gone:
                raise ZygoteError("the zygote is gone")
            self._req += 1
            req = self._req
            self._forks[req] = fut
        try:
            try:
                self.send({"t": protocol.FORK, "req": req})
            except OSError as exc:
                raise ZygoteError(f"the zygote is gone ({exc.strerror})") from None
            return fut.result(timeout=FORK_WAIT)
        finally:
            with self._lock:
                self._forks.pop(req, None)

    def kill(self, pid: int) -> None:
        try:
            self.send({"t": protocol.KILL, "pid": pid})
        except OSError:
            pass  # it is gone, and its children with it

    def stop(self) -> None:
        """Close the socket (the zygote then kills its children and exits), wait for it, and
        remove every scratch folder of its children."""
        self.spares.close()
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

    def _child(self, pid: int, scratch: str, rfd: int, wfd: int, exit_future: Future[_Exit],
               bindings_key: str | None = None, spare: bool = False) -> ZygoteChild:
        return ZygoteChild(pid, rfd, wfd, scratch=scratch, bindings_key=bindings_key, zygote=self,
                           exit_future=exit_future, spare=spare)

    def _read(self, lines: protocol.LineReader, receive: Callable[[], bytes],
              passed: list[list[int]]) -> None:
        """The zygote's messages, until its socket closes. SPARE and FORKED come with the
        child's two pipe ends, passed with the message's bytes, so `passed` holds them in the
        order of the messages."""
        try:
            while (msg := lines.read(receive)) is not None:
                kind = msg.get("t")
                if kind in (protocol.SPARE, protocol.FORKED):
                    fds = passed.pop(0) if passed else []
                    self._child_came(msg, fds)
                elif kind == protocol.EXIT:
                    pid = int(msg["pid"])
                    with self._lock:
                        done = self._exits.pop(pid, None)
                    self.spares.died(pid)  # if it was a spare no script took
                    if done is not None and not done.done():
                        done.set_result((int(msg["status"]), msg.get("cpu")))
        except Exception:  # noqa: BLE001 - whatever broke the channel, this zygote is unusable
            pass
        # the zygote is gone: nobody will answer what is pending, and its children died with it
        with self._lock:
            self.gone = True
            forks, self._forks = list(self._forks.values()), {}
            exits, self._exits = list(self._exits.values()), {}
        self.spares.close()
        for pending in forks:
            if not pending.done():
                pending.set_exception(ZygoteError("the zygote died"))
        for ending in exits:
            if not ending.done():
                ending.set_result((-signal.SIGKILL, None))

    def _child_came(self, msg: protocol.Message, fds: list[int]) -> None:
        """A SPARE, or the FORKED a launch waits for: the host holds its pipe ends from now on."""
        fork = None
        if msg["t"] == protocol.FORKED:
            with self._lock:
                fork = self._forks.pop(int(msg["req"]), None)
        if len(fds) != 2 or (msg["t"] == protocol.FORKED and fork is None):
            for fd in fds:  # nobody to give it to (its launch gave up): it reads EOF and exits
                os.close(fd)
            if fork is not None:
                fork.set_exception(ZygoteError("the zygote answered without the child's pipes"))
            return
        pid = int(msg["pid"])
        # registered before any later message is read: its exit can come next
        exit_future: Future[_Exit] = Future()
        with self._lock:
            self._exits[pid] = exit_future
        if fork is not None:
            fork.set_result(self._child(pid, str(msg["scratch"]), fds[0], fds[1], exit_future))
        else:
            self.spares.add(Spare(pid, str(msg["scratch"]), fds[0], fds[1], str(msg.get("key") or ""),
                                  bool(msg.get("idle")), exit_future))


class ZygoteLauncher(Launcher):
    """Forks run_code children from a warm zygote, started lazily and restarted if it dies."""

    children_wait_ready = True

    def __init__(self, allowed_packages: list[str], policy: protocol.ChildPolicy, python: str | None = None) -> None:
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

    def preload(self, key: str, bindings: str) -> None:
        """Have the zygote compile these bindings once, so children skip it."""
        self._current().preload(key, bindings)

    def held_fds(self) -> set[int]:
        """The pipe ends of the spares the host holds (two each): the only fds the launcher
        keeps between runs, and they change with every run."""
        zygote = self._zygote
        return zygote.spares.held_fds() if zygote is not None else set()

    def spares(self) -> list[Spare]:
        """The spares held now, oldest first."""
        zygote = self._zygote
        return zygote.spares.held() if zygote is not None else []

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
