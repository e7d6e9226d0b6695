"""Issue 26, item 1, its second mode: `pool: machine`, one pool server per machine and user, which
processes connect to (launchers/machine.py). Real processes: the server is started by the first
launch, in a private folder below a temporary XDG_RUNTIME_DIR of the test's own; two Nexus, two
processes, share it; a peer of another uid is refused; it stops once idle; killed, it is started
again and the run that lost its child says so.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import socket
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from nexus_core.testing import NexusFactory, assert_ok
from nexus_tool_code_exec.launchers import machine
from nexus_tool_code_exec.launchers.machine import MachineLauncher
from proc_helpers import alive, wait_until

from nexus_core import Nexus, ToolResult, native_tool
from nexus_tool_code_exec import engine_for

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox is Linux-only")

CE = "nexus.tool.code_exec"
ROOT = os.geteuid() == 0
PPID_SCRIPT = "import os\n\ndef run(ctx):\n    return os.getppid()\n"


@pytest.fixture
def runtime_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A private XDG_RUNTIME_DIR: the pool's folder is made below it. Any server left is stopped."""
    folder = tmp_path / "xdg"
    folder.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(folder))
    yield folder
    pid = server_pid(folder / "nexus-pool")
    if pid is not None:  # stopped as idleness stops it: its zygotes' folders removed
        os.kill(pid, signal.SIGTERM)
        if not wait_until(lambda: not alive(pid)):
            os.kill(pid, signal.SIGKILL)


def server_pid(folder: Path) -> int | None:
    """The pid of the server listening in `folder`, asked of it (None: none answers)."""
    try:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.settimeout(30)
        conn.connect(str(folder / machine.SOCKET_NAME))
    except OSError:
        return None
    with conn:
        conn.sendall(b'{"t":"info"}\n')
        data = b""
        while not data.endswith(b"\n"):
            chunk = conn.recv(4096)
            if not chunk:
                return None
            data += chunk
    return int(json.loads(data)["pid"])


def make(nexus_factory: NexusFactory, *tools: Any, idle: float = 300, **settings: Any) -> Nexus:
    nx = nexus_factory(plugins=[CE], config={"plugins": {CE: {
        "pool": "machine", "pool_idle_seconds": idle, "launcher": "zygote", "timeout_seconds": 120,
        "allowed_packages": ["os", "resource"], **settings}}})
    for tool in tools:
        nx.add_tool(tool)
    return nx


def launcher_of(nx: Nexus) -> MachineLauncher:
    launcher = engine_for(nx).launcher()
    assert isinstance(launcher, MachineLauncher), engine_for(nx).launcher_note
    return launcher


def test_two_nexus_share_the_machines_pool_each_with_its_own_limits(nexus_factory: NexusFactory,
                                                                    runtime_dir: Path) -> None:
    script = "import os, resource\n\ndef run(ctx):\n    return [os.getppid(), resource.getrlimit(resource.RLIMIT_AS)[0] >> 20]\n"
    one = make(nexus_factory, memory_mb=300)
    two = make(nexus_factory, memory_mb=700)
    results = [nx.invoke("run_code", {"script": script}) for nx in (one, two)]
    for result in results:
        assert_ok(result)
    (zygote_one, mb_one), (zygote_two, mb_two) = (r.output_structured["result"] for r in results)
    assert zygote_one == zygote_two and (mb_one, mb_two) == (300, 700)
    folder = runtime_dir / "nexus-pool"
    st = folder.stat()
    assert stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == os.getuid()
    assert stat.S_IMODE((folder / machine.SOCKET_NAME).stat().st_mode) == 0o600
    pid = server_pid(folder)
    assert pid is not None and launcher_of(one).pid == launcher_of(two).pid == pid
    # a process of its own, not this one: a zygote's parent is the server
    assert pid != os.getpid() and zygote_one != pid
    with open(f"/proc/{zygote_one}/stat") as f:
        assert int(f.read().rsplit(")", 1)[1].split()[1]) == pid
    line = next(line for line in engine_for(one).doctor_lines() if line.startswith("launcher:"))
    assert "pool: machine" in line and str(folder / machine.SOCKET_NAME) in line and f"(pid {pid})" in line


