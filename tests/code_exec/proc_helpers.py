"""Looking at processes from a test: the process table, this process's descendants, process
groups, open fds, and waiting for a condition. Shared by the timeout, acceptance and attack
tests, which all check that run_code leaves nothing behind."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple, TypeVar

T = TypeVar("T")


class Proc(NamedTuple):
    ppid: int
    pgrp: int
    state: str
    uid: int


def process_table() -> dict[int, Proc]:
    """pid -> Proc for every process we can see."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            uid = os.stat(f"/proc/{entry}").st_uid
        except OSError:
            continue
        table[int(entry)] = Proc(int(fields[1]), int(fields[2]), fields[0], uid)
    return table


def descendants(root: int | None = None) -> set[int]:
    """Live (not zombie) processes below `root` (default: this process)."""
    root = os.getpid() if root is None else root
    table = process_table()
    found: set[int] = set()
    frontier = [root]
    while frontier:
        parent = frontier.pop()
        for pid, proc in table.items():
            if proc.ppid == parent and pid not in found and proc.state != "Z":
                found.add(pid)
                frontier.append(pid)
    return found


def alive(pid: int) -> bool:
    """Running, not a zombie (a zombie has nothing left to run and holds nothing)."""
    proc = process_table().get(pid)
    return proc is not None and proc.state != "Z"


def group_members(pgid: int) -> set[int]:
    """Live processes in process group `pgid`."""
    return {pid for pid, proc in process_table().items() if proc.pgrp == pgid and proc.state != "Z"}


def open_fds() -> set[str]:
    """This process's open fds, but the one the listing itself used (the lowest free fd at the
    time, so it moves whenever other fds do)."""
    return {fd for fd in os.listdir("/proc/self/fd") if os.path.lexists(f"/proc/self/fd/{fd}")}


def lift_idle(pids: set[int] | None = None) -> None:
    """Lift SCHED_IDLE off this process's descendants, as the host does off the spare it gives a
    script. The zygote forks its spares, and they set themselves up, under SCHED_IDLE: only on
    CPU time nobody else wants (zygote/main.py), of which a busy machine has none, so there a
    spare may take minutes to be ready, by design. A test that judges the spares' state, not how
    soon an idle CPU came, lifts it first. `pids`: only those (default: every descendant)."""
    for pid in descendants() if pids is None else pids:
        try:
            if os.sched_getscheduler(pid) == os.SCHED_IDLE:
                os.sched_setscheduler(pid, os.SCHED_OTHER, os.sched_param(0))
        except OSError:  # gone, or not ours to change
            pass


def wait_until(predicate: Callable[[], bool], within: float = 30.0, spares: bool = False) -> bool:
    """Whether `predicate` came true within `within` seconds (polled): generous, since it only
    costs time when the condition does not come (a busy machine may take seconds to get there).
    `spares`: the condition waits for the zygote's spares, so SCHED_IDLE is lifted off them at
    each poll (`lift_idle`)."""
    end = time.monotonic() + within
    while time.monotonic() < end:
        if spares:
            lift_idle()
        if predicate():
            return True
        time.sleep(0.02)
    if spares:
        lift_idle()
    return bool(predicate())


def rss_growth(fn: Callable[[], T]) -> tuple[T, int]:
    """fn()'s value, and how far this process's resident memory rose (at its peak, sampled
    every 5 ms) above where it started."""
    def rss() -> int:
        with open("/proc/self/status") as f:
            return int(f.read().split("VmRSS:")[1].split()[0]) * 1024

    start, peak, done = rss(), [0], threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], rss())
            time.sleep(0.005)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        value = fn()
    finally:
        done.set()
        sampler.join()
    return value, max(peak[0], rss()) - start
