"""The plugin's config section (`plugins.nexus.tool.file`): its JSON Schema and typed form."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

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
        )
