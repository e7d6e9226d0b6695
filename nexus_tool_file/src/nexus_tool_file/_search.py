"""The tools that search many files: glob (find files by name) and grep (find lines by regex).

Both walk the workspace the confined way (`Workspace.walk_files`): from folder fd to folder fd,
never into a symlinked folder; symlinks that lead out are skipped, and so are folders named in
the `exclude` setting and the session folder. Results name paths relative to the workspace
root, ready to pass to read or edit. Patterns are compiled by RE2 (`_patterns`): matching takes
time linear in the text, whatever a model writes.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Generator, Iterator
from contextlib import closing
from typing import Any

from nexus_core import ToolResult

from . import _patterns
from ._beneath import READ_FILE
from ._fileio import SNIFF_BYTES, check_regular, looks_binary
from ._paths import FileToolError, Found, Workspace
from ._patterns import compile_glob, subject
from ._settings import Settings

#: grep shows at most this much of a matching line: a minified file's one line can be megabytes
MAX_LINE_CHARS = 500

FOLDER_TEXT = "Folder to search, relative to the workspace root."


def _folder(ws: Workspace, requested: str) -> tuple[str, str]:
    """(real rel, shown) of the folder `requested` names, or FileToolError."""
    kind, rel = ws.kind(requested)
    shown = ws.show(rel)
    if kind == "missing":
        raise FileToolError(f"{shown}: no such folder")
    if kind != "dir":
        raise FileToolError(f"{shown} is a file, not a folder")
    return rel, shown


def _below(base: str, rel: str) -> str:
    return rel[len(base) + 1:] if base else rel


# -- glob -----------------------------------------------------------------------------------

GLOB_INPUT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "pattern": {"type": "string", "minLength": 1,
                    "description": "Glob matched below `path`: `*.py` (that folder), `**/*.py` (any depth), "
                                   "`src/**/test_*.{py,pyi}`."},
        "path": {"type": "string", "default": ".", "description": FOLDER_TEXT},
        "limit": {"type": "integer", "minimum": 1,
                  "description": "The most paths to return."},
    },
    "required": ["pattern"],
    "additionalProperties": False,
}

GLOB_OUTPUT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "paths": {"type": "array", "items": {"type": "string"},
                  "description": "relative to the workspace root; each folder's files by name, then its "
                                 "subfolders'"},
        "truncated": {"type": "boolean", "description": "more may match (the limit or the search's "
                                                       "time limit was reached)"},
    },
    "required": ["paths", "truncated"],
    "additionalProperties": False,
}

GLOB_DESCRIPTION = (
    "Find files in the workspace whose path matches a glob pattern. Called directly, returns their "
    "paths relative to the workspace root, one per line. Folders such as .git and node_modules are skipped."
)


def glob(ws: Workspace, settings: Settings, arguments: dict[str, Any]) -> ToolResult:
    pattern: str = arguments["pattern"]
    if pattern.startswith("/") or ".." in pattern.split("/"):
        raise FileToolError(f"pattern {pattern!r} is matched against paths below `path`, so it cannot start "
                            "with / or contain '..'; set `path` to the folder to search instead")
    regex = compile_glob(pattern)
    base, shown = _folder(ws, arguments.get("path", "."))
    limit = min(arguments.get("limit", settings.max_results), settings.max_results)
    # Without `**` (or a choice that may hide one) a pattern fixes the depth: walk no deeper.
    depth = None if "**" in pattern or "{" in pattern else pattern.count("/") + 1
    found: list[str] = []
    deadline = _Deadline(settings.max_search_seconds)
    try:
        for file in ws.walk_files(base, settings.exclude, depth):
            if deadline.check():
                break
            if regex.match(subject(_below(base, file.rel))):
                found.append(file.rel)
                if len(found) > limit:
                    break
    finally:
        _patterns.purge()
    truncated = len(found) > limit or deadline.passed
    paths = found[:limit]
    lines = list(paths)
    if deadline.passed:
        lines.append(deadline.note("glob"))
    elif not paths:
        lines.append(f"[no files match {pattern!r} under {shown}]")
    elif truncated:
        lines.append(f"[showing the first {limit} matches; narrow the pattern or path for the rest]")
    return ToolResult(id="", name="", output="\n".join(lines),
                      output_structured={"paths": paths, "truncated": truncated})


# -- grep -----------------------------------------------------------------------------------

GREP_INPUT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "pattern": {"type": "string", "minLength": 1,
                    "description": "Regular expression for a line (Python syntax, matched by RE2: no "
                                   "backreferences or lookaround)."},
        "path": {"type": "string", "default": ".",
                 "description": "File or folder to search, relative to the workspace root."},
        "include": {"type": "string",
                    "description": "Only files matching this glob: `*.py` by name, one with `/` by path below "
                                   "`path` (`src/**/*.ts`)."},
        "ignore_case": {"type": "boolean", "default": False, "description": "Match regardless of case."},
        "limit": {"type": "integer", "minimum": 1,
                  "description": "The most matching lines to return."},
    },
    "required": ["pattern"],
    "additionalProperties": False,
}

GREP_OUTPUT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "matches": {"type": "array", "items": {
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "relative to the workspace root"},
                "line": {"type": "integer", "description": "from 1"},
                "text": {"type": "string", "description": f"its first {MAX_LINE_CHARS} characters"},
            },
            "required": ["path", "line", "text"],
            "additionalProperties": False,
        }},
        "truncated": {"type": "boolean", "description": "more may match (the limit or the search's "
                                                       "time limit was reached)"},
    },
    "required": ["matches", "truncated"],
    "additionalProperties": False,
}

GREP_DESCRIPTION = (
    "Search file contents in the workspace for a regular expression. Called directly, returns one "
    "`path:line:text` per matching line. Binary files and folders such as .git and node_modules are skipped."
)


def _pieces(fd: int, size: int, whole: tuple[Any, bool] | None = None) -> Iterator[tuple[int, bytes, bool]]:
    """(line number, piece, is the line's first piece) of a text file's lines; nothing for a
    binary, irregular or unreadable one. A line longer than `size` bytes comes in pieces, so
    memory and the cost of one search stay bounded whatever the file holds.

    With `whole` (from `_whole_file_regex`), a file of at most `size` bytes of UTF-8 is first
    searched whole, in one RE2 call, and yields nothing when that finds nothing: most files of a
    search do not match, and one call on the whole text is far cheaper than one per line."""
    try:
        check_regular(fd, "")  # a FIFO or a device: not searched
        with open(fd, "rb", closefd=False) as f:
            if looks_binary(f.read(SNIFF_BYTES)):
                return
            f.seek(0)
            if whole is not None:
                regex, no_cr = whole
                text = f.read(size + 1)
                if (len(text) <= size and _is_utf8(text) and not (no_cr and b"\r" in text)
                        and not regex.search(text)):
                    return
                f.seek(0)
            number, first = 0, True
            while piece := f.readline(size):
                if first:
                    number += 1
                yield number, piece, first
                first = piece.endswith(b"\n") or len(piece) < size
    except (OSError, FileToolError):
        return  # unreadable (permissions, vanished mid-walk), or not a file: not a match, not a failure


def _is_utf8(data: bytes) -> bool:
    if data.isascii():
        return True
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


#: `\A`, `\z` and `\Z` mean the start and end of a line to grep, of the text to a search of a
#: whole file: with one (anywhere, even escaped: conservative), files are searched line by line only
_TEXT_ANCHORS = re.compile(r"\\[AzZ]")


def _whole_file_regex(pattern: str, regex: Any, ignore_case: bool) -> tuple[Any, bool] | None:
    """The regex that searches a whole file for `_pieces`' first look, and whether it is only
    valid for files without `\\r`; None when a whole-file search could miss a line that matches.

    A pattern without anchors matches a line only where it matches the text around it. With `^`
    or `$`, multi-line mode makes them match at line starts and ends, which is what they mean on
    one line, as long as no line ends with `\\r` (grep strips it from a line, `$` would stop before it)."""
    if _TEXT_ANCHORS.search(pattern):
        return None
    if "^" not in pattern and "$" not in pattern:
        return regex, False
    try:
        return _patterns.compile_regex("(?m)" + pattern, ignore_case), True
    except FileToolError:
        return None


def _searchable(piece: bytes) -> bytes:
    """The piece as RE2 reads it: UTF-8 as it is; a line with bytes that are not UTF-8 decoded with
    U+FFFD for them (as Python's `re` over decoded text saw it), so `.` still matches there."""
    if _is_utf8(piece):
        return piece
    return piece.decode("utf-8", "replace").encode("utf-8")


class _Deadline:
    """When a search must stop: `max_search_seconds` after it started."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.at = time.monotonic() + seconds
        self.passed = False

    def check(self) -> bool:
        """True (and from then on) once the time is up."""
        if not self.passed and time.monotonic() >= self.at:
            self.passed = True
        return self.passed

    def note(self, tool: str) -> str:
        return (f"[{tool} stopped after max_search_seconds={self.seconds:g}: what was found so far is shown; "
                "narrow the pattern, path or include]")


def _files_to_search(ws: Workspace, base: str, kind: str, settings: Settings, wanted: Callable[[str], bool],
                     deadline: _Deadline) -> Generator[tuple[str, int]]:
    """(rel, an fd to read) of each file grep searches (those `wanted` says yes to), until the
    deadline; the caller closes each fd."""
    if kind == "file":
        if wanted(base):
            opened = ws.open(base, READ_FILE)
            yield opened.rel, opened.fd
        return
    found: Found
    for found in ws.walk_files(base, settings.exclude):
        if deadline.check():
            return
        if not wanted(found.rel):
            continue
        try:
            fd = found.open_read()
        except (OSError, FileToolError):
            continue  # vanished, swapped, unreadable
        yield found.rel, fd


#: bytes of a line kept to show it: enough for MAX_LINE_CHARS characters of any UTF-8
_HEAD_BYTES = 4 * MAX_LINE_CHARS + 4


def _search_file(fd: int, rel: str, regex: Any, matches: list[dict[str, Any]], most: int,
                 deadline: _Deadline, whole: tuple[Any, bool] | None) -> None:
    """Add the matching lines of one file to `matches`, stopping past `most` or the deadline."""
    matched_line = 0
    head = b""
    for number, piece, first in _pieces(fd, _patterns.piece_bytes(regex), whole):
        if deadline.check():
            return
        if first:
            head = piece[:_HEAD_BYTES]
        if number == matched_line:
            continue  # the rest of a long line that already matched
        if regex.search(_searchable(piece.rstrip(b"\r\n"))):  # the line, without its end
            matched_line = number
            text = head.decode("utf-8", "replace").rstrip("\r\n")
            if len(text) > MAX_LINE_CHARS:
                text = text[:MAX_LINE_CHARS] + "…"
            matches.append({"path": rel, "line": number, "text": text})
            if len(matches) > most:
                return


def grep(ws: Workspace, settings: Settings, arguments: dict[str, Any]) -> ToolResult:
    pattern: str = arguments["pattern"]
    ignore_case = bool(arguments.get("ignore_case"))
    regex = _patterns.compile_regex(pattern, ignore_case)
    whole = _whole_file_regex(pattern, regex, ignore_case)
    include: str = arguments.get("include", "")
    include_regex = compile_glob(include) if include else None
    include_by_name = "/" not in include  # `*.py` names files; `src/**/*.py` places them
    kind, base = ws.kind(arguments.get("path", "."))
    shown = ws.show(base)
    if kind == "missing":
        raise FileToolError(f"{shown}: no such file or folder")
    if kind == "other":
        raise FileToolError(f"{shown} is neither a regular file nor a folder")
    limit = min(arguments.get("limit", settings.max_results), settings.max_results)

    def wanted(rel: str) -> bool:
        if include_regex is None:
            return True
        name = rel.rpartition("/")[2] if include_by_name else (_below(base, rel) or ".")
        return include_regex.match(subject(name)) is not None

    matches: list[dict[str, Any]] = []
    deadline = _Deadline(settings.max_search_seconds)
    try:
        with closing(_files_to_search(ws, base, kind, settings, wanted, deadline)) as files:
            for rel, fd in files:
                try:
                    _search_file(fd, rel, regex, matches, limit, deadline, whole)
                finally:
                    os.close(fd)
                if len(matches) > limit or deadline.check():
                    break
    finally:
        _patterns.purge()

    truncated = len(matches) > limit or deadline.passed
    matches = matches[:limit]
    lines = [f"{m['path']}:{m['line']}:{m['text']}" for m in matches]
    if deadline.passed:
        lines.append(deadline.note("grep"))
    elif not matches:
        where = f"{shown} (files matching {include!r})" if include else shown
        lines.append(f"[no lines match {pattern!r} in {where}]")
    elif truncated:
        lines.append(f"[showing the first {limit} matches; narrow the pattern, path or include for the rest]")
    return ToolResult(id="", name="", output="\n".join(lines),
                      output_structured={"matches": matches, "truncated": truncated})
