"""Watching the host while a tool call runs: is it still responsive, how much CPU and memory did
the call cost it?

`HostWatch` runs a heartbeat thread that wakes every 5 ms and records the longest gap between
two beats (a call that holds the GIL, as Python's backtracking `re` does, stops every thread of
the host: the gap grows to the length of the call), and samples the process's resident memory at
each beat. It also takes the process's CPU time over the block. Tests assert generous bounds
that a frozen host breaks by far, never exact timings.

A gap counts as the host stopping only as far as the host burnt CPU during it (`max_stall`): a
thread that holds the GIL computes all the while, so the process's CPU time grows with the gap,
while a machine too busy to schedule the heartbeat leaves the process's CPU time still. So a busy
machine does not make a fine host look frozen, and a frozen host still shows (at half a CPU, a
4 s freeze is a 2 s stall).
"""

from __future__ import annotations

import threading
import time
from types import TracebackType


def resident_bytes() -> int:
    """The process's resident set size now (Linux: /proc/self/statm)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


class HostWatch:
    """`with HostWatch() as watch: ...`, then `watch.max_gap`, `watch.cpu_seconds`, `watch.memory_growth`."""

    BEAT = 0.005

    def __init__(self) -> None:
        self.max_gap = 0.0
        self.max_stall = 0.0
        self.peak_rss = 0
        self.baseline_rss = 0
        self.cpu_seconds = 0.0
        self.beats = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="heartbeat", daemon=True)

    def _beat(self) -> None:
        last, last_cpu = time.monotonic(), time.process_time()
        while not self._stop.is_set():
            time.sleep(self.BEAT)
            now, cpu = time.monotonic(), time.process_time()
            self.max_gap = max(self.max_gap, now - last)
            self.max_stall = max(self.max_stall, min(now - last, cpu - last_cpu))
            self.peak_rss = max(self.peak_rss, resident_bytes())
            self.beats += 1
            last, last_cpu = now, cpu

    def __enter__(self) -> HostWatch:
        self.baseline_rss = self.peak_rss = resident_bytes()
        self._cpu_start = time.process_time()
        self._thread.start()
        time.sleep(self.BEAT * 2)  # the heartbeat is beating before the call starts
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join(timeout=60)
        self.cpu_seconds = time.process_time() - self._cpu_start

    @property
    def memory_growth(self) -> int:
        """How far resident memory rose above where it was when the block began, in bytes."""
        return self.peak_rss - self.baseline_rss

    def assert_host_fine(self, *, max_gap: float = 1.0, cpu_seconds: float = 20.0, memory_mib: int = 200) -> None:
        """The host kept beating (no stall over `max_gap` s; a frozen GIL makes it the whole call),
        and the call cost less than `cpu_seconds` of CPU and `memory_mib` of memory."""
        assert self.beats > 0, "the heartbeat never ran"
        assert self.max_stall < max_gap, (f"the host stopped for {self.max_stall:.2f} s of its own CPU time "
                                          f"(a {self.max_gap:.2f} s gap: a thread held the GIL)")
        assert self.cpu_seconds < cpu_seconds, f"the call cost {self.cpu_seconds:.1f} s of CPU"
        grew = self.memory_growth / (1 << 20)
        assert grew < memory_mib, f"the host's memory grew by {grew:.0f} MiB"
