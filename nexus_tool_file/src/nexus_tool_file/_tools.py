"""The file tools of one Nexus: the handlers bound to its workspace and settings, and what
`nexus doctor` says about them. Imported when a Nexus registers the tools (the plugin's top
module stays light, for the `nexus` command line's start-up)."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path
from typing import Any

from nexus_core import ConfigError, Nexus, ToolDef, ToolResult, failure

from . import PLUGIN_ID, _beneath, _files, _patch, _patterns, _protect, _search
from ._paths import FileToolError, Workspace
from ._settings import Settings

Handler = Callable[[Workspace, Settings, dict[str, Any]], ToolResult]

#: (name, handler, description, input schema, output schema, writes files)
TOOLS: list[tuple[str, Handler, str, dict[str, Any], dict[str, Any], bool]] = [
    ("read", _files.read, _files.READ_DESCRIPTION, _files.READ_INPUT, _files.READ_OUTPUT, False),
    ("write", _files.write, _files.WRITE_DESCRIPTION, _files.WRITE_INPUT, _files.WRITE_OUTPUT, True),
    ("edit", _files.edit, _files.EDIT_DESCRIPTION, _files.EDIT_INPUT, _files.EDIT_OUTPUT, True),
    ("list", _files.list_folder, _files.LIST_DESCRIPTION, _files.LIST_INPUT, _files.LIST_OUTPUT, False),
    ("glob", _search.glob, _search.GLOB_DESCRIPTION, _search.GLOB_INPUT, _search.GLOB_OUTPUT, False),
    ("grep", _search.grep, _search.GREP_DESCRIPTION, _search.GREP_INPUT, _search.GREP_OUTPUT, False),
    ("apply_patch", _patch.apply_patch, _patch.PATCH_DESCRIPTION, _patch.PATCH_INPUT, _patch.PATCH_OUTPUT, True),
]


#: what a run_code script's binding says about a tool: the facts of its description that its
#: result class does not show already (a script reads typed fields, not the text a direct call
#: returns: numbered lines, one path per line), and none of the advice for direct calls
CODE_DESCRIPTIONS = {
    "read": "Read a UTF-8 text file (a binary one is refused), a long one in pieces with `offset` and `limit`.",
    "write": "Create a file, or replace all its content, in one step. To change part of a file, use edit.",
    "edit": "Replace `old_string` with `new_string`; a missing or repeated one raises ToolFailed, changing nothing.",
    "list": "List a folder, sorted by name. Not recursive: glob finds files at any depth.",
    "glob": "Find files whose path matches a glob. Folders such as .git and node_modules are skipped.",
    "grep": ("Search file contents for a regular expression. Binary files and folders such as .git and "
             "node_modules are skipped."),
}

#: the `limit` argument of each tool that has one: (its default, its most), from the settings
LIMITS: dict[str, Callable[[Settings], tuple[int, int | None]]] = {
    "read": lambda s: (s.read_lines, None),
    "list": lambda s: (s.max_results, s.max_results),
    "glob": lambda s: (s.max_results, s.max_results),
    "grep": lambda s: (s.max_results, s.max_results),
}


def with_limits(name: str, schema: dict[str, Any], settings: Settings) -> dict[str, Any]:
    """`schema` with its `limit`'s default and most as numbers, from this Nexus's settings: a
    model cannot see the settings, so "the plugin's max_results" would tell it nothing."""
    limits = LIMITS.get(name)
    if limits is None:
        return schema
    default, most = limits(settings)
    limit = {**schema["properties"]["limit"], "default": default}
    if most is not None:  # said, not a `maximum`: a bigger limit is taken as the most, not refused
        limit["description"] = f"{limit['description']} At most {most}."
    return {**schema, "properties": {**schema["properties"], "limit": limit}}


def bind(handler: Handler, workspace: Workspace, settings: Settings) -> Callable[[dict[str, Any]], ToolResult]:
    """The handler for one Nexus: its workspace and settings bound in, and expected failures
    (a refused path, a missing file, a hunk that does not apply, a disk error) returned as
    `failure(message)` for the model to read, rather than raised."""
    work = functools.partial(handler, workspace, settings)

    @functools.wraps(handler)
    def run(arguments: dict[str, Any]) -> ToolResult:
        try:
            return work(arguments)
        except FileToolError as exc:
            return failure(str(exc))
        except OSError as exc:
            where = f"{exc.filename}: " if exc.filename else ""
            return failure(f"{where}{exc.strerror or exc}")

    return run


def workspace_of(nexus: Nexus, settings: Settings) -> Workspace:
    """The workspace of one Nexus's file tools, with its protected paths. A protected_paths or
    allow_protected pattern that does not compile is a ConfigError naming it."""
    problems: list[str] = []

    def problem(key: str, index: int, message: str) -> None:
        problems.append(nexus.config.problem(("plugins", PLUGIN_ID, key, str(index)),
                                             f"plugins.{PLUGIN_ID}.{key}[{index}]: {message}"))

    root = Path(os.path.realpath(nexus.config.workspace))
    protection = _protect.build(root, settings.protected_paths, settings.allow_protected, nexus.config.source,
                                problem)
    if problems:
        raise ConfigError(problems, nexus.config.source)
    return Workspace.at(root, nexus.config.session_dir, protection)


def doctor_lines(nexus: Nexus, settings: Settings, workspace: Workspace) -> list[str]:
    """How paths are opened and patterns matched here, where the session folder lies, which
    paths are protected and how big a file the tools take."""
    assert workspace.protection is not None
    session = nexus.config.session_dir
    inside = os.path.realpath(session) == str(workspace.root) or Path(os.path.realpath(session)).is_relative_to(
        workspace.root)
    return [
        f"opening paths: beneath the workspace, {_beneath.method()}",
        (f"patterns: RE2 (google-re2 {version('google-re2')}), linear-time; regex at most "
         f"{_patterns.MAX_REGEX_CHARS} chars, glob at most {_patterns.MAX_GLOB_CHARS} chars, braces "
         f"{_patterns.MAX_BRACE_DEPTH} deep and {_patterns.MAX_BRACE_CHOICES} choices; glob and grep stop after "
         f"max_search_seconds={settings.max_search_seconds:g}"),
        f"session folder: {session} " + ("(inside the workspace: every path in it is refused)" if inside
                                         else "(outside the workspace)"),
        workspace.protection.summary(),
        (f"file sizes: read, edit and apply_patch take files of at most max_file_bytes={settings.max_file_bytes}, "
         f"write, edit and apply_patch make none larger; one apply_patch holds at most "
         f"max_patch_bytes={settings.max_patch_bytes}"),
    ]


def register_tools(register: Callable[..., Any], settings: Settings, workspace: Workspace) -> None:
    for name, handler, description, input_schema, output_schema, writes in TOOLS:
        if writes and settings.read_only:
            continue  # removed, not refused: the model is never offered a tool it may not use
        # MCP's tool hints, for hosts that show or gate on them: writers may overwrite files.
        hints = {"readOnlyHint": not writes, **({"destructiveHint": True} if writes else {})}
        register(ToolDef(name=name, handler=bind(handler, workspace, settings), description=description,
                         input_schema=with_limits(name, input_schema, settings), output_schema=output_schema,
                         annotations=hints,
                         code_description=CODE_DESCRIPTIONS.get(name, "")))
