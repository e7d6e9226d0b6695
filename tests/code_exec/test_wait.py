"""protocol.PipeReader (read a pipe, spinning briefly before blocking, adaptively and within
`SpinPermits`), and the defaults `SPIN_SECONDS` and the host's `HOST_PERMITS`.

Real pipes and real threads. How a read waited is what the reader says it did (`waited`: the data
was there, caught while spinning, blocked at once, or blocked once a spin ran out), and whether
its next read may spin is its `_spin_ok` flag. The writes come well inside a spin or well past it,
so that which happens does not depend on how busy the machine is; a write that lands before a busy
machine let the test reach its read is made again (`Pipe.read_after`).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from nexus_tool_code_exec.host.fastpath import HOST_PERMITS
from nexus_tool_code_exec.protocol import FIT_FACTOR, SPIN_SECONDS, PipeReader, SpinPermits
from proc_helpers import open_fds


class Pipe:
    """An os.pipe() whose ends are closed once, by the test or at teardown."""

    def __init__(self) -> None:
        self.r, self.w = os.pipe()
        self._open = [self.r, self.w]
        self._threads: list[threading.Thread] = []

    def close_write(self) -> None:
        self._open.remove(self.w)
        os.close(self.w)

    def later(self, delay: float, action: Callable[[], object]) -> None:
        """Run `action` on another thread after `delay` seconds."""
        def go() -> None:
            time.sleep(delay)
            action()
        thread = threading.Thread(target=go, daemon=True)
        self._threads.append(thread)
        thread.start()

    def write_later(self, delay: float, data: bytes) -> None:
        self.later(delay, lambda: os.write(self.w, data))

    def read_after(self, reader: PipeReader, delay: float, data: bytes) -> bytes:
        """`data` written `delay` seconds from now on another thread, and read by `reader`. On a
        busy machine this thread may not reach the read before the write: the data is then
        simply there (`waited == "ready"`, which leaves the reader's state alone), and the write
        is made again, until a read that waited for it shows how it waited."""
        for _ in range(50):
            self.write_later(delay, data)
            got = reader.read(len(data))
            if reader.waited != "ready":
                return got
            assert got == data
        raise AssertionError(f"50 writes {delay}s later were all there before the read began")

    def close(self) -> None:
        for thread in self._threads:
            thread.join(timeout=5)
        for fd in self._open:
            os.close(fd)
        self._open.clear()


@pytest.fixture(autouse=True)
def no_fd_leaks() -> Iterator[None]:
    before = open_fds()
    yield
    assert open_fds() == before


@pytest.fixture
def pipe() -> Iterator[Pipe]:
    p = Pipe()
    try:
        yield p
    finally:
        p.close()


# -- reading --------------------------------------------------------------------------------


def test_the_constructor_makes_the_fd_non_blocking(pipe: Pipe) -> None:
    assert os.get_blocking(pipe.r)
    reader = PipeReader(pipe.r)
    assert not os.get_blocking(pipe.r)
    assert reader.fd == pipe.r


def test_the_default_spin_is_spin_seconds(pipe: Pipe) -> None:
    assert 0 < SPIN_SECONDS < 0.01
    assert PipeReader(pipe.r).spin == SPIN_SECONDS


def test_read_returns_data_written_before_the_call(pipe: Pipe) -> None:
    os.write(pipe.w, b"hello")
    assert PipeReader(pipe.r).read() == b"hello"


def test_read_returns_at_most_size_bytes(pipe: Pipe) -> None:
    os.write(pipe.w, b"0123456789")
    reader = PipeReader(pipe.r)
    assert reader.read(4) == b"0123"
    assert reader.read() == b"456789"


def test_read_waits_for_data_written_later_by_another_thread(pipe: Pipe) -> None:
    reader = PipeReader(pipe.r)
    assert pipe.read_after(reader, 0.02, b"late") == b"late"
    assert reader.waited == "spun, then blocked"  # it did wait for the write


def test_read_returns_empty_at_end_of_file(pipe: Pipe) -> None:
    os.write(pipe.w, b"last")
    pipe.close_write()
    reader = PipeReader(pipe.r)
    assert reader.read() == b"last"
    assert reader.read() == b""
    assert reader.read() == b""


def test_read_returns_empty_when_end_of_file_comes_while_it_is_blocked(pipe: Pipe) -> None:
    reader = PipeReader(pipe.r)
    pipe.later(0.02, pipe.close_write)
    assert reader.read() == b""
    assert reader.waited == "spun, then blocked"


# -- when to spin ---------------------------------------------------------------------------


def test_an_eager_reader_is_ready_to_spin_and_a_lazy_one_is_not(pipe: Pipe) -> None:
    assert PipeReader(pipe.r)._spin_ok
    assert not PipeReader(pipe.r, eager=False)._spin_ok
    assert not PipeReader(pipe.r, spin=0)._spin_ok  # spin 0: never


def test_a_lazy_reader_does_not_spin_on_its_first_read(pipe: Pipe) -> None:
    reader = PipeReader(pipe.r, spin=1.0, eager=False)
    assert pipe.read_after(reader, 0.03, b"x") == b"x"
    assert reader.waited == "blocked"
    assert reader._spin_ok  # the wait was shorter than a spin: the next read may spin


def test_a_read_of_data_already_there_leaves_the_spin_flag_alone(pipe: Pipe) -> None:
    lazy, eager = PipeReader(pipe.r, spin=0.05, eager=False), PipeReader(pipe.r, spin=0.05)
    os.write(pipe.w, b"ab")
    assert lazy.read(1) == b"a" and not lazy._spin_ok and lazy.waited == "ready"
    assert eager.read(1) == b"b" and eager._spin_ok and eager.waited == "ready"


def test_a_reader_spins_while_it_pays_and_blocks_once_a_spin_runs_out(pipe: Pipe) -> None:
    reader = PipeReader(pipe.r, spin=0.3)

    assert pipe.read_after(reader, 0.005, b"soon") == b"soon"  # within the spin
    assert reader.waited == "spun"
    assert reader._spin_ok

    # the spin runs out, then the blocking wait is longer than a spin
    assert pipe.read_after(reader, 1.0, b"late") == b"late"
    assert reader.waited == "spun, then blocked"
    assert not reader._spin_ok

    # blocks at once; the wait turns out shorter than a spin
    assert pipe.read_after(reader, 0.005, b"soon again") == b"soon again"
    assert reader.waited == "blocked"
    assert reader._spin_ok


def test_expect_turns_spinning_back_on(pipe: Pipe) -> None:
    reader = PipeReader(pipe.r, spin=1.0, eager=False)
    reader.expect()
    assert reader._spin_ok
    assert pipe.read_after(reader, 0.02, b"x") == b"x"
    assert reader.waited == "spun"
    assert reader._spin_ok


def test_expect_with_a_window_spins_that_long_once(pipe: Pipe) -> None:
    reader = PipeReader(pipe.r, spin=0.001, eager=False)
    reader.expect(2.0)
    assert pipe.read_after(reader, 0.05, b"x") == b"x"
    assert reader.waited == "spun"  # caught by the 2 s spin, not a 1 ms one
    assert reader._spin_ok

    # the next spin is 1 ms again: it runs out, and the wait is long
    assert pipe.read_after(reader, 0.05, b"y") == b"y"
    assert reader.waited == "spun, then blocked"
    assert not reader._spin_ok


def test_the_spin_fits_the_waits_it_sees(pipe: Pipe) -> None:
    reader = PipeReader(pipe.r, spin=0.4)
    assert reader.fit == 0.4  # nothing seen yet: a whole spin
    for _ in range(40):
        reader._saw(0.05)
    assert reader.fit == pytest.approx(FIT_FACTOR * 0.05)
    for _ in range(40):
        reader._saw(0.0001)  # answers in no time: the spin gives up sooner, but not below its floor
    assert reader.fit == pytest.approx(0.4 / FIT_FACTOR)
    for _ in range(40):
        reader._saw(1.0)  # slow answers: never longer than `spin`
    assert reader.fit == 0.4


def test_a_spin_that_got_short_misses_then_grows_back(pipe: Pipe) -> None:
    reader = PipeReader(pipe.r, spin=3.0)
    for _ in range(40):
        reader._saw(0.0001)
    assert reader.fit == pytest.approx(0.75)
    # written after the short spin ran out, well within a whole spin: the reader blocks, and
    # since a whole spin would have caught it, it spins again, for longer
    assert pipe.read_after(reader, 1.2, b"x") == b"x"
    assert reader.waited == "spun, then blocked"
    assert reader._spin_ok
    assert reader.fit > 0.75


def test_a_caught_wait_is_seen(pipe: Pipe) -> None:
    reader = PipeReader(pipe.r, spin=1.0)
    assert pipe.read_after(reader, 0.02, b"x") == b"x"
    assert reader.waited == "spun"
    assert reader._typical is not None and 0.0 < reader._typical < 1.0


def test_expect_does_nothing_for_a_reader_that_never_spins(pipe: Pipe) -> None:
    reader = PipeReader(pipe.r, spin=0)
    reader.expect(0.2)
    assert not reader._spin_ok
    assert pipe.read_after(reader, 0.01, b"x") == b"x"
    assert reader.waited == "blocked"
    assert not reader._spin_ok  # a short wait does not turn spinning on either


# -- permits --------------------------------------------------------------------------------


def test_no_permits_are_ever_granted_by_spin_permits_0() -> None:
    permits = SpinPermits(0)
    assert permits.n == 0
    assert not permits.acquire()
    permits.release()  # harmless
    assert not permits.acquire()


def test_one_permit_is_granted_once_until_released() -> None:
    permits = SpinPermits(1)
    assert permits.n == 1
    assert permits.acquire()
    assert not permits.acquire()
    permits.release()
    assert permits.acquire()
    assert not permits.acquire()
    permits.release()


@pytest.mark.parametrize("n", [0, 1])
def test_a_reader_without_a_permit_blocks_instead_of_spinning(pipe: Pipe, n: int) -> None:
    permits = SpinPermits(n)
    if n:
        assert permits.acquire()  # taken by someone else
    try:
        reader = PipeReader(pipe.r, spin=1.0, permits=permits)
        assert pipe.read_after(reader, 0.02, b"x") == b"x"
        assert reader.waited == "blocked"
        assert reader._spin_ok  # unchanged: the wait was shorter than a spin
    finally:
        if n:
            permits.release()


def test_a_spinning_reader_gives_its_permit_back(pipe: Pipe) -> None:
    permits = SpinPermits(1)
    reader = PipeReader(pipe.r, spin=1.0, permits=permits)
    assert pipe.read_after(reader, 0.005, b"x") == b"x"  # caught by the spin
    assert reader.waited == "spun"
    assert permits.acquire()
    permits.release()

    reader = PipeReader(pipe.r, spin=0.001, permits=permits)
    assert pipe.read_after(reader, 0.02, b"y") == b"y"  # the spin runs out first
    assert reader.waited == "spun, then blocked"
    assert not reader._spin_ok
    assert permits.acquire()
    permits.release()


def test_the_host_has_one_permit_fewer_than_its_cpus() -> None:
    assert HOST_PERMITS.n == max(len(os.sched_getaffinity(0)) - 1, 0)
