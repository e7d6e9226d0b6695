"""The latency tricks of a run, in one place (runs in the host). None of them changes what a run
does or what it may do; each makes it start or answer sooner. The flow (engine.py, runner.py)
calls them by name:

- the seat (`Seat`): a run's child, counted among the runs going on; from a lone run's first
  tool call on, its reader thread and its child are kept on CPUs of their own (placement), so
  that the two sides can poll for each other's messages without sharing a CPU.
- polling: while calls go back and forth, both sides poll the pipe briefly before they sleep
  (protocol.PipeReader); the host's pollers share `HOST_PERMITS`. Nothing polls before a run's
  first tool call: a script without calls costs one wake-up on each side, and no CPU spent
  waiting.
- reader threads (`readers`): tool calls are answered by a reader thread, reused across runs.

The spares a zygote forks ahead (a run takes one without a round trip) are the zygote launcher's
own (launchers/spares.py): a launcher depends on nothing of the host's. Everything here was
measured on 2-vCPU VMs; docs/performance.md has the figures.
"""

from __future__ import annotations

import ctypes
import os
import queue
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

import attrs

from ..protocol import PipeReader, SpinPermits

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


def reader_of(child: Child) -> PipeReader:
    """The host's reader of a child's pipe: it polls only once told to (`expect`), which the
    runner does only for a run placed at its first tool call (a polling reader could keep the
    child off the CPU the scheduler put it on)."""
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
    """Where a lone run's processes are kept from its first tool call on, so that the side that
    waits (and polls) never shares a CPU with the side it waits for: the reader thread on the
    CPU it is on, the child on the others. Left to itself the scheduler tends to put a process
    woken through a pipe on the writer's CPU (a pipe write is a "sync" wake-up: the kernel
    expects the writer to sleep next), and two pollers sharing one CPU each run at half speed."""

    child_pid: int
    child_cpus: set[int]  # what the child had, to give back
    reader_tid: int
    reader_cpus: set[int]
    undone: bool = False

    def undo(self) -> None:
        """Give both their CPUs back (any thread may: affinity is set by thread id)."""
        if self.undone:
            return
        self.undone = True
        for tid, cpus in ((self.reader_tid, self.reader_cpus), (self.child_pid, self.child_cpus)):
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

    def place(self, child_pid: int) -> _Placement | None:
        """A lone run's first tool call, on its reader thread: this thread stays on the CPU it
        is on, the child goes to the others. None where nothing was changed (concurrent runs,
        one CPU, not allowed)."""
        if not self.can_place():
            return None
        with self.lock:
            if self.active != 1:
                return None  # concurrent runs: pinning them would only get in the load balancer's way
            try:
                mine = os.sched_getaffinity(0)
                theirs = os.sched_getaffinity(child_pid)
                cpu = _sched_getcpu()  # type: ignore[misc]
                if cpu < 0 or cpu not in mine or not theirs - {cpu}:
                    return None
                os.sched_setaffinity(0, {cpu})
                placement = _Placement(child_pid, theirs, threading.get_native_id(), mine)
                os.sched_setaffinity(child_pid, theirs - {cpu})
            except OSError:
                return None
            self.placed.append(placement)
            return placement


placements = _Placements()


@attrs.define(eq=False)
class Seat:
    """A run's child from the moment it is taken to the end of the run, and where the run's
    processes run: counted among the runs going on, and, for a lone run with tool calls, placed."""

    child: Child
    #: a run has taken it; it ends it
    used: bool = False
    _placement: _Placement | None = attrs.field(default=None, init=False)
    _released: bool = attrs.field(default=False, init=False)
    _lock: threading.Lock = attrs.field(factory=threading.Lock, init=False)

    @classmethod
    def take(cls, launcher: Launcher) -> Seat:
        """A child for a run that starts now (raises what `launch` raises)."""
        child = launcher.launch()
        placements.run_starts()
        return cls(child)

    @property
    def placed(self) -> bool:
        """The child runs off the reading thread's CPU: both sides may poll."""
        return self._placement is not None

    def place_reader(self) -> bool:
        """The run's first tool call, on the thread that will answer the calls: placed, if the
        run is (still) the only one. False where it is not."""
        with self._lock:  # not while the run is being released on its own thread
            if self._placement is None and not self._released and self.child.local:
                self._placement = placements.place(self.child.pid)
            return self._placement is not None

    def release(self) -> None:
        """The run is over: it no longer counts, and its processes get their CPUs back."""
        with self._lock:
            if self._released:
                return
            self._released = True
            placement = self._placement
        placements.run_ends(placement)
