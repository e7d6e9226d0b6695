"""Reading a pipe whose next message usually comes within microseconds: spin briefly, then block.

Host and child take turns: the child sends a call and waits, the host answers it and waits for the
next one. Blocking on every turn makes each a sleep and a wake-up, and a wake-up that crosses CPUs
costs 40-60 us on the 2-vCPU VMs this was measured on (against ~4 us for a pipe round trip when
both sides are awake), which was most of an inner call's cost. So a reader that expects an answer
soon keeps polling the pipe for up to `spin` seconds, and only then blocks in poll().

Spinning pays only while the two sides run on different CPUs: a spinner sharing a CPU with the
process it waits for takes turns with it and slows it down. The runner therefore places a run's
reader thread and its child on different CPUs once tool calls start (`_runner._place`), neither
side spins before that, and the spin does not yield the CPU on each turn (measured: yielding
hands the CPU to any runnable task, such as a spare being set up under SCHED_IDLE, which then
keeps it until the next scheduler tick; inner calls took twice as long).

The spinning adapts: once a spin runs out with nothing to read (a slow tool, a script computing
between calls), later reads block at once, until a blocking wait turns out to have been short
enough that a spin would have caught it. The host's readers also share a few spin permits (one
fewer than the CPUs this process may run on), so many concurrent runs cannot turn the host into a
busy loop; a reader without a permit blocks.

Nothing here is a security boundary: a child can only waste its own CPU time by spinning, and the
host never spins longer than `spin` per read.
"""

from __future__ import annotations

import os
import select
import threading
import time

#: how long a read polls before it blocks. A no-op inner call's answer takes ~30-60 us to come;
#: the next call of a loop, about as long.
SPIN_SECONDS = 250e-6


def _host_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


class SpinPermits:
    """At most `n` readers spinning at once, process-wide; `n` may be 0 (never spin)."""

    def __init__(self, n: int) -> None:
        self.n = n
        self._sem = threading.BoundedSemaphore(n) if n > 0 else None

    def acquire(self) -> bool:
        return self._sem is not None and self._sem.acquire(blocking=False)

    def release(self) -> None:
        if self._sem is not None:
            self._sem.release()


#: the host's: one spinning reader per CPU but one, so a run's child always has a CPU to run on
HOST_PERMITS = SpinPermits(_host_cpus() - 1)


class PipeReader:
    """Reads from `fd` (made non-blocking here), spinning first while that pays."""

    def __init__(self, fd: int, spin: float = SPIN_SECONDS, permits: SpinPermits | None = None,
                 eager: bool = True) -> None:
        os.set_blocking(fd, False)
        self.fd = fd
        self.spin = spin
        self._permits = permits
        self._spin_ok = eager and spin > 0
        self._window: float | None = None  # the next spin's length, when not `spin`
        self._poll = select.poll()
        self._poll.register(fd, select.POLLIN)  # POLLHUP and POLLERR are reported anyway

    def expect(self, window: float | None = None) -> None:
        """Something is coming soon: spin on the next read (for `window` seconds, if given),
        whatever the last waits were like."""
        if self.spin > 0:
            self._spin_ok = True
            self._window = window

    def read(self, size: int = 1 << 16) -> bytes:
        """Up to `size` bytes; b"" at end of file. Raises OSError as os.read does."""
        try:
            return os.read(self.fd, size)
        except BlockingIOError:
            pass
        window, self._window = self._window or self.spin, None
        if self._spin_ok and (self._permits is None or self._permits.acquire()):
            try:
                end = time.perf_counter() + window
                while True:
                    try:
                        return os.read(self.fd, size)
                    except BlockingIOError:
                        pass
                    if time.perf_counter() >= end:
                        break
            finally:
                if self._permits is not None:
                    self._permits.release()
            self._spin_ok = False  # the other side is busy for longer than a spin: stop paying for it
        began = time.perf_counter()
        while True:
            self._poll.poll()  # retried on EINTR (PEP 475)
            try:
                data = os.read(self.fd, size)
                break
            except BlockingIOError:
                continue  # woken without data after all
        if self.spin > 0:
            self._spin_ok = time.perf_counter() - began < self.spin
        return data
