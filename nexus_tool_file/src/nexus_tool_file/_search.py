"""The tools that search many files: glob (find files by name) and grep (find lines by regex).

Both walk the workspace the confined way (`Workspace.walk_files`): symlinked folders are not
entered, symlinks that lead out are skipped, and folders named in the `exclude` setting are left
out. Results name paths relative to the workspace root, ready to pass to read or edit.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from nexus_core import ToolResult

from ._fileio import SNIFF_BYTES, looks_binary
from ._paths import FileToolError, Workspace
from ._settings import Settings

#: grep shows at most this much of a matching line: a minified file's one line can be megabytes
MAX_LINE_CHARS = 500

FOLDER_TEXT = "Folder to search, relative to the workspace root (default: the root)."


def compile_glob(pattern: str) -> re.Pattern[str]:
    """A regex for a glob over `/`-separated paths.

    `*` and `?` stay within one path segment, `**` as a whole segment spans any number of them
    (`**/*.py` matches `a.py` and `x/y/a.py`), `[abc]` and `[!abc]` are character classes and
    `{py,pyi}` is a choice. Hidden files match like any other.
    """
    return re.compile(_translate(pattern) + r"\Z")


def _closing_brace(pattern: str, start: int) -> int:
    depth = 0
    for i in range(start, len(pattern)):
        depth += {"{": 1, "}": -1}.get(pattern[i], 0)
        if depth == 0:
            return i
    return -1


def _split_choices(body: str) -> list[str]:
    choices, depth, current = [], 0, ""
    for ch in body:
        if ch == "," and depth == 0:
            choices.append(current)
            current = ""
            continue
        depth += {"{": 1, "}": -1}.get(ch, 0)
        current += ch
    return [*choices, current]


def _translate(pattern: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        at_segment_start = i == 0 or pattern[i - 1] == "/"
        if pattern.startswith("**", i) and at_segment_start and pattern[i + 2:i + 3] in ("", "/"):
            if i + 2 == len(pattern):
                out.append(".*")
                i += 2
            else:
                out.append("(?:.*/)?")  # `**/`: no folder, or any number of them
                i += 3
        elif ch == "*":
            out.append("[^/]*")
            i += 1
        elif ch == "?":
            out.append("[^/]")
            i += 1
        elif ch == "[" and (end := pattern.find("]", i + 2)) != -1:
            body = pattern[i + 1:end]
            negate = body.startswith("!")
            body = re.sub(r"([\\\[\]^])", r"\\\1", body[1:] if negate else body)
            out.append("[" + ("^" if negate else "") + body + "]")
            i = end + 1
        elif ch == "{" and (end := _closing_brace(pattern, i)) != -1:
            out.append("(?:" + "|".join(_translate(c) for c in _split_choices(pattern[i + 1:end])) + ")")
            i = end + 1
        else:
            out.append(re.escape(ch))
            i += 1
    return "".join(out)


def _folder(ws: Workspace, requested: str) -> tuple[Path, str]:
    path = ws.resolve(requested)
    shown = ws.show(path)
    if not path.exists():
        raise FileToolError(f"{shown}: no such folder")
    if not path.is_dir():
        raise FileToolError(f"{shown} is a file, not a folder")
    return path, shown


# -- glob -----------------------------------------------------------------------------------

GLOB_INPUT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "pattern": {"type": "string", "minLength": 1,
                    "description": "Glob matched against paths below `path`: `*.py` (that folder only), "
                                   "`**/*.py` (any depth), `src/**/test_*.{py,pyi}`."},
        "path": {"type": "string", "default": ".", "description": FOLDER_TEXT},
        "limit": {"type": "integer", "minimum": 1,
                  "description": "The most paths to return (at most the plugin's max_results)."},
    },
    "required": ["pattern"],
    "additionalProperties": False,
}

GLOB_OUTPUT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "paths": {"type": "array", "items": {"type": "string"},
                  "description": "matching files, relative to the workspace root: each folder's "
                                 "files by name, then its subfolders'"},
        "truncated": {"type": "boolean", "description": "more files match than were returned"},
    },
    "required": ["paths", "truncated"],
    "additionalProperties": False,
}

GLOB_DESCRIPTION = (
    "Find files in the workspace whose path matches a glob pattern. Returns their paths relative to "
    "the workspace root, one per line. Folders such as .git and node_modules are skipped."
)


def glob(ws: Workspace, settings: Settings, arguments: dict[str, Any]) -> ToolResult:
    pattern: str = arguments["pattern"]
    if pattern.startswith("/") or ".." in pattern.split("/"):
        raise FileToolError(f"pattern {pattern!r} is matched against paths below `path`, so it cannot start "
                            "with / or contain '..'; set `path` to the folder to search instead")
    base, shown = _folder(ws, arguments.get("path", "."))
    limit = min(arguments.get("limit", settings.max_results), settings.max_results)
    regex = compile_glob(pattern)
    # Without `**` (or a choice that may hide one) a pattern fixes the depth: walk no deeper.
    depth = None if "**" in pattern or "{" in pattern else pattern.count("/") + 1
    found: list[str] = []
    for file in ws.walk_files(base, settings.exclude, depth):
        if regex.match(file.relative_to(base).as_posix()):
            found.append(file.relative_to(ws.root).as_posix())
            if len(found) > limit:
                break
    truncated = len(found) > limit
    paths = found[:limit]
    lines = list(paths)
    if not paths:
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
                    "description": "Regular expression (Python syntax) searched for in each line."},
        "path": {"type": "string", "default": ".",
                 "description": "File or folder to search, relative to the workspace root (default: the root)."},
        "include": {"type": "string",
                    "description": "Only search files matching this glob: `*.py` matches file names, "
                                   "a glob with `/` matches paths below `path` (`src/**/*.ts`)."},
        "ignore_case": {"type": "boolean", "default": False, "description": "Match regardless of case."},
        "limit": {"type": "integer", "minimum": 1,
                  "description": "The most matching lines to return (at most the plugin's max_results)."},
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
                "line": {"type": "integer", "description": "line number, from 1"},
                "text": {"type": "string", "description": f"the line (its first {MAX_LINE_CHARS} characters)"},
            },
            "required": ["path", "line", "text"],
            "additionalProperties": False,
        }},
        "truncated": {"type": "boolean", "description": "there are more matches than were returned"},
    },
    "required": ["matches", "truncated"],
    "additionalProperties": False,
}

GREP_DESCRIPTION = (
    "Search file contents in the workspace for a regular expression. Returns one `path:line:text` "
    "per matching line. Binary files and folders such as .git and node_modules are skipped."
)


def _lines(path: Path) -> Iterable[tuple[int, str]]:
    """(number, text) of each line of a text file; nothing for a binary or unreadable one."""
    try:
        with open(path, "rb") as f:
            if looks_binary(f.read(SNIFF_BYTES)):
                return
            f.seek(0)
            for number, raw in enumerate(f, 1):
                yield number, raw.decode("utf-8", "replace").rstrip("\r\n")
    except OSError:
        return  # unreadable (permissions, vanished mid-walk): not a match, not a failure


def grep(ws: Workspace, settings: Settings, arguments: dict[str, Any]) -> ToolResult:
    pattern: str = arguments["pattern"]
    try:
        regex = re.compile(pattern, re.IGNORECASE if arguments.get("ignore_case") else 0)
    except re.error as exc:
        raise FileToolError(f"invalid regular expression {pattern!r}: {exc}") from None
    base = ws.resolve(arguments.get("path", "."))
    shown = ws.show(base)
    if not base.exists():
        raise FileToolError(f"{shown}: no such file or folder")
    include: str = arguments.get("include", "")
    include_regex = compile_glob(include) if include else None
    include_by_name = "/" not in include  # `*.py` names files; `src/**/*.py` places them
    limit = min(arguments.get("limit", settings.max_results), settings.max_results)
    files = [base] if base.is_file() else ws.walk_files(base, settings.exclude)

    matches: list[dict[str, Any]] = []
    for file in files:
        if include_regex is not None:
            subject = file.name if include_by_name else file.relative_to(base).as_posix()
            if not include_regex.match(subject):
                continue
        shown_file = file.relative_to(ws.root).as_posix()
        for number, text in _lines(file):
            if regex.search(text):
                if len(text) > MAX_LINE_CHARS:
                    text = text[:MAX_LINE_CHARS] + "…"
                matches.append({"path": shown_file, "line": number, "text": text})
                if len(matches) > limit:
                    break
        if len(matches) > limit:
            break

    truncated = len(matches) > limit
    matches = matches[:limit]
    lines = [f"{m['path']}:{m['line']}:{m['text']}" for m in matches]
    if not matches:
        where = f"{shown} (files matching {include!r})" if include else shown
        lines.append(f"[no lines match {pattern!r} in {where}]")
    elif truncated:
        lines.append(f"[showing the first {limit} matches; narrow the pattern, path or include for the rest]")
    return ToolResult(id="", name="", output="\n".join(lines),
                      output_structured={"matches": matches, "truncated": truncated})
