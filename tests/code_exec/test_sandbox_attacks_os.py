"""A script's attacks on the OS under the full sandbox: every layer this machine has, together,
as the runner applies them. Each attack must fail, the test process must be unharmed, and no
child process or fd may be left behind. A test that needs a layer this machine lacks is skipped
with the probe's reason; the per-layer tests are in test_sandbox_layers.py.
"""

from __future__ import annotations

import ctypes
import errno
import os
import resource
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from nexus_tool_code_exec import sandbox

pytestmark = [pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox is Linux-only"),
              pytest.mark.usefixtures("no_leaks")]

LIBC = ctypes.CDLL(None, use_errno=True)


def attack(tmp_path: Path, fn: Callable[[], Any], *needs: str, **limits: int) -> sandbox.ChildOutcome:
    """Run `fn` in a child under every layer the probe found active; skip unless `needs` are."""
    statuses = sandbox.probe()
    for name in needs:
        if not statuses[name].active:
            pytest.skip(f"layer {name} unavailable here: {statuses[name].detail}")
    scratch = tmp_path / "scratch"
    scratch.mkdir(exist_ok=True)
    with open("/proc/self/statm") as f:
        mapped_mb = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE") // (1024 * 1024)
    limits.setdefault("memory_mb", mapped_mb + 256)
    layers = frozenset(name for name, st in statuses.items() if st.active)
    policy = sandbox.SandboxPolicy(scratch_dir=str(scratch), layers=layers, limits=sandbox.Limits(**limits))
    return sandbox.run_in_child(policy, fn)


def refused(out: sandbox.ChildOutcome, exc: str, *errnos: int) -> None:
    assert out.error is not None and out.error.startswith(exc + ":"), out
    assert out.errno in errnos, (out, errno.errorcode.get(out.errno or 0))
    assert out.exit_code == 0


@pytest.fixture
def usr1_guard() -> Iterator[None]:
    got: list[int] = []
    old = signal.signal(signal.SIGUSR1, lambda signum, frame: got.append(signum))
    yield
    signal.signal(signal.SIGUSR1, old)
    assert got == [], "a sandboxed child signalled the test process"


def _listening(kind: int, address: Any, family: int = socket.AF_INET) -> socket.socket:
    s = socket.socket(family, kind)
    s.bind(address)
    if kind == socket.SOCK_STREAM:
        s.listen(8)
    s.setblocking(False)
    return s


# -- a script that behaves: what must keep working ------------------------------------------


def test_an_ordinary_script_runs_under_the_full_sandbox(tmp_path: Path) -> None:
    def script() -> dict[str, Any]:
        import json
        import re
        from concurrent.futures import ThreadPoolExecutor

        import attrs
        import cattrs

        @attrs.frozen
        class Point:
            x: int
            y: int

        with ThreadPoolExecutor(max_workers=8) as pool:
            squares = list(pool.map(lambda n: n * n, range(10)))
        Path("notes.txt").write_text("kept in scratch")
        return {
            "squares": squares,
            "json": json.loads(json.dumps({"a": [1, 2]})),
            "re": re.findall(r"\d+", "a1b22c333"),
            "cattrs": cattrs.unstructure(Point(1, 2)),
            "notes": Path("notes.txt").read_text(),
            "cwd_is_scratch": os.getcwd().endswith("scratch"),
        }

    out = attack(tmp_path, script)
    assert out.value == {"squares": [n * n for n in range(10)], "json": {"a": [1, 2]},
                         "re": ["1", "22", "333"], "cattrs": {"x": 1, "y": 2}, "notes": "kept in scratch",
                         "cwd_is_scratch": True}, out


# -- files ----------------------------------------------------------------------------------


def test_reading_a_secret_outside_scratch_fails(tmp_path: Path, secret: Path) -> None:
    refused(attack(tmp_path, secret.read_text, "fs"), "PermissionError", errno.EACCES)


def test_writing_outside_scratch_fails(tmp_path: Path) -> None:
    target = tmp_path / "planted.py"
    refused(attack(tmp_path, lambda: target.write_text("import os"), "fs"), "PermissionError", errno.EACCES)
    assert not target.exists()


def test_listing_a_directory_outside_fails(tmp_path: Path) -> None:
    refused(attack(tmp_path, lambda: os.listdir(tmp_path), "fs"), "PermissionError", errno.EACCES)


def test_a_symlink_planted_in_scratch_does_not_escape(tmp_path: Path, secret: Path) -> None:
    def go() -> str:
        os.symlink(secret, "s")
        return Path("s").read_text()

    refused(attack(tmp_path, go, "fs"), "PermissionError", errno.EACCES)


