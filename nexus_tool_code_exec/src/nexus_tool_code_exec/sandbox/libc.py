"""The C library, for the calls Python has no wrapper for (prctl, unshare, setns, capset, syscall
...), and the prctl options the layers use: one handle and one definition of each constant."""

from __future__ import annotations

import ctypes
import errno
import os

libc = ctypes.CDLL(None, use_errno=True)
syscall = libc.syscall
syscall.restype = ctypes.c_long
prctl = libc.prctl

PR_SET_PDEATHSIG = 1
PR_SET_KEEPCAPS = 8
PR_SET_SECCOMP = 22
PR_SET_NO_NEW_PRIVS = 38


def errno_text(err: int) -> str:
    """`EPERM (Operation not permitted)`."""
    return f"{errno.errorcode.get(err, str(err))} ({os.strerror(err)})"


def last_error() -> str:
    """The errno the last libc call through this handle left, as `errno_text` words."""
    return errno_text(ctypes.get_errno())
