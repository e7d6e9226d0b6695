"""nexus_core.supervisor on its own (the shell tool's and the MCP client's tests use it through
them): a program's whole tree ends with it, setsid'd processes too, and the supervisor says
what it killed; SIGTERM is passed on with its grace; a program that cannot start says so.
Real processes; every wait is for the event itself, bounded by a generous timeout."""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from nexus_core.supervisor import Supervised, supervised_command, why_unavailable

pytestmark = pytest.mark.skipif(why_unavailable() is not None, reason=f"no subreaper here: {why_unavailable()}")

#: a bound for what a busy machine may take, never what a test expects
PATIENCE = 60.0


def wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + PATIENCE
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {PATIENCE:g} s")
        time.sleep(0.02)


def gone(pid: int) -> bool:
    """The process `pid` has ended (a zombie left for its parent to reap counts as ended)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rpartition(b")")[2].split()[0] in (b"Z", b"X")
    except OSError:
        return True


def comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def until_done(run: Supervised) -> None:
    """Read the supervisor's reports until its last one."""
    with selectors.DefaultSelector() as selector:
        selector.register(run.fileno(), selectors.EVENT_READ)
        deadline = time.monotonic() + PATIENCE
        while not run.done:
            assert time.monotonic() < deadline, "the supervisor did not report the end"
            if selector.select(timeout=1) and not run.read():
                break


def until_started(run: Supervised) -> None:
    with selectors.DefaultSelector() as selector:
        selector.register(run.fileno(), selectors.EVENT_READ)
        deadline = time.monotonic() + PATIENCE
        while run.started is None and not run.done:
            assert time.monotonic() < deadline, "the supervisor did not report the start"
            if selector.select(timeout=1) and not run.read():
                break


def test_stop_ends_the_whole_tree_and_names_what_it_killed(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    run = Supervised.start(["/bin/sh", "-c", f"setsid sleep 300 & echo $! > {pids}; exec sleep 301"], cwd=tmp_path,
                           env={"PATH": os.environ["PATH"]})
    try:
        until_started(run)
        assert run.started is not None and run.started.subreaper, run.started
        wait_for(lambda: pids.exists() and pids.read_text().strip() != "", "the shell wrote the pid")
        escaped = int(pids.read_text())
        wait_for(lambda: comm(escaped) == "sleep", "setsid ran sleep")  # not killed as `setsid`, before its exec
        run.stop()
        until_done(run)
    finally:
        run.close()
    assert run.ended is not None
    killed = dict(run.ended.killed)
    assert killed.get(run.started.pid) == "sleep"  # the program itself (it was stopped)
    assert killed.get(escaped) == "sleep"  # and the one that left its session
    assert run.ended.left == ()
    assert gone(escaped) and gone(run.started.pid)


def test_the_program_gets_exactly_the_environment_given(tmp_path: Path) -> None:
    os.environ["NEXUS_TEST_HOST_ONLY"] = "host-secret"
    try:
        run = Supervised.start(["/usr/bin/env"], cwd=tmp_path, env={"ONLY": "this"}, stdout=subprocess.PIPE)
        try:
            until_done(run)
            assert run.process.stdout is not None
            output = run.process.stdout.read().decode()
            run.process.stdout.close()
        finally:
            run.close()
    finally:
        del os.environ["NEXUS_TEST_HOST_ONLY"]
    assert output == "ONLY=this\n"
    assert run.ended is not None and run.ended.exit_code == 0 and run.ended.killed == ()


def test_a_program_that_cannot_start_is_an_error_not_a_hang(tmp_path: Path) -> None:
    run = Supervised.start([str(tmp_path / "not-there")], cwd=tmp_path, env={})
    try:
        until_done(run)
    finally:
        run.close()
    assert run.error == "No such file or directory"
    assert run.ended is None


def test_a_command_line_for_a_missing_program_fails_as_an_exec_would(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        supervised_command(["no-such-program-anywhere"], cwd=tmp_path, path=str(tmp_path))


PROGRAM = r"""
import os, signal, subprocess, sys
out = sys.argv[1]
def stop(signum, frame):
    with open(out + ".term", "w") as f:
        f.write("SIGTERM")
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
child = subprocess.Popen(["sleep", "300"], start_new_session=True)
with open(out + ".tmp", "w") as f:
    f.write(str(child.pid))
os.rename(out + ".tmp", out)
signal.pause()
"""


def test_sigterm_is_passed_on_with_its_grace_then_the_tree_is_killed(tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    argv = supervised_command([sys.executable, "-c", PROGRAM, str(ready)], cwd=tmp_path, log="the test program",
                              grace_seconds=PATIENCE)
    supervisor = subprocess.Popen(argv, cwd=tmp_path, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE)
    try:
        wait_for(ready.exists, "the program started its child")
        grandchild = int(ready.read_text())
        supervisor.send_signal(signal.SIGTERM)
        _, stderr = supervisor.communicate(timeout=PATIENCE)
    finally:
        if supervisor.poll() is None:
            supervisor.kill()
            supervisor.wait()
    assert (tmp_path / "ready.term").read_text() == "SIGTERM"  # the program had its say
    assert supervisor.returncode == 0  # the program's own status: it exited in its grace
    assert gone(grandchild)
    assert stderr.decode() == (f"nexus: the test program was stopped (SIGTERM); stopped 1 process of its tree still "
                               f"running: {grandchild} (sleep)\n")
