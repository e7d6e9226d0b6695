"""An MCP server's tool, as MCP JSON (what tools/list carries, and the tool cache keeps), made a
Nexus `ToolDef`. Plain dicts, no SDK: a Nexus whose servers are all listed from the cache does
not import the MCP SDK until a call needs it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from nexus_core import ToolDef

from ._schema import inline_refs

#: `ToolResult.metadata` key holding a result's MCP content blocks (as MCP JSON) when any of them
#: is not plain text: images, audio, resources and resource links, which `output` only mentions
#: `ToolResult.metadata` key naming the MCP server that answered
MCP_SERVER = "mcp_server"

#: the mark FastMCP (and `nexus mcp serve`) put on an outputSchema that wraps a result that is not
#: an object as {"result": ...}
WRAP_RESULT = "x-fastmcp-wrap-result"

#: the MCP ToolAnnotations fields, under their wire names
ANNOTATION_KEYS = ("title", "readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint")


class InvalidTool(ValueError):
    """A tool entry that is not an MCP tool (no name, a schema that is not an object, ...)."""


def tool_name(tool: dict[str, Any]) -> str:
    name = tool.get("name") if isinstance(tool, dict) else None
    if not isinstance(name, str) or not name:
        raise InvalidTool(f"a tool entry has no name: {str(tool)[:100]}")
    return name


def wraps_result(tool: dict[str, Any]) -> bool:
    """Whether an MCP tool's outputSchema wraps a value that is not an object as {"result": ...}
    (FastMCP's way for `-> int`): its ToolDef then promises the value itself."""
    schema = tool.get("outputSchema") if isinstance(tool, dict) else None
    return (isinstance(schema, dict) and schema.get(WRAP_RESULT) is True
            and isinstance(schema.get("properties"), dict) and "result" in schema["properties"])


def to_tooldef(server: str, tool: dict[str, Any], handler: Callable[..., Any], name: str, *,
               takes_context: bool = False) -> ToolDef:
    """The Nexus tool `name` (see `_names`) for one tool of an MCP server: its schemas with local references inlined
    (see `_schema`), its annotations under MCP's own names (`readOnlyHint`, ...), and the server's
    name under `mcp_server`. An outputSchema that wraps a value (`wraps_result`) is unwrapped: the
    tool's results are too (see `_convert.unwrap_result`)."""
    input_schema = tool.get("inputSchema") or {"type": "object"}
    output_schema = tool.get("outputSchema")
    for key, schema in (("inputSchema", input_schema), ("outputSchema", output_schema)):
        if schema is not None and not isinstance(schema, dict):
            raise InvalidTool(f"its {key} is not a JSON Schema object")
    raw_annotations = tool.get("annotations")
    annotations = {k: v for k, v in raw_annotations.items() if k in ANNOTATION_KEYS} \
        if isinstance(raw_annotations, dict) else {}
    title = tool.get("title")
    if isinstance(title, str) and title and "title" not in annotations:
        annotations["title"] = title
    annotations[MCP_SERVER] = server
    if output_schema is not None and wraps_result(tool):
        output_schema = output_schema["properties"]["result"]
    description = tool.get("description")
    return ToolDef(
        name=name,
        handler=handler,
        description=description if isinstance(description, str) else (title if isinstance(title, str) else ""),
        input_schema=inline_refs(input_schema),
        output_schema=inline_refs(output_schema) if output_schema is not None else None,
        annotations=annotations,
        takes_context=takes_context,
    )
