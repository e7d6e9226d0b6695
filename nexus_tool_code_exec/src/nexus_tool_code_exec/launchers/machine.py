"""The machine's sandbox pool (`pool: machine`): one pool server per machine and user, which every
process of that user connects to for its children (runs in the host, and as the server).

The server (`python -m nexus_tool_code_exec.poolserver`, started by the first process that needs
it, or by hand: a Ray node runs the same) keeps a `ZygotePool` (launchers/pool.py), so its zygotes
are of no session either. It listens on an AF_UNIX socket in a private folder of the user's
(`pool_folder`: `$XDG_RUNTIME_DIR/nexus-pool`, else `/tmp/nexus-pool-<uid>`; 0700, the user's, or
refused), and serves only peers of its own uid (SO_PEERCRED; any other is told so and
disconnected). It stops once no process has been connected for `idle` seconds.

One connection is one child. The client sends `launch` (the sandbox's layers, read paths and the
packages to import ahead, which pick the zygote); the server answers `child` with the child's two
pipe ends passed along (SCM_RIGHTS, as the zygote passes them to it), and the host then speaks
the run protocol with the child directly, as with any launcher's. Over the same connection the
host asks the server to `kill` the child and to `wait` for its `exit`, and says when it is
`finished`; a connection that closes before that has its child killed. A server that dies takes
its zygotes, and their children, with it: the run that had one is told its process died with its
maker, and the next launch starts a new server.

Two processes that start a server at once end with one: the start is under an exclusive lock of
`pool.lock` in the folder, and whoever holds it connects again before it starts one.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import logging
import os
import select
import signal
import socket
import stat
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from .. import protocol
from .base import CHILD_ENV, Child, Launcher
from .pool import PooledLauncher, ZygotePool
from .zygote import ZygoteChild, ZygoteError

log = logging.getLogger("nexus_tool_code_exec")

SOCKET_NAME = "pool.sock"
LOCK_NAME = "pool.lock"
#: how long a client waits for the server to start, and for a child
START_WAIT = 60.0
#: a client's request the server waits for this long at most before it answers `wait`
MAX_WAIT = 600.0
DEFAULT_IDLE_SECONDS = 300.0


class PoolServerError(Exception):
    """The machine's pool could not be reached or started, or refused us."""


