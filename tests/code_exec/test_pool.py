"""Issue 26, item 1: one sandbox pool shared by every Nexus of a process (`pool: process`, the
default), and what keeps its sessions apart. Real processes throughout: two Nexus, each with its
own tools (bindings), allowed packages and limits, run scripts at the same time from the pool's
one zygote; the test reads each child's open fds in /proc while both are inside a tool call.

Also: a session's close leaves the pool serving the others, and a pool whose zygote is killed
(-9) in the middle of a run is started again, the run that lost its child reported, not hung.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from nexus_core.testing import NexusFactory, assert_ok
from nexus_tool_code_exec.launchers.pool import PROCESS_POOL, PooledLauncher
from proc_helpers import alive, descendants, lift_idle, wait_until

from nexus_core import Nexus, ToolResult, native_tool
from nexus_tool_code_exec import engine_for

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox is Linux-only")

CE = "nexus.tool.code_exec"
#: how long a tool waits for the other session's script (a busy 2-core machine: generous)
MEET = 120.0

#: each session: its limits, its allowed packages (one the other lacks), its own tool
SESSIONS = {
    "alpha": {"memory_mb": 300, "cpu_seconds": 7, "extra": "decimal"},
    "beta": {"memory_mb": 700, "cpu_seconds": 11, "extra": "fractions"},
}
BASE_ALLOWED = ["json", "os", "resource"]


class Meeting:
    """Where the two scripts' tool calls meet: each says who it is (its child's pid and scratch
    folder), waits for the other, then has the host read its child's open fds in /proc while both
    children wait for their call's answer, and waits again before answering."""

    def __init__(self) -> None:
        self.first = threading.Barrier(2, timeout=MEET)
        self.second = threading.Barrier(2, timeout=MEET)
        self.who: dict[str, dict[str, Any]] = {}
        self.fds: dict[str, dict[str, str]] = {}

    def tool(self, name: str) -> Any:
        def meet(args: dict[str, Any]) -> str:
            self.who[name] = {"pid": int(args["pid"]), "folder": str(args["folder"])}
            self.first.wait()
            pid = self.who[name]["pid"]
            self.fds[name] = {fd: os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")}
            self.second.wait()
            other = next(n for n in self.who if n != name)
            return json.dumps(self.who[other]["folder"])

        return native_tool(f"{name}_meet", "meet the other session's script",
                           {"type": "object", "properties": {"pid": {"type": "integer"}, "folder": {"type": "string"}}},
                           meet)


def session(nexus_factory: NexusFactory, tmp_path: Path, name: str, *tools: Any) -> Nexus:
    spec = SESSIONS[name]
    workspace = tmp_path / f"workspace-{name}"
    workspace.mkdir()
    nx = nexus_factory(plugins=[CE], config={"workspace": str(workspace), "session_dir": str(tmp_path / f"s-{name}"),
                                             "plugins": {CE: {
        "timeout_seconds": 180, "launcher": "zygote", "memory_mb": spec["memory_mb"], "cpu_seconds": spec["cpu_seconds"],
        "allowed_packages": [*BASE_ALLOWED, spec["extra"]]}}})
    for tool in tools:
        nx.add_tool(tool)
    return nx


def script_of(name: str) -> str:
    extra = SESSIONS[name]["extra"]
    return f"""\
import json, os, resource, tools
import {extra}


def run(ctx):
    folder = os.getcwd()
    with open("mine.txt", "w") as f:
        f.write({name!r})
    other = json.loads(tools.{name}_meet(pid=os.getpid(), folder=folder).output)
    try:
        os.listdir(other)
        theirs = "listed"
    except OSError as exc:
        theirs = f"refused (errno {{exc.errno}})"
    return {{
        "pid": os.getpid(), "ppid": os.getppid(), "folder": folder, "entries": sorted(os.listdir(".")),
        "theirs": theirs, "tools": sorted(n for n in dir(tools) if n.endswith("_meet")),
        "memory_mb": resource.getrlimit(resource.RLIMIT_AS)[0] >> 20,
        "cpu": list(resource.getrlimit(resource.RLIMIT_CPU)),
    }}
"""


def launcher_of(nx: Nexus) -> PooledLauncher:
    launcher = engine_for(nx).launcher()
    assert isinstance(launcher, PooledLauncher), engine_for(nx).launcher_note
    return launcher


def test_two_sessions_at_once_share_the_pools_zygote_and_nothing_else(nexus_factory: NexusFactory,
                                                                      tmp_path: Path) -> None:
    meeting = Meeting()
    nexus = {name: session(nexus_factory, tmp_path, name, meeting.tool(name)) for name in SESSIONS}
    results: dict[str, ToolResult] = {}

    def go(name: str) -> None:
        results[name] = nexus[name].invoke("run_code", {"script": script_of(name)})

    threads = [threading.Thread(target=go, args=(name,)) for name in SESSIONS]
    for t in threads:
        t.start()
    for t in threads:
        t.join(2 * MEET)
    assert not any(t.is_alive() for t in threads), "a run hung"
    seen = {}
    for name, result in results.items():
        assert_ok(result)
        seen[name] = result.output_structured["result"]
    zygote = launcher_of(nexus["alpha"]).pid
    assert zygote is not None and launcher_of(nexus["beta"]).pid == zygote  # one pool, one zygote
    alpha, beta = seen["alpha"], seen["beta"]
    # a process each, both forked by the pool's zygote, which runs no script
    assert alpha["pid"] != beta["pid"] and alpha["ppid"] == beta["ppid"] == zygote
    # each sees only its own bindings and its own limits
    assert alpha["tools"] == ["alpha_meet"] and beta["tools"] == ["beta_meet"]
    assert alpha["memory_mb"] == 300 and alpha["cpu"] == [7, 8]
    assert beta["memory_mb"] == 700 and beta["cpu"] == [11, 12]
    # its own scratch folder, with only what it wrote; the other's out of its reach
    assert alpha["folder"] != beta["folder"]
    assert alpha["entries"] == ["mine.txt"] and beta["entries"] == ["mine.txt"]
    layers = set(engine_for(nexus["alpha"]).active_layers())
    if layers & {"uid", "fs"}:
        assert alpha["theirs"] != "listed" and beta["theirs"] != "listed", (alpha["theirs"], beta["theirs"])
    # no fd of one child open in the other: their pipes are their own
    assert set(meeting.fds) == {"alpha", "beta"}
    targets = {name: set(fds.values()) for name, fds in meeting.fds.items()}
    pipes = {name: {t for t in found if t.startswith("pipe:")} for name, found in targets.items()}
    assert pipes["alpha"] and pipes["beta"] and not pipes["alpha"] & pipes["beta"], meeting.fds
    assert not (targets["alpha"] & targets["beta"]) - {"/dev/null"}, meeting.fds
    # each session's allowed packages are its own: the other's is refused
    for name, other in (("alpha", "beta"), ("beta", "alpha")):
        refused = nexus[name].invoke("run_code", {"script": f"import {SESSIONS[other]['extra']}\n\n"
                                                            "def run(ctx):\n    return 1\n"})
        assert refused.error is not None and refused.error.startswith("script rejected:"), refused.error


def test_each_sessions_memory_limit_holds_in_the_shared_pool(nexus_factory: NexusFactory, tmp_path: Path) -> None:
    """The limits a child lowers its own to at its START are the ones that hold: 400 MB is past
    alpha's 300 MiB, within beta's 700."""
    nexus = {name: session(nexus_factory, tmp_path, name) for name in SESSIONS}
    grab = "def run(ctx):\n    b = bytearray(400 * 1024 * 1024)\n    return len(b) >> 20\n"
    engine = engine_for(nexus["alpha"])
    if "rlimits" not in engine.active_layers():
        pytest.skip("the rlimits layer is unavailable here")
    result = nexus["alpha"].invoke("run_code", {"script": grab})
    assert result.error is not None and "memory limit exceeded" in result.error, result.error
    result = nexus["beta"].invoke("run_code", {"script": grab})
    assert_ok(result)
    assert result.output_structured["result"] == 400
    assert launcher_of(nexus["alpha"]).pid == launcher_of(nexus["beta"]).pid


def test_a_sessions_close_leaves_the_pool_serving_the_others(nexus_factory: NexusFactory, tmp_path: Path) -> None:
    one, two = (session(nexus_factory, tmp_path, name) for name in SESSIONS)
    trivial = {"script": "import os\n\ndef run(ctx):\n    return os.getppid()\n"}
    assert_ok(one.invoke("run_code", trivial))
    assert_ok(two.invoke("run_code", trivial))
    zygote = launcher_of(two).pid
    assert zygote is not None and launcher_of(one).pid == zygote
    key = launcher_of(two).key
    users = PROCESS_POOL.users(key)
    assert users >= 2
    one.close()
    assert PROCESS_POOL.users(key) == users - 1
    assert alive(zygote) and zygote in PROCESS_POOL.pids()
    for _ in range(3):
        result = two.invoke("run_code", trivial)
        assert_ok(result)
        assert result.output_structured["result"] == zygote
    # the last session to close stops it: nothing of the pool outlives its users (unless another
    # Nexus of this process, made by some other test and still open, uses it too)
    two.close()
    assert PROCESS_POOL.users(key) == users - 2
    if users == 2:
        assert wait_until(lambda: not alive(zygote))
        assert zygote not in PROCESS_POOL.pids()


def test_a_killed_pool_is_started_again_and_the_run_that_lost_its_child_is_reported(
        nexus_factory: NexusFactory, tmp_path: Path) -> None:
    """The zygote killed (-9) while a script waits in a tool call: that run ends with an error
    (its process died with the zygote), at once, not at its timeout; the other session's next run
    is served by a new zygote."""
    inside = threading.Event()
    release = threading.Event()

    def hold(args: dict[str, Any]) -> str:
        inside.set()
        release.wait(MEET)
        return "released"

    one = session(nexus_factory, tmp_path, "alpha", native_tool("hold", "wait", {"type": "object"}, hold))
    two = session(nexus_factory, tmp_path, "beta")
    assert_ok(two.invoke("run_code", {"script": "def run(ctx):\n    return 1\n"}))
    zygote = launcher_of(two).pid
    assert zygote is not None
    results: list[ToolResult] = []
    runner = threading.Thread(target=lambda: results.append(one.invoke("run_code", {
        "script": "import tools\n\ndef run(ctx):\n    tools.hold()\n    return 'survived'\n"})))
    runner.start()
    assert inside.wait(MEET), "the script never called the tool"
    assert launcher_of(one).pid == zygote
    kids = descendants(zygote)
    os.kill(zygote, signal.SIGKILL)
    assert wait_until(lambda: not alive(zygote))
    layers = set(engine_for(one).active_layers())
    if layers & {"uid", "fs", "seccomp", "net", "rlimits", "env"}:  # the sandbox sets PDEATHSIG
        # (a spare forked just before the kill may not have run yet: SCHED_IDLE on a busy machine)
        assert wait_until(lambda: (lift_idle(kids), not any(alive(pid) for pid in kids))[1]), \
            "a child outlived the zygote"
    release.set()
    runner.join(MEET)
    assert not runner.is_alive(), "the run that lost its child hung"
    [lost] = results
    if layers:
        assert lost.error is not None and "died with the zygote that forked it" in lost.error, lost.output
    result = two.invoke("run_code", {"script": "import os\n\ndef run(ctx):\n    return os.getppid()\n"})
    assert_ok(result)
    again = launcher_of(two).pid
    assert again is not None and again != zygote and result.output_structured["result"] == again
    assert_ok(one.invoke("run_code", {"script": "def run(ctx):\n    return 1\n"}))
    assert launcher_of(one).pid == again


def test_sessions_with_other_layers_get_a_zygote_each_from_the_pool(nexus_factory: NexusFactory, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A zygote is started with the sandbox's layers: a Nexus made while a layer is switched off
    (ENV_DISABLE_LAYERS) is served by another zygote of the pool, not by one with other layers."""
    from nexus_tool_code_exec import sandbox

    one = session(nexus_factory, tmp_path, "alpha")
    assert_ok(one.invoke("run_code", {"script": "def run(ctx):\n    return 1\n"}))
    layers = engine_for(one).active_layers()
    if "seccomp" not in layers:
        pytest.skip("the seccomp layer is unavailable here")
    monkeypatch.setenv(sandbox.ENV_DISABLE_LAYERS, "seccomp")
    two = session(nexus_factory, tmp_path, "beta")
    assert_ok(two.invoke("run_code", {"script": "def run(ctx):\n    return 1\n"}))
    assert "seccomp" not in engine_for(two).active_layers()
    assert launcher_of(one).pid != launcher_of(two).pid
    assert set(PROCESS_POOL.pids()) >= {launcher_of(one).pid, launcher_of(two).pid}


def test_pool_nexus_gives_each_nexus_a_zygote_of_its_own(nexus_factory: NexusFactory, tmp_path: Path) -> None:
    made = [nexus_factory(plugins=[CE], config={"plugins": {CE: {"pool": "nexus", "launcher": "zygote"}}})
            for _ in range(2)]
    pids = set()
    for nx in made:
        assert_ok(nx.invoke("run_code", {"script": "def run(ctx):\n    return 1\n"}))
        launcher = engine_for(nx).launcher()
        assert not isinstance(launcher, PooledLauncher) and launcher.pid is not None
        assert "pool: nexus" in engine_for(nx).launcher_note
        pids.add(launcher.pid)
    assert len(pids) == 2 and not pids & set(PROCESS_POOL.pids())


def test_nexus_doctor_names_the_pool_and_its_zygote(nexus_factory: NexusFactory, tmp_path: Path) -> None:
    nx = session(nexus_factory, tmp_path, "alpha")
    lines = engine_for(nx).doctor_lines()
    launcher = launcher_of(nx)
    [line] = [line for line in lines if line.startswith("launcher:")]
    assert "shared by every Nexus of this process" in line and "pool: process" in line
    assert f"(pid {launcher.pid})" in line


def test_the_rlimit_ceiling_is_above_any_limit_a_setting_gives() -> None:
    from nexus_tool_code_exec import sandbox

    assert sandbox.CEILING_MEMORY_MB << 20 < resource.RLIM_INFINITY or resource.RLIM_INFINITY == -1
    assert sandbox.CEILING_MEMORY_MB >= 1 << 20 and sandbox.CEILING_CPU_SECONDS >= 1 << 20


def test_the_pool_is_stopped_when_the_interpreter_exits(tmp_path: Path) -> None:
    """A process that never closes its Nexus: its exit stops the pool's zygote (atexit), without
    hanging, and leaves no scratch root behind."""
    import subprocess

    program = f"""
import glob, tempfile
from nexus_core import Nexus
from nexus_tool_code_exec import engine_for
before = set(glob.glob(tempfile.gettempdir() + "/nexus-run-*"))
nx = Nexus.from_config({{"workspace": {str(tmp_path)!r}, "session_dir": {str(tmp_path / "s")!r}, "skills": [],
                        "plugins": {{"active": ["{CE}"], "{CE}": {{"launcher": "zygote"}}}}}})
result = nx.invoke("run_code", {{"script": "def run(ctx):\\n    return 1\\n"}})
assert result.error is None, result.error
launcher = engine_for(nx).launcher()
print(launcher.pid, launcher._zygote.scratch_root, flush=True)
"""
    proc = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    pid_text, root = proc.stdout.split()
    assert wait_until(lambda: not alive(int(pid_text)))
    assert not os.path.exists(root)
