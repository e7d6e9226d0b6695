"""The watchdogs' shared timer (`host.watchdog._Deadlines`): a watchdog kills its child at its
deadline even among many cancelled ones and a later live one, a new earliest deadline is honoured,
and runs much shorter than their timeouts do not pile cancelled entries up in memory."""

from __future__ import annotations

import subprocess
import sys

from nexus_tool_code_exec.host import watchdog
from nexus_tool_code_exec.host.watchdog import Watchdog
from nexus_tool_code_exec.launchers.base import Child


def sleeper() -> tuple[subprocess.Popen[bytes], Child]:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    return proc, Child(proc.pid, -1, -1, waiter=lambda timeout: proc.wait(timeout))


def test_a_watchdog_kills_its_child_at_its_deadline_among_many_cancelled_and_later_ones() -> None:
    """The timer keeps every watchdog's own deadline: the one due first kills its child, while
    the child of a later one (set first, so the timer was asleep for it) and the children of
    600 cancelled ones live on."""
    proc, child = sleeper()
    later_proc, later_child = sleeper()
    try:
        for _ in range(600):  # runs that ended long before their timeouts
            Watchdog(child, 30).start().cancel()
        later = Watchdog(later_child, 30).start()
        dog = Watchdog(child, 0.3).start()  # earlier than any other: the timer wakes for it
        assert proc.wait(timeout=10) == -9
        assert dog.fired
        assert later_proc.poll() is None and not later.fired
        later.cancel()
    finally:
        for p in (proc, later_proc):
            p.kill()
            p.wait()


def test_cancelled_entries_do_not_pile_up() -> None:
    proc, child = sleeper()
    try:
        for _ in range(5000):
            Watchdog(child, 30).start().cancel()
        assert len(watchdog._deadlines._heap) <= 2 * watchdog._Deadlines.COMPACT_AT
        # a cancelled watchdog lets its child go at once (the heap keeps only the entry)
        dog = Watchdog(child, 30).start()
        dog.cancel()
        assert dog._child is None and not dog.fired
        assert proc.poll() is None  # nothing was killed
    finally:
        proc.kill()
        proc.wait()
