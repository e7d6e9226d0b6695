"""The spares of one zygote (runs in the host, for launchers/zygote.py): children the zygote forked
ahead, whose pipe ends the host holds, so that a run takes a child without a round trip; a spare's
replacement is forked once its run is over. A latency trick (host/fastpath.py has the others),
kept with the launcher whose it is: a launcher depends only on protocol, sandbox and its own
modules."""

from __future__ import annotations

import os

import attrs

#: children a zygote keeps forked ahead, held by the host: two, so that a run that follows another
#: within a few ms (before that one's replacement has set itself up) still finds one ready
SPARES = 2
#: how long a launch waits for the spare the zygote is forking before it asks for a fork itself
SPARE_WAIT = 0.25


@attrs.define(eq=False)
class Spare:
    """A child the zygote forked ahead, held by the host until a script takes it: its pipe ends."""

    pid: int
    scratch: str
    host_read: int
    host_write: int
    key: str  # the bindings it has compiled ("" for none)
    idle: bool  # it sets itself up under SCHED_IDLE; lifted when a script takes it

    def drop(self) -> None:
        """Let it go unused: it reads EOF and exits; the zygote reaps it, and keeps its scratch
        folder for another child."""
        for fd in (self.host_read, self.host_write):
            try:
                os.close(fd)
            except OSError:
                pass


class SparePool:
    """The spares of one zygote, and how many more it is forking: `size` ahead, and one more
    whenever a spare's run is over. Whoever reads the zygote's messages (launchers/zygote.py)
    adds them; a run that finds none held waits (up to SPARE_WAIT) for one that is coming,
    rather than ask for a fork of its own. Callers hold the zygote's lock."""

    def __init__(self, size: int = SPARES) -> None:
        self.size = size
        self._spares: list[Spare] = []  # oldest first
        #: the taken spares whose replacement the zygote is forking (their runs are over)
        self.coming: set[int] = set()
        self._replaced: set[int] = set()  # taken spares whose replacement came before their run ended
        self._closed = False

    def add(self, spare: Spare, replaces: int | None = None) -> list[Spare]:
        """A spare the zygote just forked (in place of spare `replaces`, once that one's run was
        over); the ones to drop (the oldest beyond `size`: they were forked before the bindings
        changed)."""
        if self._closed:
            return [spare]
        self._spares.append(spare)
        dropped = self._spares[:-self.size]
        del self._spares[:-self.size]
        if replaces is not None:
            if replaces in self.coming:
                self.coming.discard(replaces)
            else:
                self._replaced.add(replaces)
        return dropped

    def replacement_coming(self, pid: int) -> None:
        """The run of taken spare `pid` is over: the zygote forks its replacement (which may
        have come already, read by another run)."""
        if pid in self._replaced:
            self._replaced.discard(pid)
        else:
            self.coming.add(pid)

    def died(self, pid: int) -> list[Spare]:
        """A spare ended before a script took it: the one to drop."""
        dead = [sp for sp in self._spares if sp.pid == pid]
        for sp in dead:
            self._spares.remove(sp)
        return dead

    def take(self, key: str | None) -> Spare | None:
        """A spare for a run, preferring one with the bindings `key`; None: none held."""
        if not self._spares:
            return None
        # the oldest: it has had the longest to set itself up (unless it has older bindings)
        spare = ([sp for sp in self._spares if sp.key == key] or self._spares)[0]
        self._spares.remove(spare)
        return spare

    def close(self) -> list[Spare]:
        """The zygote is gone: every spare goes (to drop), and none is coming."""
        self._closed = True
        left, self._spares = self._spares, []
        self.coming.clear()
        self._replaced.clear()
        return left

    def held(self) -> list[Spare]:
        """The spares held now, oldest first."""
        return list(self._spares)
