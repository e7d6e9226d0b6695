"""The wall-clock limit of a run (runs in the host): a `Watchdog` kills its child's process group
at the run's deadline, whatever the run's threads are doing at the time (reading, or held up in
a tool call). One timer thread serves every watchdog."""

from __future__ import annotations

import heapq
import threading
import time

from ..launchers.base import Child


class _Deadlines:
    """One timer thread for every watchdog, instead of a thread per script."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, Watchdog]] = []
        self._seq = 0
        self._thread: threading.Thread | None = None

    #: cancelled entries wait in the heap until they reach its top; past this many, add() drops
    #: them all (runs far shorter than their timeouts would otherwise pile them up)
    COMPACT_AT = 256

    def add(self, deadline: float, dog: Watchdog) -> None:
        with self._cond:
            self._seq += 1
            if len(self._heap) >= self.COMPACT_AT:
                live = [entry for entry in self._heap if not entry[2].cancelled]
                if len(live) < len(self._heap) // 2:
                    heapq.heapify(live)
                    self._heap = live
            heapq.heappush(self._heap, (deadline, self._seq, dog))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, daemon=True, name="run_code-deadlines")
                self._thread.start()
            elif self._heap[0][2] is dog:
                # only a new earliest deadline changes how long the thread sleeps: waking it for
                # every run would cost each run a thread wake-up (tens of us on a small VM)
                self._cond.notify()

    def _loop(self) -> None:
        while True:
            with self._cond:
                while self._heap and self._heap[0][2].cancelled:
                    heapq.heappop(self._heap)
                if not self._heap:
                    self._cond.wait(60)
                    if not self._heap:
                        self._thread = None
                        return
                    continue
                deadline, _, dog = self._heap[0]
                delay = deadline - time.monotonic()
                if delay > 0:
                    self._cond.wait(delay)
                    continue
                heapq.heappop(self._heap)
            dog.fire()


_deadlines = _Deadlines()


class Watchdog:
    """Kills a child at its deadline, whatever the runner is doing at the time.

    The clock stops while the run waits for a person (`pause`/`resume`, nestable, from any
    thread): a script whose inner call needs an approval does not lose its time to the person's
    thinking. The deadline then moves on by the time it stood still."""

    def __init__(self, child: Child, seconds: float) -> None:
        self.fired = False
        self.cancelled = False
        self._child: Child | None = child
        self._seconds = seconds
        self._lock = threading.Lock()
        self.deadline = 0.0
        self._paused = 0
        self._paused_at = 0.0

    @property
    def paused(self) -> bool:
        return self._paused > 0

    def fire(self) -> None:
        """Called by the timer thread when an entry of this watchdog comes due: kill the child,
        unless the clock is stopped (resume schedules it again) or the deadline has moved on."""
        with self._lock:
            child = self._child
            if self.cancelled or child is None or self._paused:
                return
            if time.monotonic() < self.deadline:  # moved on by a pause: wait for the new one
                _deadlines.add(self.deadline, self)
                return
            self.fired = True
        child.kill()

    def start(self) -> Watchdog:
        self.deadline = time.monotonic() + self._seconds
        _deadlines.add(self.deadline, self)
        return self

    def pause(self) -> None:
        with self._lock:
            self._paused += 1
            if self._paused == 1:
                self._paused_at = time.monotonic()

    def resume(self) -> None:
        with self._lock:
            if not self._paused:
                return
            self._paused -= 1
            if self._paused or self.cancelled:
                return
            self.deadline += time.monotonic() - self._paused_at
            deadline = self.deadline
        _deadlines.add(deadline, self)

    def remaining(self) -> float | None:
        """Seconds to the deadline, or None while the clock is stopped."""
        with self._lock:
            return None if self._paused else self.deadline - time.monotonic()

    def used(self) -> float:
        """Seconds the clock has run (not while it was stopped): what a resumed attempt of the
        run no longer has."""
        with self._lock:
            now = self._paused_at if self._paused else time.monotonic()
            return min(max(self._seconds - (self.deadline - now), 0.0), self._seconds)

    def cancel(self) -> None:
        self.cancelled = True
        self._child = None  # it waits in the heap until its deadline: let the child go now
