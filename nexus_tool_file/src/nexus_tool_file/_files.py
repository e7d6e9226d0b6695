"""The tools that work on one file or folder: read, write, edit and list.

Each handler takes the workspace and settings first (the plugin binds them with
`functools.partial`, per Nexus) and the call's arguments last. Expected failures raise
FileToolError, which the plugin turns into `failure(message)`. Every file and folder is opened
through the workspace (`Workspace.open`, `Workspace.locate`): beneath it, in one step.
"""

from __future__ import annotations

import heapq
import os
import stat
from collections.abc import Iterator
from typing import IO, Any

from nexus_core import ToolResult

from ._beneath import READ_DIR, READ_FILE, STAT_ONLY
from ._fileio import (SNIFF_BYTES, atomic_write, check_regular, check_size, encoded, looks_binary, not_text,
                      read_text, too_large)
from ._paths import FileToolError, Location, Workspace
from ._settings import Settings

LINE_ENDS = "\r\n"
PATH_TEXT = "File path, relative to the workspace root (an absolute one must be inside it)."


def _result(output: str, structured: dict[str, Any]) -> ToolResult:
    return ToolResult(id="", name="", output=output, output_structured=structured)


def _missing(ws: Workspace, requested: str, what: str = "file") -> FileToolError:
    return FileToolError(f"{ws.show(ws.relative(requested))}: no such {what}")


def _existing_file(ws: Workspace, requested: str) -> Location:
    """The located file `requested` names, which must exist and be a regular file. Close it."""
    try:
        location = ws.locate(requested)
    except (FileNotFoundError, NotADirectoryError):
        raise _missing(ws, requested) from None
    shown = ws.show(location.rel)
    problem = None
    if location.stat is None:
        problem = f"{shown}: no such file"
    elif stat.S_ISDIR(location.stat.st_mode):
        problem = f"{shown} is a folder; use list to see what it holds"
    elif not stat.S_ISREG(location.stat.st_mode):
        problem = f"{shown} is not a regular file"
    if problem:
        location.close()
        raise FileToolError(problem)
    return location


#: a line is read in pieces of at most this many bytes, so one huge line never sits in memory whole
LINE_PIECE_BYTES = 1 << 20


def numbered_lines(f: IO[bytes], keep: int) -> Iterator[tuple[int, bytes, int]]:
    """(number, its first `keep` bytes, its length) of each line of a binary file, reading at
    most LINE_PIECE_BYTES at a time: a file of one 2 GB line costs a piece of memory, not 2 GB."""
    number = 0
    while True:
        piece = f.readline(LINE_PIECE_BYTES)
        if not piece:
            return
        number += 1
        head, length = piece[:keep], len(piece)
        while not piece.endswith(b"\n") and len(piece) == LINE_PIECE_BYTES:
            piece = f.readline(LINE_PIECE_BYTES)
            if len(head) < keep:
                head += piece[:keep - len(head)]
            length += len(piece)
        yield number, head, length


# -- read -----------------------------------------------------------------------------------

READ_INPUT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": {"type": "string", "description": PATH_TEXT},
        "offset": {"type": "integer", "minimum": 1, "default": 1,
                   "description": "First line to return (the file's first is 1)."},
        "limit": {"type": "integer", "minimum": 1,
                  "description": "How many lines to return."},
    },
    "required": ["path"],
    "additionalProperties": False,
}

READ_OUTPUT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": {"type": "string"},
        "content": {"type": "string", "description": "the lines exactly as in the file (no line numbers)"},
        "start_line": {"type": "integer", "description": "the first line's number"},
        "lines": {"type": "integer", "description": "lines returned"},
        "total_lines": {"type": "integer", "description": "lines in the file"},
        "truncated": {"type": "boolean", "description": "more of the file follows"},
    },
    "required": ["path", "content", "start_line", "lines", "total_lines", "truncated"],
    "additionalProperties": False,
}

READ_DESCRIPTION = (
    "Read a UTF-8 text file from the workspace. Called directly, returns its lines numbered like "
    "`cat -n` (number, tab, text); the numbers are not part of the file. Long files come in pieces: give "
    "`offset` (first line) and `limit` (line count) to read further. Binary files are refused."
)


