"""MCP results and Nexus results, both ways: an MCP `CallToolResult` as a `ToolResult` (client
side), and a `ToolResult` as a `CallToolResult` (serving side)."""

from __future__ import annotations

import json
from typing import Any

import attrs
import mcp_types as types
from nexus_core.adapters import format_tool_result
from nexus_core.content import AudioContent, Content, ImageContent, ResourceContent, TextContent

from nexus_core import ToolResult

from ._tools import MCP_SERVER


def _dump(model: Any) -> Any:
    return model.model_dump(by_alias=True, exclude_none=True, mode="json")


def tool_json(tool: types.Tool) -> dict[str, Any]:
    """An MCP tool as MCP JSON (what a tools/list result carries, and the tool cache keeps)."""
    return _dump(tool)


def _decoded_size(data: str) -> int:
    """The size of what base64 `data` encodes, without decoding it."""
    data = data.rstrip()
    return len(data) * 3 // 4 - (len(data) - len(data.rstrip("=")))


def _mention(block: Any) -> str | None:
    """What `output` says about a content block that is not text, so a model reading only the
    text still knows it is there."""
    if isinstance(block, types.ImageContent):
        return f"[image: {block.mime_type}, {_decoded_size(block.data)} bytes]"
    if isinstance(block, types.AudioContent):
        return f"[audio: {block.mime_type}, {_decoded_size(block.data)} bytes]"
    if isinstance(block, types.ResourceLink):
        return f"[resource link: {block.name} <{block.uri}>]"
    if isinstance(block, types.EmbeddedResource):
        contents = block.resource
        if isinstance(contents, types.TextResourceContents):
            return contents.text
        return f"[resource: {contents.uri}{f', {contents.mime_type}' if contents.mime_type else ''}]"
    return None


def _block(block: Any) -> Content | None:
    """An MCP content block as a Nexus one (None for a kind Nexus has no block for)."""
    if isinstance(block, types.TextContent):
        return TextContent(block.text)
    if isinstance(block, types.ImageContent):
        return ImageContent(block.data, block.mime_type)
    if isinstance(block, types.AudioContent):
        return AudioContent(block.data, block.mime_type)
    if isinstance(block, types.ResourceLink):
        return ResourceContent(str(block.uri), block.mime_type, name=block.name)
    if isinstance(block, types.EmbeddedResource):
        res = block.resource
        if isinstance(res, types.TextResourceContents):
            return ResourceContent(str(res.uri), res.mime_type, text=res.text)
        return ResourceContent(str(res.uri), res.mime_type, blob=res.blob)
    return None


def to_toolresult(server: str, tool: str, result: types.CallToolResult) -> ToolResult:
    """An MCP tool result as a Nexus result (its id and name are set by the invocation path):
    text blocks joined into `output`, `structuredContent` in `output_structured`, and, when the
    server sent anything but text, every block kept in order in `content` (images, audio,
    resources: the adapters hand them on to a provider as its own content) and mentioned in
    `output`; `isError` an error."""
    parts: list[str] = []
    blocks: list[Content] = []
    rich = False
    for block in result.content:
        if isinstance(block, types.TextContent):
            parts.append(block.text)
        else:
            rich = True
            mention = _mention(block)
            if mention is not None:
                parts.append(mention)
        converted = _block(block)
        if converted is not None:
            blocks.append(converted)
    structured = result.structured_content
    output = "\n".join(parts)
    if not output and structured is not None:
        output = json.dumps(structured, ensure_ascii=False)
    metadata: dict[str, Any] = {MCP_SERVER: server}
    content = tuple(blocks) if rich else ()
    if result.is_error:
        message = output or f"MCP server {server!r} reported an error from tool {tool!r} (no message)"
        return ToolResult(id="", name="", output=message, error=message, error_kind="failure",
                          output_structured=structured, metadata=metadata, content=content)
    return ToolResult(id="", name="", output=output, output_structured=structured, metadata=metadata,
                      content=content)


def to_call_tool_result(result: ToolResult, wrap: bool = False) -> types.CallToolResult:
    """A Nexus result as an MCP tool result, through the core's MCP adapter (one rendering for
    every route): `structuredContent` (an object) with its JSON as text, as the spec asks of a
    tool that returns structured content; content blocks (an image a tool returned, or one an
    MCP server this Nexus uses gave) as MCP content; an `output_file` as an embedded resource. An
    error, a veto among them, is `isError` with its message.

    With `wrap` (a tool whose output schema is not an object, listed wrapped: see
    `nexus_core.adapters.mcp_output_schema`), the structured value goes as `{"result": value}`."""
    if result.is_error:
        message = result.error or result.output
        return types.CallToolResult(content=[types.TextContent(type="text", text=message)], is_error=True)
    out = format_tool_result(result, "mcp")
    if wrap and result.output_structured is not None:
        out["structuredContent"] = {"result": result.output_structured}
    return types.CallToolResult.model_validate(out)


def unwrap_result(result: ToolResult) -> ToolResult:
    """A result of a tool whose outputSchema wraps its value (`{"result": ...}`, FastMCP's way for
    a tool that returns an int or a list), with the value itself in `output_structured`."""
    structured = result.output_structured
    if isinstance(structured, dict) and set(structured) == {"result"}:
        return attrs.evolve(result, output_structured=structured["result"])
    return result
