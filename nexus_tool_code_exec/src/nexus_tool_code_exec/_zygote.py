"""The warm zygote: a helper process that imports the runtime once and forks one child per script.

Host and zygote talk over a Unix socket pair (JSON lines, plus file descriptors passed with
SCM_RIGHTS). For each script the host makes two pipes and sends the child's ends with a `fork`
request; the zygote forks, and the child isolates itself (sandbox.enter) and speaks the run_code
protocol with the host directly over those pipes, exactly as a spawned child would. The zygote
stays single-threaded (forking from a threaded process is unsafe, and a user namespace can only
be entered by a single-threaded process); it reaps its children and reports how each ended.

host -> zygote: {"t": "fork", "req": n, "policy": {...}}  + fds [child reads, child writes]
                {"t": "kill", "pid": p}                  kill that child's process group
                {"t": "preload", "key": k, "bindings": src}   compile `tools` once, ahead
zygote -> host: {"t": "ready", "pid": p}  {"t": "forked", "req": n, "pid": p}
                {"t": "exit", "pid": p, "status": s}     (s as subprocess reports it)
"""

from __future__ import annotations

import array
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
from concurrent.futures import Future
from typing import Any

from ._launch import CHILD_ENV, Child

MAX_CTRL_MESSAGE = 64 * 1024 * 1024


# -- the zygote process -----------------------------------------------------------------------


def _preimport(allowed: list[str]) -> None:
    """Import what every script needs, so a forked child starts warm."""
    import attrs  # noqa: F401
    import cattrs  # noqa: F401

    from . import _child, _parallel  # noqa: F401

    try:
        from . import sandbox  # noqa: F401
    except ImportError:
        pass
    for name in allowed:
        try:
            __import__(name)
        except ImportError:
            pass


def _status_of(wait_status: int) -> int:
    if os.WIFSIGNALED(wait_status):
        return -os.WTERMSIG(wait_status)
    return os.WEXITSTATUS(wait_status)


