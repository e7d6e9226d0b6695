"""`toolkit` and `execute`: a set of tools used without any installed plugin, as toolnexus's
`toolkit` / `execute` are: a `Nexus` holding just those tools, called by name."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ._models import ToolDef, ToolResult
from ._nexus import Nexus
from ._registry import ToolRegistrationError, as_tooldef


def _describe_source(obj: Any, index: int) -> str:
    """Where tool number `index` of a toolkit came from, for a duplicate-name error."""
    fn = obj.handler if isinstance(obj, ToolDef) else obj
    fn = getattr(fn, "__nexus_source__", fn)  # the function @tool described, not its adapter
    fn = getattr(fn, "__wrapped__", fn)
    where = f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', type(fn).__name__)}"
    if isinstance(obj, ToolDef):
        return f"tools[{index}] (ToolDef with handler {where})"
    return f"tools[{index}] ({where})"


def toolkit(tools: Iterable[Any] = (), *, plugins: Iterable[object] = (), config: Any = None) -> Nexus:
    """A `Nexus` holding just these tools (ToolDefs or `@tool` functions) and no installed
    plugins: the same invocation path, gates included, without any configuration.

    A name given twice raises `ToolRegistrationError` naming both entries.
    """
    items = list(tools)
    seen: dict[str, int] = {}
    for index, obj in enumerate(items):
        tool_name = as_tooldef(obj).name
        if tool_name in seen:
            first = seen[tool_name]
            raise ToolRegistrationError(
                f"duplicate tool name {tool_name!r}: {_describe_source(items[first], first)} "
                f"and {_describe_source(obj, index)}"
            )
        seen[tool_name] = index
    return Nexus(config, plugins=plugins, tools=items, autoload=False)


def execute(
    tk: Nexus,
    name: str,
    args: Mapping[str, Any] | None = None,
    ctx: Mapping[str, Any] | None = None,
    *,
    context: Mapping[str, Any] | None = None,
    answer: Any = None,
    parent_call_id: str | None = None,
) -> ToolResult:
    """Call a tool of `tk` by name: `tk.invoke(name, args, context=ctx)`. Never raises for a
    tool's failure; an unknown name is an error result. `ctx` (or `context=`) is your own data,
    which a context-taking tool reads as `CallContext.data`."""
    if ctx is not None and context is not None:
        raise TypeError("execute() takes ctx or context=, not both")
    return tk.invoke(name, args or {}, context=ctx if ctx is not None else context, answer=answer,
                     parent_call_id=parent_call_id)
