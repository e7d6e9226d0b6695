"""The `nexus.tool.file` plugin: read, write, edit, glob, grep, list and apply_patch, every path
confined to the workspace.

    plugins:
      nexus.tool.file:
        read_only: false      # true: only read, list, glob and grep are registered
        read_lines: 2000      # lines a read returns when the call gives no limit
        max_read_bytes: 262144
        max_results: 500      # paths, matches or entries per glob, grep or list
        exclude: [.git, node_modules, ...]   # folders glob and grep skip
        max_search_seconds: 30   # glob and grep stop then, returning what they found

The workspace is `workspace:` in the config (or `nexus --workspace DIR`). Paths are relative to
it; `..`, absolute paths outside it and symlinks that lead out are refused, and every path is
opened beneath the workspace in one step (no check-then-open race). Patterns are matched by RE2,
in linear time. See docs/tool-file.md.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path
from typing import Any

from nexus_core import Nexus, ToolDef, ToolResult, failure, hookimpl

from . import _beneath, _files, _patch, _patterns, _search
from ._paths import FileToolError, Workspace
from ._settings import CONFIG_SCHEMA, Settings

PLUGIN_ID = "nexus.tool.file"

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


@hookimpl
def nexus_config_schema() -> dict[str, Any]:
    return CONFIG_SCHEMA


@hookimpl
def nexus_doctor(nexus: Nexus) -> list[str]:
    """How paths are opened and patterns matched here, and where the session folder lies."""
    settings = Settings.from_config(nexus.plugin_config(PLUGIN_ID))
    workspace = Workspace.at(nexus.config.workspace, nexus.config.session_dir)
    session = nexus.config.session_dir
    inside = os.path.realpath(session) == str(workspace.root) or Path(os.path.realpath(session)).is_relative_to(
        workspace.root)
    return [
        f"opening paths: beneath the workspace, {_beneath.method()}",
        f"patterns: RE2 (google-re2 {version('google-re2')}), linear-time; regex at most "
        f"{_patterns.MAX_REGEX_CHARS} chars, glob at most {_patterns.MAX_GLOB_CHARS} chars, braces "
        f"{_patterns.MAX_BRACE_DEPTH} deep and {_patterns.MAX_BRACE_CHOICES} choices; glob and grep stop after "
        f"max_search_seconds={settings.max_search_seconds:g}",
        f"session folder: {session} " + ("(inside the workspace: every path in it is refused)" if inside
                                         else "(outside the workspace)"),
    ]


@hookimpl
def nexus_register_tools(register: Callable[..., Any], nexus: Nexus) -> None:
    settings = Settings.from_config(nexus.plugin_config(PLUGIN_ID))
    workspace = Workspace.at(nexus.config.workspace, nexus.config.session_dir)
    for name, handler, description, input_schema, output_schema, writes in TOOLS:
        if writes and settings.read_only:
            continue  # removed, not refused: the model is never offered a tool it may not use
        # MCP's tool hints, for hosts that show or gate on them: writers may overwrite files.
        hints = {"readOnlyHint": not writes, **({"destructiveHint": True} if writes else {})}
        register(ToolDef(name=name, handler=bind(handler, workspace, settings), description=description,
                         input_schema=input_schema, output_schema=output_schema, annotations=hints))
