"""The tool registry: which tools exist, which plugin gave each, and their compiled validators.

Thread-safe: lookups take a snapshot under a lock; registration replaces entries atomically.
`version` goes up on every change so caches built from the registry (run_code's bindings) know
when to rebuild.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from typing import Any

import attrs
from jsonschema.protocols import Validator

from ._models import ToolDef
from ._schema import SchemaError, compile_schema

TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


class ToolRegistrationError(ValueError):
    """A tool that cannot be registered: a bad name, a bad schema, or a duplicate name."""


def _source(tool: ToolDef) -> str:
    return f"plugin {tool.plugin!r}" if tool.plugin else "the host"


def as_tooldef(obj: Any) -> ToolDef:
    """A `ToolDef` from a ToolDef, or from a function described by `@tool` (or a plain function,
    whose schema is inferred from its type hints the same way)."""
    if isinstance(obj, ToolDef):
        return obj
    described = getattr(obj, "__nexus_tool__", None)
    if isinstance(described, ToolDef):
        return described
    if callable(obj):
        from ._native import tool as describe

        return describe(obj).__nexus_tool__  # type: ignore[attr-defined]
    raise ToolRegistrationError(
        f"cannot register {obj!r} as a tool: expected a ToolDef or a function described by @tool"
    )


@attrs.define
class _Entry:
    tool: ToolDef
    validator: Validator | None


class ToolRegistry:
    def __init__(self, on_register: Callable[[ToolDef], None] | None = None) -> None:
        self._lock = threading.RLock()
        self._entries: dict[str, _Entry] = {}
        self._on_register = on_register
        self.version = 0

    def add(self, obj: Any, plugin: str | None = None) -> ToolDef:
        """Register a tool for `plugin` (None: the host). Raises ToolRegistrationError."""
        tool = as_tooldef(obj)
        if plugin is not None or tool.plugin is None:
            tool = tool.with_plugin(plugin)
        if not isinstance(tool.name, str) or not TOOL_NAME.match(tool.name):
            raise ToolRegistrationError(
                f"tool name {tool.name!r} from {_source(tool)} is not valid: use 1-64 of "
                "a-z A-Z 0-9 _ - (nexus_core.sanitize() makes any string valid)"
            )
        try:
            validator = compile_schema(tool.input_schema) if tool.input_schema else None
            if tool.output_schema is not None:
                compile_schema(tool.output_schema)
        except SchemaError as exc:
            where = "/".join(map(str, exc.absolute_path)) or "(top level)"
            raise ToolRegistrationError(
                f"tool {tool.name!r} from {_source(tool)} has an invalid schema at {where}: {exc.message}"
            ) from None
        with self._lock:
            existing = self._entries.get(tool.name)
            if existing is not None:
                raise ToolRegistrationError(
                    f"duplicate tool name {tool.name!r}: registered by {_source(existing.tool)} "
                    f"and again by {_source(tool)}"
                )
            self._entries[tool.name] = _Entry(tool, validator)
            self.version += 1
        if self._on_register is not None:
            self._on_register(tool)
        return tool

    def remove(self, name: str) -> ToolDef | None:
        with self._lock:
            entry = self._entries.pop(name, None)
            if entry is not None:
                self.version += 1
        return entry.tool if entry else None

    def remove_plugin(self, plugin: str) -> list[str]:
        with self._lock:
            names = [n for n, e in self._entries.items() if e.tool.plugin == plugin]
            for name in names:
                del self._entries[name]
            if names:
                self.version += 1
        return names

    def lookup(self, name: str) -> tuple[ToolDef, Validator | None] | None:
        entry = self._entries.get(name)  # a dict read is atomic; entries are replaced, not mutated
        return (entry.tool, entry.validator) if entry else None

    def get(self, name: str) -> ToolDef | None:
        entry = self._entries.get(name)
        return entry.tool if entry else None

    def tools(self) -> list[ToolDef]:
        with self._lock:
            return [e.tool for e in self._entries.values()]
