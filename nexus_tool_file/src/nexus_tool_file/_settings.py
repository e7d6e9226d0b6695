"""The plugin's config section (`plugins.nexus.tool.file`): its JSON Schema and typed form."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: the largest file the tools read whole or write (16 MiB): edit holds a file a few times over
#: while it works (text, result, bytes), so this bounds the host's memory per call
DEFAULT_MAX_FILE_BYTES = 16 << 20
#: what one apply_patch may hold (64 MiB): it reads every file, and works out every new content,
#: before it writes anything (all or none)
DEFAULT_MAX_PATCH_BYTES = 64 << 20

#: folders that glob and grep do not enter (a search can still start inside one, by `path`)
DEFAULT_EXCLUDE = [".git", ".hg", ".svn", "node_modules", "__pycache__", ".venv", ".mypy_cache",
                   ".pytest_cache", ".ruff_cache", ".tox"]

CONFIG_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "read_only": {"type": "boolean", "default": False,
                      "description": "register only read, list, glob and grep"},
        "read_lines": {"type": "integer", "minimum": 1, "default": 2000,
                       "description": "lines one read returns when the call gives no limit"},
        "max_read_bytes": {"type": "integer", "minimum": 1024, "default": 262144,
                           "description": "cap on the text one read returns"},
        "max_results": {"type": "integer", "minimum": 1, "default": 500,
                        "description": "the most paths, matches or entries glob, grep and list return"},
        "exclude": {"type": "array", "items": {"type": "string"}, "default": DEFAULT_EXCLUDE,
                    "description": "folder names glob and grep skip"},
        "max_search_seconds": {"type": "number", "exclusiveMinimum": 0, "default": 30,
                               "description": "glob and grep stop after this long and return what they found"},
        "max_file_bytes": {"type": "integer", "minimum": 1024, "default": DEFAULT_MAX_FILE_BYTES,
                           "description": "the largest file read, edit and apply_patch take, and the largest "
                                          "file write, edit and apply_patch make"},
        "max_patch_bytes": {"type": "integer", "minimum": 1024, "default": DEFAULT_MAX_PATCH_BYTES,
                            "description": "the most one apply_patch holds: every file it reads and every file "
                                           "it writes, together"},
        "protected_paths": {"type": "array", "items": {"type": "string", "minLength": 1}, "default": [],
                            "description": "more files the file tools may not create, change, move or delete "
                                           "(globs over paths relative to the workspace, matching a file or "
                                           "a folder above it), besides the built-in ones"},
        "allow_protected": {"type": "array", "items": {"type": "string", "minLength": 1}, "default": [],
                            "description": "globs of protected paths the file tools may change after all"},
    },
}


@dataclass(frozen=True)
class Settings:
    read_only: bool
    read_lines: int
    max_read_bytes: int
    max_results: int
    exclude: frozenset[str]
    max_search_seconds: float
    max_file_bytes: int
    max_patch_bytes: int
    protected_paths: tuple[str, ...]
    allow_protected: tuple[str, ...]

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> Settings:
        """From the validated section (the core has applied the schema's defaults)."""
        return cls(
            read_only=config["read_only"],
            read_lines=config["read_lines"],
            max_read_bytes=config["max_read_bytes"],
            max_results=config["max_results"],
            exclude=frozenset(config["exclude"]),
            max_search_seconds=float(config["max_search_seconds"]),
            max_file_bytes=config["max_file_bytes"],
            max_patch_bytes=config["max_patch_bytes"],
            protected_paths=tuple(config["protected_paths"]),
            allow_protected=tuple(config["allow_protected"]),
        )
