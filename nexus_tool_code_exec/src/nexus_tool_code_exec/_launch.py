"""Starting run_code children. A launcher gives the runner a `Child`: a process in its own process
group and the two pipe ends the protocol runs on. The runner does not care how it was made:

- `SpawnLauncher`: a fresh `python -I` per script (~30-50 ms; works everywhere).
- the zygote launcher (_zygote.py): forks children from a warm process (a few ms).

Both isolate the child the same way, through `enter_sandbox`, before the script's first line.
"""

from __future__ import annotations

import heapq
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Protocol

import attrs

#: the environment a child gets: nothing of the host's
CHILD_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1",
             "PYTHONIOENCODING": "utf-8"}


@attrs.define(eq=False)
class Child:
    """A running child: its pid (= its process group) and the host's ends of its pipes."""

    pid: int
    rfd: int  # the host reads the child's messages here
    wfd: int  # the host writes to the child here
    scratch: str | None = None  # the child's scratch folder, removed on close
    _waiter: Any = attrs.field(default=None, repr=False)  # returns the exit status, or None
    _killer: Any = attrs.field(default=None, repr=False)  # kills the process group, if not ours
    #: `on_exit(callback)` runs callback once the process is gone (None: wait() is the only way)
    _on_exit: Any = attrs.field(default=None, repr=False)
    #: CPU seconds the process used, once its exit is known (None where the launcher cannot tell)
    cpu_seconds: float | None = None
    #: the bindings it has compiled already (None: none), so the start message can leave them out
    bindings_key: str | None = None
    #: called once its run is over (the zygote launcher then expects a new spare)
    on_finished: Any = attrs.field(default=None, repr=False)
    #: a pidfd of the process, where it cannot have started others (seccomp refuses fork): then
    #: `end` signals it directly instead of asking for a group kill
    pidfd: int | None = None
    _closed: bool = False

    def end(self) -> None:
        """Make sure a child that said it finished is gone: it is exiting by itself already, so
        without waiting, and, where only it can be left, without a message to the launcher."""
        if self.pidfd is not None:
            try:
                signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
                return
            except OSError:
                pass
        self.kill()

    def kill(self) -> None:
        """Kill the child's whole process group (it may have started nothing, but if it did)."""
        if self._killer is not None:
            self._killer()
            return
        for target in (lambda: os.killpg(self.pid, signal.SIGKILL), lambda: os.kill(self.pid, signal.SIGKILL)):
            try:
                target()
            except (ProcessLookupError, PermissionError):
                pass

    def wait(self, timeout: float = 5.0) -> int | None:
        """The exit status as subprocess reports it (negative: killed by that signal)."""
        return self._waiter(timeout) if self._waiter else None

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for fd in (self.rfd, self.wfd, self.pidfd):
            if fd is None:
                continue
            try:
                os.close(fd)
            except OSError:
                pass
        if self.scratch:
            scratch = self.scratch
            if self._on_exit is not None:
                # only once the process is gone: a script still writing (it was killed, not
                # waited for) would otherwise make the removal fail and leave the folder behind
                self._on_exit(lambda: shutil.rmtree(scratch, ignore_errors=True))
            else:
                shutil.rmtree(scratch, ignore_errors=True)


class Launcher(Protocol):
    """Makes children isolated by one policy (layers, limits, read paths); each child gets a
    scratch folder of its own, which `Child.close()` removes."""

    kind: str

    def launch(self) -> Child: ...

    def close(self) -> None: ...


def enter_sandbox(policy: dict[str, Any], keep_fds: tuple[int, ...]) -> list[str]:
    """Isolate the current (fresh, single-threaded) child as `policy` asks. Returns the layers
    applied; raises when a requested layer cannot be applied."""
    from . import sandbox  # in the child only: the host has no use for enter()

    limits = sandbox.Limits(**policy.get("limits", {}))
    sp = sandbox.SandboxPolicy(
        scratch_dir=policy["scratch"],
        read_paths=tuple(policy.get("read_paths", ())),
        limits=limits,
        layers=frozenset(policy.get("layers", ())),
        keep_fds=tuple(keep_fds),
        net_fd=policy.get("net_fd"),
    )
    sandbox.enter(sp)
    return sorted(sp.layers)


class SpawnLauncher:
    """One fresh interpreter per script."""

    kind = "spawn"

    def __init__(self, policy: dict[str, Any], python: str | None = None) -> None:
        self.python = python or sys.executable
        self.policy = policy

    def launch(self) -> Child:
        import json

        scratch = tempfile.mkdtemp(prefix="nexus-run-")
        policy = {**self.policy, "scratch": scratch}
        proc = subprocess.Popen(
            [self.python, "-I", "-m", "nexus_tool_code_exec._child", json.dumps(policy)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            env=CHILD_ENV,
            cwd=policy["scratch"],
            close_fds=True,
        )
        assert proc.stdin is not None and proc.stdout is not None
        rfd, wfd = os.dup(proc.stdout.fileno()), os.dup(proc.stdin.fileno())
        proc.stdout.close()
        proc.stdin.close()

        def wait(timeout: float) -> int | None:
            try:
                return proc.wait(timeout)
            except subprocess.TimeoutExpired:
                return None

        return Child(proc.pid, rfd, wfd, scratch=scratch, waiter=wait)

    def close(self) -> None:
        pass


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
    """Kills a child at its deadline, whatever the runner is doing at the time."""

    def __init__(self, child: Child, seconds: float) -> None:
        self.fired = False
        self.cancelled = False
        self._child: Child | None = child
        self._seconds = seconds

    def fire(self) -> None:
        child = self._child
        if not self.cancelled and child is not None:
            self.fired = True
            child.kill()

    def start(self) -> Watchdog:
        _deadlines.add(time.monotonic() + self._seconds, self)
        return self

    def cancel(self) -> None:
        self.cancelled = True
        self._child = None  # it waits in the heap until its deadline: let the child go now