def zygote_main(ctrl_fd: int, allowed: list[str]) -> None:
    ctrl = socket.socket(fileno=ctrl_fd)
    _preimport(allowed)
    from . import _child

    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    os.set_blocking(wake_r, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    children: set[int] = set()
    preloaded: dict[str, Any] = {}

    def send(msg: dict[str, Any]) -> None:
        ctrl.sendall((json.dumps(msg) + "\n").encode())

    def reap() -> None:
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            children.discard(pid)
            send({"t": "exit", "pid": pid, "status": _status_of(status)})

    send({"t": "ready", "pid": os.getpid()})
    buf = b""
    fds_queue: list[list[int]] = []
    while True:
        readable, _, _ = select.select([ctrl, wake_r], [], [])
        if wake_r in readable:
            try:
                os.read(wake_r, 4096)
            except BlockingIOError:
                pass
            reap()
        if ctrl not in readable:
            continue
        fds = array.array("i")
        try:
            data, ancdata, _, _ = ctrl.recvmsg(1 << 16, socket.CMSG_SPACE(16 * fds.itemsize))
        except InterruptedError:
            continue
        if not data:
            break  # the host went away: stop, and take the children with us
        for level, kind, payload in ancdata:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.frombytes(payload[: len(payload) - (len(payload) % fds.itemsize)])
                fds_queue.append(list(fds))
        buf += data
        while b"\n" in buf:
            line, _, buf = buf.partition(b"\n")
            msg = json.loads(line)
            kind = msg.get("t")
            if kind == "preload":
                try:
                    preloaded.clear()
                    preloaded[msg["key"]] = _child.compile_bindings(msg["bindings"])
                except Exception:  # a child will compile it itself and report the error
                    preloaded.clear()
            elif kind == "kill":
                pid = int(msg["pid"])
                if pid in children:  # only our own, not yet reaped: no pid-reuse race
                    for target in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
                        try:
                            target()
                        except (ProcessLookupError, PermissionError):
                            pass
            elif kind == "fork":
                child_fds = fds_queue.pop(0) if fds_queue else []
                if len(child_fds) != 2:
                    send({"t": "error", "req": msg.get("req"), "message": "fork request without its two fds"})
                    for fd in child_fds:
                        os.close(fd)
                    continue
                pid = os.fork()
                if pid == 0:  # the child
                    _child_after_fork(ctrl, wake_r, wake_w, child_fds, msg.get("policy") or {}, preloaded)
                children.add(pid)
                for fd in child_fds:
                    os.close(fd)
                send({"t": "forked", "req": msg.get("req"), "pid": pid})
    for pid in list(children):
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    os._exit(0)


def _child_after_fork(ctrl: socket.socket, wake_r: int, wake_w: int, fds: list[int],
                      policy: dict[str, Any], preloaded: dict[str, Any]) -> None:
    """In the forked child: drop the zygote's ends, isolate, run the script, exit."""
    from . import _child

    code = 0
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        ctrl.close()
        os.close(wake_r)
        os.close(wake_w)
        rfd, wfd = fds
        if policy.get("layers"):
            try:
                from ._launch import enter_sandbox

                enter_sandbox(policy, keep_fds=(rfd, wfd))
            except Exception as exc:
                _child.Channel(rfd, wfd).send({"t": "error", "kind": "sandbox", "message": _child._describe(exc)})
                os._exit(1)
        else:
            os.setsid()
            os.chdir(policy["scratch"])
        _child.PRELOADED_BINDINGS.update(preloaded)
        _child.serve(rfd, wfd)
    except BaseException:
        code = 1
    finally:
        os._exit(code)


# -- the host side ------------------------------------------------------------------------------


class ZygoteError(Exception):
    """The zygote could not be started or stopped answering."""


class ZygoteLauncher:
    """Forks run_code children from a warm zygote, started lazily and restarted if it dies."""

    kind = "zygote"

    def __init__(self, allowed_packages: list[str], python: str | None = None) -> None:
        self.python = python or sys.executable
        self.allowed = list(allowed_packages)
        self._lock = threading.Lock()
        self._send_lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._sock: socket.socket | None = None
        self._reader: threading.Thread | None = None
        self._pending: dict[int, Future[int]] = {}
        self._exits: dict[int, Future[int]] = {}
        self._req = 0
        self._preloaded_key: str | None = None
        self.pid: int | None = None
        self.restarts = -1

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        """Start the zygote now rather than on the first launch."""
        self._ensure()

    def _ensure(self) -> socket.socket:
        with self._lock:
            if self._sock is not None and self._proc is not None and self._proc.poll() is None:
                return self._sock
            self._stop_locked()
            host_end, zygote_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                self._proc = subprocess.Popen(
                    [self.python, "-I", "-m", "nexus_tool_code_exec._zygote", str(zygote_end.fileno()),
                     json.dumps(self.allowed)],
                    pass_fds=(zygote_end.fileno(),),
                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                    start_new_session=True, env=CHILD_ENV, close_fds=True,
                )
            finally:
                zygote_end.close()
            host_end.settimeout(30)
            ready = self._read_line(host_end, b"")
            if ready is None or ready[0].get("t") != "ready":
                host_end.close()
                raise ZygoteError("the zygote did not start")
            host_end.settimeout(None)
            self.pid = ready[0]["pid"]
            self.restarts += 1
            self._sock = host_end
            self._preloaded_key = None
            self._reader = threading.Thread(target=self._read_ctrl, args=(host_end, ready[1]),
                                            daemon=True, name="run_code-zygote")
            self._reader.start()
            return host_end

    @staticmethod
    def _read_line(sock: socket.socket, buf: bytes) -> tuple[dict[str, Any], bytes] | None:
        while b"\n" not in buf:
            data = sock.recv(1 << 16)
            if not data:
                return None
            buf += data
        line, _, rest = buf.partition(b"\n")
        return json.loads(line), rest

    def _read_ctrl(self, sock: socket.socket, buf: bytes) -> None:
        try:
            while True:
                got = self._read_line(sock, buf)
                if got is None:
                    break
                msg, buf = got
                kind = msg.get("t")
                if kind == "forked":
                    fut = self._pending.pop(msg.get("req"), None)
                    if fut is not None:
                        fut.set_result(int(msg["pid"]))
                elif kind == "error":
                    fut = self._pending.pop(msg.get("req"), None)
                    if fut is not None:
                        fut.set_exception(ZygoteError(str(msg.get("message"))))
                elif kind == "exit":
                    self._exit_future(int(msg["pid"])).set_result(int(msg["status"]))
        except (OSError, ValueError):
            pass
        # the zygote is gone: nobody will answer what is pending
        with self._lock:
            for fut in list(self._pending.values()):
                if not fut.done():
                    fut.set_exception(ZygoteError("the zygote died"))
            self._pending.clear()
            for fut in self._exits.values():
                if not fut.done():
                    fut.set_result(-signal.SIGKILL)

    def _exit_future(self, pid: int) -> Future[int]:
        with self._lock:
            fut = self._exits.get(pid)
            if fut is None:
                fut = self._exits[pid] = Future()
            return fut

    def _send(self, sock: socket.socket, msg: dict[str, Any], fds: list[int] | None = None) -> None:
        data = (json.dumps(msg) + "\n").encode()
        with self._send_lock:
            if fds:
                sock.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
            else:
                sock.sendall(data)

    def preload(self, key: str, bindings: str) -> None:
        """Have the zygote compile these bindings once, so children skip it."""
        sock = self._ensure()
        if self._preloaded_key != key:
            self._send(sock, {"t": "preload", "key": key, "bindings": bindings})
            self._preloaded_key = key

    def launch(self, policy: dict[str, Any]) -> Child:
        sock = self._ensure()
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        fut: Future[int] = Future()
        with self._lock:
            self._req += 1
            req = self._req
            self._pending[req] = fut
        try:
            self._send(sock, {"t": "fork", "req": req, "policy": policy}, [to_child_r, from_child_w])
            pid = fut.result(timeout=30)
        except Exception:
            with self._lock:
                self._pending.pop(req, None)
            os.close(to_child_w)
            os.close(from_child_r)
            raise
        finally:
            os.close(to_child_r)
            os.close(from_child_w)
        exit_future = self._exit_future(pid)

        def wait(timeout: float) -> int | None:
            try:
                status = exit_future.result(timeout=timeout)
            except TimeoutError:
                return None
            with self._lock:
                self._exits.pop(pid, None)
            return status

        return Child(pid, from_child_r, to_child_w, waiter=wait, killer=lambda: self._kill(sock, pid))

    def _kill(self, sock: socket.socket, pid: int) -> None:
        try:
            self._send(sock, {"t": "kill", "pid": pid})
        except OSError:
            pass

    def _stop_locked(self) -> None:
        if self._sock is not None:
            try:
                self._sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self._sock.close()
            self._sock = None
        if self._proc is not None:
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            self._proc = None

    def close(self) -> None:
        with self._lock:
            self._stop_locked()


if __name__ == "__main__":
    zygote_main(int(sys.argv[1]), json.loads(sys.argv[2]) if len(sys.argv) > 2 else [])
