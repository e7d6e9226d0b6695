"""The latency tricks of a run, in one place (runs in the host). None of them changes what a run
does or what it may do; each makes it start or answer sooner. The flow (engine.py, runner.py)
calls them by name:

- the seat (`Seat`): a lone run takes its child before its script is checked and wakes it with
  the source, which the child compiles while the host checks it; and it keeps its processes on
  CPUs of their own (placement), so that the sides that poll never share a CPU.
- polling: while calls go back and forth, both sides poll the pipe briefly before they sleep
  (protocol.PipeReader); the host's pollers share `HOST_PERMITS`.
- reader threads (`readers`): tool calls are answered by a reader thread, reused across runs.
- spares (`SparePool`): the zygote forks children ahead; the host holds their pipe ends, so a
  run takes a child without a round trip, and its replacement is forked once the run is over.

Everything here was measured on 2-vCPU VMs; docs/performance.md has the figures.
"""

from __future__ import annotations

import ctypes
import os
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING

import attrs

from .. import protocol
from ..protocol import PipeReader, SpinPermits
from .cleanup import janitor

if TYPE_CHECKING:
    from ..launchers.base import Child, Launcher


# -- polling ------------------------------------------------------------------------------------


def _host_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


#: the host's: one polling reader per CPU but one, so a run's child always has a CPU to run on
HOST_PERMITS = SpinPermits(_host_cpus() - 1)
#: how long the host polls for a placed run's first message before it sleeps: about what a
#: trivial script takes, so that its end is read without a wake-up
FIRST_SPIN = 0.001
#: how long a child told that its script is coming (WAKE) polls for the START before it sleeps
WAKE_SPIN = 0.003


def reader_of(child: Child) -> PipeReader:
    """The host's reader of a child's pipe: it polls only once told to (`expect`), which the
    runner does only for a placed run (a polling reader could keep the child off the CPU the
    scheduler put it on)."""
    return PipeReader(child.rfd, permits=HOST_PERMITS, eager=False)


# -- reader threads -----------------------------------------------------------------------------


class _ThreadCache:
    """Reader threads, reused across runs (starting a thread per run costs more than the run's
    own work); a new one whenever none is idle, so concurrent runs never wait for each other."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: list[queue.SimpleQueue[Callable[[], None]]] = []

    def submit(self, fn: Callable[[], None]) -> None:
        with self._lock:
            inbox = self._idle.pop() if self._idle else None
        if inbox is None:
            inbox = queue.SimpleQueue()
            threading.Thread(target=self._work, args=(inbox,), daemon=True, name="run_code-reader").start()
        inbox.put(fn)

    def _work(self, inbox: queue.SimpleQueue[Callable[[], None]]) -> None:
        while True:
            try:
                fn = inbox.get(timeout=60)
            except queue.Empty:
                with self._lock:
                    if inbox in self._idle:  # nobody took it meanwhile: this thread may end
                        self._idle.remove(inbox)
                        return
                continue  # a submitter took it and is putting work in
            fn()
            with self._lock:
                self._idle.append(inbox)


readers = _ThreadCache()


# -- placement ----------------------------------------------------------------------------------

try:
    _sched_getcpu: Callable[[], int] | None = ctypes.CDLL(None).sched_getcpu
    _sched_getcpu.restype = ctypes.c_int  # type: ignore[union-attr]
except (OSError, AttributeError):
    _sched_getcpu = None


@attrs.define(eq=False)
class _Placement:
    """Where a lone run's processes are kept, so that the side that waits (and polls) never
    shares a CPU with the side it waits for: the child off the CPU of the thread that started
    the run, and from the first tool call on, the reader thread on one CPU and the child on the
    others. Left to itself the scheduler tends to put a process woken through a pipe on the
    writer's CPU (a pipe write is a "sync" wake-up: the kernel expects the writer to sleep
    next), and two pollers sharing one CPU each run at half speed."""

    child_pid: int
    child_cpus: set[int]  # what the child had, to give back
    reader_tid: int | None = None
    reader_cpus: set[int] | None = None
    undone: bool = False

    def undo(self) -> None:
        """Give both their CPUs back (any thread may: affinity is set by thread id)."""
        if self.undone:
            return
        self.undone = True
        for tid, cpus in ((self.reader_tid, self.reader_cpus), (self.child_pid, self.child_cpus)):
            if tid is None or cpus is None:
                continue
            try:
                os.sched_setaffinity(tid, cpus)
            except OSError:
                pass  # the child may be gone already


class _Placements:
    """The runs going on in this process, and the placements in force: placement only pays for
    a lone run, so a second run undoes the first's."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.active = 0  # runs going on
        self.placed: list[_Placement] = []

    def can_place(self) -> bool:
        return _sched_getcpu is not None and hasattr(os, "sched_setaffinity") and HOST_PERMITS.n >= 1

    def run_starts(self) -> None:
        with self.lock:
            self.active += 1
            undo = list(self.placed) if self.active > 1 else []  # two runs now: let the scheduler spread them
            if undo:
                self.placed.clear()
        for placement in undo:
            placement.undo()

    def run_ends(self, placement: _Placement | None) -> None:
        with self.lock:
            self.active -= 1
            if placement is not None and placement in self.placed:
                self.placed.remove(placement)
        if placement is not None:
            placement.undo()

    def place_child(self, child: Child) -> _Placement | None:
        """A lone run: the child off the CPU this (the run's first) thread is on. None where
        nothing was changed (concurrent runs, one CPU, not allowed)."""
        if not self.can_place():
            return None
        with self.lock:
            if self.active != 1:
                return None  # concurrent runs: pinning them would only get in the load balancer's way
            try:
                theirs = os.sched_getaffinity(child.pid)
                cpu = _sched_getcpu()  # type: ignore[misc]
                if cpu < 0 or not theirs - {cpu}:
                    return None
                os.sched_setaffinity(child.pid, theirs - {cpu})
            except OSError:
                return None
            placement = _Placement(child.pid, theirs)
            self.placed.append(placement)
            return placement

    def place_reader(self, placement: _Placement) -> bool:
        """From the first tool call on: this reader thread stays on the CPU it is on, the child
        on the others. False where that is not done (another run started meanwhile)."""
        with self.lock:
            if placement.undone or placement not in self.placed:
                return False
            try:
                mine = os.sched_getaffinity(0)
                cpu = _sched_getcpu()  # type: ignore[misc]
                if cpu < 0 or cpu not in mine or not placement.child_cpus - {cpu}:
                    return False
                os.sched_setaffinity(0, {cpu})
                placement.reader_tid, placement.reader_cpus = threading.get_native_id(), mine
                os.sched_setaffinity(placement.child_pid, placement.child_cpus - {cpu})
            except OSError:
                return False
            return True


