"""A seccomp filter for the run_code child, assembled by hand as classic BPF (no libseccomp).

The filter is a deny-list (everything not named is allowed) because the CPython runtime's set of
syscalls is large and changes between versions and libc builds; the names it refuses are the ways
out of the process (fork, exec, sockets), the ways to reach other processes (signals, ptrace, their
memory, their scheduling and limits), and kernel attack surface a Python script never needs
(namespaces, mounts, keyrings, bpf, io_uring, modules...). Syscall numbers above the highest one
this table knows get ENOSYS, so a future kernel's new syscall is not silently allowed.

It first checks the architecture (a 32-bit `int 0x80` syscall on x86_64 has other numbers and
would slip past) and on x86_64 the x32 bit: both kill the process, as every real filter does.

Several checks compare an argument with the child's own pid, so the program is rendered per child
from a template built once (the zygote prepares it; a child only patches the pid and installs it).
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import struct
from collections.abc import Callable

import attrs

from .libc import PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, prctl, syscall

# --- classic BPF opcodes (linux/filter.h, linux/bpf_common.h) ---
_BPF_LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
_BPF_JEQ_K = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
_BPF_JGE_K = 0x35  # BPF_JMP | BPF_JGE | BPF_K
_BPF_JGT_K = 0x25  # BPF_JMP | BPF_JGT | BPF_K
_BPF_JSET_K = 0x45  # BPF_JMP | BPF_JSET | BPF_K
_BPF_RET_K = 0x06  # BPF_RET | BPF_K

RET_KILL_PROCESS = 0x80000000
RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000


def ret_errno(err: int) -> int:
    return _RET_ERRNO | (err & 0xFFFF)


# struct seccomp_data { int nr; __u32 arch; __u64 instruction_pointer; __u64 args[6]; }
_OFF_NR = 0
_OFF_ARCH = 4


def _arg_lo(i: int) -> int:
    # The low 32 bits of args[i] on a little-endian machine. Every argument checked here is a C
    # int or unsigned int (pid_t, flags, cmd): the kernel ignores the high half, so must we.
    return 16 + 8 * i


AUDIT_ARCH_X86_64 = 0xC000003E
AUDIT_ARCH_AARCH64 = 0xC00000B7
X32_SYSCALL_BIT = 0x40000000

# Numbers from 424 on are shared by every architecture.
_COMMON_NEW = {
    "pidfd_send_signal": 424, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
    "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
    "pidfd_open": 434, "clone3": 435, "pidfd_getfd": 438, "process_madvise": 440, "mount_setattr": 442,
    "quotactl_fd": 443, "process_mrelease": 448, "fchmodat2": 452, "statmount": 457, "listmount": 458,
    "setxattrat": 463, "getxattrat": 464, "listxattrat": 465, "removexattrat": 466, "open_tree_attr": 467,
    "file_getattr": 468, "file_setattr": 469,
}
# The highest syscall number the tables below were written against (file_setattr, Linux 6.17).
MAX_KNOWN_NR = 469

_X86_64 = {
    "fork": 57, "vfork": 58, "clone": 56, "execve": 59, "execveat": 322,
    "socket": 41, "socketpair": 53,
    "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "kcmp": 312,
    "migrate_pages": 256, "move_pages": 279, "get_robust_list": 274,
    "kill": 62, "tkill": 200, "tgkill": 234, "rt_sigqueueinfo": 129, "rt_tgsigqueueinfo": 297,
    "mount": 165, "umount2": 166, "pivot_root": 155, "chroot": 161, "unshare": 272, "setns": 308,
    "keyctl": 250, "add_key": 248, "request_key": 249,
    "bpf": 321, "perf_event_open": 298, "userfaultfd": 323, "personality": 135,
    "kexec_load": 246, "kexec_file_load": 320, "init_module": 175, "finit_module": 313, "delete_module": 176,
    "lookup_dcookie": 212, "iopl": 172, "ioperm": 173, "modify_ldt": 154, "uselib": 134, "_sysctl": 156,
    "quotactl": 179, "acct": 163, "swapon": 167, "swapoff": 168, "reboot": 169,
    "settimeofday": 164, "clock_settime": 227, "clock_adjtime": 305, "adjtimex": 159,
    "sethostname": 170, "setdomainname": 171, "syslog": 103, "vhangup": 153,
    "open_by_handle_at": 304, "name_to_handle_at": 303, "fanotify_init": 300, "fanotify_mark": 301,
    "nfsservctl": 180, "seccomp": 317,
    "inotify_init": 253, "inotify_add_watch": 254, "inotify_rm_watch": 255, "inotify_init1": 294,
    "shmget": 29, "shmat": 30, "shmctl": 31, "shmdt": 67, "semget": 64, "semop": 65, "semtimedop": 220,
    "semctl": 66, "msgget": 68, "msgsnd": 69, "msgrcv": 70, "msgctl": 71,
    "mq_open": 240, "mq_unlink": 241, "mq_timedsend": 242, "mq_timedreceive": 243, "mq_notify": 244,
    "mq_getsetattr": 245,
    "sched_setaffinity": 203, "sched_setscheduler": 144, "sched_setparam": 142, "sched_setattr": 314,
    "prlimit64": 302, "setpriority": 141, "ioprio_set": 251, "fcntl": 72, "ioctl": 16,
    "chmod": 90, "fchmod": 91, "fchmodat": 268, "chown": 92, "fchown": 93, "lchown": 94, "fchownat": 260,
    "utime": 132, "utimes": 235, "futimesat": 261, "utimensat": 280,
    "setxattr": 188, "lsetxattr": 189, "fsetxattr": 190, "getxattr": 191, "lgetxattr": 192, "fgetxattr": 193,
    "listxattr": 194, "llistxattr": 195, "flistxattr": 196, "removexattr": 197, "lremovexattr": 198,
    "fremovexattr": 199,
    "getpid": 39, "capset": 126,
    **_COMMON_NEW,
}

# asm-generic numbering; aarch64 has no fork/vfork/chmod/... (libc uses the *at and clone forms).
_AARCH64 = {
    "clone": 220, "execve": 221, "execveat": 281,
    "socket": 198, "socketpair": 199,
    "ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271, "kcmp": 272,
    "migrate_pages": 238, "move_pages": 239, "get_robust_list": 100,
    "kill": 129, "tkill": 130, "tgkill": 131, "rt_sigqueueinfo": 138, "rt_tgsigqueueinfo": 240,
    "mount": 40, "umount2": 39, "pivot_root": 41, "chroot": 51, "unshare": 97, "setns": 268,
    "keyctl": 219, "add_key": 217, "request_key": 218,
    "bpf": 280, "perf_event_open": 241, "userfaultfd": 282, "personality": 92,
    "kexec_load": 104, "kexec_file_load": 294, "init_module": 105, "finit_module": 273, "delete_module": 106,
    "lookup_dcookie": 18,
    "quotactl": 60, "acct": 89, "swapon": 224, "swapoff": 225, "reboot": 142,
    "settimeofday": 170, "clock_settime": 112, "clock_adjtime": 266, "adjtimex": 171,
    "sethostname": 161, "setdomainname": 162, "syslog": 116, "vhangup": 58,
    "open_by_handle_at": 265, "name_to_handle_at": 264, "fanotify_init": 262, "fanotify_mark": 263,
    "nfsservctl": 42, "seccomp": 277,
    "inotify_init1": 26, "inotify_add_watch": 27, "inotify_rm_watch": 28,
    "shmget": 194, "shmat": 196, "shmctl": 195, "shmdt": 197, "semget": 190, "semop": 193, "semtimedop": 192,
    "semctl": 191, "msgget": 186, "msgsnd": 189, "msgrcv": 188, "msgctl": 187,
    "mq_open": 180, "mq_unlink": 181, "mq_timedsend": 182, "mq_timedreceive": 183, "mq_notify": 184,
    "mq_getsetattr": 185,
    "sched_setaffinity": 122, "sched_setscheduler": 119, "sched_setparam": 118, "sched_setattr": 274,
    "prlimit64": 261, "setpriority": 140, "ioprio_set": 30, "fcntl": 25, "ioctl": 29,
    "fchmod": 52, "fchmodat": 53, "fchown": 55, "fchownat": 54, "utimensat": 88,
    "setxattr": 5, "lsetxattr": 6, "fsetxattr": 7, "getxattr": 8, "lgetxattr": 9, "fgetxattr": 10,
    "listxattr": 11, "llistxattr": 12, "flistxattr": 13, "removexattr": 14, "lremovexattr": 15, "fremovexattr": 16,
    "getpid": 172, "capset": 91,
    **_COMMON_NEW,
}


@attrs.frozen
class Arch:
    machine: str
    audit_arch: int
    table: dict[str, int]
    has_x32: bool


ARCHES = {
    "x86_64": Arch("x86_64", AUDIT_ARCH_X86_64, _X86_64, True),
    "aarch64": Arch("aarch64", AUDIT_ARCH_AARCH64, _AARCH64, False),
}


class SeccompError(Exception):
    """The filter could not be built or installed; the message says why."""


def current_arch() -> Arch:
    machine = platform.machine()
    arch = ARCHES.get(machine)
    if arch is None or struct.pack("=H", 1) != b"\x01\x00":
        raise SeccompError(f"no syscall table for this architecture ({machine}); known: {', '.join(ARCHES)}")
    return arch


# --- what is refused, and how ---
# Refused outright with EPERM: PermissionError in Python, the clearest error a script can get.
DENY_EPERM: tuple[str, ...] = (
    # leaving the process: new processes and new programs (threads: see clone below)
    "fork", "vfork", "execve", "execveat",
    # any socket at all: TCP/UDP, netlink, and pathname AF_UNIX (which crosses network namespaces)
    "socket", "socketpair",
    # other processes' memory and state
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd", "process_madvise",
    "process_mrelease", "migrate_pages", "move_pages", "get_robust_list",
    # signals that cannot be checked against our pid: tkill takes any tid, a pidfd names any process
    "tkill", "pidfd_send_signal",
    # namespaces, mounts, root
    "mount", "umount2", "pivot_root", "chroot", "unshare", "setns", "open_tree", "move_mount", "fsopen",
    "fsconfig", "fsmount", "fspick", "mount_setattr", "open_tree_attr",
    # kernel attack surface no script needs
    "keyctl", "add_key", "request_key", "bpf", "perf_event_open", "userfaultfd", "personality",
    "io_uring_setup", "io_uring_enter", "io_uring_register",
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
    "lookup_dcookie", "iopl", "ioperm", "modify_ldt", "uselib", "_sysctl",
    "quotactl", "quotactl_fd", "acct", "swapon", "swapoff", "reboot",
    "settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "sethostname", "setdomainname",
    "syslog", "vhangup", "open_by_handle_at", "name_to_handle_at", "nfsservctl", "seccomp",
    # what a path holds or goes through, learnt without opening it (Landlock governs opening only):
    # watches that name every file made or changed in a folder, the mounts of the namespace, an
    # inode's flags. xattrs are refused below, with their own errno.
    "inotify_init", "inotify_init1", "inotify_add_watch", "inotify_rm_watch", "fanotify_init", "fanotify_mark",
    "statmount", "listmount", "file_getattr",
    # host-wide IPC objects that outlive the process (SysV) or are shared by name (POSIX mqueues)
    "shmget", "shmat", "shmctl", "shmdt", "semget", "semop", "semtimedop", "semctl",
    "msgget", "msgsnd", "msgrcv", "msgctl",
    "mq_open", "mq_unlink", "mq_timedsend", "mq_timedreceive", "mq_notify", "mq_getsetattr",
)

# Extended attributes, all of them, refused with EOPNOTSUPP ("not supported here"): Landlock does
# not govern them, so getxattr would read a value of any file the child can reach by path, and
# listxattr its names. EOPNOTSUPP, not EPERM, because that is what shutil.copystat/copy2/copytree
# take for "this file system has none" and skip: a script's copies in scratch keep working.
DENY_XATTR: tuple[str, ...] = (
    "setxattr", "lsetxattr", "fsetxattr", "getxattr", "lgetxattr", "fgetxattr",
    "listxattr", "llistxattr", "flistxattr", "removexattr", "lremovexattr", "fremovexattr",
    "setxattrat", "getxattrat", "listxattrat", "removexattrat",
)

# Landlock does not govern file metadata: chmod, chown and utime work on any path the caller's uid
# owns. A child that still has the host's uid (no "uid" layer) could chmod the host's files, so
# then these are refused too. Under the "uid" layer the child owns only its scratch files, DAC
# already stops the rest, and scripts keep shutil.copy & co.
DENY_METADATA: tuple[str, ...] = (
    "chmod", "fchmod", "fchmodat", "fchmodat2", "chown", "fchown", "lchown", "fchownat",
    "utime", "utimes", "futimesat", "utimensat", "file_setattr",
)

# Allowed only when the pid argument (arg 0) is 0 (= the caller) or the child's own pid.
SELF_PID_ARG0: tuple[str, ...] = (
    "kill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo", "pidfd_open",
    "sched_setaffinity", "sched_setscheduler", "sched_setparam", "sched_setattr", "prlimit64",
)

CLONE_THREAD = 0x00010000
# CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET: no namespaces, even for a thread.
CLONE_NEW_MASK = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000

PRIO_PROCESS = 0
IOPRIO_WHO_PROCESS = 1
F_SETOWN = 8
F_SETOWN_EX = 15
# ioctls that route signals to another process (FIOSETOWN, SIOCSPGRP) or type into a terminal
# (TIOCSTI, TIOCLINUX) if a kept fd happens to be a tty.
DENY_IOCTLS = (0x8901, 0x8902, 0x5412, 0x541C)


_BPF_JA = 0x05  # BPF_JMP | BPF_JA: 32-bit forward offset in k


class _Asm:
    """A tiny classic-BPF assembler: forward jumps to labels, resolved into 8-bit offsets
    (conditional jumps) or 32-bit ones (`ja`)."""

    def __init__(self) -> None:
        self.code: list[tuple[int, int | str, int | str, int | str]] = []
        self.labels: dict[str, int] = {}
        self.pid_slots: list[int] = []
        self._n = 0

    def fresh(self, stem: str) -> str:
        self._n += 1
        return f"{stem}_{self._n}"

    def label(self, name: str) -> None:
        self.labels[name] = len(self.code)

    def ld(self, offset: int) -> None:
        self.code.append((_BPF_LD_W_ABS, 0, 0, offset))

    def jmp(self, op: int, k: int, jt: int | str = 0, jf: int | str = 0) -> None:
        self.code.append((op, jt, jf, k))

    def ja(self, target: str) -> None:
        self.code.append((_BPF_JA, 0, 0, target))

    def jeq_pid(self, jt: int | str = 0, jf: int | str = 0) -> None:
        self.pid_slots.append(len(self.code))
        self.code.append((_BPF_JEQ_K, jt, jf, 0))

    def ret(self, value: int) -> None:
        self.code.append((_BPF_RET_K, 0, 0, value))

    def _offset(self, i: int, target: int | str, limit: int) -> int:
        off = self.labels[target] - i - 1 if isinstance(target, str) else target
        if not 0 <= off <= limit:
            raise SeccompError(f"BPF jump out of range at instruction {i}: {off}")
        return off

    def assemble(self) -> tuple[bytes, list[int]]:
        if len(self.code) > 4096:
            raise SeccompError("BPF program too long")
        out = bytearray()
        for i, (op, jt, jf, k) in enumerate(self.code):
            if op == _BPF_JA:
                out += struct.pack("=HBBI", op, 0, 0, self._offset(i, k, 0xFFFFFFFF))
            else:
                assert isinstance(k, int)
                out += struct.pack("=HBBI", op, self._offset(i, jt, 255), self._offset(i, jf, 255), k)
        return bytes(out), self.pid_slots


# A rule is what happens to one syscall number: a fixed return value, or a function that emits
# an argument check (entered with the accumulator free, always ending in a return). Checks are
# emitted once, after the search tree, and reached with `ja`, so ten pid-checked syscalls share
# one block.
_Check = Callable[["_Asm"], None]
_Action = int | _Check


def _self_pid_arg0(a: _Asm) -> None:
    ok = a.fresh("pid_ok")
    a.ld(_arg_lo(0))
    a.jmp(_BPF_JEQ_K, 0, ok, 0)
    a.jeq_pid(ok, 0)
    a.ret(ret_errno(errno.EPERM))
    a.label(ok)
    a.ret(RET_ALLOW)


def _which_self(which: int) -> _Check:
    # setpriority(which, who, prio) / ioprio_set(which, who, prio): one process, ourselves.
    def emit(a: _Asm) -> None:
        ok, deny = a.fresh("who_ok"), a.fresh("who_deny")
        a.ld(_arg_lo(0))
        a.jmp(_BPF_JEQ_K, which, 0, deny)
        a.ld(_arg_lo(1))
        a.jmp(_BPF_JEQ_K, 0, ok, 0)
        a.jeq_pid(ok, 0)
        a.label(deny)
        a.ret(ret_errno(errno.EPERM))
        a.label(ok)
        a.ret(RET_ALLOW)
    return emit


def _clone_threads_only(a: _Asm) -> None:
    deny = a.fresh("clone_deny")
    a.ld(_arg_lo(0))
    a.jmp(_BPF_JSET_K, CLONE_THREAD, 0, deny)
    a.jmp(_BPF_JSET_K, CLONE_NEW_MASK, deny, 0)
    a.ret(RET_ALLOW)
    a.label(deny)
    a.ret(ret_errno(errno.EPERM))


def _arg1_not_in(values: tuple[int, ...]) -> _Check:
    def emit(a: _Asm) -> None:
        deny = a.fresh("cmd_deny")
        a.ld(_arg_lo(1))
        for v in values:
            a.jmp(_BPF_JEQ_K, v, deny, 0)
        a.ret(RET_ALLOW)
        a.label(deny)
        a.ret(ret_errno(errno.EPERM))
    return emit


def _ranges(rules: dict[int, _Action]) -> list[tuple[int, int, _Action]]:
    """Consecutive numbers with the same action become one range (mount..reboot, msg*...)."""
    out: list[tuple[int, int, _Action]] = []
    for nr in sorted(rules):
        action = rules[nr]
        if out and out[-1][1] == nr - 1 and out[-1][2] == action:
            out[-1] = (out[-1][0], nr, action)
        else:
            out.append((nr, nr, action))
    return out


def _emit_tree(a: _Asm, ranges: list[tuple[int, int, _Action]], targets: dict[int, str]) -> None:
    """Binary search on the syscall number (in the accumulator), so that a common syscall runs
    through a dozen instructions instead of a linear list of every refused one."""
    if len(ranges) <= 3:
        for lo, hi, action in ranges:
            nxt = a.fresh("next")
            if lo == hi:
                a.jmp(_BPF_JEQ_K, lo, 0, nxt)
            else:
                a.jmp(_BPF_JGE_K, lo, 0, nxt)
                a.jmp(_BPF_JGT_K, hi, nxt, 0)
            if isinstance(action, int):
                a.ret(action)
            else:
                a.ja(targets[id(action)])
            a.label(nxt)
        a.ret(RET_ALLOW)
        return
    mid = len(ranges) // 2
    right = a.fresh("ge")
    a.jmp(_BPF_JGE_K, ranges[mid][0], 0, 1)
    a.ja(right)
    _emit_tree(a, ranges[:mid], targets)
    a.label(right)
    _emit_tree(a, ranges[mid:], targets)


@attrs.frozen
class FilterTemplate:
    """A filter program whose own-pid constants are patched per child (`Prepared.install`)."""

    program: bytes
    pid_slots: tuple[int, ...]
    length: int

    def render(self, pid: int) -> bytes:
        buf = bytearray(self.program)
        for slot in self.pid_slots:
            struct.pack_into("=I", buf, slot * 8 + 4, pid & 0xFFFFFFFF)
        return bytes(buf)


def build_template(arch: Arch, deny_metadata: bool) -> FilterTemplate:
    """Assemble the filter for `arch`. Names a table lacks (no fork on aarch64) are skipped."""
    t = arch.table
    eperm = ret_errno(errno.EPERM)
    rules: dict[int, _Action] = {}
    for name in DENY_EPERM + (DENY_METADATA if deny_metadata else ()):
        if name in t:
            rules[t[name]] = eperm
    for name in DENY_XATTR:
        rules[t[name]] = ret_errno(errno.EOPNOTSUPP)
    # clone3 passes its flags in memory BPF cannot read: refuse with ENOSYS so that glibc (2.34+)
    # falls back to clone, whose flags we can check.
    rules[t["clone3"]] = ret_errno(errno.ENOSYS)
    rules[t["clone"]] = _clone_threads_only
    for name in SELF_PID_ARG0:
        rules[t[name]] = _self_pid_arg0
    rules[t["setpriority"]] = _which_self(PRIO_PROCESS)
    rules[t["ioprio_set"]] = _which_self(IOPRIO_WHO_PROCESS)
    # fcntl(fd, F_SETOWN/F_SETOWN_EX): SIGIO/SIGURG to another process, a signal path that kill's
    # checks never see.
    rules[t["fcntl"]] = _arg1_not_in((F_SETOWN, F_SETOWN_EX))
    rules[t["ioctl"]] = _arg1_not_in(DENY_IOCTLS)

    a = _Asm()
    a.ld(_OFF_ARCH)
    a.jmp(_BPF_JEQ_K, arch.audit_arch, 1, 0)
    a.ret(RET_KILL_PROCESS)
    a.ld(_OFF_NR)
    if arch.has_x32:
        a.jmp(_BPF_JGE_K, X32_SYSCALL_BIT, 0, 1)
        a.ret(RET_KILL_PROCESS)
    a.jmp(_BPF_JGT_K, MAX_KNOWN_NR, 0, 1)
    a.ret(ret_errno(errno.ENOSYS))
    checks = {id(act): act for act in rules.values() if not isinstance(act, int)}
    targets = {key: a.fresh("check") for key in checks}
    _emit_tree(a, _ranges(rules), targets)
    for key, check in checks.items():
        a.label(targets[key])
        check(a)
    program, slots = a.assemble()
    return FilterTemplate(program=program, pid_slots=tuple(slots), length=len(a.code))


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


SECCOMP_MODE_FILTER = 2
SECCOMP_SET_MODE_FILTER = 1
SECCOMP_FILTER_FLAG_TSYNC = 1


class Prepared:
    """A filter ready to load: its buffer and sock_fprog are built in the zygote, so a child
    only writes its pid into a few instructions and makes two syscalls."""

    def __init__(self, arch: Arch, template: FilterTemplate) -> None:
        self.arch = arch
        self.template = template
        self._buf = ctypes.create_string_buffer(template.program, len(template.program))
        self._prog = _SockFprog(len=template.length, filter=ctypes.addressof(self._buf))
        self._nr = ctypes.c_long(arch.table["seccomp"])

    def install(self, pid: int) -> None:
        """Load the filter for this process (all threads, via TSYNC), with no_new_privs."""
        for slot in self.template.pid_slots:
            struct.pack_into("=I", self._buf, slot * 8 + 4, pid & 0xFFFFFFFF)
        if prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise SeccompError(f"prctl(PR_SET_NO_NEW_PRIVS) failed: {os.strerror(ctypes.get_errno())}")
        prog = ctypes.byref(self._prog)
        res = syscall(self._nr, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, prog)
        if res == 0:
            return
        err = ctypes.get_errno()
        if err == errno.ENOSYS:
            # Linux < 3.17 has no seccomp() syscall; prctl does the same for a single thread.
            if prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, prog, 0, 0) == 0:
                return
            err = ctypes.get_errno()
            if err == errno.EINVAL:
                raise SeccompError("the kernel has no seccomp filter support (CONFIG_SECCOMP_FILTER)")
        if res > 0:
            raise SeccompError(f"another thread (tid {res}) could not be synchronised with the filter")
        name = errno.errorcode.get(err, str(err))
        raise SeccompError(f"installing the filter failed: {name} ({os.strerror(err)})")


def prepare(deny_metadata: bool) -> Prepared:
    """Build the filter for this machine; SeccompError if the architecture is not supported."""
    arch = current_arch()
    return Prepared(arch, build_template(arch, deny_metadata))
