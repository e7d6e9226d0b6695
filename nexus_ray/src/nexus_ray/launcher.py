"""`RemoteLauncher` (runs in the session) and `PoolActor` (a Ray actor per node).

A launch: the session opens a TCP listener of its own for this one child (ephemeral port, on its
node's address) and makes a random token; it asks a node's pool actor to `launch`, which takes a
child from the machine pool server of its node (launchers/machine.py, in a folder of the node's
own) and connects twice to the session, once per direction, each connection opening with the
token and its direction. The session compares the token with `hmac.compare_digest`; a connection
with another token is closed and the listener waits on (until its deadline). The actor splices
the child's pipes onto the two connections; the runner reads and writes the sockets as it would
the pipes, so inner calls are answered by the session's Nexus, never through Ray calls.

Kill, wait and finished go to the actor by Ray calls, each `ray.get` with a timeout. The session
going away (the connection to the child ends) makes the actor kill the child; the actor going
away ends the connection, and `wait` tells the runner the child died with its maker.
"""

from __future__ import annotations

import hmac
import itertools
import logging
import os
import secrets
import select
import socket
import sys
import threading
import time
from collections.abc import Iterable, Sequence
from typing import Any

import attrs
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from nexus_tool_code_exec import protocol, sandbox
from nexus_tool_code_exec.launchers.base import Child, LayersMissing, Launcher
from nexus_tool_code_exec.launchers.machine import MachineChild, MachineLauncher, parse_exit

log = logging.getLogger("nexus_ray")

NAMESPACE = "nexus"
#: how long a session waits for a node's actor and its child's two connections
LAUNCH_TIMEOUT = 60.0
#: every other Ray call's timeout
CALL_TIMEOUT = 30.0
#: how long a connection to a session's listener has to say its hello
HELLO_WAIT = 5.0
TOKEN_BYTES = 32
DIRECTIONS = (b"out", b"in ")  # out: the child's messages to the session; in: the session's to the child
HELLO_SIZE = 2 * TOKEN_BYTES + 1 + 3 + 1  # hex token, space, direction, newline
HEAD_RESOURCE = "node:__internal_head__"


class RemoteLaunchError(Exception):
    """No child from the cluster: no node, a node refused (missing layers), or a timeout."""


class NodeLacksLayers(RemoteLaunchError, LayersMissing):
    """A node refused a launch: it lacks layers the session requires (the engine says
    "sandbox unavailable")."""


def _hello(token: str, direction: bytes) -> bytes:
    return token.encode() + b" " + direction + b"\n"


# -- the pool actor (one per node) ------------------------------------------------------------


@attrs.define(eq=False)
class _Held:
    child: MachineChild
    out_sock: socket.socket
    in_sock: socket.socket
    finished: bool = False


def _node_folder(node_id: str) -> str:
    base = f"/tmp/nexus-ray-{os.getuid()}"
    os.makedirs(base, mode=0o700, exist_ok=True)
    folder = os.path.join(base, node_id[:16])
    os.makedirs(folder, mode=0o700, exist_ok=True)
    os.chmod(base, 0o700)
    os.chmod(folder, 0o700)
    return folder