def read(ws: Workspace, settings: Settings, arguments: dict[str, Any]) -> ToolResult:
    requested: str = arguments["path"]
    try:
        opened = ws.open(requested, READ_FILE)
    except (FileNotFoundError, NotADirectoryError):
        raise _missing(ws, requested) from None
    shown = ws.show(opened.rel)
    offset: int = arguments.get("offset", 1)
    limit: int = arguments.get("limit", settings.read_lines)
    chosen: list[str] = []
    size = total = 0
    cut_line: int | None = None  # a line cut short because it alone passes the byte cap
    hit_byte_cap = False
    try:
        if stat.S_ISDIR(os.fstat(opened.fd).st_mode):
            raise FileToolError(f"{shown} is a folder; use list to see what it holds")
        # not a FIFO or a device: reading one could block, or never end
        check_size(check_regular(opened.fd, shown), shown, settings.max_file_bytes)
    except BaseException:
        os.close(opened.fd)
        raise
    with open(opened.fd, "rb", closefd=True) as f:
        if looks_binary(f.read(SNIFF_BYTES)):
            raise not_text(shown, "it contains NUL bytes")
        f.seek(0)
        # Stream line by line: a huge file is counted, not held in memory.
        consumed = 0
        for number, raw, length in numbered_lines(f, settings.max_read_bytes + 1):
            total = number
            consumed += length
            if consumed > settings.max_file_bytes:  # it grew past the limit while it was read
                raise too_large(shown, consumed, settings.max_file_bytes)
            if number < offset or len(chosen) >= limit or hit_byte_cap:
                continue
            if size + length > settings.max_read_bytes:
                hit_byte_cap = True
                if chosen:
                    continue
                raw, cut_line = raw[: settings.max_read_bytes], number
            try:
                chosen.append(raw.decode("utf-8", "replace" if cut_line else "strict"))
            except UnicodeDecodeError as exc:
                raise not_text(shown, f"invalid UTF-8 on line {number}, byte {exc.start}") from None
            size += len(raw)

    end = offset + len(chosen) - 1
    truncated = end < total or cut_line is not None
    numbered = [f"{offset + i:6}\t{line.rstrip(LINE_ENDS)}" for i, line in enumerate(chosen)]
    if total == 0:
        numbered.append("[empty file]")
    elif offset > total:
        numbered.append(f"[{shown} has {total} lines; offset {offset} is past the end]")
    elif cut_line is not None:
        numbered.append(f"[line {cut_line} is longer than max_read_bytes={settings.max_read_bytes}; "
                        "only its start is shown]")
    elif truncated:
        why = f", stopped at max_read_bytes={settings.max_read_bytes}" if hit_byte_cap else ""
        numbered.append(f"[lines {offset}-{end} of {total}{why}; read on with offset={end + 1}]")
    return _result("\n".join(numbered), {
        "path": shown, "content": "".join(chosen), "start_line": offset, "lines": len(chosen),
        "total_lines": total, "truncated": truncated,
    })


# -- write ----------------------------------------------------------------------------------

WRITE_INPUT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": {"type": "string", "description": PATH_TEXT + " Missing parent folders are created."},
        "content": {"type": "string", "description": "The whole new content of the file."},
    },
    "required": ["path", "content"],
    "additionalProperties": False,
}

WRITE_OUTPUT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": {"type": "string"},
        "bytes": {"type": "integer", "description": "size written (UTF-8)"},
        "created": {"type": "boolean", "description": "the file did not exist before"},
    },
    "required": ["path", "bytes", "created"],
    "additionalProperties": False,
}

WRITE_DESCRIPTION = (
    "Create a file, or replace all of an existing file's content, in the workspace. The file is "
    "replaced in one step (readers never see half of it). To change part of a file, use edit."
)


