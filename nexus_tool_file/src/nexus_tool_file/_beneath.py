"""Opening a path beneath a folder without a check-then-open race.

Checking a path (`realpath`, then "is it inside?") and opening it afterwards leaves a window in
which another process can swap a folder for a symlink that leads out; a reader then opens what
the check never saw. Here the check and the open are one step, made by the kernel on a folder's
file descriptor:

- Linux 5.6+: `openat2(2)` with `RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS`. The kernel follows
  symlinks but fails with EXDEV any resolution that would leave the folder (`..` past it, an
  absolute symlink, a symlink whose target climbs out), and refuses /proc's magic links. Called
  through ctypes (Python has no binding); syscall 437 on every architecture Linux numbers alike.
- Elsewhere, or where a seccomp filter refuses the call (ENOSYS, EPERM): a walk, one component at
  a time, each opened with `O_NOFOLLOW` relative to the folder before it. A component that is a
  symlink is read (`readlinkat`) and its target walked the same way; `..` steps back to the fd
  of the folder above, and never past the start; an absolute target is an escape, as for
  RESOLVE_BENEATH. The answer is the same, in a few more system calls.

Either way an escape is `OSError(EXDEV)`. Nothing here knows about tools or messages.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import platform
import stat
import sys
from collections.abc import Iterator
from contextlib import contextmanager

# openat2's `resolve` bits (linux/openat2.h)
RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_NO_SYMLINKS = 0x04
RESOLVE_BENEATH = 0x08

#: openat2 is 437 on every architecture that took the unified syscall numbers (Linux 5.1+);
#: alpha, the exception, is left to the walk
_SYS_OPENAT2 = 437
_UNIFIED_MACHINES = frozenset({"x86_64", "amd64", "aarch64", "arm64", "i386", "i686", "armv7l", "armv6l",
                               "ppc64le", "ppc64", "s390x", "riscv64", "loongarch64", "mips64"})
#: symlinks followed in one resolution before giving up, as Linux does (ELOOP)
MAX_SYMLINKS = 40

CLOEXEC = getattr(os, "O_CLOEXEC", 0)
#: a descriptor that names a folder without reading it, enough for the *at calls
DIR_ANCHOR = (getattr(os, "O_PATH", 0) or os.O_RDONLY) | os.O_DIRECTORY | CLOEXEC
#: a descriptor that names a file or folder without opening its content (fstat only)
STAT_ONLY = (getattr(os, "O_PATH", 0) or (os.O_RDONLY | os.O_NONBLOCK)) | CLOEXEC
#: reading a file: non-blocking so a FIFO or a device never hangs the call (the caller checks
#: that it got a regular file), no controlling terminal
READ_FILE = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | CLOEXEC
#: reading a folder's entries
READ_DIR = os.O_RDONLY | os.O_DIRECTORY | CLOEXEC


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


def _load_openat2() -> tuple[object | None, str]:
    """(the libc `syscall` function, "") when openat2 works here, else (None, why not)."""
    if not sys.platform.startswith("linux"):
        return None, f"openat2 is Linux-only (this is {sys.platform})"
    if platform.machine().lower() not in _UNIFIED_MACHINES:
        return None, f"openat2's syscall number is not known for {platform.machine()}"
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        syscall = libc.syscall
    except (OSError, AttributeError) as exc:
        return None, f"libc's syscall() is not reachable: {exc}"
    syscall.restype = ctypes.c_long
    syscall.argtypes = [ctypes.c_long, ctypes.c_int, ctypes.c_char_p, ctypes.POINTER(_OpenHow), ctypes.c_size_t]
    root = os.open("/", DIR_ANCHOR)
    try:
        how = _OpenHow(STAT_ONLY, 0, RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)
        fd = syscall(_SYS_OPENAT2, root, b".", ctypes.byref(how), ctypes.sizeof(how))
        if fd < 0:
            code = ctypes.get_errno()
            why = {errno.ENOSYS: "the kernel has no openat2 (Linux 5.6+)",
                   errno.EPERM: "a seccomp filter refuses openat2"}.get(code, os.strerror(code))
            return None, f"openat2 failed here: {why}"
        os.close(fd)
    finally:
        os.close(root)
    return syscall, ""


_syscall, WHY_NOT_OPENAT2 = _load_openat2()


def method() -> str:
    """How paths are opened here, for `nexus doctor` and the docs."""
    if _syscall is not None:
        return "openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)"
    return f"a walk opening each component with O_NOFOLLOW ({WHY_NOT_OPENAT2})"


def _openat2(dir_fd: int, path: str, flags: int, mode: int) -> int:
    assert _syscall is not None
    how = _OpenHow(flags | CLOEXEC, mode if flags & os.O_CREAT else 0, RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)
    encoded = os.fsencode(path)
    while True:
        fd: int = _syscall(_SYS_OPENAT2, dir_fd, encoded, ctypes.byref(how), ctypes.sizeof(how))  # type: ignore[operator]
        if fd >= 0:
            return fd
        code = ctypes.get_errno()
        if code == errno.EINTR:
            continue
        if code == errno.EAGAIN:  # a rename raced the lookup (RESOLVE_BENEATH checks for it): try again
            continue
        raise OSError(code, os.strerror(code), path)


def _escape(path: str) -> OSError:
    return OSError(errno.EXDEV, "resolution would leave the folder", path)


def _walk_open(dir_fd: int, path: str, flags: int, mode: int) -> int:
    """openat2(RESOLVE_BENEATH)'s answer by walking: see the module docstring."""
    pending = [p for p in path.split("/") if p not in ("", ".")]
    if path.startswith("/"):
        raise _escape(path)
    pending.reverse()  # a stack: the next component is at the end
    held: list[int] = []  # fds of the folders walked into, below dir_fd
    links = 0
    try:
        while True:
            here = held[-1] if held else dir_fd
            if not pending:  # the path named the start folder itself, or walked back to it
                return os.open(".", flags | CLOEXEC, mode, dir_fd=here)
            name = pending.pop()
            if name == "..":
                if not held:
                    raise _escape(path)
                os.close(held.pop())
                continue
            last = not pending
            try:
                fd = os.open(name, (flags if last else DIR_ANCHOR) | os.O_NOFOLLOW | CLOEXEC, mode, dir_fd=here)
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
                    raise
                try:
                    target = os.readlink(name, dir_fd=here)
                except OSError:
                    raise exc from None  # not a symlink: the error stands
                fd = -1
            else:
                if not (last and flags & getattr(os, "O_PATH", 0) and stat.S_ISLNK(os.fstat(fd).st_mode)):
                    if last:
                        return fd
                    held.append(fd)
                    continue
                # O_PATH | O_NOFOLLOW opened the symlink itself: follow it like the others
                os.close(fd)
                target = os.readlink(name, dir_fd=here)
            links += 1
            if links > MAX_SYMLINKS:
                raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), path)
            if target.startswith("/"):
                raise _escape(path)
            pending.extend(reversed([p for p in target.split("/") if p not in ("", ".")]))
    finally:
        for fd in held:
            os.close(fd)