def test_two_processes_starting_at_once_end_with_one_server(runtime_dir: Path, tmp_path: Path) -> None:
    program = f"""
import sys
from nexus_core import Nexus
from nexus_tool_code_exec import engine_for
nx = Nexus.from_config({{"workspace": sys.argv[1], "session_dir": sys.argv[1] + "/s", "skills": [],
                        "plugins": {{"active": ["{CE}"], "{CE}": {{"pool": "machine", "launcher": "zygote",
                                                               "allowed_packages": ["os"]}}}}}})
sys.stdin.readline()  # both are ready: start together
result = nx.invoke("run_code", {{"script": "import os\\n\\ndef run(ctx):\\n    return os.getppid()\\n"}})
assert result.error is None, result.error
print(engine_for(nx).launcher().pid, result.output_structured["result"], flush=True)
nx.close()
"""
    procs = []
    for i in range(2):
        work = tmp_path / f"p{i}"
        work.mkdir()
        procs.append(subprocess.Popen([sys.executable, "-c", program, str(work)], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
    outs = [proc.communicate(timeout=300) for proc in procs]
    for proc, (out, err) in zip(procs, outs, strict=True):
        assert proc.returncode == 0, err
    seen = {tuple(out.split()) for out, _ in outs}
    assert len(seen) == 1, seen  # the same server, the same zygote
    [(server, _zygote)] = seen
    assert server_pid(runtime_dir / "nexus-pool") == int(server)


@pytest.mark.skipif(not ROOT, reason="a peer of another uid needs root to make")
def test_a_peer_of_another_uid_is_refused(nexus_factory: NexusFactory, runtime_dir: Path) -> None:
    """A process whose effective uid is another's (nobody), with root's file-system uid so that
    it reaches the socket at all: the server reads its credentials (SO_PEERCRED) and refuses it."""
    nx = make(nexus_factory)
    assert_ok(nx.invoke("run_code", {"script": PPID_SCRIPT}))
    path = str(runtime_dir / "nexus-pool" / machine.SOCKET_NAME)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through the pipe
        answer = b"?"
        try:
            os.close(r)
            libc = ctypes.CDLL(None, use_errno=True)
            if libc.setresuid(0, 65534, 0) != 0:
                raise OSError(ctypes.get_errno(), "setresuid")
            libc.setfsuid(0)  # the file-system uid back to root's: the folder and socket let it in
            conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            conn.settimeout(30)
            conn.connect(path)  # the server answers before it reads anything from a peer it refuses
            answer = b""
            while True:
                chunk = conn.recv(4096)
                if not chunk:
                    break
                answer += chunk
        except BaseException as exc:  # noqa: BLE001
            answer = f"error: {exc}".encode()
        finally:
            os.write(w, answer)
            os._exit(0)
    os.close(w)
    got = b""
    while chunk := os.read(r, 4096):
        got += chunk
    os.close(r)
    os.waitpid(pid, 0)
    assert json.loads(got) == {"t": "refused", "message": f"this pool serves uid {os.getuid()} only"}, got
    assert_ok(nx.invoke("run_code", {"script": PPID_SCRIPT}))  # and it serves its own uid on


def test_the_server_stops_once_idle_and_the_next_launch_starts_another(nexus_factory: NexusFactory,
                                                                       runtime_dir: Path) -> None:
    nx = make(nexus_factory, idle=1)
    assert_ok(nx.invoke("run_code", {"script": PPID_SCRIPT}))
    first = launcher_of(nx).pid
    assert first is not None and alive(first)
    assert wait_until(lambda: not alive(first)), "the idle server did not stop"
    assert not (runtime_dir / "nexus-pool" / machine.SOCKET_NAME).exists()
    assert_ok(nx.invoke("run_code", {"script": PPID_SCRIPT}))
    again = server_pid(runtime_dir / "nexus-pool")
    assert again is not None and again != first


def test_a_killed_server_is_started_again_and_the_run_that_lost_its_child_is_reported(
        nexus_factory: NexusFactory, runtime_dir: Path) -> None:
    inside = threading.Event()
    release = threading.Event()

    def hold(args: dict[str, Any]) -> str:
        inside.set()
        release.wait(120)
        return "released"

    nx = make(nexus_factory, native_tool("hold", "wait", {"type": "object"}, hold))
    assert_ok(nx.invoke("run_code", {"script": PPID_SCRIPT}))
    server = launcher_of(nx).pid
    assert server is not None
    results: list[ToolResult] = []
    runner = threading.Thread(target=lambda: results.append(nx.invoke("run_code", {
        "script": "import tools\n\ndef run(ctx):\n    tools.hold()\n    return 'survived'\n"})))
    runner.start()
    assert inside.wait(120), "the script never called the tool"
    os.kill(server, signal.SIGKILL)
    assert wait_until(lambda: not alive(server))
    if engine_for(nx).active_layers():  # the sandbox sets PDEATHSIG: the child dies with its zygote
        release.set()
        runner.join(180)
        assert not runner.is_alive(), "the run that lost its child hung"
        [lost] = results
        assert lost.error is not None and "died with the zygote that forked it" in lost.error, lost.error
    else:
        release.set()
        runner.join(180)
    result = nx.invoke("run_code", {"script": PPID_SCRIPT})
    assert_ok(result)
    again = server_pid(runtime_dir / "nexus-pool")
    assert again is not None and again != server


def test_a_server_killed_between_runs_is_replaced_by_the_next_run(nexus_factory: NexusFactory,
                                                                  runtime_dir: Path) -> None:
    """SIGKILL of the server while no run is going on: it leaves its socket behind (nobody listens
    there any more) and its zygote goes with it; the same Nexus's next run starts a new server."""
    nx = make(nexus_factory)
    first = nx.invoke("run_code", {"script": PPID_SCRIPT})
    assert_ok(first)
    zygote = first.output_structured["result"]
    server = server_pid(runtime_dir / "nexus-pool")
    assert server is not None and launcher_of(nx).pid == server and zygote != server
    os.kill(server, signal.SIGKILL)
    assert wait_until(lambda: not alive(server), within=120)
    assert (runtime_dir / "nexus-pool" / machine.SOCKET_NAME).exists()  # not unlinked: a kill, not a stop
    assert wait_until(lambda: not alive(zygote), within=120), "the zygote outlived its server"
    again = nx.invoke("run_code", {"script": PPID_SCRIPT})
    assert_ok(again)
    new = server_pid(runtime_dir / "nexus-pool")
    assert new is not None and new != server and launcher_of(nx).pid == new  # the launcher knows the new one
    assert again.output_structured["result"] != zygote


def test_a_launch_whose_server_stops_before_answering_is_made_again_to_a_new_server(
        nexus_factory: NexusFactory, runtime_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The race an idle stop leaves: a launch whose connection reached the server just as it
    stopped is closed without a word, and `MachineLauncher.launch` connects once more, to a new
    server. Made to happen, not waited for: the server is stopped (SIGSTOP) while the launch's
    hello waits in its backlog, then told to stop (SIGTERM: the same way out as idleness, its
    socket unlinked and its zygotes stopped) and continued; the run succeeds on a new server."""
    nx = make(nexus_factory)
    assert_ok(nx.invoke("run_code", {"script": PPID_SCRIPT}))
    server = launcher_of(nx).pid
    assert server is not None and server == server_pid(runtime_dir / "nexus-pool")
    connections: list[machine._Lines] = []
    sent = threading.Event()
    real = machine._Lines

    class Seen(real):  # the real reader; the test only learns that a launch sent its hello
        def __init__(self, sock: socket.socket) -> None:
            super().__init__(sock)
            connections.append(self)
            sent.set()

    monkeypatch.setattr(machine, "_Lines", Seen)
    results: list[ToolResult] = []
    runner = threading.Thread(target=lambda: results.append(nx.invoke("run_code", {"script": PPID_SCRIPT})))
    os.kill(server, signal.SIGSTOP)
    try:
        runner.start()
        assert sent.wait(120), "the launch never sent its hello"  # it waits in the stopped server's backlog
        os.kill(server, signal.SIGTERM)  # pending until the server runs again
    finally:
        os.kill(server, signal.SIGCONT)
    runner.join(180)
    assert not runner.is_alive(), "the launch hung on a server that stopped"
    [result] = results
    assert_ok(result)
    assert wait_until(lambda: not alive(server), within=120)
    new = server_pid(runtime_dir / "nexus-pool")
    assert new is not None and new != server and launcher_of(nx).pid == new
    assert len(connections) == 2  # the one closed without a word, and the one the new server answered


def test_a_folder_others_may_enter_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "xdg"
    (folder / "nexus-pool").mkdir(parents=True)
    (folder / "nexus-pool").chmod(0o755)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(folder))
    with pytest.raises(machine.PoolServerError, match="is not a private folder"):
        machine.pool_folder()


def test_the_server_is_a_module_one_starts_by_itself(tmp_path: Path) -> None:
    folder = tmp_path / "pool"
    folder.mkdir(mode=0o700)
    proc = subprocess.Popen([sys.executable, "-I", "-m", "nexus_tool_code_exec.poolserver", "--folder", str(folder),
                             "--idle", "600", "--foreground"], stdin=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        assert wait_until(lambda: server_pid(folder) is not None), "the server never listened"
        assert server_pid(folder) == proc.pid
        launcher = MachineLauncher({"layers": [], "limits": {"memory_mb": 512, "cpu_seconds": 5}, "read_paths": []},
                                   [], folder=str(folder))
        child = launcher.launch()
        try:
            assert child.pid > 0 and alive(child.pid)
        finally:
            child.kill()
            assert child.wait(30) is not None
            child.finished()
            child.close()
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(30)
    assert proc.returncode == -signal.SIGTERM or proc.returncode == 128 + signal.SIGTERM, proc.returncode
    assert not (folder / machine.SOCKET_NAME).exists()


def test_an_exit_reply_is_read_by_one_helper_for_the_machine_pool_and_ray() -> None:
    """`parse_exit` reads the pool server's `exit` reply (MachineChild.wait) and a Ray node's pool
    actor's (nexus_ray's RemoteChild.wait): a field of another type counts as absent."""
    assert machine.parse_exit({"t": "exit", "status": -9, "cpu": 0.25, "maker_gone": True}) == (-9, 0.25, True)
    assert machine.parse_exit({"status": 0, "cpu": 1, "maker_gone": False}) == (0, 1.0, False)
    assert machine.parse_exit({"status": None, "cpu": None}) == (None, None, False)  # still running
    assert machine.parse_exit({"status": "0", "cpu": "1.5", "maker_gone": 0}) == (None, None, False)
