"""`enter()`: each layer applied to a freshly forked, single-threaded child, in order (see the
package docstring for what each does and what a script sees); and `prepare()`, which the zygote
calls once so that each child only carries the layers out. Runs in the child and the zygote."""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import resource
import signal
import stat
import sys
import tempfile
import threading
from collections.abc import Iterable

from . import landlock, seccomp, view
from .libc import PR_SET_KEEPCAPS, PR_SET_NO_NEW_PRIVS, PR_SET_PDEATHSIG, errno_text, last_error, libc, prctl
from .paths import runtime_read_paths
from .policy import Limits, SandboxError, SandboxPolicy

THREAD_STACK_BYTES = 4 * 1024 * 1024

_MiB = 1024 * 1024

_unshare = libc.unshare
_setns = libc.setns
_capset = libc.capset
_clearenv = libc.clearenv
_mallopt = getattr(libc, "mallopt", None)  # glibc only; musl has one arena per thread anyway

M_ARENA_MAX = -8
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
CAP_DAC_READ_SEARCH = 2
_LINUX_CAPABILITY_VERSION_3 = 0x20080522

# What the last enter() in this process applied, layer -> detail (read by the probe).
applied: dict[str, str] = {}


def _libc_call(layer: str, what: str, res: int) -> None:
    if res != 0:
        raise SandboxError(layer, f"{what} failed: {last_error()}")


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
    if env_end > env_start:
        ctypes.memset(env_start, 0, env_end - env_start)
    fixed = (("HOME", scratch), ("TMPDIR", scratch), ("LANG", "C.UTF-8"), ("TZ", "UTC0"))
    if isinstance(data, dict):
        # libc's side is already empty: drop the mapping's copies without an unsetenv per key
        # (os.environ.clear() costs ~0.3 ms in a fresh fork). os.environb shares this dict, whose
        # keys and values are the encoded bytes. Set the same way, by putenv and the dict: each
        # page a fresh fork writes to is a copy, and os.environ.update's way through the
        # MutableMapping ABC wrote to ~50 of them, this to ~13
        data.clear()
        for key, value in fixed:
            name, text = os.fsencode(key), os.fsencode(value)
            os.putenv(name, text)
            data[name] = text
    else:
        os.environ.clear()
        for key, value in fixed:
            os.environ[key] = value
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


#: the limits a pool's child enters the sandbox with (launchers/pool.py): above any a run asks
#: for, so that each run's START lowers them to its own (`lower_limits`). A child may lower its
#: limits but, its privileges gone, never raise them again.
CEILING_MEMORY_MB = 1 << 30  # 1 PiB of address space: no limit
CEILING_CPU_SECONDS = 1 << 30


def lower_limits(memory_mb: int, cpu_seconds: int) -> None:
    """Lower RLIMIT_AS and RLIMIT_CPU to one run's, in a child that entered the sandbox with the
    rlimits layer (a shared pool's spare entered it with the pool's ceilings, another child with
    these same limits already). Raises SandboxError("rlimits", ...) where they cannot be set."""
    if "rlimits" not in applied:
        return
    mapped = _mapped_at_prepare
    want_as = memory_mb * _MiB
    if mapped is not None and want_as < mapped + 16 * _MiB:
        raise SandboxError("rlimits", f"memory_mb={memory_mb} is below what the process already maps "
                                      f"({mapped // _MiB} MiB) plus 16 MiB of headroom")
    for which, soft, hard in ((resource.RLIMIT_AS, want_as, want_as),
                              (resource.RLIMIT_CPU, cpu_seconds, cpu_seconds + 1)):
        cur_soft, cur_hard = resource.getrlimit(which)
        if cur_hard != resource.RLIM_INFINITY:
            soft, hard = min(soft, cur_hard), min(hard, cur_hard)
        if (soft, hard) == (cur_soft, cur_hard):
            continue
        try:
            resource.setrlimit(which, (soft, hard))
        except (OSError, ValueError) as exc:
            raise SandboxError("rlimits", f"setrlimit({which}, {soft}, {hard}): {exc}") from None


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


