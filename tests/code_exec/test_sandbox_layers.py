"""Each sandbox layer alone, in a real forked child, attacked the way a script would attack it.

Every attack must fail with the errno the sandbox module documents, and the test process must be
unharmed: no signal reached it, no child or fd leaked (checked after every test). Layers this
machine cannot provide are skipped with the probe's reason, so the suite says what it could not
check instead of passing vacuously.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import resource
import signal
import socket
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from nexus_tool_code_exec import sandbox
from nexus_tool_code_exec.sandbox import landlock, seccomp

pytestmark = [pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox is Linux-only"),
              pytest.mark.usefixtures("no_leaks")]

LIBC = ctypes.CDLL(None, use_errno=True)
LIBC.syscall.restype = ctypes.c_long


def need(*layers: str) -> None:
    statuses = sandbox.probe()
    for name in layers:
        if not statuses[name].active:
            pytest.skip(f"layer {name} unavailable here: {statuses[name].detail}")


def landlock_abi() -> int:
    try:
        return landlock.abi_version()
    except landlock.LandlockError:
        return 0


def mapped_mb() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE") // (1024 * 1024)


def make_policy(tmp_path: Path, layers: set[str], **limits: int) -> sandbox.SandboxPolicy:
    scratch = tmp_path / "scratch"
    scratch.mkdir(exist_ok=True)
    limits.setdefault("memory_mb", mapped_mb() + 256)
    return sandbox.SandboxPolicy(scratch_dir=str(scratch), layers=frozenset(layers),
                                 limits=sandbox.Limits(**limits))


def run(tmp_path: Path, layers: set[str], fn: Callable[[], Any], **limits: int) -> sandbox.ChildOutcome:
    need(*layers)
    return sandbox.run_in_child(make_policy(tmp_path, layers, **limits), fn)


def refused(out: sandbox.ChildOutcome, exc: str, err: int) -> None:
    """The child's attack raised `exc` with errno `err` (and nothing else happened)."""
    assert out.error is not None and out.error.startswith(exc + ":"), out
    assert out.errno == err, (out, errno.errorcode.get(out.errno or 0))
    assert out.exit_code == 0


def syscall(name: str, *args: Any) -> tuple[int, int]:
    """Raw syscall by name from the sandbox's own table: (result, errno)."""
    nr = seccomp.current_arch().table[name]
    res = LIBC.syscall(ctypes.c_long(nr), *args)
    return int(res), ctypes.get_errno() if res < 0 else 0


# -- fixtures -------------------------------------------------------------------------------


@pytest.fixture
def tcp_listener() -> Iterator[socket.socket]:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    s.listen(8)
    s.setblocking(False)
    yield s
    with pytest.raises(BlockingIOError):
        s.accept()  # nothing ever got through
    s.close()


@pytest.fixture
def usr1_guard() -> Iterator[list[int]]:
    """Records every SIGUSR1 the test process receives; the attacks send SIGUSR1 to it."""
    got: list[int] = []
    old = signal.signal(signal.SIGUSR1, lambda signum, frame: got.append(signum))
    yield got
    signal.signal(signal.SIGUSR1, old)
    assert got == [], "a sandboxed child signalled the test process"


def signal_parent() -> None:
    os.kill(os.getppid(), signal.SIGUSR1)


# -- API ------------------------------------------------------------------------------------


