"""Issue 27: run_code's scripts in the pools of a real Ray cluster (`ray.cluster_utils.Cluster`: a
head and 2 worker nodes, one module-scoped fixture), launcher: ray. Inner calls are answered by
the session's own Nexus through the relay (its gate runs in this process, a veto too); no script
runs on the head; a wrong token, or a token replayed to another child's listener, is refused; a
killed pool actor ends its run with a clear error; a session gone makes the pool end its child.
"""

from __future__ import annotations

import glob
import os
import secrets
import socket
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402

from nexus_core import Nexus, ToolCall, ToolDef, Veto, hookimpl  # noqa: E402
from nexus_core.testing import NexusFactory  # noqa: E402
from nexus_ray import launcher as remote  # noqa: E402
from nexus_tool_code_exec import engine_for  # noqa: E402

pytestmark = [pytest.mark.ray,
              pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox is Linux-only")]

CE = "nexus.tool.code_exec"


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    workers = [c.add_node(num_cpus=1) for _ in range(2)]
    c.wait_for_nodes(timeout=120)
    ray.init(address=c.address, namespace=remote.NAMESPACE, log_to_driver=False)
    try:
        yield c
    finally:
        for node in remote.worker_nodes(include_head=True):
            try:
                ray.kill(ray.get_actor(f"nexus-pool-{node}", namespace=remote.NAMESPACE))
            except ValueError:
                pass
        ray.shutdown()
        del workers
        c.shutdown()


class Where:
    """A gate that records the process it ran in, and vetoes `forbidden`."""

    def __init__(self) -> None:
        self.pids: list[int] = []
        self.lock = threading.Lock()

    @hookimpl
    def nexus_before_tool_invoke(self, call: ToolCall, tool: ToolDef) -> Veto | None:
        with self.lock:
            self.pids.append(os.getpid())
        if call.name == "forbidden":
            return Veto("not here")
        return None


def make(nexus_factory: NexusFactory, *plugins: Any, **settings: Any) -> Nexus:
    echo = ToolDef(name="echo", handler=lambda a: a["text"],
                   input_schema={"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]})
    forbidden = ToolDef(name="forbidden", handler=lambda a: "ran", input_schema={"type": "object", "properties": {}})
    return nexus_factory(plugins=[CE, *plugins], tools=[echo, forbidden], config={"plugins": {CE: {
        "launcher": "ray", "timeout_seconds": 60, "allowed_packages": ["os", "time"], **settings}}})


def test_an_inner_call_is_answered_by_the_sessions_gate_across_nodes(cluster: Cluster,
                                                                     nexus_factory: NexusFactory) -> None:
    where = Where()
    nx = make(nexus_factory, where)
    launcher = engine_for(nx).launcher()
    assert isinstance(launcher, remote.RemoteLauncher), engine_for(nx).launcher_note
    head = [n["NodeID"] for n in ray.nodes() if remote.HEAD_RESOURCE in n["Resources"]]
    assert len(launcher.nodes()) == 2 and not set(launcher.nodes()) & set(head)  # no script on the head
    script = "import tools, os\n\ndef run(ctx):\n    return [tools.echo(text='hi'), os.getpid()]\n"
    results = [nx.invoke("run_code", {"script": script}) for _ in range(2)]
    for result in results:
        assert result.error is None, result.output
        assert result.output_structured["result"][0] in ("hi", {"output": "hi"})
    assert where.pids.count(os.getpid()) == len(where.pids) >= 4  # run_code and echo, twice: here
    vetoed = nx.invoke("run_code", {"script": "import tools\n\ndef run(ctx):\n    return tools.forbidden()\n"})
    assert vetoed.error is not None and "not here" in (vetoed.error + vetoed.output)


def test_each_node_reports_its_layers_and_a_missing_required_layer_refuses(cluster: Cluster,
                                                                           nexus_factory: NexusFactory) -> None:
    nx = make(nexus_factory)
    launcher = engine_for(nx).launcher()
    assert isinstance(launcher, remote.RemoteLauncher)
    reports = launcher.doctor()
    assert len(reports) == 2 and all(r["layers"] for r in reports)
    lines = engine_for(nx).doctor_lines()
    assert sum(line.startswith("ray node ") for line in lines) == 2, lines
    demanding = remote.RemoteLauncher(require=["no-such-layer"], preimport=["os"])
    demanding.start()
    with pytest.raises(remote.RemoteLaunchError, match="lacks required layers: no-such-layer"):
        demanding.launch()


def test_require_is_checked_on_the_nodes_that_run_scripts_not_on_the_sessions_machine(
        cluster: Cluster, nexus_factory: NexusFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """A session on a machine that lacks a layer its `require` names (here `fs`, off in this
    process only, as NEXUS_SANDBOX_DISABLE does) runs no script there with launcher: ray: it is
    not refused, its scripts run on the worker nodes, which have the layer. A node that lacks a
    required layer refuses the run as "sandbox unavailable", as the local check would have."""
    from nexus_tool_code_exec import sandbox

    monkeypatch.setenv(sandbox.ENV_DISABLE_LAYERS, "fs")
    assert not sandbox.layer_statuses()["fs"].active  # this machine, as the session sees it
    where = Where()
    nx = make(nexus_factory, where, require=["fs"])
    engine = engine_for(nx)
    assert engine.missing_required() == []
    script = "import tools\n\ndef run(ctx):\n    return tools.echo(text='on a node with fs')\n"
    result = nx.invoke("run_code", {"script": script})
    assert result.error is None, (result.error, result.output)
    assert where.pids == [os.getpid()] * 2
    lines = engine.doctor_lines()
    assert not [line for line in lines if line.startswith("error:")], lines
    assert sum(line.startswith("ray node ") and "fs" in line.split("layers on:")[1].split(";")[0]
               for line in lines) == 2, lines  # both worker nodes have it on
    # the nodes' own check (it is theirs alone now): a layer no node has, asked of the engine's launcher
    launcher = engine.launcher()
    assert isinstance(launcher, remote.RemoteLauncher) and launcher.require == ["fs"]
    launcher.require = ["fs", "no-such-layer"]  # a layer a settings check would refuse to name
    refused = nx.invoke("run_code", {"script": script})
    assert refused.error is not None and refused.error.startswith("sandbox unavailable: node "), refused.error
    assert "lacks required layers: no-such-layer" in refused.error, refused.error
    assert where.pids == [os.getpid()] * 3  # run_code's gate only: no script ran


def test_a_wrong_token_and_a_replayed_one_are_refused(cluster: Cluster) -> None:
    launcher = remote.RemoteLauncher(preimport=["os"])
    launcher.start()
    # a listener expecting token A: connections with another token, or a token of another child, are closed
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    good, other = "1" * 64, "2" * 64
    done = ray.put(None)
    for token in (other, "x"):  # `other`: as another child's token replayed here
        with socket.create_connection(("127.0.0.1", port), timeout=30) as bad:
            bad.sendall(remote._hello(token, b"out") if len(token) == 64 else b"x\n")
            bad.shutdown(socket.SHUT_WR)
            socks = remote.RemoteLauncher._accept(listener, good, time.monotonic() + 3, done)
            assert socks == {}
            assert bad.recv(1) == b""  # closed by the session
    listener.close()
    # two real children each get their own listener and token (a token is good for one child only)
    first, second = launcher.launch(), launcher.launch()
    try:
        assert isinstance(first, remote.RemoteChild) and isinstance(second, remote.RemoteChild)
        assert first.cid != second.cid or first.node_id != second.node_id
    finally:
        for child in (first, second):
            child.kill()
            child.finished()
            child.close()


def test_a_killed_pool_ends_its_run_with_a_clear_error(cluster: Cluster, nexus_factory: NexusFactory) -> None:
    started = threading.Event()

    def hold(args: dict[str, Any]) -> str:
        started.set()
        time.sleep(3)
        return "held"

    nx = make(nexus_factory)
    nx.add_tool(ToolDef(name="hold", handler=hold, input_schema={"type": "object", "properties": {}}))
    launcher = engine_for(nx).launcher()
    assert isinstance(launcher, remote.RemoteLauncher)
    box: list[Any] = []
    runner = threading.Thread(target=lambda: box.append(nx.invoke("run_code", {
        "script": "import tools, time\n\ndef run(ctx):\n    tools.hold()\n    time.sleep(30)\n    return 'survived'\n"})))
    runner.start()
    assert started.wait(120)
    for node in launcher.nodes():
        try:
            ray.kill(ray.get_actor(f"nexus-pool-{node}", namespace=remote.NAMESPACE))
        except ValueError:  # no actor there yet
            pass
    runner.join(120)
    assert not runner.is_alive()
    result = box[0]
    assert result.error is not None and "survived" not in result.output
    # it had made a call: not run again, and the error names the node whose pool it died with
    assert "died with the pool of Ray node " in result.error, result.error
    assert any(f"Ray node {node[:12]} " in result.error for node in launcher.nodes()), result.error
    # the next run gets a new pool actor
    again = nx.invoke("run_code", {"script": "def run(ctx):\n    return 2\n"})
    assert again.error is None, again.output


def _waiting_script(token: str, text: str) -> str:
    """A script that writes `started` (`token` and its pid) in its scratch folder, waits there
    (up to 150 s) for a file `go`, then returns [tools.echo(text=text), its pid]."""
    return ("import os, time, tools\n\ndef run(ctx):\n"
            f"    open('started', 'w').write('{token} ' + str(os.getpid()))\n"
            "    deadline = time.monotonic() + 150\n"
            "    while not os.path.exists('go') and time.monotonic() < deadline:\n"
            "        time.sleep(0.05)\n"
            f"    return [tools.echo(text={text!r}), os.getpid()]\n")


def _started(token: str, seen: set[str], timeout: float = 120.0) -> tuple[str, int]:
    """The scratch folder and pid of the next attempt of a script that wrote `started` (its token
    and pid) there; `seen`: the folders found before."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for path in glob.glob("/tmp/nexus-run-*/run-*/started"):
            folder = os.path.dirname(path)
            try:
                with open(path) as f:
                    text = f.read().split()
            except OSError:
                continue
            if folder not in seen and len(text) == 2 and text[0] == token:
                seen.add(folder)
                return folder, int(text[1])
        time.sleep(0.05)
    raise AssertionError("no attempt of the script started")


def _pool_actors() -> dict[str, Any]:
    """The pool actors alive now, by node (an earlier test may have killed some)."""
    actors = {}
    for node in remote.worker_nodes(include_head=True):
        try:
            actors[node] = ray.get_actor(f"nexus-pool-{node}", namespace=remote.NAMESPACE)
        except ValueError:
            continue
    return actors


def _kill_holder(pid: int) -> str:
    """Kill the pool actor that holds the child `pid`; its node."""
    for node, actor in _pool_actors().items():
        if pid in ray.get(actor.children.remote(), timeout=30):
            ray.kill(actor)
            return node
    raise AssertionError(f"no pool actor holds {pid}")


@pytest.mark.parametrize("kills", [1, 2])
def test_a_run_whose_pool_died_before_any_call_runs_again_once_on_a_new_pool(cluster: Cluster,
                                                                            nexus_factory: NexusFactory,
                                                                            kills: int) -> None:
    where = Where()
    nx = make(nexus_factory, where)
    token = secrets.token_hex(8)
    script = _waiting_script(token, "after")
    box: list[Any] = []
    runner = threading.Thread(target=lambda: box.append(nx.invoke("run_code", {"script": script})))
    runner.start()
    seen: set[str] = set()
    _folder, first_pid = _started(token, seen)
    _kill_holder(first_pid)  # the script waits for 'go': it has made no call
    folder, second_pid = _started(token, seen)  # run again, from the start, by a new pool's child
    if kills == 2:
        node = _kill_holder(second_pid)  # lost again: not tried a third time
    else:
        open(os.path.join(folder, "go"), "w").close()
    runner.join(150)
    assert not runner.is_alive()
    result = box[0]
    if kills == 2:
        assert result.error is not None and f"died with the pool of Ray node {node[:12]} " in result.error, result.error
        assert where.pids == [os.getpid()]  # run_code's gate only: no inner call
        return
    assert result.error is None, (result.error, result.output)
    echoed, pid = result.output_structured["result"]
    assert echoed in ("after", {"output": "after"}) and pid == second_pid != first_pid
    assert where.pids.count(os.getpid()) == len(where.pids) == 2  # run_code and the one echo: here, once


def test_a_session_gone_makes_the_pool_end_its_child(cluster: Cluster) -> None:
    launcher = remote.RemoteLauncher(preimport=["os"])
    launcher.start()
    child = launcher.launch()
    assert isinstance(child, remote.RemoteChild)
    assert child.pid in ray.get(child.actor.children.remote(), timeout=30)
    os.close(child.rfd); os.close(child.wfd)  # the session's ends go, as when its process dies
    deadline = time.monotonic() + 60
    while child.pid in ray.get(child.actor.children.remote(), timeout=30):
        assert time.monotonic() < deadline, "the pool kept the child of a session gone"
        time.sleep(0.1)


def test_a_script_past_its_timeout_is_killed_through_the_pool(cluster: Cluster, nexus_factory: NexusFactory) -> None:
    nx = make(nexus_factory, timeout_seconds=2)
    result = nx.invoke("run_code", {"script": "def run(ctx):\n    while True:\n        pass\n"})
    assert result.error is not None and "timed out" in result.error, result.output
    launcher = engine_for(nx).launcher()
    assert isinstance(launcher, remote.RemoteLauncher)
    deadline = time.monotonic() + 60
    actors = list(_pool_actors().values())
    while any(ray.get(actor.children.remote(), timeout=30) for actor in actors):
        assert time.monotonic() < deadline, "the pool still holds the timed-out child"
        time.sleep(0.1)


# -- attacks (each must fail) ---------------------------------------------------------------------


class Recorder:
    """Records each launch's listener address and token as the session makes them (the real
    functions run; the test only keeps what they return)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.tokens: list[str] = []
        self.listeners: list[tuple[str, int]] = []
        real_token, real_server = remote.secrets.token_hex, remote.socket.create_server

        def token_hex(n: int) -> str:
            token = real_token(n)
            self.tokens.append(token)
            return token

        def create_server(address: Any, *args: Any, **kwargs: Any) -> socket.socket:
            server = real_server(address, *args, **kwargs)
            self.listeners.append(server.getsockname()[:2])
            return server

        monkeypatch.setattr(remote.secrets, "token_hex", token_hex)
        monkeypatch.setattr(remote.socket, "create_server", create_server)


def _end(child: Any) -> None:
    child.kill()
    child.finished()
    child.close()


def test_attack_a_real_childs_token_replayed_to_another_childs_listener_is_refused(
        cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    recorder = Recorder(monkeypatch)
    launcher = remote.RemoteLauncher(preimport=["os"])
    launcher.start()
    first = launcher.launch()  # a real child: its token is the one captured
    captured = recorder.tokens[-1]
    try:
        node = launcher.nodes()[0]
        actor = launcher._actor(node)
        listener = socket.create_server((launcher._bind_host, 0))
        host, port = listener.getsockname()[:2]
        # the replays connect first, both directions, then the actor is asked for the real child
        replays = [socket.create_connection((host, port), timeout=60) for _ in remote.DIRECTIONS]
        for sock, direction in zip(replays, remote.DIRECTIONS):
            sock.sendall(remote._hello(captured, direction))
        token = secrets.token_hex(remote.TOKEN_BYTES)
        ref = actor.launch.remote(host, port, token, [], ["os"])
        socks = remote.RemoteLauncher._accept(listener, token, time.monotonic() + remote.LAUNCH_TIMEOUT, ref)
        listener.close()
        assert set(socks) == set(remote.DIRECTIONS)  # the actor's two, not the replays
        for sock in replays:
            assert sock.recv(1) == b""  # closed by the session, nothing said
            sock.close()
        reply = ray.get(ref, timeout=60)
        second = remote.RemoteChild(int(reply["pid"]), socks[b"out"].detach(), socks[b"in "].detach(), actor=actor,
                                    cid=str(reply["id"]), node_id=node)
        _end(second)
    finally:
        _end(first)


def test_attack_a_script_that_knows_its_own_token_and_port_gets_nothing_but_its_own_calls(
        cluster: Cluster, nexus_factory: NexusFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    recorder = Recorder(monkeypatch)
    where = Where()
    nx = make(nexus_factory, where, allowed_packages=["os", "time", "socket", "json"])
    # the strongest script: told its own launch's listener and token (it could read no more from
    # its environment or /proc: it is checked that the token is not there either)
    nx.add_tool(ToolDef(name="leak", handler=lambda a: {"host": recorder.listeners[-1][0], "port": recorder.listeners[-1][1],
                                                       "token": recorder.tokens[-1]},
                        input_schema={"type": "object", "properties": {}}))
    script = '''import os, json, tools

def run(ctx):
    leaked = tools.leak()
    secret = leaked if isinstance(leaked, dict) else json.loads(leaked.output)
    found = []
    for path in ("/proc/self/environ", "/proc/self/cmdline", "/proc/%d/environ" % os.getppid(),
                 "/proc/%d/cmdline" % os.getppid()):
        try:
            with open(path, "rb") as f:
                found.append(secret["token"].encode() in f.read())
        except Exception:
            found.append(False)
    tried = []
    for direction in ("out", "in "):
        try:
            import socket
            s = socket.create_connection((secret["host"], secret["port"]), timeout=5)
            s.sendall((secret["token"] + " " + direction + "\\n").encode())
            s.sendall(b'{"t": "call", "id": 99, "name": "forbidden", "args": {}}\\n')
            tried.append("connected: " + repr(s.recv(100)))
        except Exception as exc:
            tried.append(repr(exc))
    return {"found": found, "tried": tried, "token": secret["token"]}
'''
    result = nx.invoke("run_code", {"script": script})
    assert result.error is None, (result.error, result.output)
    out = result.output_structured["result"]
    assert out["token"] == recorder.tokens[-1] and len(out["found"]) == 4, out
    assert not any(out["found"]), out  # the token is in neither its environment nor its parent's
    for attempt in out["tried"]:  # the listener is closed once its two connections came (or no socket at all)
        assert not attempt.startswith("connected") or attempt == "connected: b''", out
    assert where.pids == [os.getpid()] * 2  # run_code and its own leak: the forbidden call reached no gate


def test_attack_garbage_and_silent_connections_are_closed_and_hold_up_no_launch(cluster: Cluster) -> None:
    launcher = remote.RemoteLauncher(preimport=["os"])
    launcher.start()
    node = launcher.nodes()[0]
    actor = launcher._actor(node)
    listener = socket.create_server((launcher._bind_host, 0))
    host, port = listener.getsockname()[:2]
    silent = [socket.create_connection((host, port), timeout=60) for _ in range(20)]
    garbage = [socket.create_connection((host, port), timeout=60) for _ in range(5)]
    for i, sock in enumerate(garbage):
        sock.sendall(os.urandom(200) if i % 2 else b"\x00" * remote.HELLO_SIZE)
    token = secrets.token_hex(remote.TOKEN_BYTES)
    ref = actor.launch.remote(host, port, token, [], ["os"])
    # 20 silent connections at HELLO_WAIT each, one after another, would take 100 s: past the
    # launch's deadline. Read side by side, they hold up nothing
    socks = remote.RemoteLauncher._accept(listener, token, time.monotonic() + remote.LAUNCH_TIMEOUT, ref)
    listener.close()
    assert set(socks) == set(remote.DIRECTIONS)
    for sock in garbage + silent:  # every one closed by the session (the silent within HELLO_WAIT)
        try:
            assert sock.recv(1) == b""
        except ConnectionResetError:
            pass
        sock.close()
    reply = ray.get(ref, timeout=60)
    _end(remote.RemoteChild(int(reply["pid"]), socks[b"out"].detach(), socks[b"in "].detach(), actor=actor,
                            cid=str(reply["id"]), node_id=node))


# -- the session actor ----------------------------------------------------------------------------


class GateLog:
    """A gate that writes each call's name and the pid it ran in to a file (it runs in the session
    actor's process: the test reads the file), and vetoes `forbidden`."""

    def __init__(self, path: str) -> None:
        self.path = path

    @hookimpl
    def nexus_before_tool_invoke(self, call: ToolCall, tool: ToolDef) -> Veto | None:
        with open(self.path, "a") as f:
            f.write(f"{call.name} {os.getpid()}\n")
        return Veto("not here") if call.name == "forbidden" else None


def test_a_session_actor_on_the_head_answers_its_workers_scripts_with_its_own_gate(cluster: Cluster,
                                                                                    tmp_path: Any) -> None:
    from nexus_ray import SessionActor

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the gate and tools go to the actor
    gate_log = tmp_path / "gate.log"
    echo = ToolDef(name="echo", handler=lambda a: a["text"],
                   input_schema={"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]})
    forbidden = ToolDef(name="forbidden", handler=lambda a: "ran", input_schema={"type": "object", "properties": {}})
    config = {"skills": [], "plugins": {"active": [CE], CE: {
        "launcher": "ray", "timeout_seconds": 120, "allowed_packages": ["os", "time"]}}}
    actor = SessionActor.options(resources={remote.HEAD_RESOURCE: 0.001}).remote(
        config, plugins=[GateLog(str(gate_log))], tools=[echo, forbidden], workspace=str(tmp_path / "ws"))
    try:
        actor_pid = ray.get(actor.pid.remote(), timeout=120)
        head = [n["NodeID"] for n in ray.nodes() if remote.HEAD_RESOURCE in n["Resources"]]
        assert ray.get(actor.node.remote(), timeout=30) in head and actor_pid != os.getpid()
        token = secrets.token_hex(8)
        script = _waiting_script(token, "from a worker")
        ref = actor.run_code.remote(script)
        folder, pid = _started(token, set())
        holders = []  # the pool actor holding the script's process: a worker node's
        for node, pool in _pool_actors().items():
            if pid in ray.get(pool.children.remote(), timeout=30):
                holders.append(node)
        assert len(holders) == 1 and holders[0] not in head, holders
        open(os.path.join(folder, "go"), "w").close()
        result = ray.get(ref, timeout=180)
        assert result.error is None, (result.error, result.output)
        assert result.output_structured["result"][0] in ("from a worker", {"output": "from a worker"})
        assert result.output_structured["result"][1] == pid
        vetoed = ray.get(actor.run_code.remote("import tools\n\ndef run(ctx):\n    return tools.forbidden()\n"),
                         timeout=180)
        assert vetoed.error is not None and "not here" in (vetoed.error + vetoed.output)
        direct = ray.get(actor.invoke.remote("echo", {"text": "direct"}), timeout=60)
        assert direct.error is None and "direct" in direct.output
        lines = [line.split() for line in gate_log.read_text().splitlines()]
        assert [name for name, _ in lines] == ["run_code", "echo", "run_code", "forbidden", "echo"]
        assert {int(p) for _, p in lines} == {actor_pid}  # every gate ran in the session actor's process
    finally:
        try:
            ray.get(actor.close.remote(), timeout=60)
        finally:
            ray.kill(actor)


def test_a_session_actor_runs_an_agent_whose_run_code_script_runs_on_a_worker(
        cluster: Cluster, tmp_path: Any, fake_providers: Any) -> None:
    """`SessionActor.agent(prompt)`: the real `openai` SDK in the session actor (on the head) talks
    to the loopback fake provider (tests/fakes/providers.py, Chat Completions on 127.0.0.1, in
    this process), which answers first with a `run_code` tool call, then with a final text. The
    script runs in a worker node's pool, its inner call passes the actor's gate, and the
    `AgentResult` comes back to the caller through Ray."""
    from fakes.providers import Call, chat_completion
    from nexus_agent import AgentResult

    from nexus_ray import SessionActor

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the gate goes to the actor
    gate_log = tmp_path / "gate.log"
    token = secrets.token_hex(8)
    script = _waiting_script(token, "from a worker")
    fake_providers.script("openai.chat", chat_completion(calls=[Call("run_code", {"script": script})]),
                          chat_completion(text="The worker said hello."))
    echo = ToolDef(name="echo", handler=lambda a: a["text"],
                   input_schema={"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]})
    config = {"skills": [], "model": "openai:gpt-4.1", "session_dir": str(tmp_path / "sessions"), "plugins": {
        "active": [CE, "nexus.agent", "nexus.provider.openai"],
        "nexus.provider.openai": {"base_url": fake_providers.openai_base_url, "api_key_env": None,
                                  "max_retries": 0, "timeout_seconds": 120},
        CE: {"launcher": "ray", "timeout_seconds": 120, "allowed_packages": ["os", "time"]}}}
    actor = SessionActor.options(resources={remote.HEAD_RESOURCE: 0.001}).remote(
        config, plugins=[GateLog(str(gate_log))], tools=[echo], workspace=str(tmp_path / "ws"))
    try:
        actor_pid = ray.get(actor.pid.remote(), timeout=120)
        head = [n["NodeID"] for n in ray.nodes() if remote.HEAD_RESOURCE in n["Resources"]]
        assert ray.get(actor.node.remote(), timeout=30) in head
        ref = actor.agent.remote("Say hello from a worker node.")
        folder, pid = _started(token, set())
        holders = [node for node, pool in _pool_actors().items()
                   if pid in ray.get(pool.children.remote(), timeout=30)]
        assert len(holders) == 1 and holders[0] not in head, holders  # the script: on a worker node
        open(os.path.join(folder, "go"), "w").close()
        result = ray.get(ref, timeout=240)
        assert isinstance(result, AgentResult), result
        assert (result.text, result.stop_reason, result.turns) == ("The worker said hello.", "final_answer", 2), result
        assert result.error is None and result.transcript is not None
        lines = [line.split() for line in gate_log.read_text().splitlines()]
        assert [name for name, _ in lines] == ["run_code", "echo"]
        assert {int(p) for _, p in lines} == {actor_pid} != {os.getpid()}  # the gate ran in the actor's process
        first, second = fake_providers.requests_for("openai.chat")
        assert "run_code" in [tool["function"]["name"] for tool in first.body["tools"]]
        [sent] = [m["content"] for m in second.body["messages"] if m["role"] == "tool"]
        assert "from a worker" in sent and str(pid) in sent, sent  # the script's result went to the model
    finally:
        try:
            ray.get(actor.close.remote(), timeout=60)
        finally:
            ray.kill(actor)


def test_the_cli_works_unchanged_with_launcher_ray(cluster: Cluster, tmp_path: Any) -> None:
    """Configured, not coded: `launcher: ray` with the cluster's `address` in the config, and the
    CLI as a user runs it: `nexus doctor` reports each worker node's layers, `nexus call run_code`
    runs a script whose inner call is answered by the CLI's own Nexus."""
    import json
    import subprocess

    (tmp_path / "notes.txt").write_text("from the workspace\n")
    config = tmp_path / "nexus.yaml"
    config.write_text(json.dumps({"workspace": str(tmp_path), "plugins": {CE: {
        "launcher": "ray", "address": cluster.address, "timeout_seconds": 60}}}))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NEXUS_", "RAY_ADDRESS"))}

    def nexus(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "nexus_core.cli", *args, "--config", str(config),
                               "--trust-config"], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=300, check=False)

    doctor = nexus("doctor")
    assert sum(line.lstrip().startswith("ray node ") for line in doctor.stdout.splitlines()) == 2, \
        doctor.stdout + doctor.stderr
    script = "import tools\n\ndef run(ctx):\n    return tools.read(path='notes.txt').content\n"
    call = nexus("call", "run_code", json.dumps({"script": script}), "--json")
    assert call.returncode == 0, call.stdout + call.stderr
    assert "from the workspace" in json.loads(call.stdout)["output"], call.stdout
