"""Nothing a command started outlives its call (issue 21, item 7): not a process that called
`setsid`, not one that double-forked, not when the call times out, when its caller stops it
from another thread, when the command ends, or when the host itself dies.

Each test learns the pids of what the command started (the command writes them to files) and
waits for the condition it checks (a pid gone, a file there); nothing asserts on elapsed time.
A process leaves its mark (`LATE`) 30 seconds after it started unless it was killed: once its pid
is gone, the mark can never appear.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import nexus_tool_shell._run as run
from nexus_core import CancelToken, Nexus
from nexus_core.testing import NexusFactory, assert_error, assert_ok

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a child subreaper is Linux-only")

#: the command: a process that setsid'd and one that double-forked, each writing its pid, then
#: sleeping and leaving a mark if still alive; `ready` once both pids are written
ESCAPERS = (
    "setsid sh -c 'echo $$ > setsid.pid; sleep 30; touch LATE' & "
    "(setsid sh -c 'echo $$ > daemon.pid; sleep 30; touch LATE2' &); "
    "while [ ! -s setsid.pid ] || [ ! -s daemon.pid ]; do sleep 0.02; done; touch ready; "
)


def wait_for(condition: Callable[[], bool], within: float = 60.0) -> bool:
    end = time.monotonic() + within
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


def gone(pid: int) -> bool:
    """The process no longer runs (a zombie whose parent is gone counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def pids(workspace: Path, *names: str) -> list[int]:
    return [int((workspace / name).read_text()) for name in names]


def assert_nothing_left(workspace: Path, killed: list[dict[str, object]]) -> None:
    started = pids(workspace, "setsid.pid", "daemon.pid")
    assert {"pid": started[0], "name": "sh"} in killed and {"pid": started[1], "name": "sh"} in killed, killed
    for pid in [*started, *(int(str(k["pid"])) for k in killed)]:
        assert wait_for(lambda pid=pid: gone(pid)), f"process {pid} outlived the call"
    # every process that could leave the marks is gone, so they can never appear
    assert not (workspace / "LATE").exists() and not (workspace / "LATE2").exists()


@pytest.fixture
def shell(nexus_factory: NexusFactory) -> Nexus:
    return nexus_factory(plugins=["nexus.tool.shell"])


def test_kill_method_is_the_subreaper_here() -> None:
    available, how = run.kill_method()
    assert available, how
    assert "PR_SET_CHILD_SUBREAPER" in how


def test_a_timeout_kills_setsid_and_double_forked_processes(shell: Nexus, nexus_workspace: Path) -> None:
    result = assert_ok(shell.invoke("shell", {"command": ESCAPERS + "sleep 60", "timeout": 10}))
    out = result.output_structured
    assert out["timed_out"] is True and out["exit_code"] is None
    assert (nexus_workspace / "ready").exists(), "the command did not get to start its processes within 10 s"
    assert_nothing_left(nexus_workspace, out["killed"])
    names = ", ".join(k["name"] for k in out["killed"])
    assert result.output.endswith(f"[timed out after 10 s: killed {len(out['killed'])} processes ({names})]")
    assert sorted(names.split(", ")) == ["sh", "sh", "sleep", "sleep", "sleep"]  # the shell exec'd its last sleep


def test_cancelling_from_another_thread_kills_the_tree(shell: Nexus, nexus_workspace: Path) -> None:
    token = CancelToken()

    def stop_when_ready() -> None:
        wait_for(lambda: (nexus_workspace / "ready").exists(), within=120)
        token.cancel("the person pressed Ctrl-C")

    stopper = threading.Thread(target=stop_when_ready)
    stopper.start()
    try:
        command = ESCAPERS.replace("touch ready", "echo waiting; touch ready") + "sleep 300"
        result = shell.invoke("shell", {"command": command, "timeout": 600}, cancel=token)
    finally:
        token.cancel("test over")
        stopper.join()
    assert_error(result, kind="cancelled")
    assert result.error is not None and result.error.startswith(
        "stopped: the call was cancelled (the person pressed Ctrl-C): killed ")
    assert result.output.startswith("waiting\n[stopped: the call was cancelled")
    assert result.output_structured is not None and result.output_structured["timed_out"] is False
    assert_nothing_left(nexus_workspace, result.output_structured["killed"])


def test_what_the_command_leaves_running_is_killed_and_named(shell: Nexus, nexus_workspace: Path) -> None:
    result = assert_ok(shell.invoke("shell", {"command": ESCAPERS + "echo done"}))
    out = result.output_structured
    assert out["exit_code"] == 0 and out["timed_out"] is False
    assert_nothing_left(nexus_workspace, out["killed"])
    assert result.output.startswith("done\n[the command ended; killed ")
    assert " it left running (" in result.output


def test_a_fork_loop_is_ended(shell: Nexus, nexus_workspace: Path) -> None:
    # each hop writes its pid, starts the next one detached (setsid) and exits: an endless chain of
    # orphans, which the kill must catch up with
    command = ("cat > hop.sh <<'EOF'\necho $$ >> chain.pids\nsetsid sh hop.sh &\nsleep 0.05\nEOF\n"
               "sh hop.sh & sleep 60")
    result = assert_ok(shell.invoke("shell", {"command": command, "timeout": 3}))
    assert result.output_structured["timed_out"] is True
    hops = [int(p) for p in (nexus_workspace / "chain.pids").read_text().split()]
    assert len(hops) > 1
    for pid in hops:
        assert wait_for(lambda pid=pid: gone(pid)), f"hop {pid} outlived the call"
    count = len((nexus_workspace / "chain.pids").read_text().split())
    time.sleep(0.5)  # had a hop survived, the chain would have grown meanwhile
    assert len((nexus_workspace / "chain.pids").read_text().split()) == count


def test_the_host_dying_kills_the_tree(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    host = textwrap.dedent(f"""
        from nexus_core import Nexus
        nx = Nexus.from_config({{"workspace": {str(workspace)!r}, "skills": [],
                                "plugins": {{"active": ["nexus.tool.shell"]}}}})
        nx.invoke("shell", {{"command": {ESCAPERS + "sleep 300"!r}, "timeout": 600}})
    """)
    proc = subprocess.Popen([sys.executable, "-c", host])
    try:
        assert wait_for(lambda: (workspace / "ready").exists(), within=120), "the command did not start"
    finally:
        proc.send_signal(signal.SIGKILL)  # no cleanup of any kind in the host
        proc.wait()
    for pid in pids(workspace, "setsid.pid", "daemon.pid"):
        assert wait_for(lambda pid=pid: gone(pid)), f"process {pid} outlived its dead host"
    assert not (workspace / "LATE").exists() and not (workspace / "LATE2").exists()


def test_a_command_that_kills_its_supervisor_is_still_ended_by_group(shell: Nexus, nexus_workspace: Path) -> None:
    # the supervisor cannot survive SIGKILL: the host then kills the command's process group, and says so
    result = assert_ok(shell.invoke("shell", {"command": "sleep 100 & echo $! > bg.pid; kill -9 $PPID; sleep 0.2; "
                                                         "echo after", "timeout": 60}))
    assert "[warning: the supervisor was killed before the command ended: only its process group was killed]" \
        in result.output
    assert wait_for(lambda: gone(pids(nexus_workspace, "bg.pid")[0]))


def test_the_supervisor_imports_nothing_from_the_workspace(shell: Nexus, nexus_workspace: Path) -> None:
    for module in ("ctypes", "select", "os", "signal", "_signal", "time", "encodings"):
        (nexus_workspace / f"{module}.py").write_text(f"open({str(nexus_workspace / 'PWNED')!r}, 'w').close()\n")
    assert_ok(shell.invoke("shell", {"command": "echo hi"}), "hi")
    assert not (nexus_workspace / "PWNED").exists()


def test_the_command_sees_its_own_environment_not_the_supervisors(nexus_factory: NexusFactory) -> None:
    nx = nexus_factory(plugins=["nexus.tool.shell"], config={"plugins": {"nexus.tool.shell": {
        "env_allowlist": [], "env": {"ONLY": "a=b c"}}}})
    result = assert_ok(nx.invoke("shell", {"command": "env | sort"}))
    lines = [line for line in result.output_structured["stdout"].splitlines()
             if not line.startswith(("PWD=", "SHLVL=", "_="))]  # what bash itself sets
    assert lines == ["ONLY=a=b c"]


def test_the_environment_is_not_on_any_command_line(nexus_factory: NexusFactory) -> None:
    # /proc/<pid>/cmdline is readable by every local user; the environment is the user's alone
    nx = nexus_factory(plugins=["nexus.tool.shell"], config={"plugins": {"nexus.tool.shell": {
        "env": {"SERVICE_TOKEN": "s3cret-7f3a"}}}})
    result = assert_ok(nx.invoke("shell", {"command": "tr '\\0' ' ' < /proc/$PPID/cmdline; echo; "
                                                      "tr '\\0' ' ' < /proc/$$/cmdline; echo; echo $SERVICE_TOKEN"}))
    stdout = result.output_structured["stdout"]
    assert " -I -S -B " in stdout and "nexus_core/_subreaper.py" in stdout  # the supervisor's command line
    assert stdout.endswith("\ns3cret-7f3a\n") and stdout.count("s3cret") == 1  # in the environment alone


def test_signals_the_supervisor_ignores_are_at_their_defaults_in_the_command(shell: Nexus) -> None:
    # Python ignores SIGPIPE: a command must not inherit that (`yes | head` would never end)
    result = assert_ok(shell.invoke("shell", {"command": "yes | head -n 2; grep -E '^Sig(Ign|Blk)' /proc/self/status",
                                              "timeout": 60}))
    assert result.output_structured["stdout"].startswith("y\ny\n")
    ignored = dict(line.split(":\t") for line in result.output_structured["stdout"].splitlines()[2:])
    assert int(ignored["SigBlk"], 16) == 0
    assert not int(ignored["SigIgn"], 16) & (1 << (signal.SIGPIPE - 1) | 1 << (signal.SIGXFSZ - 1))


def test_without_a_supervisor_the_group_is_killed(shell: Nexus, nexus_workspace: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # elsewhere (macOS) or where Python cannot start again: the old way, and said so
    monkeypatch.setattr(run, "_why_no_supervisor", lambda: "a test said so")
    result = assert_ok(shell.invoke("shell", {"command": "sleep 100 & echo $!; sleep 60", "timeout": 5}))
    assert result.output.endswith("[timed out after 5 s: the command's process group was killed]")
    assert wait_for(lambda: gone(int(result.output_structured["stdout"])))
    token = CancelToken()

    def stop_when_ready() -> None:
        wait_for(lambda: (nexus_workspace / "ready").exists(), within=120)
        token.cancel("stop")

    stopper = threading.Thread(target=stop_when_ready)
    stopper.start()
    try:
        stopped = shell.invoke("shell", {"command": "sleep 100 & echo $! > bg.pid; touch ready; sleep 60",
                                         "timeout": 600}, cancel=token)
    finally:
        token.cancel("test over")
        stopper.join()
    assert_error(stopped, "stopped: the call was cancelled (stop): the command's process group was killed",
                 kind="cancelled")
    assert wait_for(lambda: gone(pids(nexus_workspace, "bg.pid")[0]))


def test_nexus_doctor_names_the_kill_method(shell: Nexus) -> None:
    lines = shell.plugin("nexus.tool.shell").nexus_doctor()
    assert any(line.startswith("process tree: available here: a supervisor that is PR_SET_CHILD_SUBREAPER")
               for line in lines), lines
    assert "(.git/config too: gate the shell, or Ask)" in lines[0]


def test_stopping_before_the_call_ran_runs_nothing(shell: Nexus, nexus_workspace: Path) -> None:
    token = CancelToken()
    token.cancel("too late")
    result = shell.invoke("shell", {"command": "touch ran"}, cancel=token)
    assert_error(result, kind="cancelled")
    assert not (nexus_workspace / "ran").exists()