placements = _Placements()


# -- the seat -----------------------------------------------------------------------------------

#: the host's encoder of WAKE (the runner's, for the rest)
_encode = protocol.encoder()


@attrs.define(eq=False)
class Seat:
    """A run's child from the moment it is taken to the end of the run, and where the run's
    processes run: counted among the runs going on, and, for a lone run, placed."""

    child: Child
    _placement: _Placement | None = attrs.field(default=None, alias="placement")
    #: it was sent the script's source early (WAKE), and compiles it while the host checks it
    woken: bool = False
    #: a run has taken it; it ends it
    used: bool = False
    _released: bool = attrs.field(default=False, init=False)

    @classmethod
    def take(cls, launcher: Launcher) -> Seat:
        """A child for a run that starts now (raises what `launch` raises)."""
        child = launcher.launch()
        placements.run_starts()
        return cls(child, placements.place_child(child))

    @classmethod
    def early(cls, launcher: Launcher | None, script: str) -> Seat | None:
        """A lone run's child, taken before its script is checked and told the script is coming,
        with its source: a process that has slept for a while takes 0.2-0.3 ms to wake on a
        small VM, so it wakes, and compiles the source, while the host checks it. Nothing of the
        script runs before the START, which comes only for a script that passed its check (a
        rejected one's child is let go: `abandon`). Only for a lone run placed on a CPU other
        than this thread's (a child polling on this thread's CPU would slow it down), and only
        where children wait ready (a fresh interpreter takes ~30 ms to start: nothing to win, a
        spawn to waste). None: nothing taken; the run takes its child once the script is ready."""
        if launcher is None or not launcher.children_wait_ready or not placements.can_place():
            return None
        with placements.lock:
            if placements.active != 0:
                return None
        try:
            seat = cls.take(launcher)
        except Exception:  # noqa: BLE001 - the run proper launches again, and reports what fails
            return None
        if seat._placement is not None:
            wake: protocol.WakeMessage = {"t": protocol.WAKE, "spin": int(WAKE_SPIN * 1e6), "script": script}
            try:
                protocol.write_all(seat.child.wfd, _encode(wake))
                seat.woken = True
            except OSError:
                pass  # it is gone: the run finds out
        return seat

    @property
    def placed(self) -> bool:
        """The child runs off the reading thread's CPU: both sides may poll."""
        return self._placement is not None

    def place_reader(self) -> bool:
        """The run's first tool call: the reader thread that answers the calls stays on its CPU,
        the child on the others. False where the run is not (or no longer) placed."""
        return self._placement is not None and placements.place_reader(self._placement)

    def release(self) -> None:
        """The run is over: it no longer counts, and its processes get their CPUs back."""
        if not self._released:
            self._released = True
            placements.run_ends(self._placement)

    def abandon(self) -> None:
        """No run will take it (its script was rejected, or the run failed before it started):
        the child is let go. Nothing once a run has taken it."""
        if self.used:
            return
        self.used = True
        self.release()
        self.child.kill()
        self.child.close()
        self.child.finished()


