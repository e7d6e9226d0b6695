"""Issue 21, item 9: a stopped MCP server leaves nothing.

A stdio server runs under a supervisor that is its tree's subreaper (nexus_core.supervisor). Each
attack is a real server (servers/fixture_server.py) whose child left the process group the SDK
stops — `setsid`, `setpgid`, a daemon's double fork — and ignores SIGTERM. However the server
ends (the Nexus closes, the server crashes, it ignores stdin and SIGTERM itself, the host dies),
no process of its tree may be left: each is checked by pid.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from mcp_helpers import alive, fixture_server, log_folder, mcp_config, wait_for
from nexus_core.supervisor import why_unavailable

from nexus_core import Nexus

pytestmark = pytest.mark.skipif(why_unavailable() is not None, reason=f"no subreaper here: {why_unavailable()}")

KINDS = ("setsid", "setpgid", "daemon")


@pytest.fixture
def leaked() -> Iterator[list[int]]:
    """Pids a test started; whatever is still alive at the end is killed, so a failing test does
    not leave stubborn processes on the machine."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


def spawn(nx: Nexus, how: str, server: str = "fx") -> int:
    result = nx.invoke(f"{server}_spawn", {"how": how})
    assert not result.is_error, result.error
    pid = int(result.output)
    assert alive(pid)
    return pid


def server_pid(nx: Nexus, server: str = "fx") -> int:
    result = nx.invoke(f"{server}_pid", {})
    assert not result.is_error, result.error
    return int(result.output)


def gone(pids: list[int]) -> Callable[[], bool]:
    return lambda: not any(alive(pid) for pid in pids)


def test_closing_the_nexus_ends_every_process_of_the_tree(make_nexus: Callable[..., Nexus],
                                                          leaked: list[int]) -> None:
    nx = make_nexus({"fx": fixture_server()})
    leaked.append(server_pid(nx))
    stubborn = [spawn(nx, how) for how in KINDS]
    leaked.extend(stubborn)
    nx.close()
    wait_for(gone(leaked), what=f"the server and its children {stubborn} to be gone")
    # the supervisor says what it killed (the server itself among them when a busy machine made it
    # miss the SDK's grace period)
    log = (log_folder(nx) / "fx.log").read_text()
    [report] = [line for line in log.splitlines() if "processes of its tree still running" in line]
    assert all(f"{pid} (python" in report for pid in stubborn), log


def test_a_server_that_ignores_stdin_and_sigterm_leaves_nothing(make_nexus: Callable[..., Nexus],
                                                                leaked: list[int]) -> None:
    """The SDK's escalation: stdin closed, 2 s, SIGTERM to the group (which neither the server nor
    its child heeds); the supervisor passes SIGTERM on, then kills the tree."""
    nx = make_nexus({"fx": fixture_server()})
    leaked.append(server_pid(nx))
    leaked.append(spawn(nx, "setsid"))
    assert nx.invoke("fx_linger", {}).output == "lingering"
    nx.close()
    wait_for(gone(leaked), what="the lingering server and its child to be gone")
    assert "the MCP server was stopped (SIGTERM)" in (log_folder(nx) / "fx.log").read_text()


def test_a_server_that_crashes_leaves_nothing(make_nexus: Callable[..., Nexus], leaked: list[int]) -> None:
    nx = make_nexus({"fx": fixture_server()})
    first = server_pid(nx)
    stubborn = [spawn(nx, how) for how in KINDS]
    leaked.extend([first, *stubborn])
    crashed = nx.invoke("fx_crash", {})
    assert crashed.is_error and "went away" in crashed.error
    # while the Nexus is still open: the tree ended with the server, not at close
    wait_for(gone(leaked), what="the crashed server's children to be gone")
    assert server_pid(nx) != first  # and the next call starts a fresh one


HOST = """\
import json, sys
from nexus_core import Nexus

nx = Nexus(json.loads(sys.argv[1]))
pids = [int(nx.invoke("fx_pid", {}).output)]
pids += [int(nx.invoke("fx_spawn", {"how": how}).output) for how in ("setsid", "setpgid", "daemon")]
print(json.dumps(pids), flush=True)
sys.stdin.read()  # until the test kills this process
"""


def test_the_host_dying_leaves_nothing(tmp_path: Path, leaked: list[int]) -> None:
    """A host killed with SIGKILL closes nothing; the supervisor's parent-death signal stops the
    server and its tree all the same."""
    config = mcp_config(tmp_path, {"fx": fixture_server()})
    host = subprocess.Popen([sys.executable, "-c", HOST, json.dumps(config)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert host.stdout is not None
        pids = json.loads(host.stdout.readline())
        leaked.extend(pids)
        assert all(alive(pid) for pid in pids)
        host.kill()
        host.wait(timeout=60)
        wait_for(gone(pids), what=f"the dead host's server and its children {pids} to be gone")
    finally:
        if host.poll() is None:
            host.kill()
            host.wait()


def test_the_supervisor_passes_the_server_its_command_line_environment_and_folder(
        make_nexus: Callable[..., Nexus], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The supervisor is invisible to the server: its arguments, environment and working folder
    are as configured, its parent is the supervisor, and it is where the SDK stops it."""
    monkeypatch.setenv("NEXUS_TEST_SECRET", "s3cret")
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    nx = make_nexus({"fx": fixture_server(env={"GIVEN": "${NEXUS_TEST_SECRET}"}, cwd=str(folder))})
    assert nx.invoke("fx_env", {"name": "GIVEN"}).output == "s3cret"
    assert nx.invoke("fx_env", {"name": "NEXUS_TEST_SECRET"}).output == "<unset>"
    assert nx.invoke("fx_cwd", {}).output == str(folder)
    pid = server_pid(nx)
    parent = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    assert Path(f"/proc/{parent}/comm").read_text().strip() == "nexus-mcp-reap"
    assert Path(f"/proc/{parent}/stat").read_text().rsplit(")", 1)[1].split()[1] == str(os.getpid())
    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    assert cmdline[1].endswith(b"fixture_server.py")  # the server's own argv, nothing added
    # the environment it started with is the SDK's, nothing added (no LC_CTYPE from the
    # supervisor's Python coercing a C locale)
    entries = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    started_with = {entry.split(b"=", 1)[0].decode() for entry in entries if entry}
    inherited = {k for k in ("HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER") if k in os.environ}
    assert started_with == {"GIVEN", *inherited}