def pool_folder() -> str:
    """The user's private folder for the pool's socket and lock, made 0700 if missing; refused
    (PoolServerError) if it is not the user's own or others may enter it."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    base = os.path.join(runtime, "nexus-pool") if runtime and os.path.isdir(runtime) else f"/tmp/nexus-pool-{os.getuid()}"
    try:
        os.mkdir(base, 0o700)
    except FileExistsError:
        pass
    st = os.lstat(base)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or stat.S_IMODE(st.st_mode) & 0o077:
        raise PoolServerError(f"{base} is not a private folder of this user (0700, owned by uid {os.getuid()})")
    return base


def _peer_uid(conn: socket.socket) -> int:
    _pid, uid, _gid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
    return int(uid)


class _Lines:
    """One connection's messages, read with the fds passed along, up to a deadline."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.passed: list[list[int]] = []
        self._receive = protocol.fd_receiver(sock, self.passed)
        self._lines = protocol.LineReader(1 << 20)

    def next(self, timeout: float | None) -> dict[str, Any] | None:
        """The next message, or None at EOF or past `timeout` seconds (None: no limit)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            msg = self._lines.next()
            if msg is not None:
                return msg if isinstance(msg, dict) else None
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return None
            ready, _, _ = select.select([self.sock], [], [], left)
            if not ready:
                return None
            try:
                data = self._receive()
            except OSError:
                return None
            if not data:
                return None
            self._lines.feed(data)


# -- the server ---------------------------------------------------------------------------------


class PoolServer:
    """The machine's pool: the socket, the zygotes (a `ZygotePool`), and a thread per connection."""

    def __init__(self, folder: str, idle: float = DEFAULT_IDLE_SECONDS, watch_pid: int | None = None) -> None:
        self.folder = folder
        self.idle = idle
        # the process whose end stops this server too (a Ray node's pool actor): a pidfd, which
        # select sees readable once that process has exited (no pid reuse to fear)
        self.watch = os.pidfd_open(watch_pid) if watch_pid is not None else None
        self.path = os.path.join(folder, SOCKET_NAME)
        self.pool = ZygotePool()
        self._launchers: dict[str, PooledLauncher] = {}
        self._lock = threading.Lock()
        self._connected = 0
        self._last = time.monotonic()
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)
        try:
            self.sock.bind(self.path)
        finally:
            os.umask(old)
        self.sock.listen(128)

    def serve(self) -> None:
        """Accept until no one has been connected for `idle` seconds; then stop every zygote."""
        try:
            while True:
                watched = [self.watch] if self.watch is not None else []
                ready, _, _ = select.select([self.sock.fileno(), *watched], [], [], min(1.0, self.idle))
                if self.watch is not None and self.watch in ready:
                    break  # the watched process ended: so does its pool
                if ready:
                    conn, _ = self.sock.accept()
                    with self._lock:
                        self._connected += 1
                    threading.Thread(target=self._serve_one, args=(conn,), daemon=True).start()
                    continue
                with self._lock:
                    if self._connected == 0 and time.monotonic() - self._last >= self.idle:
                        break
        finally:
            try:
                os.unlink(self.path)
            except OSError:
                pass
            self.sock.close()
            if self.watch is not None:
                os.close(self.watch)
            self.pool.close()

    def _serve_one(self, conn: socket.socket) -> None:
        try:
            self._converse(conn)
        except Exception:
            log.exception("nexus pool server: a connection failed")
        finally:
            conn.close()
            with self._lock:
                self._connected -= 1
                self._last = time.monotonic()

    def _converse(self, conn: socket.socket) -> None:
        if _peer_uid(conn) != os.getuid():
            protocol.send_with_fds(conn, {"t": "refused", "message": f"this pool serves uid {os.getuid()} only"})
            return
        lines = _Lines(conn)
        hello = lines.next(START_WAIT)
        if hello is None:
            return
        if hello.get("t") == "info":
            protocol.send_with_fds(conn, {"t": "info", "pid": os.getpid(), "zygotes": self.pool.pids()})
            return
        if hello.get("t") != "launch":
            protocol.send_with_fds(conn, {"t": "error", "message": "expected launch or info"})
            return
        try:
            child = self._launcher(hello).launch()
        except (ZygoteError, OSError, KeyError, TypeError, ValueError) as exc:
            protocol.send_with_fds(conn, {"t": "error", "message": f"no child: {exc}"})
            return
        except Exception as exc:  # said, not a connection closed without a word ("no answer")
            protocol.send_with_fds(conn, {"t": "error", "message": f"no child: {type(exc).__name__}: {exc}"})
            raise
        assert isinstance(child, ZygoteChild)
        maker = child.zygote.pid if child.zygote is not None else None
        try:
            protocol.send_with_fds(conn, {"t": "child", "pid": child.pid, "zygote": maker, "server": os.getpid()},
                                   [child.rfd, child.wfd])
        finally:
            child.close()  # the server's copies of its pipe ends: the client holds them now
        finished = False
        try:
            while (msg := lines.next(None)) is not None:
                kind = msg.get("t")
                if kind == "kill":
                    child.kill()
                elif kind == "wait":
                    status = child.wait(min(float(msg.get("timeout", 5.0)), MAX_WAIT))
                    protocol.send_with_fds(conn, {"t": "exit", "status": status, "cpu": child.cpu_seconds,
                                                  "maker_gone": child.died_with_its_maker()})
                elif kind == "finished":
                    finished = True
                    break
        finally:
            if not finished:  # the client went away with it: it goes too
                child.kill()
                child.wait(2.0)
            child.finished()

    def _launcher(self, hello: dict[str, Any]) -> PooledLauncher:
        policy: protocol.ChildPolicy = {"layers": [str(x) for x in hello["layers"]],
                                        "limits": {"memory_mb": 0, "cpu_seconds": 0},
                                        "read_paths": [str(x) for x in hello["read_paths"]]}
        preimport = [str(x) for x in hello["preimport"]]
        python = str(hello.get("python") or sys.executable)
        key = json.dumps([policy["layers"], policy["read_paths"], sorted(preimport), python])
        with self._lock:
            launcher = self._launchers.get(key)
            if launcher is None:
                launcher = self._launchers[key] = PooledLauncher(self.pool, policy, preimport, python)
            return launcher