# -- spares -------------------------------------------------------------------------------------

#: children a zygote keeps forked ahead, held by the host: two, so that a run that follows
#: another within a few ms (before that one's replacement has set itself up) still finds one
SPARES = 2
#: how long a launch waits for the spare the zygote is forking before it asks for a fork itself
SPARE_WAIT = 0.25


@attrs.define(eq=False)
class Spare:
    """A child the zygote forked ahead, held by the host until a script takes it: its pipe
    ends, and the future of its exit (status, CPU seconds) that the zygote will report."""

    pid: int
    scratch: str
    host_read: int
    host_write: int
    key: str  # the bindings it has compiled ("" for none)
    idle: bool  # it sets itself up under SCHED_IDLE; lifted when a script takes it
    exit_future: Future[tuple[int, float | None]]

    def drop(self) -> None:
        """Let it go unused: it reads EOF and exits, the zygote reaps it; its scratch folder is
        removed now."""
        for fd in (self.host_read, self.host_write):
            try:
                os.close(fd)
            except OSError:
                pass
        janitor.remove(self.scratch)


class SparePool:
    """The spares of one zygote. It forks `size` of them ahead, and one more whenever a spare's
    run is over: a run that finds none held waits (up to SPARE_WAIT) for one that is coming,
    rather than ask for a fork of its own."""

    def __init__(self, size: int = SPARES) -> None:
        self.size = size
        self._lock = threading.Lock()
        self._came = threading.Condition(self._lock)
        self._spares: list[Spare] = []  # oldest first
        self._coming = 0  # spares the zygote is forking (one for each taken spare whose run is over)
        self._closed = False

    def add(self, spare: Spare) -> None:
        """A spare the zygote just forked. The oldest beyond `size` go: they were forked before
        the bindings changed."""
        with self._lock:
            if self._closed:
                dropped = [spare]
            else:
                self._spares.append(spare)
                dropped = self._spares[:-self.size]
                del self._spares[:-self.size]
                self._coming = max(0, self._coming - 1)
                self._came.notify_all()
        for old in dropped:
            old.drop()

    def died(self, pid: int) -> None:
        """A spare ended before a script took it."""
        with self._lock:
            dead = [sp for sp in self._spares if sp.pid == pid]
            for sp in dead:
                self._spares.remove(sp)
        for sp in dead:
            sp.drop()

    def take(self, key: str | None) -> Spare | None:
        """A spare for a run, preferring one with the bindings `key`; None: ask for a fork."""
        with self._lock:
            if not self._spares and self._coming > 0:
                self._came.wait_for(lambda: bool(self._spares) or self._coming == 0, timeout=SPARE_WAIT)
            if not self._spares:
                self._coming = 0  # it did not come: do not wait for it again
                return None
            # the oldest: it has had the longest to set itself up (unless it has older bindings)
            spare = ([sp for sp in self._spares if sp.key == key] or self._spares)[0]
            self._spares.remove(spare)
        if spare.idle:  # a script waits for it now: no longer only the CPU nobody wants
            try:
                os.sched_setscheduler(spare.pid, os.SCHED_OTHER, os.sched_param(0))
            except OSError:
                pass
        return spare

    def replacement_coming(self) -> None:
        """A taken spare's run is over: the zygote forks a new spare once it has reaped it."""
        with self._lock:
            self._coming += 1

    def close(self) -> None:
        """The zygote is gone: every spare goes, and none is coming (a waiting run asks for a
        fork, which finds the zygote gone)."""
        with self._lock:
            self._closed = True
            left, self._spares = self._spares, []
            self._coming = 0
            self._came.notify_all()
        for sp in left:
            sp.drop()

    def held(self) -> list[Spare]:
        """The spares held now, oldest first."""
        with self._lock:
            return list(self._spares)

    def held_fds(self) -> set[int]:
        with self._lock:
            return {fd for sp in self._spares for fd in (sp.host_read, sp.host_write)}
