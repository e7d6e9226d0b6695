"""Landlock through its three raw syscalls (444 create_ruleset, 445 add_rule, 446 restrict_self).

No library: the structs are three and small, and a dependency would have to be built on every CI
machine. The ruleset is ABI-aware: it handles every access right the running kernel knows, so
anything not granted by a rule is denied, and it uses the network rules (ABI >= 4) and the scope
flags (ABI >= 6) when they exist. The syscall numbers are the same on every architecture.

Landlock restricts the calling *thread* (before ABI 8's TSYNC), so `restrict()` must run while the
process has one thread; `enter()` (layers.py) checks that first.
"""

from __future__ import annotations

import ctypes
import errno
import os

import attrs

from .libc import syscall

SYS_LANDLOCK_CREATE_RULESET = 444
SYS_LANDLOCK_ADD_RULE = 445
SYS_LANDLOCK_RESTRICT_SELF = 446

CREATE_RULESET_VERSION = 1 << 0
RULE_PATH_BENEATH = 1
RULE_NET_PORT = 2

# Filesystem access rights (include/uapi/linux/landlock.h).
FS_EXECUTE = 1 << 0
FS_WRITE_FILE = 1 << 1
FS_READ_FILE = 1 << 2
FS_READ_DIR = 1 << 3
FS_REMOVE_DIR = 1 << 4
FS_REMOVE_FILE = 1 << 5
FS_MAKE_CHAR = 1 << 6
FS_MAKE_DIR = 1 << 7
FS_MAKE_REG = 1 << 8
FS_MAKE_SOCK = 1 << 9
FS_MAKE_FIFO = 1 << 10
FS_MAKE_BLOCK = 1 << 11
FS_MAKE_SYM = 1 << 12
FS_REFER = 1 << 13  # ABI 2
FS_TRUNCATE = 1 << 14  # ABI 3
FS_IOCTL_DEV = 1 << 15  # ABI 5

NET_BIND_TCP = 1 << 0  # ABI 4
NET_CONNECT_TCP = 1 << 1  # ABI 4

SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0  # ABI 6
SCOPE_SIGNAL = 1 << 1  # ABI 6

# Rights that only make sense on a directory: a rule on a regular file may not carry them (EINVAL).
_FILE_RIGHTS = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV


def _fs_rights_for(abi: int) -> int:
    rights = (1 << 13) - 1  # ABI 1: EXECUTE .. MAKE_SYM
    if abi >= 2:
        rights |= FS_REFER
    if abi >= 3:
        rights |= FS_TRUNCATE
    if abi >= 5:
        rights |= FS_IOCTL_DEV
    return rights


class LandlockError(Exception):
    """Landlock could not be applied; the message says why in words a user can act on."""


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1  # the kernel struct is __attribute__((packed)): 12 bytes
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def abi_version() -> int:
    """The kernel's Landlock ABI version, or LandlockError saying why there is none."""
    res = syscall(SYS_LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0),
                   ctypes.c_uint32(CREATE_RULESET_VERSION))
    if res >= 0:
        return int(res)
    err = ctypes.get_errno()
    if err == errno.ENOSYS:
        raise LandlockError("the kernel has no Landlock syscalls "
                            "(Linux < 5.13, or built without CONFIG_SECURITY_LANDLOCK)")
    if err == errno.EOPNOTSUPP:
        raise LandlockError("Landlock is built in but not enabled at boot "
                            "(add 'landlock' to the lsm= kernel parameter)")
    raise LandlockError(f"landlock_create_ruleset(VERSION) failed: {os.strerror(err)}")


def _fail(what: str) -> LandlockError:
    err = ctypes.get_errno()
    return LandlockError(f"{what}: {errno.errorcode.get(err, str(err))} ({os.strerror(err)})")


@attrs.frozen
class Ruleset:
    """The part of a ruleset that can be worked out once, in the zygote: ABI, handled rights, and
    each fixed path with the rights it gets (file or directory already decided). A child then
    only opens, adds and restricts."""

    abi: int
    handled_fs: int
    handled_net: int
    scoped: int
    attr_size: int
    rules: tuple[tuple[str, int], ...]
    write_dir_rights: int

    def describe(self) -> str:
        parts = [f"Landlock ABI {self.abi}: read-only runtime paths, read-write scratch"]
        parts.append("TCP bind/connect denied" if self.handled_net else "no TCP rules (ABI < 4)")
        parts.append("signal + abstract-unix scoping" if self.scoped else "no scoping (ABI < 6)")
        return ", ".join(parts)


