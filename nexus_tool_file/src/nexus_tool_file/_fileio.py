"""Reading text and replacing files atomically, through file descriptors: the small I/O rules
every file tool shares. Paths are never opened here by name from the root: callers hand in an fd
they opened beneath the workspace (see _paths), or a folder's fd and a name in it."""

from __future__ import annotations

import os
import secrets
import stat

from ._paths import FileToolError, Location

#: how much of a file is looked at to tell text from binary (git and grep look at the start too)
SNIFF_BYTES = 8192


def looks_binary(head: bytes) -> bool:
    """A NUL byte is the sign of a binary file that UTF-8 text never carries."""
    return b"\0" in head


def not_text(shown: str, why: str) -> FileToolError:
    return FileToolError(f"{shown} is not a text file ({why}); the file tools read and edit UTF-8 text only")


def check_regular(fd: int, shown: str) -> os.stat_result:
    """fstat of an fd opened to read: a regular file, or FileToolError saying what it is."""
    found = os.fstat(fd)
    if stat.S_ISDIR(found.st_mode):
        raise FileToolError(f"{shown} is a folder, not a file")
    if not stat.S_ISREG(found.st_mode):
        raise FileToolError(f"{shown} is not a regular file")
    return found


#: the config key of the file size limit, for the messages that name it
MAX_FILE_KEY = "plugins.nexus.tool.file.max_file_bytes"


def too_large(shown: str, size: int, limit: int, *, would: str = "", at_least: bool = False) -> FileToolError:
    """The refusal of a file over `max_file_bytes`: what, how big, the limit and its key.
    `would` says what the call would have done (a result too large), else the file is."""
    bytes_ = f"{'at least ' if at_least else ''}{size} bytes"
    what = f"{would} would make {shown} {bytes_}" if would else f"{shown} is {bytes_}"
    return FileToolError(f"{what}, more than max_file_bytes={limit} ({MAX_FILE_KEY}), the largest file the file "
                         "tools read whole or write; nothing was changed. Work on a smaller file (grep finds lines "
                         "in a large one), or a person can raise the limit")


def check_size(found: os.stat_result, shown: str, limit: int) -> None:
    if found.st_size > limit:
        raise too_large(shown, found.st_size, limit)


def read_bytes(fd: int, limit: int, shown: str) -> bytes:
    """All of an open regular file, from its start (the fd is not closed), or FileToolError when
    it holds more than `limit` bytes: its size is checked before reading, and the reading stops
    past the limit too (a file that grows meanwhile)."""
    check_size(os.fstat(fd), shown, limit)
    chunks = []
    total = 0
    os.lseek(fd, 0, os.SEEK_SET)
    while chunk := os.read(fd, min(1 << 20, limit + 1 - total) or 1):
        chunks.append(chunk)
        total += len(chunk)
        if total > limit:
            raise too_large(shown, total, limit)
    return b"".join(chunks)


def read_text(location: Location, shown: str, limit: int) -> tuple[str, int]:
    """The whole file as text, and its size in bytes, or FileToolError when it is missing, a
    folder, not UTF-8 text, or larger than `limit` bytes."""
    if location.stat is None:
        raise FileToolError(f"{shown}: no such file")
    if stat.S_ISDIR(location.stat.st_mode):
        raise FileToolError(f"{shown} is a folder, not a file")
    fd = location.open_read()
    try:
        check_regular(fd, shown)
        data = read_bytes(fd, limit, shown)
    finally:
        os.close(fd)
    return decode_text(data, shown), len(data)


def encoded(text: str, shown: str, limit: int, *, would: str) -> bytes:
    """`text` as UTF-8, or FileToolError when that is more than `limit` bytes, refused before the
    bytes are made where the length alone says so (each character takes at least one byte)."""
    if len(text) > limit:
        raise too_large(shown, len(text), limit, would=would, at_least=True)
    data = text.encode("utf-8")
    if len(data) > limit:
        raise too_large(shown, len(data), limit, would=would)
    return data


def decode_text(data: bytes, shown: str) -> str:
    """A file's bytes as text, or FileToolError when they are binary or not UTF-8."""
    if looks_binary(data[:SNIFF_BYTES]):
        raise not_text(shown, "it contains NUL bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise not_text(shown, f"invalid UTF-8 at byte {exc.start}") from None


def stage(location: Location, data: bytes, mode: int | None = None) -> str:
    """Write `data` to a new temporary file in the target's folder, ready for `commit_staged`;
    returns its name there.

    Beside the target, so the rename stays on one filesystem and is atomic: a reader sees the old
    file or the new one, never half of it. Created in the folder's fd with O_EXCL|O_NOFOLLOW, so
    nothing planted under that name is written through. The file takes `mode`, else the mode of
    the file it replaces, else the usual mode for a new file (the umask applies).
    """
    tmp = f".{location.name[:200]}.{secrets.token_hex(4)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666,
                 dir_fd=location.dir_fd)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)  # the data is on disk before the rename makes it the file
            if mode is None and location.stat is not None and stat.S_ISREG(location.stat.st_mode):
                mode = stat.S_IMODE(location.stat.st_mode)
            if mode is not None:
                os.fchmod(fd, mode)
        finally:
            os.close(fd)
    except BaseException:
        discard(location, tmp)
        raise
    return tmp


def commit_staged(location: Location, tmp: str) -> None:
    """Rename the staged file over the target, both in the folder's fd (renameat: a symlink put in
    the target's place is replaced, not followed)."""
    os.replace(tmp, location.name, src_dir_fd=location.dir_fd, dst_dir_fd=location.dir_fd)


def discard(location: Location, tmp: str) -> None:
    try:
        os.unlink(tmp, dir_fd=location.dir_fd)
    except FileNotFoundError:
        pass


def atomic_write(location: Location, data: bytes) -> None:
    """Replace (or create) the located file with `data` in one step."""
    tmp = stage(location, data)
    try:
        commit_staged(location, tmp)
    except BaseException:
        discard(location, tmp)
        raise
