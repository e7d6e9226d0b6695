"""The latency tricks of a run, in one place (runs in the host). None of them changes what a run
does; each makes it start or answer sooner. The flow (engine.py, runner.py) calls them by name:

- spares: the zygote forks children ahead; the host holds their pipe ends (`SparePool`), so a
  run takes a child without a round trip, and its replacement is forked once the run is over.

Everything here was measured on 2-vCPU VMs; docs/performance.md has the figures.
"""

from __future__ import annotations

import os
import shutil
import threading
from concurrent.futures import Future

import attrs

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
        shutil.rmtree(self.scratch, ignore_errors=True)


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
