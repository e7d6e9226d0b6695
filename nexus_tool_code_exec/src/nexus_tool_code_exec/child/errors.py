"""How an exception that ended a script is told to the model: its type, its words, the script's
line, and for what the sandbox refused, what it was; for the mistakes a model makes, the fix
(a name it misspelt, a file it looked for in the scratch folder, a result JSON cannot carry)
(runs in the child)."""

from __future__ import annotations

import datetime
import decimal
import errno
import math
import re
import sys
import traceback
import types
from typing import Any

import attrs

from ..protocol import SCRIPT_FILENAME


def script_line(tb: types.TracebackType | None) -> int | None:
    line = None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == SCRIPT_FILENAME:
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


def _has_tool(name: str) -> bool:
    return hasattr(sys.modules.get("tools"), name)


def describe(exc: BaseException, source: str = "") -> str:
    refused = refused_operation(exc, source)
    text = refused or str(exc)
    if not refused and isinstance(exc, OSError) and exc.errno is not None:
        text = exc.strerror or text
        if isinstance(exc, FileNotFoundError) and exc.filename is not None:
            text = (f"{str(exc.filename)!r} is not in this run's scratch folder (the working folder, empty at "
                    "the start)")
            if _has_tool("read"):
                text += f": read the workspace's files with tools.read(path={str(exc.filename)!r})"
    if isinstance(exc, (NameError, AttributeError)) and not refused:
        # Python adds "Did you mean ...?" only when it prints a traceback: ask for it
        try:
            shown = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        except Exception:
            shown = ""
        prefix = f"{type(exc).__name__}: "
        if shown.startswith(prefix) and len(shown) > len(prefix) + len(text):
            text = shown[len(prefix):].replace(". Did you mean: ", "; did you mean ")
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def where_text(line: int | None, source: str) -> str:
    """`at line 4: while True:`, the script's line as it is written (its start)."""
    if not line:
        return ""
    lines = source.splitlines()
    code = lines[line - 1].strip() if 0 < line <= len(lines) else ""
    if len(code) > 80:
        code = code[:77] + "..."
    return f"at line {line}: {code}" if code else f"at line {line}"


def _path_text(path: list[Any]) -> str:
    return "result" + "".join(f"[{p!r}]" for p in path)


def _unjsonable(value: Any, path: list[Any], depth: int = 0) -> str | None:
    """What in `value` JSON cannot carry, first found, with its key path and the fix."""
    if depth > 200:
        return None
    if value is None or isinstance(value, (str, bool, int)):
        return None
    where = _path_text(path)
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            shown = "NaN" if math.isnan(value) else ("infinity" if value > 0 else "-infinity")
            return f"{where} is {shown}: JSON has no NaN or infinity; return None (or a string) in its place"
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, (str, int, float, bool)) and key is not None:
                return (f"{where} has a key {key!r} of type {type(key).__name__}: JSON keys are strings; "
                        "use str(key) or a list of pairs")
            found = _unjsonable(item, [*path, key], depth + 1)
            if found:
                return found
        return None
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            found = _unjsonable(item, [*path, i], depth + 1)
            if found:
                return found
        return None
    kind = type(value).__name__
    if attrs.has(type(value)):  # a class from `tools`: sent as its fields
        return _unjsonable({f.name: getattr(value, f.name, None) for f in attrs.fields(type(value))}, path, depth + 1)
    if isinstance(value, (set, frozenset)):
        return f"{where} is a {kind}: return a list, e.g. sorted(...) or list(...)"
    if isinstance(value, (datetime.date, datetime.time, datetime.timedelta)):
        fix = "str(...)" if isinstance(value, datetime.timedelta) else ".isoformat()"
        return f"{where} is a {kind}: return text, e.g. {fix}"
    if isinstance(value, decimal.Decimal):
        return f"{where} is a Decimal: return str(...) or float(...)"
    if isinstance(value, (bytes, bytearray)):
        return f"{where} is {kind}: return text, e.g. .decode() (or base64 for binary data)"
    if isinstance(value, types.GeneratorType) or hasattr(value, "__next__"):
        return f"{where} is a {kind}: return a list, e.g. list(...)"
    article = "an" if kind[:1].lower() in "aeiou" else "a"
    return f"{where} is {article} {kind}: return its data as a dict, a list or a string"


def unserializable(value: Any, exc: BaseException) -> str:
    """Why run's return value cannot be sent as JSON: where in it, and the fix."""
    if isinstance(exc, RecursionError):
        return "it is nested too deeply (or contains itself)"
    try:
        found = _unjsonable(value, [])
    except RecursionError:
        found = None
    return found or str(exc)


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