class PoolActor:
    """The sandbox pool of one node: the machine pool server of the node (its own folder, so that
    nodes sharing a machine, as a simulated cluster's do, keep pools of their own), its layers as
    the node probes them, and the relays of the children it gave out."""

    def __init__(self) -> None:
        self.node_id = ray.get_runtime_context().get_node_id()
        self.folder = _node_folder(self.node_id)
        self._launchers: dict[tuple[str, ...], MachineLauncher] = {}
        self._held: dict[str, _Held] = {}
        self._lock = threading.Lock()
        self._ids = itertools.count(1)

    def doctor(self) -> dict[str, Any]:
        """This node's report: its id, the actor's pid, each layer (active, detail)."""
        statuses = sandbox.layer_statuses()
        return {"node": self.node_id, "pid": os.getpid(), "ip": ray.util.get_node_ip_address(),
                "layers": {name: [status.active, status.detail] for name, status in statuses.items()}}

    def launch(self, host: str, port: int, token: str, require: Sequence[str], preimport: Sequence[str]) -> dict[str, Any]:
        statuses = sandbox.layer_statuses()
        missing = [name for name in require if name not in statuses or not statuses[name].active]
        if missing:
            raise NodeLacksLayers(f"node {self.node_id[:12]} lacks required layers: {', '.join(missing)}")
        layers = sorted(name for name, status in statuses.items() if status.active)
        key = (*layers, "|", *sorted(preimport))
        with self._lock:
            launcher = self._launchers.get(key)
            if launcher is None:
                policy: protocol.ChildPolicy = {"layers": layers, "limits": {"memory_mb": 0, "cpu_seconds": 0},
                                                "read_paths": list(sandbox.runtime_read_paths())}
                launcher = self._launchers[key] = MachineLauncher(policy, preimport, python=sys.executable,
                                                                  folder=self.folder, watch_pid=os.getpid())
        child = launcher.launch()
        assert isinstance(child, MachineChild)
        try:
            socks = []
            for direction in DIRECTIONS:
                sock = socket.create_connection((host, port), timeout=LAUNCH_TIMEOUT)
                sock.sendall(_hello(token, direction))
                sock.settimeout(None)
                socks.append(sock)
        except BaseException:
            for sock in locals().get("socks", []):
                sock.close()
            child.kill()
            child.close()
            raise
        cid = f"{next(self._ids)}"
        held = _Held(child, socks[0], socks[1])
        with self._lock:
            self._held[cid] = held
        threading.Thread(target=self._relay_out, args=(held,), daemon=True).start()
        threading.Thread(target=self._relay_in, args=(cid, held), daemon=True).start()
        return {"id": cid, "pid": child.pid}

    @staticmethod
    def _relay_out(held: _Held) -> None:
        """The child's messages to the session, until the child closes its end."""
        try:
            while data := os.read(held.child.rfd, 1 << 16):
                held.out_sock.sendall(data)
        except OSError:
            pass
        try:
            held.out_sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    def _relay_in(self, cid: str, held: _Held) -> None:
        """The session's messages to the child; the connection ending before the run was
        `finished` (the session went away) kills the child."""
        try:
            while data := held.in_sock.recv(1 << 16):
                protocol.write_all(held.child.wfd, data)
        except OSError:
            pass
        if not held.finished:
            held.child.kill()
            self._drop(cid)

    def kill(self, cid: str) -> None:
        held = self._held.get(cid)
        if held is not None:
            held.child.kill()

    def wait(self, cid: str, timeout: float) -> dict[str, Any]:
        held = self._held.get(cid)
        if held is None:
            return {"status": None, "cpu": None, "maker_gone": False}
        status = held.child.wait(timeout)
        return {"status": status, "cpu": held.child.cpu_seconds, "maker_gone": held.child.died_with_its_maker()}

    def finished(self, cid: str) -> None:
        held = self._held.get(cid)
        if held is not None:
            held.finished = True
            held.child.finished()
            self._drop(cid)

    def children(self) -> list[int]:
        """The pids of the children it holds now (for tests)."""
        with self._lock:
            return [held.child.pid for held in self._held.values()]

    def _drop(self, cid: str) -> None:
        with self._lock:
            held = self._held.pop(cid, None)
        if held is None:
            return
        held.child.close()
        for sock in (held.out_sock, held.in_sock):
            sock.close()


RemotePool = ray.remote(num_cpus=0, max_restarts=0)(PoolActor)


def pool_actor(node_id: str) -> Any:
    """The pool actor of `node_id`, started there if there is none (detached: it serves every
    session of the cluster)."""
    return RemotePool.options(
        max_concurrency=64, name=f"nexus-pool-{node_id}", namespace=NAMESPACE, get_if_exists=True, lifetime="detached",
        scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False)).remote()


def worker_nodes(include_head: bool = False) -> list[str]:
    """The ids of the cluster's live nodes that take scripts: not the head unless asked."""
    return [node["NodeID"] for node in ray.nodes()
            if node.get("Alive") and (include_head or HEAD_RESOURCE not in node.get("Resources", {}))]