def open_beneath(dir_fd: int, path: str, flags: int, mode: int = 0o666) -> int:
    """A new fd for `path` resolved beneath the folder `dir_fd`, symlinks inside it followed.

    `path` is relative (an absolute one is an escape). Raises OSError: EXDEV when the resolution
    would leave the folder, ELOOP for too many links (or /proc's magic links), and the usual
    errors (ENOENT, ENOTDIR, ...) otherwise. The fd is close-on-exec.
    """
    if _syscall is not None:
        try:
            return _openat2(dir_fd, path, flags, mode)
        except OSError as exc:
            if exc.errno != errno.ENAMETOOLONG:  # past PATH_MAX: the walk takes a component at a time
                raise
    return _walk_open(dir_fd, path, flags, mode)


def fd_path(fd: int) -> str | None:
    """The absolute path the kernel holds for an open fd (Linux: /proc/self/fd; macOS: F_GETPATH),
    or None where neither tells. Used to name what was opened, never to open it again."""
    if sys.platform.startswith("linux"):
        try:
            path = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            return None
        return None if path.endswith(" (deleted)") or not path.startswith("/") else path
    get_path: int | None = getattr(fcntl, "F_GETPATH", None)
    if get_path is None:
        return None
    try:
        raw = fcntl.fcntl(fd, get_path, b"\0" * 1024)
    except OSError:
        return None
    return os.fsdecode(raw.split(b"\0", 1)[0]) or None


@contextmanager
def opened(fd: int) -> Iterator[int]:
    """Close `fd` when the block ends."""
    try:
        yield fd
    finally:
        os.close(fd)