#: capset's two arguments, made once (in the zygote) and filled in by each child: making
#: ctypes arrays in a fresh fork wrote to more pages (each a copy) than filling these in does
_cap_header = (ctypes.c_uint32 * 2)()
_cap_data = (ctypes.c_uint32 * 6)()  # [effective, permitted, inheritable] x 2 words


def _set_caps(effective: int, permitted: int, layer: str) -> None:
    header, data = _cap_header, _cap_data
    header[0], header[1] = _LINUX_CAPABILITY_VERSION_3, 0  # (the kernel may have written its version)
    data[0], data[1], data[2], data[3], data[4], data[5] = effective, permitted, 0, 0, 0, 0
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
        raise SandboxError("net", f"unshare(CLONE_NEWUSER|CLONE_NEWNET) failed: {errno_text(err)}{hint}")
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


def _apply_uid(policy: SandboxPolicy, scratch: str) -> str:
    if os.geteuid() != 0:
        raise SandboxError("uid", "not running as root, so there is no other uid to switch to "
                                  "(seccomp and Landlock scoping still keep signals and ptrace in)")
    uid = policy.uid_base + os.getpid()
    try:
        _chown_tree(scratch, uid)
    except OSError as exc:
        raise SandboxError("uid", f"chown of the scratch dir to {uid}: {exc}") from None
    # The runtime must stay readable without any capability: where it sits below a folder other
    # users cannot search (a 0700 /root), the view shows it there (made by the zygote once, or
    # here). Only where no view can be made is CAP_DAC_READ_SEARCH kept, as the way to read it.
    runtime = view.make(policy.read_paths)
    keep = 0 if runtime.ok else 1 << CAP_DAC_READ_SEARCH
    if keep:
        _libc_call("uid", "prctl(PR_SET_KEEPCAPS)", prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0))
    try:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    except OSError as exc:
        raise SandboxError("uid", f"switching to uid {uid}: {exc}") from None
    # setresuid from root to others clears the effective and permitted sets, unless KEEPCAPS
    # kept the permitted one: set both explicitly either way
    _set_caps(keep, keep, "uid")
    if keep:
        _libc_call("uid", "prctl(PR_SET_KEEPCAPS, 0)", prctl(PR_SET_KEEPCAPS, 0, 0, 0, 0))
    if os.getresuid() != (uid, uid, uid) or os.getresgid() != (uid, uid, uid) or os.getgroups():
        raise SandboxError("uid", "the uid/gid switch did not take")
    if keep:
        return (f"uid/gid {policy.uid_base}+pid, no groups, only CAP_DAC_READ_SEARCH, kept to read the runtime: "
                f"{runtime.describe()}")
    return f"uid/gid {policy.uid_base}+pid, no groups, no capabilities; {runtime.describe()}"


# ---------------------------------------------------------------- fs


@functools.cache
def _landlock_ruleset(read_paths: tuple[str, ...]) -> landlock.Ruleset:
    return landlock.prepare(tuple(p for p in read_paths if p != "/dev/null"), rw_files=("/dev/null",))


def _build_fs(policy: SandboxPolicy, scratch: str) -> tuple[int, str]:
    """The Landlock ruleset's fd, its rules added (before ``uid``: every rule's folder is opened
    while the process can still reach it by its path, which an unprivileged uid may not)."""
    try:
        ruleset = _landlock_ruleset(policy.read_paths)
        return landlock.build(ruleset, write_dirs=(scratch,)), ruleset.describe()
    except landlock.LandlockError as exc:
        raise SandboxError("fs", str(exc)) from None


def _apply_fs(ruleset_fd: int) -> None:
    try:
        landlock.enforce(ruleset_fd)
    except landlock.LandlockError as exc:
        raise SandboxError("fs", str(exc)) from None


# ---------------------------------------------------------------- seccomp


@functools.cache
def _seccomp_filter(deny_metadata: bool) -> seccomp.Prepared:
    return seccomp.prepare(deny_metadata)