def write(ws: Workspace, settings: Settings, arguments: dict[str, Any]) -> ToolResult:
    data = encoded(arguments["content"], ws.show(ws.relative(arguments["path"])), settings.max_file_bytes,
                   would="writing the content")
    location = ws.locate(arguments["path"], create_parents=True)
    try:
        shown = ws.show(location.rel)
        if location.stat is not None and stat.S_ISDIR(location.stat.st_mode):
            raise FileToolError(f"{shown} is a folder; give the path of a file")
        created = location.stat is None
        atomic_write(location, data)
    finally:
        location.close()
    how = "new file" if created else "replaced its content"
    return _result(f"wrote {len(data)} bytes to {shown} ({how})",
                   {"path": shown, "bytes": len(data), "created": created})


# -- edit -----------------------------------------------------------------------------------

EDIT_INPUT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": {"type": "string", "description": PATH_TEXT},
        "old_string": {"type": "string", "minLength": 1,
                       "description": "The exact text to replace, whitespace included; it must occur once unless replace_all."},
        "new_string": {"type": "string", "description": "Its replacement."},
        "replace_all": {"type": "boolean", "default": False,
                        "description": "Replace every occurrence."},
    },
    "required": ["path", "old_string", "new_string"],
    "additionalProperties": False,
}

EDIT_OUTPUT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": {"type": "string"},
        "replacements": {"type": "integer", "description": "how many occurrences were replaced"},
    },
    "required": ["path", "replacements"],
    "additionalProperties": False,
}

EDIT_DESCRIPTION = (
    "Replace text in a file: `old_string` becomes `new_string`. Copy old_string exactly from the "
    "file (without read's line numbers), with enough surrounding lines to be unique. The call fails, "
    "changing nothing, when old_string is missing or occurs more than once (unless replace_all)."
)


def _line_numbers(text: str, needle: str, most: int = 10) -> list[int]:
    numbers: list[int] = []
    start = text.find(needle)
    while start != -1 and len(numbers) < most:
        numbers.append(text.count("\n", 0, start) + 1)
        start = text.find(needle, start + len(needle))
    return numbers


def _crlf(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\n", "\r\n")


def edit(ws: Workspace, settings: Settings, arguments: dict[str, Any]) -> ToolResult:
    old: str = arguments["old_string"]
    new: str = arguments["new_string"]
    replace_all: bool = arguments.get("replace_all", False)
    if old == new:
        raise FileToolError("old_string and new_string are the same: nothing to change")
    location = _existing_file(ws, arguments["path"])
    try:
        return _edit(location, ws.show(location.rel), old, new, replace_all, settings.max_file_bytes)
    finally:
        location.close()


def _edit(location: Location, shown: str, old: str, new: str, replace_all: bool, limit: int) -> ToolResult:
    text, size = read_text(location, shown, limit)
    if len(new) > limit:  # the result holds new_string at least once: too large, however often it occurs
        raise too_large(shown, size - len(old) + len(new), limit, would="replacing old_string", at_least=True)
    count = text.count(old)
    if count == 0 and "\n" in old and "\r\n" in text:
        # A model writes "\n"; a file with Windows line ends holds "\r\n". Match it as it is.
        old, new = _crlf(old), _crlf(new)
        count = text.count(old)
    if count == 0:
        raise FileToolError(f"old_string was not found in {shown}; read the file and copy the text exactly, "
                            "whitespace and indentation included")
    if count > 1 and not replace_all:
        lines = ", ".join(map(str, _line_numbers(text, old)))
        raise FileToolError(f"old_string occurs {count} times in {shown} (lines {lines}); include more "
                            "surrounding text so it occurs once, or set replace_all to replace every one")
    done = count if replace_all else 1
    # The result's size, worked out before it is built: 1 MiB of `a` with every `a` replaced by
    # 4 KiB would otherwise be a 4 GiB string in the host before anything could refuse it.
    result_size = size + done * (len(new.encode("utf-8")) - len(old.encode("utf-8")))
    if result_size > limit:
        raise too_large(shown, result_size, limit,
                        would=f"replacing {done} occurrence{'s' if done != 1 else ''} of old_string")
    replaced = text.replace(old, new) if replace_all else text.replace(old, new, 1)
    atomic_write(location, replaced.encode("utf-8"))
    return _result(f"replaced {done} occurrence{'s' if done != 1 else ''} in {shown}",
                   {"path": shown, "replacements": done})


# -- list -----------------------------------------------------------------------------------

LIST_INPUT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": {"type": "string", "default": ".",
                 "description": "Folder to list, relative to the workspace root."},
        "limit": {"type": "integer", "minimum": 1,
                  "description": "The most entries to return."},
    },
    "additionalProperties": False,
}