def test_changing_a_host_file_mode_fails(tmp_path: Path, secret: Path, searchable_secret: Path) -> None:
    # Landlock does not cover chmod; the uid layer (not the owner, or not even allowed to search
    # the folder) or seccomp (refused) does.
    for path in (searchable_secret, secret):
        out = attack(tmp_path, lambda path=path: os.chmod(path, 0o666), "fs", "seccomp")
        refused(out, "PermissionError", errno.EPERM, errno.EACCES)
        assert path.stat().st_mode & 0o777 == 0o600


def test_known_limit_stat_reveals_only_what_any_user_could(tmp_path: Path, secret: Path,
                                                           searchable_secret: Path) -> None:
    """Pinned on purpose: Landlock governs opening, not stat(); a script can learn the existence,
    size and times of a path it guesses in a folder every user may search, never its content.
    In a folder other users may not search (pytest's is 0700) it learns nothing: the child has
    no capability left to search past the folder's mode (as root, issue 11)."""
    assert attack(tmp_path, lambda: os.stat(searchable_secret).st_size, "fs").value == len("hunter2")
    out = attack(tmp_path, lambda: os.stat(secret).st_size, "fs")
    if os.geteuid() == 0 and sandbox.probe()["uid"].active:
        refused(out, "PermissionError", errno.EACCES)
    else:  # the child is the host's own user, who may search its own folder
        assert out.value == len("hunter2")


# -- network --------------------------------------------------------------------------------


def test_tcp_connect_to_a_listener_on_localhost_fails(tmp_path: Path) -> None:
    srv = _listening(socket.SOCK_STREAM, ("127.0.0.1", 0))
    port = srv.getsockname()[1]
    try:
        out = attack(tmp_path, lambda: socket.create_connection(("127.0.0.1", port), timeout=2).close(),
                     "net")
        refused(out, "PermissionError", errno.EPERM, errno.EACCES)
        with pytest.raises(BlockingIOError):
            srv.accept()
    finally:
        srv.close()


def test_udp_to_localhost_fails(tmp_path: Path) -> None:
    srv = _listening(socket.SOCK_DGRAM, ("127.0.0.1", 0))
    port = srv.getsockname()[1]

    def go() -> None:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.sendto(b"leak", ("127.0.0.1", port))

    try:
        refused(attack(tmp_path, go, "net"), "PermissionError", errno.EPERM)
        with pytest.raises(BlockingIOError):
            srv.recv(100)
    finally:
        srv.close()


def test_a_pathname_unix_socket_of_the_host_is_unreachable(tmp_path: Path) -> None:
    """Pathname AF_UNIX sockets cross network namespaces and Landlock (ABI <= 7) does not govern
    connect(): it is seccomp's refusal of socket() that stops this one."""
    path = str(tmp_path / "host.sock")
    srv = _listening(socket.SOCK_STREAM, path, socket.AF_UNIX)
    try:
        out = attack(tmp_path, lambda: socket.socket(socket.AF_UNIX).connect(path), "seccomp")
        refused(out, "PermissionError", errno.EPERM)
        with pytest.raises(BlockingIOError):
            srv.accept()
    finally:
        srv.close()


def test_an_abstract_unix_socket_of_the_host_is_unreachable(tmp_path: Path) -> None:
    name = f"\0nexus-attack-{os.getpid()}"
    srv = _listening(socket.SOCK_STREAM, name, socket.AF_UNIX)
    try:
        out = attack(tmp_path, lambda: socket.socket(socket.AF_UNIX).connect(name), "net")
        refused(out, "PermissionError", errno.EPERM, errno.ECONNREFUSED)
    finally:
        srv.close()


# -- processes ------------------------------------------------------------------------------


def test_fork_fails(tmp_path: Path) -> None:
    def go() -> None:
        if os.fork() == 0:
            os._exit(0)

    refused(attack(tmp_path, go, "seccomp"), "PermissionError", errno.EPERM)


def test_exec_of_a_shell_fails(tmp_path: Path) -> None:
    refused(attack(tmp_path, lambda: os.execv("/bin/sh", ["sh", "-c", "id"]), "seccomp"), "PermissionError",
            errno.EPERM, errno.EACCES)
    refused(attack(tmp_path, lambda: subprocess.run(["/bin/sh", "-c", "id"], check=False), "seccomp"),
            "PermissionError", errno.EPERM)


