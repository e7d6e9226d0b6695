"""The tool registry: which tools exist, which plugin gave each, and their compiled validators.

Thread-safe and lock-free for readers: the table of tools is never changed in place. A change
builds a new table under a lock and swaps it in with one assignment, so a lookup (one read of
the current table) never sees a half-made change, whatever the interpreter's locking. `version`
goes up on every change so caches built from the registry (run_code's bindings) know when to
rebuild.

A tool's aliases (`ToolDef.aliases`) are more keys of the table for the same entry: a lookup by
any of its names finds the one `ToolDef`, whose `name` is the canonical one, and `tools()`
lists each tool once. Every name, canonical or alias, is taken once across all tools.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

import attrs

from ._models import ToolDef
from ._schema import ArgumentValidator, SchemaError, compile_schema
from ._tool import tool

TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


class ToolRegistrationError(ValueError):
    """A tool that cannot be registered: a bad name, a bad schema, or a duplicate name."""


def _source(tool: ToolDef) -> str:
    return f"plugin {tool.plugin!r}" if tool.plugin else "the host"


def _role(tool: ToolDef, name: str) -> str:
    """"" when `name` is the tool's own name, else " (an alias of 'shell')"."""
    return "" if name == tool.name else f" (an alias of {tool.name!r})"


def as_tooldef(obj: Any) -> ToolDef:
    """A `ToolDef` from a ToolDef, or from a function described by `@tool` (or a plain function,
    whose schema is inferred from its type hints the same way)."""
    if isinstance(obj, ToolDef):
        return obj
    described = getattr(obj, "__nexus_tool__", None)
    if isinstance(described, ToolDef):
        return described
    if callable(obj):
        inferred: ToolDef = tool(obj).__nexus_tool__
        return inferred
    raise ToolRegistrationError(
        f"cannot register {obj!r} as a tool: expected a ToolDef or a function described by @tool"
    )


@attrs.frozen
class _Entry:
    tool: ToolDef
    validator: ArgumentValidator | None


