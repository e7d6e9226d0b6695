"""Which layers work on this machine: each applied alone in a forked child, then attacked there
(read a secret, connect to a listener, fork, signal the parent...); active only if the attack
fails. Runs in the host, once per process. Also `run_in_child`, the fork-enter-call-report helper
the probe (and the sandbox's tests) use, and the lines `nexus doctor` prints."""

from __future__ import annotations

import json
import os
import resource
import select
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

import attrs

from .. import protocol
from .layers import FIXED_ENV_KEYS, _address_space_bytes, _thread_count, applied, enter, prepare
from .policy import ALL_LAYERS, LAYERS, LayerStatus, Limits, SandboxError, SandboxPolicy

_MiB = 1024 * 1024

#: layers to treat as unavailable, e.g. to see how run_code behaves on a machine without them
ENV_DISABLE_LAYERS = "NEXUS_SANDBOX_DISABLE"


@attrs.frozen
class _ProbeEnv:
    """What the probing parent sets up for a child to attack: a listener on 127.0.0.1, a secret
    file outside the scratch dir."""

    scratch: str
    secret: str
    port: int


def _check_env(_env: _ProbeEnv) -> str | None:
    if "NEXUS_SANDBOX_PROBE" in os.environ or set(os.environ) != set(FIXED_ENV_KEYS):
        return f"environment still has {sorted(os.environ)}"
    return None


def _check_rlimits(_env: _ProbeEnv) -> str | None:
    limit, _ = resource.getrlimit(resource.RLIMIT_AS)
    try:
        bytearray(limit + 64 * _MiB)
    except MemoryError:
        return None
    return "an allocation beyond RLIMIT_AS succeeded"


def _connect_refused(port: int) -> str | None:
    try:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    except OSError:
        return None
    try:
        s.settimeout(2)
        s.connect(("127.0.0.1", port))
    except OSError:
        return None
    finally:
        s.close()
    return "a TCP connect to a listener on 127.0.0.1 succeeded"


def _check_net(env: _ProbeEnv) -> str | None:
    return _connect_refused(env.port)


def _signal_refused() -> str | None:
    try:
        os.kill(os.getppid(), 0)
    except PermissionError:
        return None
    except OSError as exc:
        return f"signalling the parent gave {exc!r}, not EPERM"
    return "signalling the parent (signal 0) succeeded"


def _check_uid(_env: _ProbeEnv) -> str | None:
    if 0 in os.getresuid():
        return "still uid 0"
    return _signal_refused()


def _check_fs(env: _ProbeEnv) -> str | None:
    try:
        with open(env.secret, "rb"):
            return "a file outside the scratch dir was readable"
    except PermissionError:
        pass
    try:
        with open(os.path.join(env.scratch, "probe.txt"), "w") as f:
            f.write("ok")
        with open(os.__file__, "rb") as f:
            f.read(1)
    except OSError as exc:
        return f"an allowed path was refused: {exc}"
    return None


def _check_seccomp(env: _ProbeEnv) -> str | None:
    try:
        pid = os.fork()
    except PermissionError:
        pass
    else:
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
        return "os.fork() still works"
    try:
        socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).close()
        return "socket() still works"
    except PermissionError:
        pass
    box: list[int] = []
    t = threading.Thread(target=lambda: box.append(1))
    t.start()
    t.join()
    if box != [1]:
        return "threads no longer work"
    return None


_CHECKS: dict[str, Callable[[_ProbeEnv], str | None]] = {
    "env": _check_env, "rlimits": _check_rlimits, "net": _check_net,
    "uid": _check_uid, "fs": _check_fs, "seccomp": _check_seccomp,
}


