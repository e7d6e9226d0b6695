"""Reading text and replacing files atomically: the small I/O rules every file tool shares."""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

from ._paths import FileToolError

#: how much of a file is looked at to tell text from binary (git and grep look at the start too)
SNIFF_BYTES = 8192


def looks_binary(head: bytes) -> bool:
    """A NUL byte is the sign of a binary file that UTF-8 text never carries."""
    return b"\0" in head


def not_text(shown: str, why: str) -> FileToolError:
    return FileToolError(f"{shown} is not a text file ({why}); the file tools read and edit UTF-8 text only")


def read_text(path: Path, shown: str) -> str:
    """The whole file as text, or FileToolError when it is missing, a folder, or not UTF-8 text."""
    if path.is_dir():
        raise FileToolError(f"{shown} is a folder, not a file")
    if not path.exists():
        raise FileToolError(f"{shown}: no such file")
    data = path.read_bytes()
    if looks_binary(data[:SNIFF_BYTES]):
        raise not_text(shown, "it contains NUL bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise not_text(shown, f"invalid UTF-8 at byte {exc.start}") from None


def stage(path: Path, data: bytes, mode: int | None = None) -> Path:
    """Write `data` to a new temporary file beside `path`, ready for `os.replace(tmp, path)`.

    Beside, so the rename stays on one filesystem and is atomic: a reader sees the old file or
    the new one, never half of it. The file takes `mode`, else the mode of the file it replaces,
    else the usual mode for a new file (created with O_EXCL, so the umask applies).
    """
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    try:
        with open(tmp, "xb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())  # the data is on disk before the rename makes it the file
        if mode is None and path.exists():
            mode = stat.S_IMODE(path.stat().st_mode)
        if mode is not None:
            os.chmod(tmp, mode)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return tmp


def make_parents(path: Path) -> list[Path]:
    """Create the missing folders above `path`; returns those created, deepest first (so a
    caller that must undo can remove them in that order)."""
    missing = []
    parent = path.parent
    while not parent.exists():
        missing.append(parent)
        parent = parent.parent
    if not parent.is_dir():
        raise FileToolError(f"cannot create {path.name} under {parent.name}: {parent.name} is a file, not a folder")
    for folder in reversed(missing):
        folder.mkdir()
    return missing


def atomic_write(path: Path, data: bytes) -> None:
    """Replace (or create) `path` with `data` in one step, creating parent folders."""
    make_parents(path)
    os.replace(stage(path, data), path)
