"""How an exception that ended a script is told to the model: its type, its words, the script's
line, and for what the sandbox refused, what it was (runs in the child)."""

from __future__ import annotations

import errno
import re
import types

from ..protocol import SCRIPT_FILENAME


def script_line(tb: types.TracebackType | None) -> int | None:
    line = None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == SCRIPT_FILENAME:
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


def describe(exc: BaseException, source: str = "") -> str:
    refused = refused_operation(exc, source)
    text = refused or str(exc)
    if not refused and isinstance(exc, OSError) and exc.errno is not None:
        text = exc.strerror or text
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


_PROCESS_MODULES = ("subprocess.py", "popen_fork.py", "popen_spawn_posix.py", "pty.py")
_NETWORK_MODULES = ("socket.py", "ssl.py", "selectors.py")
_PROCESS_CALL = re.compile(r"\b(fork\w*|vfork|exec[lv]\w*|spawn\w*|posix_spawn\w*|system|popen|Popen)\b")
_NETWORK_CALL = re.compile(r"\b(socket|socketpair|connect|create_connection|create_server|bind)\b")
_SIGNAL_CALL = re.compile(r"\b(kill|killpg|pidfd_send_signal|pthread_kill|sigqueue)\b")


def refused_operation(exc: BaseException, source: str) -> str | None:
    """For an operation the sandbox refused (EPERM/EACCES), what it was, in words: the module it
    was refused in, or else the script's own line that made the call."""
    if not isinstance(exc, OSError) or exc.errno not in (errno.EPERM, errno.EACCES):
        return None
    files = []
    tb = exc.__traceback__
    line = None
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        files.append(filename)
        if filename == SCRIPT_FILENAME:
            line = tb.tb_lineno
        tb = tb.tb_next
    names = {f.rsplit("/", 1)[-1] for f in files}
    if names & set(_NETWORK_MODULES) or any("/http/" in f or "/urllib/" in f for f in files):
        return "network access is not allowed in run_code"
    if names & set(_PROCESS_MODULES) or any("/multiprocessing/" in f for f in files):
        return "starting processes is not allowed in run_code"
    text = ""
    if line is not None and source:
        lines = source.splitlines()
        text = lines[line - 1] if 0 < line <= len(lines) else ""
    if _PROCESS_CALL.search(text):
        return "starting processes is not allowed in run_code"
    if _NETWORK_CALL.search(text):
        return "network access is not allowed in run_code"
    if _SIGNAL_CALL.search(text):
        return "signalling other processes is not allowed in run_code"
    if exc.filename is not None:
        return f"access to {str(exc.filename)!r} is not allowed in run_code"
    return None