@attrs.frozen
class ChildOutcome:
    """How a `run_in_child` child ended. value: what fn returned (through JSON); error:
    "SandboxError: ..." or "<ExceptionType>: message" if enter() or fn raised, with `layer` and
    `reason` for a SandboxError, `errno` for an OSError; exit_code or signal: how the process
    ended (no report at all when it was killed); enter_ms: what enter() took in the child."""

    value: Any = None
    error: str | None = None
    layer: str | None = None
    reason: str | None = None
    errno: int | None = None
    exit_code: int | None = None
    signal: int | None = None
    enter_ms: float | None = None


def run_in_child(policy: SandboxPolicy, fn: Callable[[], Any], timeout: float = 15.0) -> ChildOutcome:
    """Fork; in the child enter(policy) (plus a pipe it reports through), call fn() and send
    back its JSON-able result or its exception; reap the child (killed after `timeout`). For
    probes and tests: the caller must be single-threaded, like any forking zygote."""
    r, w = os.pipe()
    policy = attrs.evolve(policy, keep_fds=tuple(policy.keep_fds) + (w,))
    pid = os.fork()
    if pid == 0:  # the child never returns into the caller's stack
        code = 1
        try:
            os.close(r)
            report: dict[str, Any] = {}
            t0 = time.perf_counter()
            try:
                enter(policy)
                report["enter_ms"] = (time.perf_counter() - t0) * 1000
                report["value"] = fn()
            except SandboxError as exc:
                report.update(error=f"SandboxError: {exc}", layer=exc.layer, reason=exc.reason)
            except BaseException as exc:  # noqa: BLE001 - everything goes back to the parent
                report.update(error=f"{type(exc).__name__}: {exc}", errno=getattr(exc, "errno", None))
            protocol.write_all(w, _encode_report(report))
            code = 0
        finally:
            os._exit(code)
    os.close(w)
    lines = protocol.LineReader(1 << 24)
    deadline = time.monotonic() + timeout

    def read_until_the_deadline() -> bytes:
        if not sel.select(timeout=max(0.0, deadline - time.monotonic())):
            return b""
        return os.read(r, 65536)

    with selectors.DefaultSelector() as sel:
        sel.register(r, selectors.EVENT_READ)
        try:
            report = lines.read(read_until_the_deadline) or {}
        except protocol.FramingError:
            report = {"error": "unreadable report from the child"}
    os.close(r)
    status = _reap(pid, deadline)
    return ChildOutcome(
        value=report.get("value"), error=report.get("error"), layer=report.get("layer"),
        reason=report.get("reason"), errno=report.get("errno"), enter_ms=report.get("enter_ms"),
        exit_code=os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
        signal=os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
    )


#: a report's encoder: what JSON has no type for as its repr()
_encode_report = protocol.encoder(default=repr)


def _reap(pid: int, deadline: float) -> int:
    """waitpid until `deadline`; a child still running then is killed (with its group). Waits on
    a pidfd where there is one, so the parent wakes the moment the child is gone."""
    try:
        pidfd: int | None = os.pidfd_open(pid)
    except (AttributeError, OSError):
        pidfd = None
    try:
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return status
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                for kill in (os.killpg, os.kill):
                    try:
                        kill(pid, signal.SIGKILL)
                    except OSError:
                        pass
                return os.waitpid(pid, 0)[1]
            if pidfd is not None:
                # poll(), not select(), which takes no fd past 1023 (a host with many sessions)
                poller = select.poll()
                poller.register(pidfd, select.POLLIN)
                poller.poll(remaining * 1000)
            else:
                time.sleep(min(0.002, remaining))
    finally:
        if pidfd is not None:
            os.close(pidfd)


# Where the applied detail would describe the probe's own settings rather than the mechanism.
_PROBE_DETAIL = {
    "rlimits": "address space, CPU seconds, open files, file size, threads (with uid) and core size capped; "
               "an allocation past RLIMIT_AS failed",
}