# -- the session's side -------------------------------------------------------------------------


@attrs.define(eq=False)
class RemoteChild(Child):
    """A child in a node's pool: its pipes are the two relayed connections; kill, wait and
    finished go to the node's actor. Its pid is a pid of that node, never signalled here."""

    local = False  # no sched_setaffinity, no killpg on its pid
    actor: Any = attrs.field(default=None, repr=False)
    cid: str = ""
    node_id: str = ""
    maker_gone: bool = False

    def kill(self) -> None:
        try:
            self.actor.kill.remote(self.cid)  # not waited for: the relay ending kills it too
        except Exception:  # noqa: BLE001 - a dead actor's child is dead already
            self.maker_gone = True

    def end(self) -> None:
        self.kill()

    def wait(self, timeout: float = 5.0) -> int | None:
        try:
            reply = ray.get(self.actor.wait.remote(self.cid, timeout), timeout=timeout + CALL_TIMEOUT)
        except Exception:  # noqa: BLE001 - the actor died, or Ray did not answer in time
            self.maker_gone = True
            return None
        status, self.cpu_seconds, self.maker_gone = parse_exit(reply)
        return status

    def finished(self) -> None:
        try:
            self.actor.finished.remote(self.cid)
        except Exception:  # noqa: BLE001, S110 - gone with its actor
            pass

    def died_with_its_maker(self) -> bool:
        return self.maker_gone

    def maker_text(self) -> str:
        return f"the pool of Ray node {self.node_id[:12]} (its pool actor ended, or the node went away)"