def test_threads_are_allowed(tmp_path: Path) -> None:
    def go() -> int:
        import threading

        done: list[int] = []
        threads = [threading.Thread(target=done.append, args=(i,)) for i in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return len(done)

    assert attack(tmp_path, go, "seccomp").value == 16


def test_signalling_the_test_process_fails_and_it_is_unharmed(tmp_path: Path, usr1_guard: None) -> None:
    out = attack(tmp_path, lambda: os.kill(os.getppid(), signal.SIGUSR1), "seccomp")
    refused(out, "PermissionError", errno.EPERM)
    # Broadcast and group forms, with signal 0 so that a broken sandbox still harms nothing.
    refused(attack(tmp_path, lambda: os.kill(-1, 0), "seccomp"), "PermissionError", errno.EPERM)
    pgid = os.getpgid(0)
    refused(attack(tmp_path, lambda: os.killpg(pgid, 0), "seccomp"), "PermissionError", errno.EPERM)
    refused(attack(tmp_path, lambda: os.kill(1, 0), "seccomp"), "PermissionError", errno.EPERM)


def test_ptrace_and_reading_the_test_process_memory_fail(tmp_path: Path) -> None:
    def seize() -> int:
        res = LIBC.ptrace(0x4206, os.getppid(), None, None)  # PTRACE_SEIZE: never stops the tracee
        return ctypes.get_errno() if res != 0 else 0

    assert attack(tmp_path, seize, "seccomp").value == errno.EPERM
    refused(attack(tmp_path, lambda: Path(f"/proc/{os.getppid()}/mem").read_bytes(), "fs"),
            "PermissionError", errno.EACCES)

    def vm_read() -> int:
        buf = ctypes.create_string_buffer(8)
        iov = (ctypes.c_void_p * 2)(ctypes.addressof(buf), 8)
        res = LIBC.process_vm_readv(os.getppid(), iov, 1, iov, 1, 0)
        return ctypes.get_errno() if res < 0 else 0

    assert attack(tmp_path, vm_read, "seccomp").value == errno.EPERM


def test_meddling_with_the_test_process_limits_and_scheduling_fails(tmp_path: Path) -> None:
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)
    prio = os.getpriority(os.PRIO_PROCESS, 0)
    cpus = os.sched_getaffinity(0)
    for go in (lambda: resource.prlimit(os.getppid(), resource.RLIMIT_NOFILE, nofile),
               lambda: os.setpriority(os.PRIO_PROCESS, os.getppid(), prio),
               lambda: os.sched_setaffinity(os.getppid(), cpus)):
        refused(attack(tmp_path, go, "seccomp"), "PermissionError", errno.EPERM)


def test_regaining_privileges_fails(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        refused(attack(tmp_path, lambda: os.setuid(0), "uid"), "PermissionError", errno.EPERM)

    def new_userns() -> int:
        return 0 if LIBC.unshare(0x10000000) == 0 else ctypes.get_errno()

    assert attack(tmp_path, new_userns, "seccomp").value == errno.EPERM


def test_host_environment_secrets_are_absent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NEXUS_HOST_TOKEN", "hunter2")
    def leaked() -> list[str]:
        return [k for k, v in os.environ.items() if "hunter2" in v or k == "NEXUS_HOST_TOKEN"]

    out = attack(tmp_path, leaked, "env")
    assert out.value == [], out
    out = attack(tmp_path, lambda: Path("/proc/self/environ").read_bytes(), "fs")
    refused(out, "PermissionError", errno.EACCES)


# -- resources ------------------------------------------------------------------------------


def test_a_memory_bomb_hits_the_cap_and_the_host_is_fine(tmp_path: Path) -> None:
    def bomb() -> None:
        hoard = []
        while True:
            hoard.append(bytearray(32 * 1024 * 1024))

    out = attack(tmp_path, bomb, "rlimits")
    assert out.error is not None and out.error.startswith("MemoryError"), out
    assert len(bytearray(64 * 1024 * 1024)) == 64 * 1024 * 1024  # the test process still allocates


def test_a_cpu_loop_is_killed(tmp_path: Path) -> None:
    def spin() -> None:
        while True:
            pass

    out = attack(tmp_path, spin, "rlimits", cpu_seconds=1)
    assert out.signal == signal.SIGXCPU, out


def test_a_file_size_bomb_in_scratch_stops_at_the_limit(tmp_path: Path) -> None:
    def bomb() -> None:
        with open("bomb.bin", "wb") as f:
            f.writelines(b"\0" * (1024 * 1024) for _ in range(8))

    refused(attack(tmp_path, bomb, "rlimits", file_size_mb=2), "OSError", errno.EFBIG)
    assert (tmp_path / "scratch" / "bomb.bin").stat().st_size == 2 * 1024 * 1024


def test_an_open_files_bomb_gets_emfile(tmp_path: Path) -> None:
    def bomb() -> None:
        held = []
        for i in range(10_000):
            held.append(os.open(f"f{i}", os.O_CREAT | os.O_WRONLY, 0o600))

    refused(attack(tmp_path, bomb, "rlimits", open_files=32), "OSError", errno.EMFILE)
    assert len(os.listdir(tmp_path / "scratch")) < 32
