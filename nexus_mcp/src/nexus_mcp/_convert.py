"""MCP results and Nexus results, both ways: an MCP `CallToolResult` as a `ToolResult` (client
side), and a `ToolResult` as a `CallToolResult` (serving side)."""

from __future__ import annotations

import json
from typing import Any

import mcp_types as types

from nexus_core import ToolResult

from ._tools import MCP_CONTENT, MCP_SERVER


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


def to_toolresult(server: str, tool: str, result: types.CallToolResult) -> ToolResult:
    """An MCP tool result as a Nexus result (its id and name are set by the invocation path):
    text blocks joined into `output`, `structuredContent` in `output_structured`, other blocks
    kept whole in `metadata["mcp_content"]` and mentioned in `output`, `isError` an error."""
    parts: list[str] = []
    rich = False
    for block in result.content:
        if isinstance(block, types.TextContent):
            parts.append(block.text)
        else:
            rich = True
            mention = _mention(block)
            if mention is not None:
                parts.append(mention)
    structured = result.structured_content
    output = "\n".join(parts)
    if not output and structured is not None:
        output = json.dumps(structured, ensure_ascii=False)
    metadata: dict[str, Any] = {MCP_SERVER: server}
    if rich:
        metadata[MCP_CONTENT] = [_dump(block) for block in result.content]
    if result.is_error:
        message = output or f"MCP server {server!r} reported an error from tool {tool!r} (no message)"
        return ToolResult(id="", name="", output=message, error=message, error_kind="failure",
                          output_structured=structured, metadata=metadata)
    return ToolResult(id="", name="", output=output, output_structured=structured, metadata=metadata)


def to_call_tool_result(result: ToolResult) -> types.CallToolResult:
    """A Nexus result as an MCP tool result: `structuredContent` (an object) with its JSON as the
    text, as the spec asks of a tool that returns structured content; else `output`. An error,
    a veto among them, is `isError` with its message. Content blocks an MCP tool gave (an image
    from a server this Nexus uses) pass through."""
    structured = result.output_structured if isinstance(result.output_structured, dict) else None
    if result.is_error:
        text = result.error or result.output
        structured = None
    elif structured is not None:
        text = json.dumps(structured, ensure_ascii=False)
    else:
        text = result.output
    if result.output_file and not result.is_error:
        text = f"{text}\n[output file: {result.output_file}]" if text else f"[output file: {result.output_file}]"
    content: list[Any] = [types.TextContent(type="text", text=text)]
    passed = result.metadata.get(MCP_CONTENT) if not result.is_error else None
    if isinstance(passed, list):
        for block in passed:
            if isinstance(block, dict) and block.get("type") != "text":
                try:
                    content.append(_CONTENT_BLOCK.validate_python(block))
                except ValueError:
                    continue  # not valid MCP content: the text already mentions it
    return types.CallToolResult(content=content, structured_content=structured, is_error=result.is_error)


def _content_block_adapter() -> Any:
    from pydantic import TypeAdapter

    return TypeAdapter(types.ImageContent | types.AudioContent | types.ResourceLink | types.EmbeddedResource)


_CONTENT_BLOCK = _content_block_adapter()