def _probe_one(name: str, env: _ProbeEnv) -> LayerStatus:
    """Apply only `name` in a forked child, then attack it there."""
    try:
        mapped_mb = _address_space_bytes() // _MiB
    except OSError:
        mapped_mb = 256
    policy = SandboxPolicy(scratch_dir=env.scratch, limits=Limits(memory_mb=mapped_mb + 128),
                           layers=frozenset({name}))
    os.environ["NEXUS_SANDBOX_PROBE"] = "1"  # the env check looks for it; the child inherits it
    try:
        out = run_in_child(policy, lambda: _CHECKS[name](env)
                           or {"ok": _PROBE_DETAIL.get(name) or applied[name]})
    finally:
        os.environ.pop("NEXUS_SANDBOX_PROBE", None)
    if out.error is not None:
        return LayerStatus(name, False, out.reason or out.error)
    if isinstance(out.value, dict):
        return LayerStatus(name, True, str(out.value["ok"]))
    if isinstance(out.value, str):
        return LayerStatus(name, False, out.value)
    if out.signal is not None:
        return LayerStatus(name, False, f"the probe child was killed by {signal.Signals(out.signal).name}")
    return LayerStatus(name, False, f"the probe child exited with status {out.exit_code} and no report")


def _probe_here() -> dict[str, LayerStatus]:
    prepare()
    base = tempfile.mkdtemp(prefix="nexus-sandbox-probe-")
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        scratch = os.path.join(base, "scratch")
        os.mkdir(scratch)
        secret = os.path.join(base, "secret.txt")
        with open(secret, "w") as f:
            f.write("probe secret")
        env = _ProbeEnv(scratch=scratch, secret=secret, port=listener.getsockname()[1])
        return {name: _probe_one(name, env) for name in LAYERS}
    finally:
        listener.close()
        shutil.rmtree(base, ignore_errors=True)


def _probe_main() -> None:
    """Entry point of the probe subprocess (used when the caller has threads)."""
    statuses = _probe_here()
    sys.stdout.write(json.dumps({k: attrs.asdict(v) for k, v in statuses.items()}))


def _probe_subprocess() -> dict[str, LayerStatus]:
    # fork() in a multi-threaded process copies locks other threads may hold; a fresh
    # single-threaded interpreter does the forking instead.
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    cmd = [sys.executable, "-c", "from nexus_tool_code_exec.sandbox.probes import _probe_main; _probe_main()"]
    try:
        proc = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=120, env=env)
        data = json.loads(proc.stdout)
        return {k: LayerStatus(**v) for k, v in data.items()}
    except (OSError, ValueError, subprocess.SubprocessError) as exc:
        return {name: LayerStatus(name, False, f"the probe process failed: {exc}") for name in LAYERS}


_probe_cache: dict[str, LayerStatus] | None = None


def probe(refresh: bool = False) -> dict[str, LayerStatus]:
    """Each layer applied alone in a forked child and then attacked (read a secret, connect to a
    listener, fork, signal the parent...); active only if the attack fails. Cached per process."""
    global _probe_cache
    if _probe_cache is None or refresh:
        _probe_cache = _probe_here() if _thread_count() == 1 else _probe_subprocess()
    return dict(_probe_cache)


def layer_statuses() -> dict[str, LayerStatus]:
    """Each layer, probed once per process: active, or unavailable and why; the layers named in
    NEXUS_SANDBOX_DISABLE (comma-separated) count as unavailable."""
    statuses = probe()
    for name in os.environ.get(ENV_DISABLE_LAYERS, "").split(","):
        if name.strip() in statuses:
            statuses[name.strip()] = LayerStatus(name.strip(), False, f"disabled by {ENV_DISABLE_LAYERS}")
    return statuses


def doctor_lines(statuses: dict[str, LayerStatus]) -> list[str]:
    """`nexus doctor`'s lines for the layers: one per layer, in the order enter() applies them,
    active or unavailable and why."""
    lines = []
    for name in LAYERS + tuple(sorted(set(statuses) - ALL_LAYERS)):
        status = statuses.get(name)
        state = "active" if status is not None and status.active else "unavailable"
        lines.append(f"layer {name:<8} {state}: {status.detail if status is not None else 'not probed'}")
    return lines
