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
        max_file_bytes: 16777216 # the largest file read whole or written
        max_patch_bytes: 67108864   # the most one apply_patch holds
        protected_paths: []      # more files the tools may not change, besides .git, .envrc, ...
        allow_protected: []      # protected paths they may change after all

The workspace is `workspace:` in the config (or `nexus --workspace DIR`). Paths are relative to
it; `..`, absolute paths outside it and symlinks that lead out are refused, and every path is
opened beneath the workspace in one step (no check-then-open race). Files that configure
programs run on the host (`.git/`, `.envrc`, `.vscode/`, `nexus.yaml`, ...) are not changed
(see _protect), and no file larger than the limits is read whole, built or written. Patterns are
matched by RE2, in linear time.

The plugin is `FilePlugin`, its settings `Settings` (the schema of its config section is derived
from that class). See docs/tool-file.md.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from nexus_core.plugins import Plugin

from nexus_core import hookimpl

from ._settings import Settings

if TYPE_CHECKING:
    from ._paths import Workspace

__all__ = ["PLUGIN_ID", "FilePlugin", "Settings"]

PLUGIN_ID = "nexus.tool.file"


class FilePlugin(Plugin[Settings]):
    """The plugin object of one Nexus (the entry point names this class): its settings, and the
    workspace its tools are confined to, with the paths they may not change."""

    NEXUS_PLUGIN_ID = PLUGIN_ID

    def configure(self) -> None:
        from ._tools import workspace_of  # here, not at import: `nexus --help` imports this module

        self.workspace: Workspace = workspace_of(self.nexus, self.settings)

    @hookimpl
    def nexus_doctor(self) -> list[str]:
        """How paths are opened and patterns matched here, where the session folder lies, which
        paths are protected and how large a file the tools take."""
        from ._tools import doctor_lines

        return doctor_lines(self.nexus, self.settings, self.workspace)

    @hookimpl
    def nexus_register_tools(self, register: Callable[..., Any]) -> None:
        from ._tools import register_tools

        register_tools(register, self.settings, self.workspace)
