"""The watchdogs' shared timer (`host.watchdog._Deadlines`): a watchdog kills its child at the deadline
even among many cancelled ones, a new earliest deadline is honoured at once, and runs much
shorter than their timeouts do not pile cancelled entries up in memory."""

from __future__ import annotations

import subprocess
import sys
import time

from nexus_tool_code_exec.host import watchdog
from nexus_tool_code_exec.host.watchdog import Watchdog
from nexus_tool_code_exec.launchers.base import Child


def sleeper() -> tuple[subprocess.Popen[bytes], Child]:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    return proc, Child(proc.pid, -1, -1, waiter=lambda timeout: proc.wait(timeout))


def test_a_watchdog_kills_its_child_at_the_deadline_among_many_cancelled() -> None:
    proc, child = sleeper()
    try:
        for _ in range(600):  # runs that ended long before their timeouts
            Watchdog(child, 30).start().cancel()
        dog = Watchdog(child, 0.3).start()  # earlier than any other: the timer wakes for it
        began = time.monotonic()
        assert proc.wait(timeout=5) == -9
        assert 0.25 <= time.monotonic() - began < 2.0
        assert dog.fired
    finally:
        proc.kill()
        proc.wait()


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