def test_unknown_layer_is_rejected_when_the_policy_is_built(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown sandbox layer"):
        sandbox.SandboxPolicy(scratch_dir=str(tmp_path), layers=frozenset({"fs", "firewall"}))


def test_runtime_read_paths_cover_the_runtime_and_nothing_broad() -> None:
    paths = sandbox.runtime_read_paths()
    import attrs
    import cattrs

    import nexus_tool_code_exec

    for mod in (attrs, cattrs, nexus_tool_code_exec, json):
        assert any(str(mod.__file__).startswith(p + os.sep) for p in paths), mod
    assert "/dev/null" in paths and "/dev/urandom" in paths
    assert all(os.path.exists(p) for p in paths)
    for broad in ("/", "/root", "/home", "/etc", "/tmp", "/proc", "/usr", os.path.expanduser("~")):
        assert broad not in paths


def test_probe_reports_every_layer_with_a_reason() -> None:
    statuses = sandbox.probe()
    assert list(statuses) == list(sandbox.LAYERS)
    for name, st in statuses.items():
        assert st.name == name and st.detail
    assert sandbox.probe() == statuses  # cached per process


def test_doctor_lines_one_line_per_layer_in_the_order_they_are_applied() -> None:
    statuses = {
        "fs": sandbox.LayerStatus("fs", False, "Landlock is built in but not enabled at boot"),
        "net": sandbox.LayerStatus("net", True, "own network namespace"),
    }
    lines = sandbox.doctor_lines(statuses)
    assert len(lines) == len(sandbox.LAYERS)
    assert [line.split()[1] for line in lines] == list(sandbox.LAYERS)
    assert lines[sandbox.LAYERS.index("fs")] == "layer fs       unavailable: Landlock is built in but not enabled at boot"
    assert lines[sandbox.LAYERS.index("net")] == "layer net      active: own network namespace"
    assert lines[sandbox.LAYERS.index("env")] == "layer env      unavailable: not probed"


def test_a_layer_that_cannot_be_applied_raises_naming_it(tmp_path: Path) -> None:
    out = sandbox.run_in_child(make_policy(tmp_path, {"rlimits"}, memory_mb=1), lambda: "ran anyway")
    assert out.value is None and out.layer == "rlimits" and "memory_mb=1" in (out.reason or "")
    missing = sandbox.SandboxPolicy(scratch_dir=str(tmp_path / "nowhere"), layers=frozenset())
    out = sandbox.run_in_child(missing, lambda: "ran anyway")
    assert out.value is None and out.layer == "process" and "chdir" in (out.reason or "")


def test_enter_refuses_a_process_with_threads(tmp_path: Path) -> None:
    def go() -> None:
        stop = threading.Event()
        threading.Thread(target=stop.wait, daemon=True).start()
        try:
            sandbox.enter(make_policy(tmp_path, set()))
        finally:
            stop.set()

    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            go()
            os.write(w, b"entered")
        except sandbox.SandboxError as exc:
            os.write(w, exc.layer.encode())
        finally:
            os._exit(0)
    os.close(w)
    assert os.read(r, 100) == b"process"
    os.close(r)
    os.waitpid(pid, 0)


def test_enter_accepts_a_child_that_already_leads_its_own_session(tmp_path: Path) -> None:
    """A spawned child (start_new_session=True) is a session leader: setpgid would refuse it."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.setsid()
            sandbox.enter(sandbox.SandboxPolicy(scratch_dir=str(tmp_path), layers=frozenset(), keep_fds=(w,)))
            os.write(w, f"ok {os.getpgrp() == os.getpid()}".encode())
        except BaseException as exc:  # noqa: BLE001 - reported to the test
            os.write(w, repr(exc).encode())
        finally:
            os._exit(0)
    os.close(w)
    assert os.read(r, 200) == b"ok True"
    os.close(r)
    os.waitpid(pid, 0)


def test_enter_refuses_a_child_whose_forker_died_before_it_ran(tmp_path: Path) -> None:
    """A child that first runs after the process that forked it died has been reparented: read at
    that point, its parent's pid is the new one's, and the parent-death signal set after it would
    never come (a spare of a killed zygote left running). The forker's pid, known before the fork,
    is what the child checks."""
    r, w = os.pipe()
    forker = os.getpid()
    pid = os.fork()
    if pid == 0:
        try:
            # as if the forker had died and this process had been handed to another parent
            sandbox.enter(sandbox.SandboxPolicy(scratch_dir=str(tmp_path), layers=frozenset({"env"}),
                                                keep_fds=(w,), parent=forker + 1_000_000))
            os.write(w, b"entered")
        except BaseException as exc:  # noqa: BLE001 - reported to the test
            os.write(w, repr(exc).encode())
        finally:
            os._exit(0)
    os.close(w)
    said = os.read(r, 300).decode()
    os.close(r)
    os.waitpid(pid, 0)
    assert "the parent exited before the sandbox was entered" in said, said


def test_the_seccomp_program_assembles_for_every_known_architecture() -> None:
    for arch in seccomp.ARCHES.values():
        for deny_metadata in (True, False):
            tpl = seccomp.build_template(arch, deny_metadata)
            assert len(tpl.program) == 8 * tpl.length and 0 < tpl.length < 4096
            assert tpl.render(4242) != tpl.render(4243)  # the own-pid checks are really patched


# -- env ------------------------------------------------------------------------------------


def test_env_host_secrets_are_gone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NEXUS_TEST_SECRET", "hunter2")
    def seen() -> dict[str, Any]:
        return {"keys": sorted(os.environ), "getenv": os.getenv("NEXUS_TEST_SECRET"),
                "bytes": sorted(k.decode() for k in os.environb)}

    out = run(tmp_path, {"env"}, seen)
    fixed = sorted(sandbox.FIXED_ENV_KEYS)
    assert out.value == {"keys": fixed, "getenv": None, "bytes": fixed}


@pytest.mark.parametrize("uid", [False, True], ids=["no-uid", "uid"])
def test_a_policy_made_once_serves_each_child_with_its_own_folder_and_fds(tmp_path: Path, uid: bool) -> None:
    # as the zygote does: one policy made before the fork, each child giving its own scratch
    # folder, fds and parent to enter(); the folder the policy was made with is not the child's.
    # (Under uid the test's folder cannot be reached by the child's uid: its owner is checked)
    need("env", "fs", *(("uid",) if uid else ()))
    active = {n for n, st in sandbox.probe().items() if st.active}
    made = make_policy(tmp_path, active if uid else active - {"uid"})
    own = tmp_path / "own"
    own.mkdir()
    os.chmod(tmp_path, 0o711)
    r, w = os.pipe()
    stray = os.open(os.devnull, os.O_RDONLY)  # not kept: closed by enter
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            report: dict[str, Any] = {}
            try:
                sandbox.enter(made, scratch_dir=str(own), keep_fds=(w,), parent=parent)
                libc_home = ctypes.CDLL(None).getenv
                libc_home.restype = ctypes.c_char_p
                report = {"cwd": os.getcwd(), "home": os.environ["HOME"], "tmpdir": os.environ["TMPDIR"],
                          "libc_home": libc_home(b"HOME").decode(), "stray_open": _is_open(stray)}
                if not uid:
                    (own / "written").write_text("x")
                    report["own_written"] = True
                    try:
                        (Path(made.scratch_dir) / "written").write_text("x")
                        report["made_written"] = True
                    except OSError as exc:
                        report["made_written"] = exc.errno
            except BaseException as exc:  # noqa: BLE001 - everything goes back to the test
                report["error"] = f"{type(exc).__name__}: {exc}"
            os.write(w, json.dumps(report).encode())
        finally:
            os._exit(0)
    os.close(w)
    os.close(stray)
    data = b""
    while chunk := os.read(r, 65536):
        data += chunk
    os.close(r)
    os.waitpid(pid, 0)
    report = json.loads(data)
    want: dict[str, Any] = {"cwd": str(own), "home": str(own), "tmpdir": str(own), "libc_home": str(own),
                            "stray_open": False}
    if uid:  # the child's own folder became its uid's, the policy's stayed as it was
        assert (os.stat(own).st_uid, os.stat(made.scratch_dir).st_uid) == (made.uid_base + pid, os.getuid())
    else:
        want.update(own_written=True, made_written=errno.EACCES)
    assert report == want


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
        return True
    except OSError:
        return False


def test_env_the_exec_time_environment_block_is_zeroed(tmp_path: Path) -> None:
    """/proc/self/environ shows what exec put on the stack, not os.environ: a process started
    with a secret in its environment must not find it there after enter()."""
    need("env")
    program = textwrap.dedent(f"""
        import json, os, sys
        from nexus_tool_code_exec import sandbox
        sys.stdout.flush()
        sandbox.enter(sandbox.SandboxPolicy(scratch_dir={str(tmp_path)!r}, layers={{"env"}}, keep_fds=(1,)))
        with open("/proc/self/environ", "rb") as f:
            block = f.read()
        os.write(1, json.dumps({{"in_block": b"hunter2" in block, "environ": sorted(os.environ)}}).encode())
    """)
    env = dict(os.environ, NEXUS_TEST_SECRET="hunter2")
    proc = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True, timeout=30,
                          check=True)
    assert json.loads(proc.stdout) == {"in_block": False, "environ": sorted(sandbox.FIXED_ENV_KEYS)}


# -- rlimits --------------------------------------------------------------------------------


def test_rlimits_memory_bomb_ends_in_memory_error(tmp_path: Path) -> None:
    def bomb() -> int:
        hoard = []
        while True:
            hoard.append(bytearray(16 * 1024 * 1024))

    out = run(tmp_path, {"rlimits"}, bomb)
    assert out.error is not None and out.error.startswith("MemoryError"), out
    assert out.exit_code == 0


def test_rlimits_cpu_loop_is_killed_by_sigxcpu(tmp_path: Path) -> None:
    def spin() -> None:
        while True:
            pass

    out = run(tmp_path, {"rlimits"}, spin, cpu_seconds=1)
    assert out.signal == signal.SIGXCPU, out


def test_rlimits_file_size_bomb_in_scratch_gets_efbig(tmp_path: Path) -> None:
    def bomb() -> None:
        with open("big.bin", "wb") as f:
            f.writelines(b"\0" * (1024 * 1024) for _ in range(4))

    out = run(tmp_path, {"rlimits"}, bomb, file_size_mb=1)
    refused(out, "OSError", errno.EFBIG)
    assert (tmp_path / "scratch" / "big.bin").stat().st_size == 1024 * 1024


def test_rlimits_open_files_bomb_gets_emfile(tmp_path: Path) -> None:
    def bomb() -> None:
        held = []
        while True:
            held.append(open("/dev/null"))  # noqa: SIM115

    out = run(tmp_path, {"rlimits"}, bomb, open_files=16)
    refused(out, "OSError", errno.EMFILE)


def test_rlimits_thread_bomb_is_capped_under_uid(tmp_path: Path) -> None:
    def bomb() -> dict[str, Any]:
        stop = threading.Event()
        started = 0
        try:
            for _ in range(20):
                threading.Thread(target=stop.wait).start()
                started += 1
        except RuntimeError as exc:
            return {"started": started, "error": str(exc)}
        finally:
            stop.set()
        return {"started": started}

    out = run(tmp_path, {"rlimits", "uid"}, bomb, threads=4)
    assert out.value == {"started": 3, "error": "can't start new thread"}, out


# -- net ------------------------------------------------------------------------------------


def test_net_tcp_connect_to_a_host_listener_fails(tmp_path: Path, tcp_listener: socket.socket) -> None:
    port = tcp_listener.getsockname()[1]
    out = run(tmp_path, {"net"}, lambda: socket.create_connection(("127.0.0.1", port), timeout=2).close())
    refused(out, "OSError", errno.ENETUNREACH)


def test_net_a_shared_namespace_from_the_zygote_works_the_same(tmp_path: Path,
                                                                tcp_listener: socket.socket) -> None:
    need("net")
    if os.geteuid() != 0:
        pytest.skip("a shared namespace needs root")
    net_fd = sandbox.make_shared_netns()
    assert net_fd is not None
    port = tcp_listener.getsockname()[1]

    def attack() -> dict[str, Any]:
        try:
            os.fstat(net_fd)
            fd_open = True
        except OSError:
            fd_open = False
        try:
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
            return {"connected": True, "fd_open": fd_open}
        except OSError as exc:
            return {"connected": False, "errno": exc.errno, "fd_open": fd_open}

    try:
        policy = make_policy(tmp_path, {"net"})
        shared = sandbox.SandboxPolicy(scratch_dir=policy.scratch_dir, layers=policy.layers, net_fd=net_fd)
        out = sandbox.run_in_child(shared, attack)
    finally:
        os.close(net_fd)
    assert out.value == {"connected": False, "errno": errno.ENETUNREACH, "fd_open": False}, out
    # The test process itself is still in its own namespace.
    socket.create_connection(("127.0.0.1", port), timeout=2).close()
    tcp_listener.setblocking(True)
    tcp_listener.accept()[0].close()
    tcp_listener.setblocking(False)


def test_net_alone_does_not_stop_pathname_unix_sockets(tmp_path: Path) -> None:
    """Known and by design: a pathname AF_UNIX socket is a file, not part of the network
    namespace. seccomp (no socket()) is the layer that stops it; see the seccomp and full
    policy tests."""
    path = str(tmp_path / "host.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as srv:
        srv.bind(path)
        srv.listen(1)
        out = run(tmp_path, {"net"}, lambda: socket.socket(socket.AF_UNIX).connect(path))
        assert out.error is None
        srv.accept()[0].close()


# -- uid ------------------------------------------------------------------------------------


def needs_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("the uid layer needs root")


def test_uid_child_is_not_root_and_has_no_capability_left(tmp_path: Path) -> None:
    needs_root()

    def look() -> dict[str, Any]:
        with open("/proc/self/status") as f:
            caps = dict(line.split(":\t", 1) for line in f if line.startswith("Cap"))
        return {"ids": os.getresuid() + os.getresgid(), "groups": os.getgroups(), "pid": os.getpid(),
                "eff": int(caps["CapEff"], 16), "prm": int(caps["CapPrm"], 16)}

    out = run(tmp_path, {"uid"}, look)
    uid = sandbox.DEFAULT_UID_BASE + out.value["pid"]
    assert out.value["ids"] == [uid] * 6 and out.value["groups"] == []
    # not even CAP_DAC_READ_SEARCH (issue 11): the runtime is reached through the mount view
    assert out.value["eff"] == out.value["prm"] == 0
    assert (tmp_path / "scratch").stat().st_uid == uid


def test_uid_scratch_contents_are_handed_over_but_not_hard_links_out(tmp_path: Path, secret: Path) -> None:
    needs_root()
    scratch = tmp_path / "scratch"
    (scratch / "inputs").mkdir(parents=True)
    (scratch / "inputs" / "data.csv").write_text("a,b")
    os.link(secret, scratch / "linked")  # the same inode as a file outside scratch
    out = run(tmp_path, {"uid"}, lambda: Path("inputs/data.csv").write_text("a,b,c"))
    assert out.error is None, out
    assert (scratch / "inputs" / "data.csv").read_text() == "a,b,c"
    assert secret.stat().st_uid == 0


def test_uid_signal_to_the_test_process_is_refused(tmp_path: Path, usr1_guard: list[int]) -> None:
    needs_root()
    refused(run(tmp_path, {"uid"}, signal_parent), "PermissionError", errno.EPERM)


def test_uid_cannot_set_limits_or_priority_of_the_test_process(tmp_path: Path) -> None:
    needs_root()
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)
    prio = os.getpriority(os.PRIO_PROCESS, 0)
    out = run(tmp_path, {"uid"}, lambda: resource.prlimit(os.getppid(), resource.RLIMIT_NOFILE, nofile))
    refused(out, "PermissionError", errno.EPERM)
    out = run(tmp_path, {"uid"}, lambda: os.setpriority(os.PRIO_PROCESS, os.getppid(), prio))
    refused(out, "PermissionError", errno.EPERM)


def test_uid_cannot_chmod_or_read_host_files_but_can_still_read_the_runtime(
        tmp_path: Path, secret: Path, searchable_secret: Path) -> None:
    needs_root()
    # in a folder it may search: not the owner; below pytest's 0700 folder: not even that far
    refused(run(tmp_path, {"uid"}, lambda: os.chmod(searchable_secret, 0o666)), "PermissionError", errno.EPERM)
    refused(run(tmp_path, {"uid"}, lambda: os.chmod(secret, 0o666)), "PermissionError", errno.EACCES)
    assert secret.stat().st_mode & 0o777 == searchable_secret.stat().st_mode & 0o777 == 0o600
    # Without fs, the uid alone keeps a 0600 file out (it used to keep CAP_DAC_READ_SEARCH, which
    # read anything); a module first imported now still loads, wherever the runtime is installed.
    for path in (secret, searchable_secret):
        refused(run(tmp_path, {"uid"}, lambda path=path: Path(path).read_text()), "PermissionError", errno.EACCES)

    def lazily() -> list[str]:
        import colorsys
        import fractions

        return [colorsys.__name__, str(fractions.Fraction(1, 3))]

    assert run(tmp_path, {"uid"}, lazily).value == ["colorsys", "1/3"]


# -- fs (Landlock) --------------------------------------------------------------------------


def test_fs_secret_outside_scratch_is_unreadable(tmp_path: Path, secret: Path) -> None:
    refused(run(tmp_path, {"fs"}, lambda: secret.read_text()), "PermissionError", errno.EACCES)


def test_fs_writing_outside_scratch_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "dropped.txt"
    refused(run(tmp_path, {"fs"}, lambda: target.write_text("x")), "PermissionError", errno.EACCES)
    assert not target.exists()


def test_fs_listing_a_directory_outside_is_refused(tmp_path: Path) -> None:
    refused(run(tmp_path, {"fs"}, lambda: os.listdir(tmp_path)), "PermissionError", errno.EACCES)
    refused(run(tmp_path, {"fs"}, lambda: os.listdir("/")), "PermissionError", errno.EACCES)


def test_fs_scratch_is_fully_usable(tmp_path: Path) -> None:
    def work() -> list[str]:
        os.mkdir("sub")
        Path("sub/a.txt").write_text("a")
        os.rename("sub/a.txt", "sub/b.txt")
        with open("sub/b.txt", "r+") as f:
            f.truncate(0)
        os.symlink("sub/b.txt", "link")
        os.unlink("link")
        return sorted(os.listdir("sub"))

    assert run(tmp_path, {"fs"}, work).value == ["b.txt"]


def test_fs_symlink_out_of_scratch_does_not_escape(tmp_path: Path, secret: Path) -> None:
    def attack() -> str:
        os.symlink(secret, "escape")
        return Path("escape").read_text()

    refused(run(tmp_path, {"fs"}, attack), "PermissionError", errno.EACCES)


def test_fs_hard_link_and_rename_across_the_boundary_fail(tmp_path: Path, secret: Path) -> None:
    out = run(tmp_path, {"fs"}, lambda: os.link(secret, "stolen"))
    assert out.errno in (errno.EXDEV, errno.EACCES), out
    assert not (tmp_path / "scratch" / "stolen").exists()

    def move_out() -> None:
        Path("x").write_text("x")
        os.rename("x", tmp_path / "x")

    out = run(tmp_path, {"fs"}, move_out)
    assert out.errno in (errno.EXDEV, errno.EACCES), out
    assert not (tmp_path / "x").exists()


def test_fs_proc_and_etc_are_out_of_reach(tmp_path: Path) -> None:
    def reader(path: str) -> Callable[[], bytes]:
        return lambda: Path(path.format(ppid=os.getppid())).read_bytes()

    for path in ("/proc/self/environ", "/proc/{ppid}/mem", "/etc/passwd"):
        refused(run(tmp_path, {"fs"}, reader(path)), "PermissionError", errno.EACCES)


def test_fs_exec_is_never_granted(tmp_path: Path) -> None:
    refused(run(tmp_path, {"fs"}, lambda: os.execv(sys.executable, [sys.executable, "-c", "0"])),
            "PermissionError", errno.EACCES)


def test_fs_the_runtime_still_imports_lazily(tmp_path: Path) -> None:
    """Modules (and C extensions with their shared libraries) first imported after enter() load
    from the read-only paths: the zygote cannot import everything a script might use."""
    names = ["colorsys", "fractions", "lzma", "bz2", "decimal", "sqlite3", "zipfile", "csv", "ctypes.util",
             "cattrs.preconf.json", "attrs.validators"]

    def imports() -> dict[str, Any]:
        import importlib

        fresh = [n for n in names if n not in sys.modules]
        for n in names:
            importlib.import_module(n)
        import decimal
        import lzma

        return {"fresh": fresh, "lzma": lzma.decompress(lzma.compress(b"ok")).decode(),
                "decimal": str(decimal.Decimal(1) / 8)}

    out = run(tmp_path, {"fs"}, imports)
    assert out.error is None, out
    assert out.value["lzma"] == "ok" and out.value["decimal"] == "0.125"
    assert out.value["fresh"], "every module was already imported: the test proves nothing"


def test_fs_tcp_connect_refused_by_landlock_network_rules(tmp_path: Path,
                                                          tcp_listener: socket.socket) -> None:
    if landlock_abi() < 4:
        pytest.skip("Landlock network rules need ABI 4")
    port = tcp_listener.getsockname()[1]
    out = run(tmp_path, {"fs"}, lambda: socket.create_connection(("127.0.0.1", port), timeout=2).close())
    refused(out, "PermissionError", errno.EACCES)


def test_fs_scoping_refuses_signals_even_to_a_same_uid_process(tmp_path: Path, usr1_guard: list[int]) -> None:
    if landlock_abi() < 6:
        pytest.skip("Landlock signal scoping needs ABI 6")
    refused(run(tmp_path, {"fs"}, signal_parent), "PermissionError", errno.EPERM)


def test_fs_scoping_refuses_abstract_unix_sockets_outside(tmp_path: Path) -> None:
    if landlock_abi() < 6:
        pytest.skip("Landlock abstract-socket scoping needs ABI 6")
    name = f"\0nexus-sandbox-test-{os.getpid()}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as srv:
        srv.bind(name)
        srv.listen(1)
        refused(run(tmp_path, {"fs"}, lambda: socket.socket(socket.AF_UNIX).connect(name)),
                "PermissionError", errno.EPERM)


# -- seccomp --------------------------------------------------------------------------------


def test_seccomp_fork_is_refused(tmp_path: Path) -> None:
    def attack() -> None:
        if os.fork() == 0:
            os._exit(0)

    refused(run(tmp_path, {"seccomp"}, attack), "PermissionError", errno.EPERM)


def test_seccomp_exec_and_subprocess_are_refused(tmp_path: Path) -> None:
    refused(run(tmp_path, {"seccomp"}, lambda: os.execv("/bin/sh", ["sh", "-c", "true"])),
            "PermissionError", errno.EPERM)
    refused(run(tmp_path, {"seccomp"}, lambda: subprocess.run(["/bin/sh", "-c", "true"], check=False)),
            "PermissionError", errno.EPERM)
    refused(run(tmp_path, {"seccomp"}, lambda: os.posix_spawn("/bin/sh", ["sh"], {})),
            "PermissionError", errno.EPERM)


def test_seccomp_sockets_are_refused(tmp_path: Path) -> None:
    refused(run(tmp_path, {"seccomp"}, lambda: socket.socket()), "PermissionError", errno.EPERM)
    refused(run(tmp_path, {"seccomp"}, lambda: socket.socketpair()), "PermissionError", errno.EPERM)


def test_seccomp_threads_still_work(tmp_path: Path) -> None:
    def work() -> list[int]:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=8) as pool:
            return list(pool.map(lambda n: sum(range(n)), range(16)))

    assert run(tmp_path, {"seccomp"}, work).value == [sum(range(n)) for n in range(16)]


def test_seccomp_signals_to_self_work_to_others_not(tmp_path: Path, usr1_guard: list[int]) -> None:
    refused(run(tmp_path, {"seccomp"}, signal_parent), "PermissionError", errno.EPERM)

    def to_self() -> list[int]:
        got: list[int] = []
        signal.signal(signal.SIGUSR2, lambda s, f: got.append(s))
        os.kill(os.getpid(), signal.SIGUSR2)
        signal.raise_signal(signal.SIGUSR2)  # tgkill(own pid, own tid)
        os.kill(0, 0)  # our own process group
        return got

    assert run(tmp_path, {"seccomp"}, to_self).value == [signal.SIGUSR2, signal.SIGUSR2]


def test_seccomp_clone3_says_enosys_so_libc_falls_back(tmp_path: Path) -> None:
    out = run(tmp_path, {"seccomp"}, lambda: syscall("clone3", None, ctypes.c_size_t(0)))
    assert out.value == [-1, errno.ENOSYS]


def test_seccomp_thread_with_a_namespace_flag_is_refused(tmp_path: Path) -> None:
    flags = 0x00000100 | 0x00000800 | 0x00010000 | 0x40000000  # CLONE_VM|SIGHAND|THREAD|NEWNET
    out = run(tmp_path, {"seccomp"}, lambda: syscall("clone", flags, None, None, None, None))
    assert out.value == [-1, errno.EPERM]


def test_seccomp_x32_syscalls_kill_the_process(tmp_path: Path) -> None:
    if seccomp.current_arch().machine != "x86_64":
        pytest.skip("x32 exists on x86_64 only")
    out = run(tmp_path, {"seccomp"}, lambda: LIBC.syscall(ctypes.c_long(0x40000000 | 39)))
    assert out.signal == signal.SIGSYS, out


def _int80_getpid() -> int:
    import mmap

    code = b"\xb8\x14\x00\x00\x00\xcd\x80\xc3"  # mov eax, 20 (i386 getpid); int 0x80; ret
    mem = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    mem.write(code)
    addr = ctypes.addressof(ctypes.c_char.from_buffer(mem))
    return int(ctypes.CFUNCTYPE(ctypes.c_int)(addr)())


def test_seccomp_a_foreign_architecture_syscall_kills_the_process(tmp_path: Path) -> None:
    if seccomp.current_arch().machine != "x86_64":
        pytest.skip("the i386 entry point exists on x86_64 only")
    control = sandbox.run_in_child(make_policy(tmp_path, set()), _int80_getpid)
    if control.value is None:
        pytest.skip(f"no ia32 emulation in this kernel ({control})")
    out = run(tmp_path, {"seccomp"}, _int80_getpid)
    assert out.signal == signal.SIGSYS, out


def _ppid() -> int:
    return os.getppid()


# name -> arguments, built in the child. Each call is harmless if it went through (no-op values,
# or one that fails for another reason than EPERM), so a broken filter fails the test, never the
# machine.
REFUSED_SYSCALLS: dict[str, Callable[[], tuple[Any, ...]]] = {
    "ptrace": lambda: (0x4206, _ppid(), None, None),  # PTRACE_SEIZE does not stop the tracee
    "process_vm_readv": lambda: (_ppid(), None, 0, None, 0, 0),
    "kcmp": lambda: (os.getpid(), _ppid(), 0, 0, 0),
    "pidfd_open": lambda: (_ppid(), 0),
    "pidfd_send_signal": lambda: (-1, 0, None, 0),
    "tgkill": lambda: (_ppid(), _ppid(), 0),
    "tkill": lambda: (_ppid(), 0),
    "rt_sigqueueinfo": lambda: (_ppid(), 0, None),
    "prlimit64": lambda: (_ppid(), resource.RLIMIT_NOFILE, None, None),
    "sched_setaffinity": lambda: (_ppid(), 0, None),
    "unshare": lambda: (0x04000000,),  # CLONE_NEWUTS: only the child's own
    "setns": lambda: (-1, 0),
    "mount": lambda: (None, None, None, 0, None),
    "umount2": lambda: (b"/nonexistent", 0),
    "chroot": lambda: (b"/",),
    "pivot_root": lambda: (None, None),
    "keyctl": lambda: (0, -3, 0),  # KEYCTL_GET_KEYRING_ID of the session keyring
    "add_key": lambda: (None, None, None, 0, 0),
    "request_key": lambda: (None, None, None, 0),
    "bpf": lambda: (0, None, 0),
    "perf_event_open": lambda: (None, 0, -1, -1, 0),
    "userfaultfd": lambda: (0,),
    "personality": lambda: (0xFFFFFFFF,),  # query only
    "io_uring_setup": lambda: (1, None),
    "init_module": lambda: (None, 0, None),
    "finit_module": lambda: (-1, None, 0),
    "kexec_load": lambda: (0, 0, None, 0),
    "settimeofday": lambda: (None, None),
    "syslog": lambda: (10, None, 0),  # SYSLOG_ACTION_SIZE_BUFFER
    "open_by_handle_at": lambda: (-1, None, 0),
    "shmget": lambda: (0x6E657875, 4096, 0),  # no IPC_CREAT: nothing is ever created
    "mq_open": lambda: (b"nexus-sandbox-test", 0, 0, None),
    "seccomp": lambda: (0, 0, None),
    "chmod": lambda: (b"/nonexistent", 0o644),  # seccomp without uid also refuses metadata changes
    "fcntl": lambda: (0, 8, _ppid()),  # F_SETOWN: SIGIO to another process
    "ioctl": lambda: (0, 0x5412, b"x"),  # TIOCSTI
}


@pytest.mark.parametrize("name", sorted(REFUSED_SYSCALLS))
def test_seccomp_refuses_with_eperm(tmp_path: Path, name: str) -> None:
    if name not in seccomp.current_arch().table:
        pytest.skip(f"{name} does not exist on this architecture")
    out = run(tmp_path, {"seccomp"}, lambda: syscall(name, *REFUSED_SYSCALLS[name]()))
    assert out.value == [-1, errno.EPERM], (name, out, errno.errorcode.get((out.value or [0, 0])[1]))


def test_seccomp_the_same_calls_pass_without_the_filter(tmp_path: Path) -> None:
    """Control: the refusals above come from the filter, not from the calls themselves."""
    def calls() -> dict[str, int]:
        return {name: syscall(name, *REFUSED_SYSCALLS[name]())[1]
                for name in ("personality", "keyctl", "userfaultfd", "unshare", "prlimit64")}

    out = sandbox.run_in_child(make_policy(tmp_path, set()), calls)
    assert out.value is not None and errno.EPERM not in out.value.values(), out


def test_a_view_that_fails_half_way_leaves_the_tree_as_it_was(tmp_path: Path) -> None:
    """A runtime path that cannot be bound once its folder is covered must not leave the folder
    covered by an empty tmpfs, hiding the runtime from a child that then keeps
    CAP_DAC_READ_SEARCH to read it."""
    needs_root()
    from nexus_tool_code_exec.sandbox import view

    hidden = tmp_path / "hidden"
    (hidden / "lib").mkdir(parents=True)
    (hidden / "lib" / "mod.py").write_text("x = 1\n")
    (hidden / "lib").chmod(0o755)
    (hidden / "lib" / "mod.py").chmod(0o644)
    hidden.chmod(0o700)

    def attempt() -> dict[str, Any]:
        view._current = None
        real_mount = view._mount

        def failing_bind(source: Any, target: Any, kind: Any, flags: int, data: Any) -> int:
            if flags & view.MS_BIND and not flags & view.MS_REMOUNT:
                ctypes.set_errno(errno.EINVAL)
                return -1
            return int(real_mount(source, target, kind, flags, data))

        view._mount = failing_bind
        try:
            made = view.make((str(hidden / "lib"),))
        finally:
            view._mount = real_mount
        return {"error": made.error, "still_there": os.path.exists(hidden / "lib" / "mod.py")}

    out = sandbox.run_in_child(sandbox.SandboxPolicy(scratch_dir=str(tmp_path), layers=frozenset()), attempt)
    assert out.value is not None, out
    assert out.value["error"].startswith(f"binding {hidden / 'lib'} failed"), out
    assert out.value["still_there"], out


def test_where_no_view_can_be_made_the_child_keeps_only_read_search_and_says_why(tmp_path: Path) -> None:
    """The fallback (no mount namespaces here, or a runtime other users may not read): the child
    keeps CAP_DAC_READ_SEARCH, the only way it could read the runtime, and the layer's detail
    (what `nexus doctor` prints) says so and why."""
    needs_root()
    from nexus_tool_code_exec.sandbox import layers, view

    def look() -> dict[str, Any]:
        with open("/proc/self/status") as f:
            caps = dict(line.split(":\t", 1) for line in f if line.startswith("Cap"))
        return {"eff": int(caps["CapEff"], 16), "detail": layers.applied["uid"]}

    saved = view._current
    view._current = view.View(error="mount namespaces are not available here")  # as a fork inherits it
    try:
        out = run(tmp_path, {"uid"}, look)
    finally:
        view._current = saved
    assert out.value["eff"] == 1 << 2, out  # CAP_DAC_READ_SEARCH
    assert out.value["detail"].endswith("only CAP_DAC_READ_SEARCH, kept to read the runtime: no runtime view "
                                        "(mount namespaces are not available here)"), out