class RemoteLauncher(Launcher):
    """Children in the pools of a Ray cluster's nodes, taken in turn (not the head's unless
    `include_head`); the session process joins the cluster at `address` if it has not."""

    def __init__(self, address: str = "auto", require: Iterable[str] = (), preimport: Iterable[str] = (),
                 include_head: bool = False, nodes: Sequence[str] | None = None) -> None:
        self.address = address
        self.require = sorted(set(require))
        self.preimport = sorted(set(preimport))
        self.include_head = include_head
        self._nodes = list(nodes) if nodes is not None else None
        self._turn = itertools.count()
        self._actors: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._bind_host = "127.0.0.1"

    def start(self) -> None:
        if not ray.is_initialized():
            ray.init(address=self.address, namespace=NAMESPACE, log_to_driver=False)
        self._bind_host = ray.util.get_node_ip_address()
        if not self.nodes():
            raise RemoteLaunchError("the Ray cluster has no node that takes scripts"
                                    + ("" if self.include_head else " (the head takes none unless asked)"))

    def nodes(self) -> list[str]:
        return list(self._nodes) if self._nodes is not None else worker_nodes(self.include_head)

    def _actor(self, node_id: str, fresh: bool = False) -> Any:
        with self._lock:
            actor = None if fresh else self._actors.get(node_id)
            if actor is None:
                actor = self._actors[node_id] = pool_actor(node_id)
            return actor

    def doctor(self) -> list[dict[str, Any]]:
        """Each node's report (`PoolActor.doctor`)."""
        refs = [self._actor(node).doctor.remote() for node in self.nodes()]
        return list(ray.get(refs, timeout=LAUNCH_TIMEOUT))

    def doctor_lines(self) -> list[str]:
        lines = []
        for report in self.doctor():
            on = sorted(name for name, (active, _detail) in report["layers"].items() if active)
            off = sorted(name for name, (active, _detail) in report["layers"].items() if not active)
            lines.append(f"ray node {report['node'][:12]} ({report['ip']}): layers on: {', '.join(on) or 'none'}"
                         + (f"; off: {', '.join(off)}" if off else ""))
            missing = [name for name in self.require if name in off or name not in report["layers"]]
            if missing:
                lines.append(f"error: ray node {report['node'][:12]} lacks required layers {', '.join(missing)}: it refuses runs")
        return lines

    def launch(self) -> Child:
        nodes = self.nodes()
        if not nodes:
            raise RemoteLaunchError("the Ray cluster has no node that takes scripts")
        node_id = nodes[next(self._turn) % len(nodes)]
        try:
            return self._launch_on(node_id, self._actor(node_id))
        except ray.exceptions.RayActorError:
            return self._launch_on(node_id, self._actor(node_id, fresh=True))  # it died: a new one

    def _launch_on(self, node_id: str, actor: Any) -> RemoteChild:
        token = secrets.token_hex(TOKEN_BYTES)
        listener = socket.create_server((self._bind_host, 0))
        try:
            host, port = listener.getsockname()[:2]
            ref = actor.launch.remote(host, port, token, self.require, self.preimport)
            deadline = time.monotonic() + LAUNCH_TIMEOUT
            socks = self._accept(listener, token, deadline, ref)
            try:
                reply = ray.get(ref, timeout=max(deadline - time.monotonic(), 1.0))
            except ray.exceptions.RayTaskError as exc:
                for sock in socks.values():
                    sock.close()
                cause = exc.cause if isinstance(getattr(exc, "cause", None), Exception) else exc
                kind = NodeLacksLayers if isinstance(cause, NodeLacksLayers) else RemoteLaunchError
                raise kind(str(cause).splitlines()[0] if str(cause) else repr(cause)) from None
            except BaseException:
                for sock in socks.values():
                    sock.close()
                raise
        finally:
            listener.close()
        if len(socks) != 2:
            for sock in socks.values():
                sock.close()
            raise RemoteLaunchError(f"node {node_id[:12]} did not connect its child in {LAUNCH_TIMEOUT:.0f}s")
        rfd = socks[DIRECTIONS[0]].detach()
        wfd = socks[DIRECTIONS[1]].detach()
        return RemoteChild(int(reply["pid"]), rfd, wfd, actor=actor, cid=str(reply["id"]), node_id=node_id)

    @staticmethod
    def _accept(listener: socket.socket, token: str, deadline: float, ref: Any) -> dict[bytes, socket.socket]:
        """The two connections that open with `token`, one per direction; any other is closed.
        Hellos are read side by side (a connection that sends nothing holds up no other; each has
        HELLO_WAIT seconds to say its hello). Stops early when the launch failed (its result is
        ready and no connection came)."""
        want = token.encode()
        socks: dict[bytes, socket.socket] = {}
        pending: dict[socket.socket, tuple[bytes, float]] = {}  # connection -> (its bytes so far, its deadline)
        try:
            while len(socks) < 2 and time.monotonic() < deadline:
                now = time.monotonic()
                for conn, (_, until) in list(pending.items()):
                    if until <= now:
                        log.warning("nexus.ray: closed a connection that gave no hello")
                        del pending[conn]
                        conn.close()
                ready, _, _ = select.select([listener, *pending], [], [], 0.2)
                if not ready:
                    done, _ = ray.wait([ref], timeout=0)
                    if done and not socks and not pending:
                        break  # it failed (or answered without connecting): ray.get says why
                    continue
                for sock in ready:
                    if sock is listener:
                        conn, _ = listener.accept()
                        conn.setblocking(False)
                        pending[conn] = (b"", min(deadline, time.monotonic() + HELLO_WAIT))
                        continue
                    data, until = pending.pop(sock)
                    try:
                        chunk = sock.recv(HELLO_SIZE - len(data))
                    except (BlockingIOError, InterruptedError):
                        pending[sock] = (data, until)
                        continue
                    except OSError:
                        chunk = b""
                    data += chunk
                    if chunk and len(data) < HELLO_SIZE:
                        pending[sock] = (data, until)
                        continue
                    given, _, rest = data.partition(b" ")
                    direction = rest[:3]
                    if (len(data) != HELLO_SIZE or not hmac.compare_digest(given, want)
                            or direction not in DIRECTIONS or direction in socks or rest[3:] != b"\n"):
                        log.warning("nexus.ray: refused a connection with a wrong token")
                        sock.close()
                        continue
                    sock.setblocking(True)
                    socks[direction] = sock
        finally:
            for conn in pending:
                conn.close()
        return socks

    def close(self) -> None:
        """Nothing kept: the pool actors serve the cluster."""