LIST_OUTPUT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": {"type": "string"},
        "entries": {"type": "array", "items": {
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "type": {"enum": ["file", "dir", "other"]},
                "size": {"type": ["integer", "null"], "description": "bytes, for files"},
            },
            "required": ["name", "type", "size"],
            "additionalProperties": False,
        }},
        "truncated": {"type": "boolean", "description": "more entries than returned"},
    },
    "required": ["path", "entries", "truncated"],
    "additionalProperties": False,
}

LIST_DESCRIPTION = (
    "List what a folder in the workspace holds, sorted by name; called directly, folders end with `/`. "
    "Not recursive: use glob to find files by name anywhere below a folder."
)


def list_folder(ws: Workspace, settings: Settings, arguments: dict[str, Any]) -> ToolResult:
    requested: str = arguments.get("path", ".")
    try:
        opened = ws.open(requested, READ_DIR)
    except FileNotFoundError:
        raise _missing(ws, requested, "folder") from None
    except NotADirectoryError:
        kind, rel = ws.kind(requested)
        if kind == "missing":
            raise _missing(ws, requested, "folder") from None
        raise FileToolError(f"{ws.show(rel)} is a file; use read to see it") from None
    shown = ws.show(opened.rel)
    limit = min(arguments.get("limit", settings.max_results), settings.max_results)
    count = 0

    def visible(scan: Iterator[os.DirEntry[str]]) -> Iterator[tuple[str, os.DirEntry[str], dict[str, Any] | None]]:
        """(name, entry, what a symlink leads to) of each entry shown: not symlinks that lead out,
        neither by name nor in the count."""
        nonlocal count
        for entry in scan:
            described = None
            if entry.is_symlink():
                described = _describe_link(ws, f"{opened.rel}/{entry.name}" if opened.rel else entry.name)
                if described is None:
                    continue
            count += 1
            yield entry.name, entry, described

    def describe(entry: os.DirEntry[str], link: dict[str, Any] | None) -> dict[str, Any]:
        if link is not None:
            return {"name": entry.name, **link}
        if entry.is_dir(follow_symlinks=False):
            return {"name": entry.name, "type": "dir", "size": None}
        if entry.is_file(follow_symlinks=False):
            return {"name": entry.name, "type": "file", "size": entry.stat(follow_symlinks=False).st_size}
        return {"name": entry.name, "type": "other", "size": None}

    try:
        with os.scandir(opened.fd) as scan:
            # the first `limit` by name, held while the folder is read: a folder of millions of
            # entries costs the host `limit` of them in memory, not millions
            kept = heapq.nsmallest(limit, visible(scan), key=lambda item: item[0])
            entries = [describe(entry, link) for _, entry, link in kept]
    finally:
        os.close(opened.fd)
    truncated = count > limit
    lines = [e["name"] + ("/" if e["type"] == "dir" else "") for e in entries]
    if not entries:
        lines.append(f"[{shown} is empty]")
    elif truncated:
        lines.append(f"[first {limit} of {count} entries]")
    return _result("\n".join(lines), {"path": shown, "entries": entries, "truncated": truncated})


def _describe_link(ws: Workspace, rel: str) -> dict[str, Any] | None:
    """Type and size of what a symlink leads to, opened beneath the workspace (so the size is
    never an outside file's); None for a link that leads out."""
    try:
        opened = ws.open(rel, STAT_ONLY)
    except FileNotFoundError:  # dangling: shown while its target would lie inside
        return {"type": "other", "size": None} if ws.dangling_inside(rel) else None
    except (OSError, FileToolError):
        return None
    try:
        found = os.fstat(opened.fd)
    finally:
        os.close(opened.fd)
    if stat.S_ISDIR(found.st_mode):
        return {"type": "dir", "size": None}
    if stat.S_ISREG(found.st_mode):
        return {"type": "file", "size": found.st_size}
    return {"type": "other", "size": None}