def _apply_seccomp(deny_metadata: bool) -> str:
    try:
        prepared = _seccomp_filter(deny_metadata)
        prepared.install(os.getpid())
    except seccomp.SeccompError as exc:
        raise SandboxError("seccomp", str(exc)) from None
    extra = "; chmod/chown/utime refused too" if deny_metadata else ""
    return (f"{prepared.arch.machine} filter of {prepared.template.length} BPF instructions: "
            f"fork, exec, sockets, ptrace, namespaces, signals to other pids, inotify/fanotify and "
            f"mount listings refused (EPERM), xattrs unsupported (EOPNOTSUPP){extra}; foreign arch killed")


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
    except landlock.LandlockError:
        pass
    for deny_metadata in (True, False):
        try:
            _seccomp_filter(deny_metadata)
        except seccomp.SeccompError:
            pass


# ---------------------------------------------------------------- enter


def enter(policy: SandboxPolicy, *, scratch_dir: str | None = None, keep_fds: Iterable[int] | None = None,
          parent: int | None = None) -> None:
    """Isolate this freshly forked, single-threaded process for good. Raises SandboxError naming
    the layer that could not be applied; the process is then half-isolated and must exit.

    `scratch_dir`, `keep_fds` and `parent`, where given, stand for the policy's own: a zygote
    makes one policy before it forks, and each child gives only what is its own (building a
    policy in a fresh fork writes to ~30 pages, each a copy).

    Order, and why:
    1. check single-threaded: unshare, setresuid and Landlock act per thread or refuse threads.
    2. setpgid: own process group, so the runner's timeout kills the whole group and terminal
       signals (which go to the foreground group) do not reach us.
    3. fds: nothing inherited by accident survives into the later layers (or the script).
    4. env, then chdir(scratch): /proc is still readable, and later steps see the clean state.
    5. rlimits: while still root, so the hard limits are set before privileges go.
    6. net: needs CAP_SYS_ADMIN (as root) before uid gives it up.
    7. fs, first half: the Landlock ruleset built, each rule's folder opened while the process can
       still reach it (an unprivileged uid may not be able to search its way to scratch).
    8. uid: after net (which needs CAP_SYS_ADMIN as root); the runtime view, then every
       capability dropped. The parent-death signal is set after it (a credential change clears it).
    9. fs, second half: the ruleset enforced (it needs no_new_privs, set just before).
    10. seccomp last: the narrowest layer; it would refuse the syscalls the steps above need.
    """
    applied.clear()
    layers = policy.layers
    scratch = policy.scratch_dir if scratch_dir is None else scratch_dir
    kept = policy.keep_fds if keep_fds is None else tuple(keep_fds)
    if parent is None:
        parent = policy.parent if policy.parent is not None else os.getppid()
    if os.getppid() != parent:
        raise SandboxError("process", "the parent exited before the sandbox was entered")
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
        keep = kept + ((policy.net_fd,) if policy.net_fd is not None else ())
        _close_fds(keep)
    except OSError as exc:
        raise SandboxError("process", f"setpgid/closing fds: {exc}") from None
    if "env" in layers:
        applied["env"] = _apply_env(scratch)
    try:
        os.chdir(scratch)
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
    ruleset_fd = None
    if "fs" in layers:
        ruleset_fd, applied["fs"] = _build_fs(policy, scratch)
    if "uid" in layers:
        applied["uid"] = _apply_uid(policy, scratch)
    _libc_call("process", "prctl(PR_SET_PDEATHSIG)", prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0))
    if os.getppid() != parent:
        raise SandboxError("process", "the parent exited while the sandbox was being set up")
    if "fs" in layers or "seccomp" in layers:
        # Both require it; it also means no exec could ever gain privileges.
        _libc_call("process", "prctl(PR_SET_NO_NEW_PRIVS)", prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))
    if ruleset_fd is not None:
        _apply_fs(ruleset_fd)
    if "seccomp" in layers:
        applied["seccomp"] = _apply_seccomp(deny_metadata="uid" not in layers)