def serve_main(argv: list[str] | None = None) -> None:
    """`python -m nexus_tool_code_exec.poolserver [--folder F] [--idle S] [--foreground]`: serve
    the machine's pool. Without --foreground it detaches once its socket listens (so the process
    that started it can connect as soon as this one exits)."""
    parser = argparse.ArgumentParser(prog="python -m nexus_tool_code_exec.poolserver")
    parser.add_argument("--folder", default=None, help="the socket's folder (default: the user's, see pool_folder)")
    parser.add_argument("--idle", type=float, default=DEFAULT_IDLE_SECONDS,
                        help="stop once no process has been connected for this many seconds")
    parser.add_argument("--foreground", action="store_true", help="do not detach")
    parser.add_argument("--watch-pid", type=int, default=None,
                        help="stop (as idleness does) once the process with this pid has ended")
    args = parser.parse_args(argv)
    folder = args.folder or pool_folder()
    try:
        server = PoolServer(folder, args.idle, args.watch_pid)
    except OSError as exc:
        print(f"nexus pool server: cannot listen in {folder}: {exc}", file=sys.stderr)
        sys.exit(1)
    if not args.foreground:
        if os.fork() != 0:
            os._exit(0)  # the listening socket stays with the child, which serves
        os.setsid()
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):  # the starter waits for its pipes to close
            os.dup2(null, fd)
        os.close(null)
    # SIGTERM (or SIGINT in the foreground) stops it as idleness does: every zygote, and their
    # children, stopped and their scratch folders removed
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _stop)
    server.serve()


def _stop(signum: int, _frame: Any) -> None:
    raise SystemExit(128 + signum)


# -- the client ---------------------------------------------------------------------------------


def parse_exit(reply: Mapping[str, Any]) -> tuple[int | None, float | None, bool]:
    """A child's `exit` reply (the pool server's `{"t": "exit", "status", "cpu", "maker_gone"}`,
    or a Ray node's pool actor's `wait`, nexus_ray): its exit status (None: still running),
    its CPU seconds (None: unknown) and whether it died with its maker; a field of another
    type counts as absent."""
    status, cpu = reply.get("status"), reply.get("cpu")
    return (int(status) if isinstance(status, int) else None,
            float(cpu) if isinstance(cpu, (int, float)) else None,
            bool(reply.get("maker_gone")))


@attrs.define(eq=False)
class MachineChild(Child):
    """A child of the machine's pool: killed and waited for through its connection."""

    conn: socket.socket | None = attrs.field(default=None, repr=False)
    lines: _Lines | None = attrs.field(default=None, repr=False)
    maker_gone: bool = False

    def _send(self, msg: dict[str, Any]) -> bool:
        if self.conn is None:
            return False
        try:
            protocol.send_with_fds(self.conn, msg)
            return True
        except OSError:
            self.maker_gone = True
            return False

    def kill(self) -> None:
        self._send({"t": "kill"})

    def wait(self, timeout: float = 5.0) -> int | None:
        if not self._send({"t": "wait", "timeout": timeout}) or self.lines is None:
            return None
        reply = self.lines.next(timeout + 5.0)
        if reply is None or reply.get("t") != "exit":
            self.maker_gone = reply is None  # the server went away (and its zygotes with it)
            return None
        status, self.cpu_seconds, self.maker_gone = parse_exit(reply)
        return status

    def finished(self) -> None:
        self._send({"t": "finished"})
        self._hang_up()

    def died_with_its_maker(self) -> bool:
        return self.maker_gone

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._close_fds()
        self._hang_up()

    def _hang_up(self) -> None:
        conn, self.conn = self.conn, None
        if conn is not None:
            conn.close()


