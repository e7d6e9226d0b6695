"""The sandbox pool of a process (runs in the host): the zygotes that every Nexus of one process
shares (`pool: process`, the default), where otherwise each Nexus starts its own (`pool: nexus`).

A pooled zygote is of no session: it is started with what every session of the process has in
common (the interpreter, the sandbox's layers and read-only paths, the packages every script may
import), and with the sandbox's ceilings for memory and CPU instead of one session's limits. Its
spares are generic: any session may take one, and each child runs one script, as before. What
differs per session travels with the run's START (its bindings, its limits, which the child lowers
its own to before the script runs: child.runtime.run_limited), and the host's check (allowed
packages). The zygote compiles no bindings (no PRELOAD): what it holds when it forks would be in
every session's children.

Sessions that differ in what a zygote is started with (another layer set, say, with a layer
switched off by the environment) get a zygote each, from the same pool. A zygote lives while any
launcher uses it (`join`/`leave`: a session's close leaves the others served), is started again if
it dies (the run that lost its child is told so: `Child.died_with_its_maker`), and every zygote
still running is stopped when the interpreter exits (atexit). A process forked from the host
starts with an empty pool: the zygotes (and their sockets) are its parent's.
"""

from __future__ import annotations

import atexit
import json
import os
import sys
import threading
import weakref
from collections.abc import Iterable

from .. import protocol, sandbox
from .base import Child
from .zygote import ZygoteChild, ZygoteError, ZygoteLauncher, _Zygote

#: what a pooled zygote is started with: interpreter, policy (JSON), packages it imports ahead
_Key = tuple[str, str, tuple[str, ...]]


class ZygotePool:
    """The zygotes of one process, by what they are started with, and how many launchers use each."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._zygotes: dict[_Key, _Zygote] = {}
        self._users: dict[_Key, int] = {}
        self._pid = os.getpid()

    def join(self, key: _Key) -> None:
        """A launcher uses the zygote of `key` from now on (started on its first launch)."""
        with self._lock:
            self._own()
            self._users[key] = self._users.get(key, 0) + 1

    def leave(self, key: _Key) -> None:
        """A launcher is done with it: the last one to leave stops it."""
        with self._lock:
            self._own()
            left = self._users.get(key, 0) - 1
            zygote = None
            if left <= 0:
                self._users.pop(key, None)
                zygote = self._zygotes.pop(key, None)
            else:
                self._users[key] = left
        if zygote is not None:
            zygote.stop()

    def current(self, key: _Key) -> _Zygote:
        """The live zygote of `key`, started (again) if there is none."""
        with self._lock:
            self._own()
            zygote = self._zygotes.get(key)
            if zygote is not None and zygote.alive():
                return zygote
            self._zygotes.pop(key, None)
            if zygote is not None:
                zygote.stop()
            python, policy, preimport = key
            zygote = _Zygote(python, list(preimport), json.loads(policy))
            self._zygotes[key] = zygote
            return zygote

    def forget(self, key: _Key, zygote: _Zygote) -> None:
        """`zygote` failed a launch: the next one starts another."""
        with self._lock:
            if self._zygotes.get(key) is zygote:
                del self._zygotes[key]
        zygote.stop()

    def users(self, key: _Key) -> int:
        """How many launchers use the zygote of `key` now."""
        with self._lock:
            return self._users.get(key, 0)

    def pids(self) -> list[int]:
        """The pids of the zygotes running now (for tests and `nexus doctor`)."""
        with self._lock:
            return [z.pid for z in self._zygotes.values() if z.alive()]

    def close(self) -> None:
        """Stop every zygote (at the interpreter's exit): each kills its children and exits."""
        with self._lock:
            self._own()
            zygotes = list(self._zygotes.values())
            self._zygotes.clear()
            self._users.clear()
        for zygote in zygotes:
            try:
                zygote.stop()
            except Exception:  # noqa: BLE001, S110 - at exit: the next one still goes
                pass

    def _own(self) -> None:
        """In a process forked from the one that started them, the zygotes are not ours: forget
        them (the lock is held)."""
        if self._pid != os.getpid():
            self._pid = os.getpid()
            self._zygotes.clear()
            self._users.clear()


#: the pool every Nexus of this process shares (`pool: process`)
PROCESS_POOL = ZygotePool()
atexit.register(PROCESS_POOL.close)


class PooledLauncher(ZygoteLauncher):
    """Children forked by a zygote of a `ZygotePool`, shared with every other launcher of the
    pool with the same sandbox layers and read paths. The policy's limits go to each child in its
    START (the engine puts them there), not to the zygote; `preimport` is what the zygote imports
    ahead (the packages every session may import, none of one session's own)."""

    def __init__(self, pool: ZygotePool, policy: protocol.ChildPolicy, preimport: Iterable[str],
                 python: str | None = None) -> None:
        generic: protocol.ChildPolicy = {
            "layers": sorted(policy["layers"]),
            "limits": {"memory_mb": sandbox.CEILING_MEMORY_MB, "cpu_seconds": sandbox.CEILING_CPU_SECONDS},
            "read_paths": list(policy["read_paths"]),
            "shared": True,  # its children are of many sessions: none gets a folder another had
        }
        super().__init__(sorted(set(preimport)), generic, python)
        self.pool = pool
        self.key: _Key = (self.python or sys.executable, json.dumps(generic, sort_keys=True), tuple(self.allowed))
        self._joined = False
        self._closed = False
        self._mine: weakref.WeakSet[ZygoteChild] = weakref.WeakSet()  # the children its runs have

    def launch(self) -> Child:
        child = super().launch()
        if isinstance(child, ZygoteChild):
            self._mine.add(child)
        return child

    def preload(self, key: str, bindings: protocol.BindingsPayload) -> None:
        """Nothing: a pooled zygote compiles no session's bindings (each child compiles its own
        from the START)."""

    @property
    def preloaded_key(self) -> str | None:
        """The bindings every spare has compiled: none ("")."""
        return ""

    def close(self) -> None:
        """Kill the children its runs still have (none, once its runs are over), and leave the
        pool: the zygote goes on serving the others."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            joined, self._joined = self._joined, False
            zygote, self._zygote = self._zygote, None
        if zygote is not None:
            for child in list(self._mine):
                if child.zygote is zygote and child.pid in zygote._watched:
                    zygote.kill(child.pid)
        if joined:
            self.pool.leave(self.key)

    def _current(self) -> _Zygote:
        with self._lock:
            if self._closed:
                raise ZygoteError("run_code's launcher is closed")
            if not self._joined:
                self.pool.join(self.key)
                self._joined = True
        zygote = self.pool.current(self.key)
        with self._lock:
            self._zygote = zygote
            self.pid = zygote.pid
        return zygote

    def _forget(self, zygote: _Zygote) -> None:
        with self._lock:
            if self._zygote is zygote:
                self._zygote = None
        self.pool.forget(self.key, zygote)
