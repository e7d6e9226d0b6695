"""The OS-level isolation of a run_code child: what `enter()` does to a freshly forked process.

The runner's warm zygote forks one child per script; the child calls `enter(policy)` before the
script's first line and from then on can reach the host only through the pipe fds it kept. The AST
check in front of it only gives early, clear errors; this module is the boundary.

Layers (fixed names, applied in this order; `SandboxPolicy.layers` picks which):

- ``env``      os.environ (and libc's environ) cleared to HOME/TMPDIR=scratch, LANG=C.UTF-8,
               TZ=UTC0; the initial environment block on the stack, which /proc/self/environ
               shows, is zeroed too.
- ``rlimits``  RLIMIT_AS (memory_mb), RLIMIT_CPU (cpu_seconds soft, +1 s hard), RLIMIT_NOFILE,
               RLIMIT_FSIZE, RLIMIT_CORE=0, RLIMIT_NPROC (threads; counted only for a non-root
               uid, so it bites together with ``uid``); one malloc arena and 4 MiB thread stacks so
               the script's own threads fit under the address-space cap.
- ``net``      a network namespace of its own: no interfaces but a loopback that is down. As root
               it is created directly (or joined, see `make_shared_netns`); otherwise inside a
               new user namespace, which is the only way an unprivileged process can make one.
- ``uid``      (root only) the child stops being root: a per-run uid/gid (uid_base + pid, so no
               two live children share one), no supplementary groups, and no capabilities except
               CAP_DAC_READ_SEARCH, so it can still *read* the root-owned runtime (e.g. under
               /root/.pyenv) wherever ``fs`` allows. The scratch dir is chowned to that uid. Every
               kernel check of the form "same owner or privileged" now fails against the host's
               processes: kill, ptrace, prlimit, setpriority, sched_setaffinity, SIGIO owners...
- ``fs``       Landlock (ABI-aware): read-only use of `read_paths`, read-write use of scratch_dir,
               /dev/null read-write, nothing else; never execute. ABI >= 4: every TCP bind/connect
               refused. ABI >= 6: no signals to and no abstract unix sockets of processes outside
               the sandbox.
- ``seccomp``  last, with no_new_privs: see `_seccomp` for the full list. fork, vfork, clone
               without CLONE_THREAD (or with namespace flags), execve(at), socket(pair), ptrace,
               process_vm_*, signals/pidfds/prlimit/scheduling aimed at another pid, namespaces and
               mounts, keyrings, bpf, perf, userfaultfd, io_uring, modules, SysV/POSIX IPC, clock
               and host settings; chmod/chown/utime/xattr changes when ``uid`` is off. clone3 gets
               ENOSYS (glibc then falls back to clone, whose flags BPF can see); syscalls newer than
               the table get ENOSYS; a foreign architecture or x32 syscall kills the process.

Always done, whatever the layers: own process group (`os.setpgid(0, 0)`, so a timeout can kill
the group; not setsid, whose scheduler autogroup costs up to several ms), every fd not kept
closed and 0/1/2 on /dev/null unless kept, cwd = scratch_dir, no .pyc writing, and SIGKILL when
the parent (the zygote) dies.

What a script sees when it is refused (errno -> Python exception):

- open/listdir/write/rename outside its paths: EACCES -> PermissionError (Landlock); a hard link
  out of scratch: EXDEV -> OSError.
- socket(), socketpair(): EPERM -> PermissionError (seccomp). Without seccomp: TCP connect/bind
  EACCES -> PermissionError (Landlock), otherwise ENETUNREACH -> OSError (network namespace).
- os.fork(), subprocess, os.posix_spawn, os.exec*(): EPERM -> PermissionError.
- os.kill/killpg/pidfd_open/sched_setaffinity/setpriority/prlimit on another process: EPERM ->
  PermissionError (seccomp, and independently ``uid`` and Landlock scoping).
- ptrace, process_vm_readv/writev, mount, unshare, bpf, keyctl, ...: EPERM (ctypes callers see -1).
- chmod/chown/utime/setxattr when ``uid`` is off: EPERM -> PermissionError.
- memory: ENOMEM -> MemoryError. CPU time: SIGXCPU at cpu_seconds, SIGKILL one second later.
  File size: EFBIG -> OSError "File too large" (CPython ignores SIGXFSZ). Open files: EMFILE ->
  OSError "Too many open files". Threads beyond the limit: EAGAIN -> RuntimeError "can't start
  new thread".

For the zygote: call `prepare(policy)` once before forking (the seccomp programs, the Landlock
ruleset and the environment block's address are then worked out once instead of in every child),
pass `make_shared_netns()`'s fd as `SandboxPolicy.net_fd` (joining a namespace costs ~15 us,
creating one ~0.6 ms), start the zygote itself with a clean environment, and `gc.freeze()` after
its imports so children do not copy-on-write the whole heap on their first collection.

What a child can still do (known, by design or beyond these layers):

- stat() any path it can guess: existence, size, owner and times (Landlock governs opening and
  changing the tree, not metadata reads). Never the content or a directory listing.
- read heap copies of the zygote's environment with ctypes: enter() clears os.environ, libc's
  environ and the exec-time block, not freed heap memory. Start the zygote with a clean env.
- fill the scratch file system: RLIMIT_FSIZE bounds each file, not their number; put scratch on
  a size-limited file system if that matters. Same for memfd_create (tmpfs memory, file_size_mb
  per memfd, open_files of them).
- use every CPU core with threads, for cpu_seconds of CPU time in total (the wall-clock timeout is
  the runner's).
- without ``seccomp``: connect to a pathname unix socket it can reach (they cross network
  namespaces, and Landlock ABI <= 7 does not govern connect); without ``fs``: read every file root
  can (``uid`` keeps CAP_DAC_READ_SEARCH) and, if ``uid`` is off too, write them. The layers are
  meant to be used together; `probe()` says which this machine has.
- the deny-list filter allows syscalls it does not name; unknown numbers above the table get
  ENOSYS. A thread may change its own affinity or priority (pid 0), not another process's.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import importlib.util
import json
import os
import resource
import select
import selectors
import shutil
import signal
import socket
import stat
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

import attrs

from . import _landlock, _seccomp, protocol

# The order enter() applies them in; see the module docstring.
LAYERS: tuple[str, ...] = ("env", "rlimits", "net", "uid", "fs", "seccomp")
ALL_LAYERS: frozenset[str] = frozenset(LAYERS)

THREAD_STACK_BYTES = 4 * 1024 * 1024
DEFAULT_UID_BASE = 2_000_000_000
# Modules the run_code child imports lazily from disk, besides the stdlib.
RUNTIME_MODULES: tuple[str, ...] = ("attrs", "attr", "cattrs", "cattr", "nexus_core", "nexus_tool_code_exec")

_MiB = 1024 * 1024

_libc = ctypes.CDLL(None, use_errno=True)
_prctl = _libc.prctl
_unshare = _libc.unshare
_setns = _libc.setns
_capset = _libc.capset
_clearenv = _libc.clearenv
_mallopt = getattr(_libc, "mallopt", None)  # glibc only; musl has one arena per thread anyway

PR_SET_PDEATHSIG = 1
PR_SET_KEEPCAPS = 8
PR_SET_NO_NEW_PRIVS = 38
M_ARENA_MAX = -8
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
CAP_DAC_READ_SEARCH = 2
_LINUX_CAPABILITY_VERSION_3 = 0x20080522


class SandboxError(Exception):
    """A requested layer (or the basic process setup) could not be applied; never ignored."""

    def __init__(self, layer: str, reason: str) -> None:
        super().__init__(f"sandbox layer {layer!r} could not be applied: {reason}")
        self.layer = layer
        self.reason = reason


@attrs.frozen
class Limits:
    """Resource limits of one run. threads counts the main thread; it is enforced only with the
    ``uid`` layer (RLIMIT_NPROC does nothing for root)."""

    memory_mb: int = 512
    cpu_seconds: int = 30
    open_files: int = 64
    file_size_mb: int = 16
    threads: int = 64


def _check_layers(_inst: object, _attr: object, value: frozenset[str]) -> None:
    unknown = set(value) - ALL_LAYERS
    if unknown:
        raise ValueError(f"unknown sandbox layer(s) {sorted(unknown)}; known: {', '.join(LAYERS)}")


@functools.cache
def _runtime_read_paths_cached(extra: tuple[str, ...]) -> tuple[str, ...]:
    paths: list[str] = []

    def add(p: str | None) -> None:
        if p:
            p = os.path.abspath(p)
            if os.path.exists(p) and p not in paths:
                paths.append(p)

    # The stdlib (lib-dynload lives inside it on CPython builds) and the platform stdlib.
    cfg = sysconfig.get_paths()
    add(cfg.get("stdlib"))
    add(cfg.get("platstdlib"))
    # sys.path entries inside the interpreter's prefixes: site-packages, lib-dynload, pythonXY.zip.
    prefixes = {os.path.abspath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix,
                                             sys.base_exec_prefix)}
    for entry in sys.path:
        if entry and any(os.path.abspath(entry).startswith(pre + os.sep) for pre in prefixes):
            add(entry)
    # The sys.path entry that holds each runtime package (an editable install's src/ folder, or
    # site-packages). Found without importing anything.
    for name in RUNTIME_MODULES + extra:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        if spec is None:
            continue
        if spec.submodule_search_locations:
            for loc in spec.submodule_search_locations:
                add(os.path.dirname(loc))
        elif spec.origin and os.path.isabs(spec.origin):
            add(os.path.dirname(spec.origin))
    # What the dynamic loader opens when an extension module (say _lzma, _ctypes) is first
    # imported and pulls in a shared library not loaded yet: its cache and the system lib dirs.
    add("/etc/ld.so.cache")
    multiarch = getattr(sys.implementation, "_multiarch", None)
    for d in ("/lib", "/usr/lib"):
        if multiarch:
            add(f"{d}/{multiarch}")
    for d in ("/lib64", "/usr/lib64"):
        add(d)
    for d in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep):
        add(d)
    # The shared libraries already mapped (libpython, libc...) need no rule: the loader finds
    # them by soname without opening them again.
    add("/dev/null")
    add("/dev/urandom")
    return tuple(paths)


def runtime_read_paths(extra_modules: Iterable[str] = ()) -> tuple[str, ...]:
    """The read-only paths the child's Python runtime needs: stdlib, lib-dynload, site-packages
    and the folders holding attrs/cattrs/nexus_core/nexus_tool_code_exec (plus `extra_modules`),
    the loader's cache and system library folders, /dev/null and /dev/urandom. Only existing
    paths; computed once per process."""
    return _runtime_read_paths_cached(tuple(extra_modules))


def _to_paths(value: Iterable[str]) -> tuple[str, ...]:
    return tuple(value)


def _to_layers(value: Iterable[str]) -> frozenset[str]:
    return frozenset(value)


def _to_fds(value: Iterable[int]) -> tuple[int, ...]:
    return tuple(int(fd) for fd in value)


@attrs.frozen
class SandboxPolicy:
    """What `enter()` does. net_fd: an fd from `make_shared_netns()` to join instead of creating
    a namespace per child (creating one costs ~0.6 ms, joining ~15 us); it is closed by enter()."""

    scratch_dir: str
    read_paths: tuple[str, ...] = attrs.field(factory=runtime_read_paths, converter=_to_paths)
    limits: Limits = attrs.field(factory=Limits)
    layers: frozenset[str] = attrs.field(default=ALL_LAYERS, converter=_to_layers, validator=_check_layers)
    keep_fds: tuple[int, ...] = attrs.field(default=(), converter=_to_fds)
    net_fd: int | None = None
    uid_base: int = DEFAULT_UID_BASE


@attrs.frozen
class LayerStatus:
    name: str
    active: bool
    detail: str


# What the last enter() in this process applied, layer -> detail (read by the probe).
applied: dict[str, str] = {}


def _errno_text(err: int) -> str:
    return f"{errno.errorcode.get(err, str(err))} ({os.strerror(err)})"


def _libc_call(layer: str, what: str, res: int) -> None:
    if res != 0:
        raise SandboxError(layer, f"{what} failed: {_errno_text(ctypes.get_errno())}")


# ---------------------------------------------------------------- always-on process setup


def _thread_count() -> int:
    try:
        return int(_proc_stat_fields()[20 - 3])  # field 20: num_threads, as the kernel counts them
    except (OSError, ValueError, IndexError):
        return threading.active_count()


def _close_fds(keep: Iterable[int]) -> None:
    """0/1/2 onto /dev/null unless kept; every other fd not kept closed (close_range, so this is
    a handful of syscalls whatever the fd table size)."""
    kept = sorted({fd for fd in keep if fd >= 0})
    devnull = os.open("/dev/null", os.O_RDWR | os.O_CLOEXEC)
    for fd in (0, 1, 2):
        if fd not in kept and fd != devnull:
            os.dup2(devnull, fd, inheritable=False)
    low = 3
    for fd in kept + [2**31 - 1]:
        if fd >= low:
            os.closerange(low, fd)
            low = fd + 1
    if devnull > 2 and devnull not in kept:
        try:
            os.close(devnull)
        except OSError:
            pass  # already closed by closerange


# ---------------------------------------------------------------- env


FIXED_ENV_KEYS = ("HOME", "LANG", "TMPDIR", "TZ")


def _proc_stat_fields() -> list[bytes]:
    fd = os.open("/proc/self/stat", os.O_RDONLY | os.O_CLOEXEC)
    try:
        raw = os.read(fd, 4096)
    finally:
        os.close(fd)
    # The fields after "pid (comm) ", numbered from 3 (state); comm may hold spaces and parens.
    return raw[raw.rindex(b")") + 2:].split()


@functools.cache
def _env_block() -> tuple[int, int]:
    """env_start/env_end (fields 50/51): where exec put the environment strings. A fork child
    has the same addresses, so the zygote can look them up once (`prepare`)."""
    fields = _proc_stat_fields()
    return int(fields[50 - 3]), int(fields[51 - 3])


def _apply_env(scratch: str) -> str:
    # The block the kernel copied onto the stack at exec still holds the zygote's environment
    # (it is what /proc/self/environ shows), whatever os.environ says: zero it.
    try:
        env_start, env_end = _env_block()
    except (OSError, ValueError, IndexError) as exc:
        raise SandboxError("env", f"cannot locate the environment block in /proc/self/stat: {exc}") from None
    _clearenv()  # libc's environ, including entries os.environ never saw (no '=', undecodable)
    data = getattr(os.environ, "_data", None)
    if isinstance(data, dict):
        # libc's side is already empty: drop the mapping's copies without an unsetenv per key
        # (os.environ.clear() costs ~0.3 ms in a fresh fork). os.environb shares this dict.
        data.clear()
    else:
        os.environ.clear()
    if env_end > env_start:
        ctypes.memset(env_start, 0, env_end - env_start)
    os.environ.update({"HOME": scratch, "TMPDIR": scratch, "LANG": "C.UTF-8", "TZ": "UTC0"})
    tempfile.tempdir = scratch  # gettempdir() may have cached the host's /tmp already
    return "environment reduced to " + ", ".join(FIXED_ENV_KEYS) + "; exec-time block zeroed"


# ---------------------------------------------------------------- rlimits


def _address_space_bytes() -> int:
    with open("/proc/self/statm", "rb") as f:
        return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


# The zygote's address-space size when prepare() ran: a fork child starts with the same
# mappings, and this spares each child a /proc read for a sanity check.
_mapped_at_prepare: int | None = None


def _apply_rlimits(limits: Limits) -> str:
    mapped = _mapped_at_prepare
    if mapped is None:
        try:
            mapped = _address_space_bytes()
        except OSError as exc:
            raise SandboxError("rlimits", f"cannot read /proc/self/statm: {exc.strerror}") from None
    want_as = limits.memory_mb * _MiB
    # Headroom for the runtime's own next allocations; below this the child could not even run.
    if want_as < mapped + 16 * _MiB:
        raise SandboxError("rlimits", f"memory_mb={limits.memory_mb} is below what the process already maps "
                                      f"({mapped // _MiB} MiB) plus 16 MiB of headroom")
    # Each glibc arena reserves 64 MiB of address space (128 MiB while aligning): threads with
    # their own arenas would hit RLIMIT_AS long before using memory. One arena; the GIL
    # serialises most allocation anyway, and pymalloc serves small objects.
    if _mallopt is not None:
        _mallopt(M_ARENA_MAX, 1)
    # pthread's default stack is RLIMIT_STACK (8 MiB) per thread; 4 MiB keeps deep recursion
    # working and 64 threads within 256 MiB.
    threading.stack_size(THREAD_STACK_BYTES)
    settings = (
        (resource.RLIMIT_AS, want_as, want_as),
        # Soft: SIGXCPU (default action: terminate). Hard, a second later: SIGKILL, in case the
        # script catches SIGXCPU.
        (resource.RLIMIT_CPU, limits.cpu_seconds, limits.cpu_seconds + 1),
        (resource.RLIMIT_NOFILE, limits.open_files, limits.open_files),
        (resource.RLIMIT_FSIZE, limits.file_size_mb * _MiB, limits.file_size_mb * _MiB),
        (resource.RLIMIT_CORE, 0, 0),
        (resource.RLIMIT_NPROC, limits.threads, limits.threads),
        # POSIX message queues are refused by seccomp; no bytes for them either way.
        (resource.RLIMIT_MSGQUEUE, 0, 0),
    )
    root = os.geteuid() == 0
    for which, soft, hard in settings:
        if not root:
            # An unprivileged process may only lower its hard limits; never ask for more.
            _, cur_hard = resource.getrlimit(which)
            if cur_hard != resource.RLIM_INFINITY:
                soft, hard = min(soft, cur_hard), min(hard, cur_hard)
        try:
            resource.setrlimit(which, (soft, hard))
        except (OSError, ValueError) as exc:
            raise SandboxError("rlimits", f"setrlimit({which}, {soft}, {hard}): {exc}") from None
    return (f"address space {limits.memory_mb} MiB, CPU {limits.cpu_seconds} s, "
            f"{limits.open_files} open files, "
            f"{limits.file_size_mb} MiB per file, {limits.threads} threads (with uid), no core dumps")


# ---------------------------------------------------------------- net


def make_shared_netns() -> int | None:
    """For the zygote, once: an O_RDONLY fd on a new, empty network namespace that children then
    join (`SandboxPolicy.net_fd`) instead of each creating its own, which costs ~0.6 ms plus its
    teardown. Children share it, but it has no interfaces up and, under seccomp, they cannot
    open sockets at all. Only root can do this without a user namespace; others get None (each
    child then unshares its own). The calling thread is back in its own namespace on return."""
    if os.geteuid() != 0:
        return None
    old = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        _libc_call("net", "unshare(CLONE_NEWNET)", _unshare(CLONE_NEWNET))
        try:
            return os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        finally:
            _libc_call("net", "setns(back to the original namespace)", _setns(old, CLONE_NEWNET))
    finally:
        os.close(old)


def _write_proc(path: str, text: str) -> None:
    try:
        with open(path, "w") as f:
            f.write(text)
    except OSError as exc:
        raise SandboxError("net", f"writing {path}: {exc.strerror}") from None


def _set_caps(effective: int, permitted: int, layer: str) -> None:
    header = (ctypes.c_uint32 * 2)(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)(effective, permitted, 0, 0, 0, 0)  # [eff, perm, inh] x 2 words
    _libc_call(layer, "capset", _capset(header, data))


def _apply_net(net_fd: int | None) -> str:
    if net_fd is not None:
        res = _setns(net_fd, CLONE_NEWNET)
        os.close(net_fd)
        _libc_call("net", "setns(shared network namespace)", res)
        return "shared empty network namespace (loopback down)"
    if os.geteuid() == 0:
        _libc_call("net", "unshare(CLONE_NEWNET)", _unshare(CLONE_NEWNET))
        return "own network namespace (loopback down)"
    uid, gid = os.geteuid(), os.getegid()
    res = _unshare(CLONE_NEWUSER | CLONE_NEWNET)
    if res != 0:
        err = ctypes.get_errno()
        hint = ""
        if err in (errno.EPERM, errno.ENOSPC, errno.EACCES):
            hint = " (unprivileged user namespaces disabled? user.max_user_namespaces, " \
                   "kernel.unprivileged_userns_clone, kernel.apparmor_restrict_unprivileged_userns)"
        raise SandboxError("net", f"unshare(CLONE_NEWUSER|CLONE_NEWNET) failed: {_errno_text(err)}{hint}")
    # Map our own ids only (all an unprivileged process may map), then give up the capabilities
    # the new user namespace granted: they were needed for nothing but the maps.
    _write_proc("/proc/self/setgroups", "deny")
    _write_proc("/proc/self/uid_map", f"{uid} {uid} 1")
    _write_proc("/proc/self/gid_map", f"{gid} {gid} 1")
    _set_caps(0, 0, "net")
    return "own user + network namespace (loopback down), no capabilities"


# ---------------------------------------------------------------- uid


def _chown_tree(top: str, uid: int) -> None:
    os.chown(top, uid, uid)
    with os.scandir(top) as it:
        if next(it, None) is None:
            return  # the usual case, a fresh scratch dir: skip os.walk's cost
    for dirpath, dirnames, filenames in os.walk(top):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
                continue  # a hard link: the same inode has a name outside scratch too; leave it
            os.lchown(path, uid, uid)


def _apply_uid(policy: SandboxPolicy) -> str:
    if os.geteuid() != 0:
        raise SandboxError("uid", "not running as root, so there is no other uid to switch to "
                                  "(seccomp and Landlock scoping still keep signals and ptrace in)")
    uid = policy.uid_base + os.getpid()
    try:
        _chown_tree(policy.scratch_dir, uid)
    except OSError as exc:
        raise SandboxError("uid", f"chown of the scratch dir to {uid}: {exc}") from None
    # Keep the permitted set across setresuid so CAP_DAC_READ_SEARCH can be kept: the runtime
    # under a 0700 /root must stay readable. Everything else goes.
    _libc_call("uid", "prctl(PR_SET_KEEPCAPS)", _prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0))
    try:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    except OSError as exc:
        raise SandboxError("uid", f"switching to uid {uid}: {exc}") from None
    keep = 1 << CAP_DAC_READ_SEARCH
    _set_caps(keep, keep, "uid")
    _libc_call("uid", "prctl(PR_SET_KEEPCAPS, 0)", _prctl(PR_SET_KEEPCAPS, 0, 0, 0, 0))
    if os.getresuid() != (uid, uid, uid) or os.getresgid() != (uid, uid, uid) or os.getgroups():
        raise SandboxError("uid", "the uid/gid switch did not take")
    return f"uid/gid {policy.uid_base}+pid, no groups, only CAP_DAC_READ_SEARCH (reads beneath fs's paths)"


# ---------------------------------------------------------------- fs


@functools.cache
def _landlock_ruleset(read_paths: tuple[str, ...]) -> _landlock.Ruleset:
    return _landlock.prepare(tuple(p for p in read_paths if p != "/dev/null"), rw_files=("/dev/null",))


def _apply_fs(policy: SandboxPolicy) -> str:
    try:
        ruleset = _landlock_ruleset(policy.read_paths)
        _landlock.restrict(ruleset, write_dirs=(policy.scratch_dir,))
    except _landlock.LandlockError as exc:
        raise SandboxError("fs", str(exc)) from None
    return ruleset.describe()


# ---------------------------------------------------------------- seccomp


@functools.cache
def _seccomp_filter(deny_metadata: bool) -> _seccomp.Prepared:
    return _seccomp.prepare(deny_metadata)


def _apply_seccomp(deny_metadata: bool) -> str:
    try:
        prepared = _seccomp_filter(deny_metadata)
        prepared.install(os.getpid())
    except _seccomp.SeccompError as exc:
        raise SandboxError("seccomp", str(exc)) from None
    extra = "; chmod/chown/utime/xattr refused too" if deny_metadata else ""
    return (f"{prepared.arch.machine} filter of {prepared.template.length} BPF instructions: "
            f"fork, exec, sockets, "
            f"ptrace, namespaces and signals to other pids refused (EPERM){extra}; foreign arch killed")


def prepare(policy: SandboxPolicy | None = None) -> None:
    """Do once, in the zygote before it forks, the work each child would otherwise repeat
    (a child pays twice for it: the work, and copy-on-write faults): the runtime paths, the
    Landlock ruleset for `policy.read_paths`, both seccomp programs, the environment block's
    address. Errors are left for enter() and probe() to report, each with its layer."""
    global _mapped_at_prepare
    read_paths = policy.read_paths if policy is not None else runtime_read_paths()
    try:
        _mapped_at_prepare = _address_space_bytes()
    except OSError:
        pass
    try:
        _env_block()
    except (OSError, ValueError, IndexError):
        pass
    try:
        _landlock_ruleset(tuple(read_paths))
    except _landlock.LandlockError:
        pass
    for deny_metadata in (True, False):
        try:
            _seccomp_filter(deny_metadata)
        except _seccomp.SeccompError:
            pass


# ---------------------------------------------------------------- enter


def enter(policy: SandboxPolicy) -> None:
    """Isolate this freshly forked, single-threaded process for good. Raises SandboxError naming
    the layer that could not be applied; the process is then half-isolated and must exit.

    Order, and why:
    1. check single-threaded: unshare, setresuid and Landlock act per thread or refuse threads.
    2. setpgid: own process group, so the runner's timeout kills the whole group and terminal
       signals (which go to the foreground group) do not reach us.
    3. fds: nothing inherited by accident survives into the later layers (or the script).
    4. env, then chdir(scratch): /proc is still readable, and later steps see the clean state.
    5. rlimits: while still root, so the hard limits are set before privileges go.
    6. net: needs CAP_SYS_ADMIN (as root) before uid gives it up.
    7. uid: after net; before Landlock so the chown of scratch and the rule opens see the final
       credentials. The parent-death signal is set after it (a credential change clears it).
    8. fs (Landlock): needs to open its paths, so before seccomp.
    9. seccomp last: the narrowest layer; it would refuse the syscalls the steps above need.
    """
    applied.clear()
    layers = policy.layers
    parent = os.getppid()
    if _thread_count() != 1:
        raise SandboxError("process", "enter() must run in a single-threaded process (fork first, "
                                      "before any thread starts)")
    try:
        # A process group of our own, not a session: setsid() also creates a scheduler
        # autogroup, measured here at 20 us typical but 3-6 ms at the 90th percentile. The group
        # is what the runner's timeout kills; the terminal is out of reach anyway (0/1/2 are
        # /dev/null, Landlock refuses /dev/tty, seccomp refuses TIOCSTI). A child that already
        # leads its group (a spawned one, start_new_session=True) has one, and setpgid would
        # refuse a session leader with EPERM.
        if os.getpgrp() != os.getpid():
            os.setpgid(0, 0)
        keep = tuple(policy.keep_fds) + ((policy.net_fd,) if policy.net_fd is not None else ())
        _close_fds(keep)
    except OSError as exc:
        raise SandboxError("process", f"setpgid/closing fds: {exc}") from None
    if "env" in layers:
        applied["env"] = _apply_env(policy.scratch_dir)
    try:
        os.chdir(policy.scratch_dir)
    except OSError as exc:
        raise SandboxError("process", f"chdir to scratch dir: {exc}") from None
    # The read-only paths cannot take __pycache__ writes; do not even try.
    sys.dont_write_bytecode = True
    if "rlimits" in layers:
        applied["rlimits"] = _apply_rlimits(policy.limits)
    if "net" in layers:
        applied["net"] = _apply_net(policy.net_fd)
    elif policy.net_fd is not None:
        os.close(policy.net_fd)
    if "uid" in layers:
        applied["uid"] = _apply_uid(policy)
    _libc_call("process", "prctl(PR_SET_PDEATHSIG)", _prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0))
    if os.getppid() != parent:
        raise SandboxError("process", "the parent exited while the sandbox was being set up")
    if "fs" in layers or "seccomp" in layers:
        # Both require it; it also means no exec could ever gain privileges.
        _libc_call("process", "prctl(PR_SET_NO_NEW_PRIVS)", _prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))
    if "fs" in layers:
        applied["fs"] = _apply_fs(policy)
    if "seccomp" in layers:
        applied["seccomp"] = _apply_seccomp(deny_metadata="uid" not in layers)


# ---------------------------------------------------------------- probe


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
                select.select([pidfd], [], [], remaining)
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
    cmd = [sys.executable, "-c", "from nexus_tool_code_exec.sandbox import _probe_main; _probe_main()"]
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


def doctor_lines(statuses: dict[str, LayerStatus], trivial_run_ms: float | None) -> list[str]:
    """The `nexus doctor` text: one line per layer (name, active/unavailable, why), then the
    cost of a trivial run."""
    lines = []
    for name in LAYERS + tuple(sorted(set(statuses) - ALL_LAYERS)):
        st = statuses.get(name)
        if st is None:
            lines.append(f"{name:<8} {'unavailable':<11}  not probed")
        else:
            lines.append(f"{name:<8} {'active' if st.active else 'unavailable':<11}  {st.detail}")
    if trivial_run_ms is None:
        lines.append("trivial run_code script: not measured")
    else:
        lines.append(f"trivial run_code script: {trivial_run_ms:.1f} ms")
    return lines
