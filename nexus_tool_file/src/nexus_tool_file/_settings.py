"""The plugin's settings (`plugins.nexus.tool.file`): an attrs class, from which the config
section's JSON Schema is derived (`nexus_core.plugins.settings_schema`)."""

from __future__ import annotations

import attrs
from nexus_core.plugins import setting

#: the largest file the tools read whole or write (16 MiB): edit holds a file a few times over
#: while it works (text, result, bytes), so this bounds the host's memory per call
DEFAULT_MAX_FILE_BYTES = 16 << 20
#: what one apply_patch may hold (64 MiB): it reads every file, and works out every new content,
#: before it writes anything (all or none)
DEFAULT_MAX_PATCH_BYTES = 64 << 20

#: folders that glob and grep do not enter (a search can still start inside one, by `path`)
DEFAULT_EXCLUDE = (".git", ".hg", ".svn", "node_modules", "__pycache__", ".venv", ".mypy_cache",
                   ".pytest_cache", ".ruff_cache", ".tox")


@attrs.frozen
class Settings:
    """How one Nexus's file tools behave."""

    read_only: bool = setting(False, description="register only read, list, glob and grep")
    read_lines: int = setting(2000, minimum=1, description="lines one read returns when the call gives no limit")
    max_read_bytes: int = setting(262144, minimum=1024, description="cap on the text one read returns")
    max_results: int = setting(500, minimum=1,
                               description="the most paths, matches or entries glob, grep and list return")
    exclude: tuple[str, ...] = setting(DEFAULT_EXCLUDE, description="folder names glob and grep skip")
    max_search_seconds: float = setting(30, exclusiveMinimum=0,
                                        description="glob and grep stop after this long and return what they found")
    max_file_bytes: int = setting(DEFAULT_MAX_FILE_BYTES, minimum=1024,
                                  description="the largest file read, edit and apply_patch take, and the largest "
                                              "file write, edit and apply_patch make")
    max_patch_bytes: int = setting(DEFAULT_MAX_PATCH_BYTES, minimum=1024,
                                   description="the most one apply_patch holds: every file it reads and every file "
                                               "it writes, together")
    protected_paths: tuple[str, ...] = setting(
        (), items={"type": "string", "minLength": 1},
        description="more files the file tools may not create, change, move or delete (globs over paths relative "
                    "to the workspace, matching a file or a folder above it), besides the built-in ones")
    allow_protected: tuple[str, ...] = setting(
        (), items={"type": "string", "minLength": 1},
        description="globs of protected paths the file tools may change after all")