def prepare(read_paths: tuple[str, ...], rw_files: tuple[str, ...] = ()) -> Ruleset:
    """Work out the ruleset for `read_paths` (read files, list directories; never execute) and
    `rw_files` (single files such as /dev/null, read and write). Paths that do not exist are
    left out: they would grant nothing. Raises LandlockError when Landlock is unavailable."""
    abi = abi_version()
    fs_rights = _fs_rights_for(abi)
    # Handled with no port rule at all (ABI >= 4): every TCP bind and connect is refused (EACCES).
    net = NET_BIND_TCP | NET_CONNECT_TCP if abi >= 4 else 0
    # ABI >= 6: no signals to, and no abstract unix sockets of, processes outside this domain.
    scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if abi >= 6 else 0
    size = 24 if abi >= 6 else 16 if abi >= 4 else 8
    rules: list[tuple[str, int]] = []
    wanted = [(p, FS_READ_FILE | FS_READ_DIR) for p in read_paths]
    wanted += [(p, FS_READ_FILE | FS_WRITE_FILE) for p in rw_files]
    for path, rights in wanted:
        try:
            is_dir = os.path.isdir(path) if os.path.exists(path) else None
        except OSError:
            is_dir = None
        if is_dir is None:
            continue
        rules.append((path, (rights if is_dir else rights & _FILE_RIGHTS) & fs_rights))
    write_dir = fs_rights & ~(FS_EXECUTE | FS_MAKE_CHAR | FS_MAKE_BLOCK | FS_MAKE_SOCK)
    return Ruleset(abi=abi, handled_fs=fs_rights, handled_net=net, scoped=scoped, attr_size=size,
                   rules=tuple(rules), write_dir_rights=write_dir)


def build(ruleset: Ruleset, write_dirs: tuple[str, ...]) -> int:
    """The ruleset as a Landlock fd, its rules added: `ruleset` plus full read-write use of
    `write_dirs` (create, delete, rename within, truncate; no execute, no device nodes, no
    sockets). Nothing is restricted yet (`enforce` does that), so this may run while the process
    can still reach every rule's path: a rule holds its folder by an fd opened here, and the
    process needs no way to that folder by its path afterwards."""
    attr = _RulesetAttr(handled_access_fs=ruleset.handled_fs, handled_access_net=ruleset.handled_net,
                        scoped=ruleset.scoped)
    fd = syscall(SYS_LANDLOCK_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(ruleset.attr_size),
                  ctypes.c_uint32(0))
    if fd < 0:
        raise _fail("landlock_create_ruleset")
    try:
        rule = _PathBeneathAttr()
        for path, rights in ruleset.rules + tuple((d, ruleset.write_dir_rights) for d in write_dirs):
            try:
                rule.parent_fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError as exc:
                raise LandlockError(f"cannot open {path!r} for a rule: {exc.strerror}") from None
            try:
                rule.allowed_access = rights
                if syscall(SYS_LANDLOCK_ADD_RULE, fd, RULE_PATH_BENEATH, ctypes.byref(rule), 0) < 0:
                    raise _fail(f"landlock_add_rule({path!r})")
            finally:
                os.close(rule.parent_fd)
    except BaseException:
        os.close(fd)
        raise
    return int(fd)


def enforce(fd: int) -> None:
    """Confine this thread (and threads it starts later) to the ruleset `fd` from `build`, for
    good, and close `fd`. The caller must have set no_new_privs."""
    try:
        if syscall(SYS_LANDLOCK_RESTRICT_SELF, fd, 0) < 0:
            raise _fail("landlock_restrict_self")
    finally:
        os.close(fd)


def restrict(ruleset: Ruleset, write_dirs: tuple[str, ...]) -> None:
    """`build` and `enforce` at once."""
    enforce(build(ruleset, write_dirs))