class MachineLauncher(Launcher):
    """Children from the machine's pool server, started on first use if none is running."""

    def __init__(self, policy: protocol.ChildPolicy, preimport: Iterable[str], python: str | None = None,
                 idle: float = DEFAULT_IDLE_SECONDS, folder: str | None = None, watch_pid: int | None = None) -> None:
        self.python = python or sys.executable
        self.watch_pid = watch_pid  # a server this launcher starts stops once that process has ended
        self.hello = {"t": "launch", "layers": sorted(policy["layers"]), "read_paths": list(policy["read_paths"]),
                      "preimport": sorted(set(preimport)), "python": self.python}
        self.idle = idle
        self.folder = folder
        self.pid: int | None = None  # the server's
        self.zygote_pid: int | None = None

    @property
    def socket_path(self) -> str:
        return os.path.join(self.folder or pool_folder(), SOCKET_NAME)

    def start(self) -> None:
        conn = self._connect()
        try:
            protocol.send_with_fds(conn, {"t": "info"})
            reply = _Lines(conn).next(START_WAIT)
        finally:
            conn.close()
        if reply is None or reply.get("t") != "info":
            raise PoolServerError(f"the pool server at {self.socket_path} did not answer: {reply}")
        self.pid = int(reply["pid"])

    def launch(self) -> Child:
        for attempt in (1, 2):
            conn = self._connect()
            began = time.monotonic()
            try:
                protocol.send_with_fds(conn, self.hello)
                lines = _Lines(conn)
                reply = lines.next(START_WAIT)
            except OSError:
                conn.close()
                if attempt == 2:
                    raise
                continue
            if reply is None and not lines.passed and time.monotonic() - began < START_WAIT / 2 and attempt == 1:
                # closed without a word: the server stopped (idle) just as this connected; the
                # next connection finds the socket gone and starts a new one
                conn.close()
                continue
            break
        try:
            fds = lines.passed.pop(0) if lines.passed else []
            if reply is None or reply.get("t") != "child" or len(fds) != 2:
                for fd in fds:
                    os.close(fd)
                why = reply.get("message") if reply else "no answer"
                raise PoolServerError(f"the pool server gave no child: {why}")
        except BaseException:
            conn.close()
            raise
        if isinstance(reply.get("zygote"), int):
            self.zygote_pid = reply["zygote"]
        if isinstance(reply.get("server"), int):
            self.pid = reply["server"]  # a new server's, once the last one stopped (idle, killed)
        return MachineChild(int(reply["pid"]), fds[0], fds[1], conn=conn, lines=lines)

    def close(self) -> None:
        """Nothing kept: the server serves the machine, and stops by itself once idle."""

    def _connect(self) -> socket.socket:
        """A connection to the server, started if there is none (one at a time: the lock)."""
        folder = self.folder or pool_folder()
        path = os.path.join(folder, SOCKET_NAME)
        conn = self._try(path)
        if conn is not None:
            return conn
        with open(os.path.join(folder, LOCK_NAME), "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            conn = self._try(path)
            if conn is not None:
                return conn
            try:
                os.unlink(path)  # a dead server's
            except FileNotFoundError:
                pass
            watch = ["--watch-pid", str(self.watch_pid)] if self.watch_pid is not None else []
            started = subprocess.run(
                [self.python, "-I", "-m", "nexus_tool_code_exec.poolserver", "--folder", folder, "--idle", str(self.idle),
                 *watch],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=CHILD_ENV,
                start_new_session=True, close_fds=True, timeout=START_WAIT, check=False)
            if started.returncode != 0:
                raise PoolServerError(f"the pool server did not start: {started.stderr.decode(errors='replace')[-500:]}")
            conn = self._try(path)
            if conn is None:
                raise PoolServerError(f"the pool server started but {path} refuses connections")
            return conn

    @staticmethod
    def _try(path: str) -> socket.socket | None:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.connect(path)
        except (FileNotFoundError, ConnectionRefusedError):
            conn.close()
            return None
        except OSError:
            conn.close()
            raise
        return conn