class ToolRegistry:
    def __init__(self, on_register: Callable[[ToolDef], None] | None = None,
                 on_unregister: Callable[[ToolDef], None] | None = None,
                 prepare: Callable[[ToolDef], ToolDef] | None = None) -> None:
        self._write_lock = threading.Lock()
        self._entries: Mapping[str, _Entry] = MappingProxyType({})
        self._on_register = on_register
        self._on_unregister = on_unregister
        #: applied to every tool as it enters (the config's per-tool settings)
        self._prepare = prepare
        self.version = 0

    def _swap(self, entries: dict[str, _Entry]) -> None:
        # callers hold _write_lock; readers see the old table or the new one, never a mix
        self._entries = MappingProxyType(entries)
        self.version += 1

    def add(self, obj: Any, plugin: str | None = None) -> ToolDef:
        """Register a tool for `plugin` (None: the host). Raises ToolRegistrationError."""
        return self._put(obj, plugin, replace=False)

    def replace(self, obj: Any, plugin: str | None = None) -> ToolDef:
        """Swap in a new definition of a tool the same `plugin` registered, in one step: unlike
        `remove` then `add`, no concurrent call finds the tool missing in between (run_code
        refreshes its description this way). Raises ToolRegistrationError when the tool does not
        exist or belongs to someone else."""
        return self._put(obj, plugin, replace=True)

    def _put(self, obj: Any, plugin: str | None, replace: bool) -> ToolDef:
        tool = as_tooldef(obj)
        if plugin is not None or tool.plugin is None:
            tool = tool.with_plugin(plugin)
        if not isinstance(tool.name, str) or not TOOL_NAME.match(tool.name):
            raise ToolRegistrationError(
                f"tool name {tool.name!r} from {_source(tool)} is not valid: use 1-64 of "
                "a-z A-Z 0-9 _ - (nexus_core.sanitize() makes any string valid)"
            )
        seen: set[str] = {tool.name}
        for alias in tool.aliases:
            if not isinstance(alias, str) or not TOOL_NAME.match(alias):
                raise ToolRegistrationError(
                    f"alias {alias!r} of tool {tool.name!r} from {_source(tool)} is not valid: use 1-64 "
                    "of a-z A-Z 0-9 _ - (nexus_core.sanitize() makes any string valid)"
                )
            if alias in seen:
                again = "is the tool's own name" if alias == tool.name else "is given twice"
                raise ToolRegistrationError(f"alias {alias!r} of tool {tool.name!r} from {_source(tool)} {again}")
            seen.add(alias)
        if self._prepare is not None:
            tool = self._prepare(tool)
        if not callable(tool.handler):
            raise ToolRegistrationError(
                f"tool {tool.name!r} from {_source(tool)}: handler {tool.handler!r} is not callable"
            )
        validator: ArgumentValidator | None = None
        previous = self._entries.get(tool.name) if replace else None
        if previous is not None and previous.tool.input_schema == tool.input_schema \
                and previous.tool.output_schema == tool.output_schema:
            # the same schemas as the definition it replaces (run_code's new description): checked
            # and compiled already
            validator = previous.validator
            schemas: tuple[tuple[str, Any], ...] = ()
        else:
            schemas = (("input_schema", tool.input_schema), ("output_schema", tool.output_schema))
        for which, schema in schemas:
            if schema is None and which == "output_schema":
                continue
            if not isinstance(schema, dict):
                raise ToolRegistrationError(
                    f"tool {tool.name!r} from {_source(tool)}: {which} must be a JSON Schema "
                    f"object (a dict), got {type(schema).__name__}"
                )
            try:
                # an empty schema accepts anything: no validator. An output schema is only checked
                # here (compile_schema raises SchemaError for a bad one); nothing keeps its validator.
                if schema:
                    compiled = compile_schema(schema)
                    if which == "input_schema":
                        validator = ArgumentValidator(schema, compiled)
            except SchemaError as exc:
                where = "/".join(map(str, exc.absolute_path)) or "(top level)"
                raise ToolRegistrationError(
                    f"tool {tool.name!r} from {_source(tool)} has an invalid {which} at {where}: "
                    f"{exc.message}"
                ) from None
        with self._write_lock:
            existing = self._entries.get(tool.name)
            if replace and (existing is None or existing.tool.plugin != tool.plugin
                            or existing.tool.name != tool.name):
                owner = (f"is registered by {_source(existing.tool)}{_role(existing.tool, tool.name)}"
                         if existing else "is not registered")
                raise ToolRegistrationError(
                    f"{_source(tool)} cannot replace tool {tool.name!r}: it {owner}"
                )
            for name in tool.names:
                taken = self._entries.get(name)
                # a replacement may keep, drop or change its own aliases; other tools' names stay taken
                if taken is not None and not (replace and taken is existing):
                    raise ToolRegistrationError(
                        f"duplicate tool name {name!r}: registered by {_source(taken.tool)}{_role(taken.tool, name)} "
                        f"and again by {_source(tool)}{_role(tool, name)}"
                    )
            entry = _Entry(tool, validator)
            if replace:  # in place: the table keeps its order
                entries = {n: entry if e is existing else e for n, e in self._entries.items()
                           if e is not existing or n == tool.name}
            else:
                entries = dict(self._entries)
            entries.update(dict.fromkeys(tool.names, entry))
            self._swap(entries)
        if self._on_register is not None:
            self._on_register(tool)
        return tool

    def remove(self, name: str) -> ToolDef | None:
        """Remove the tool `name` (its canonical name or an alias) with all its names."""
        with self._write_lock:
            entry = self._entries.get(name)
            if entry is not None:
                self._swap({n: e for n, e in self._entries.items() if e is not entry})
        if entry is not None and self._on_unregister is not None:
            self._on_unregister(entry.tool)
        return entry.tool if entry else None

    def remove_plugin(self, plugin: str) -> list[str]:
        with self._write_lock:
            removed = [e.tool for n, e in self._entries.items() if e.tool.plugin == plugin and n == e.tool.name]
            if removed:
                self._swap({n: e for n, e in self._entries.items() if e.tool.plugin != plugin})
        if self._on_unregister is not None:
            for tool in removed:
                self._on_unregister(tool)
        return [tool.name for tool in removed]

    def lookup(self, name: str) -> tuple[ToolDef, ArgumentValidator | None] | None:
        """The tool called `name` (by its name or an alias) and its compiled input validator
        (compiled once, when the tool was registered), or None."""
        entry = self._entries.get(name)
        return (entry.tool, entry.validator) if entry else None

    def get(self, name: str) -> ToolDef | None:
        entry = self._entries.get(name)
        return entry.tool if entry else None

    def tools(self) -> list[ToolDef]:
        """Each tool once (its aliases are not tools of their own)."""
        return [e.tool for n, e in self._entries.items() if n == e.tool.name]

    def names(self) -> list[str]:
        """Every name a call may use: tools' names and their aliases."""
        return list(self._entries)
