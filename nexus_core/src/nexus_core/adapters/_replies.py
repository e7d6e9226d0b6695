"""Tool results out: a `ToolResult` as the message, block or part that carries it back to the
model, its content blocks (images, documents, audio, an `output_file`) as the provider's own
content where it has some, and as text where it has none."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from .._content import (
    MAX_FILE_BYTES,
    AudioContent,
    Content,
    ImageContent,
    ResourceContent,
    TextContent,
    content_text,
    describe,
    file_content,
)
from .._models import ToolCall, ToolResult
from ._calls import _provider_data
from ._common import check_format

# What each provider takes as an image or document inside a tool result (by its docs); any
# other block is sent as a line of text naming it.
_ANTHROPIC_IMAGES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})
_RESPONSES_IMAGES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})
_GEMINI_INLINE = frozenset({"image/png", "image/jpeg", "image/webp", "image/heic", "image/heif",
                            "application/pdf", "text/plain"})
_PDF = "application/pdf"
_TEXT_ONLY = " (not shown: this API takes text only in tool results)"


def _blocks(result: ToolResult, max_file_bytes: int) -> list[Content] | None:
    """The result as content blocks, or None when it is plain text (`output` alone)."""
    if not result.content and result.output_file is None:
        return None
    blocks: list[Content] = list(result.content)
    if not blocks and (result.output or result.output_file is None):
        blocks.append(TextContent(result.output))
    if result.output_file is not None:
        blocks.append(file_content(result.output_file, max_file_bytes))
    return blocks


def _as_text(block: Content, shown: bool = False) -> str:
    """A block for a reader of text: text as it is, anything else named (and said to be unseen)."""
    if isinstance(block, TextContent):
        return block.text
    if isinstance(block, ResourceContent) and block.text is not None:
        return content_text([block])
    return describe(block) + ("" if shown else _TEXT_ONLY)


def _data_url(mime_type: str, data: str) -> str:
    return f"data:{mime_type};base64,{data}"


def _file_name(block: ResourceContent) -> str:
    return block.name or block.uri.rstrip("/").rsplit("/", 1)[-1] or "file"


def format_tool_result(result: ToolResult, format: str, *, call: ToolCall | None = None,
                       max_file_bytes: int = MAX_FILE_BYTES) -> dict[str, Any]:
    """A result as the provider's tool-result message (errors included: the model reads them):

    - "openai": `{"role": "tool", "tool_call_id", "content"}`, the content text only
    - "openai-responses": `{"type": "function_call_output", "call_id", "output"}`, the output
      text, or a list of `input_text` / `input_image` / `input_file` items
    - "anthropic": `{"type": "tool_result", "tool_use_id", "content", "is_error"}` (it goes in
      the content of the next user message), the content text, or a list of text, image and
      document blocks
    - "gemini": a part `{"functionResponse": {"id"?, "name", "response", "parts"?}}`, the
      response being `{"output": ...}` or `{"error": ...}` as Gemini's docs suggest, images and
      PDFs in `parts`
    - "mcp": a `CallToolResult` `{"content": [...], "structuredContent"?, "isError"}`; the text
      content carries the structured result as JSON, as MCP asks

    `result.content` (and the file `result.output_file` names, read when formatting, up to
    `max_file_bytes`) becomes the provider's image and document content where it has some, and
    a line of text naming the block where it has none (docs/adapters.md has the table).

    `call` is the call the result answers, when you have it: a Gemini call that came without
    an id is answered without one, and what the provider asked to get back (a Responses
    `caller`, an Anthropic `toolset_name`) is sent back.
    """
    check_format(format)
    if not isinstance(result, ToolResult):
        raise TypeError(f"format_tool_result() takes a ToolResult, not {type(result).__name__}")
    blocks = _blocks(result, max_file_bytes)
    data = _provider_data(call, format) if call is not None else {}
    if format == "openai":
        text = result.output if blocks is None else "\n".join(_as_text(b) for b in blocks)
        return {"role": "tool", "tool_call_id": result.id, "content": text}
    if format == "openai-responses":
        out: dict[str, Any] = {"type": "function_call_output", "call_id": result.id,
                               "output": result.output if blocks is None else _responses_output(blocks)}
        if "caller" in data:
            out["caller"] = data["caller"]
        return out
    if format == "anthropic":
        out = {"type": "tool_result", "tool_use_id": result.id,
               "content": result.output if blocks is None else _anthropic_content(blocks),
               "is_error": result.is_error}
        if "toolset_name" in data:
            out["toolset_name"] = data["toolset_name"]
        return out
    if format == "gemini":
        return _gemini_part(result, blocks, call)
    return _mcp_result(result, blocks)


def _responses_output(blocks: list[Content]) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for block in blocks:
        if isinstance(block, ImageContent) and block.mime_type in _RESPONSES_IMAGES:
            items.append({"type": "input_image", "image_url": _data_url(block.mime_type, block.data)})
        elif isinstance(block, ResourceContent) and block.blob is not None and block.mime_type == _PDF:
            items.append({"type": "input_file", "filename": _file_name(block),
                          "file_data": _data_url(_PDF, block.blob)})
        else:
            items.append({"type": "input_text", "text": _as_text(block)})
    return items


def _anthropic_content(blocks: list[Content]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for block in blocks:
        if isinstance(block, ImageContent) and block.mime_type in _ANTHROPIC_IMAGES:
            out.append({"type": "image",
                        "source": {"type": "base64", "media_type": block.mime_type, "data": block.data}})
        elif isinstance(block, ResourceContent) and block.blob is not None and block.mime_type == _PDF:
            out.append({"type": "document", "title": _file_name(block),
                        "source": {"type": "base64", "media_type": _PDF, "data": block.blob}})
        elif isinstance(block, ResourceContent) and block.text is not None:
            out.append({"type": "document", "title": block.name or block.uri,
                        "source": {"type": "text", "media_type": "text/plain", "data": block.text}})
        else:
            out.append({"type": "text", "text": _as_text(block)})
    return out


def _gemini_part(result: ToolResult, blocks: list[Content] | None, call: ToolCall | None) -> dict[str, Any]:
    parts: list[dict[str, Any]] = []
    if blocks is None:
        value: Any = result.output_structured if result.output_structured is not None else result.output
    else:
        lines = []
        for block in blocks:
            if isinstance(block, (ImageContent, AudioContent)) and block.mime_type in _GEMINI_INLINE:
                parts.append({"inlineData": {"mimeType": block.mime_type, "data": block.data}})
                lines.append(describe(block))
            elif isinstance(block, ResourceContent) and block.blob is not None and block.mime_type in _GEMINI_INLINE:
                parts.append({"inlineData": {"mimeType": block.mime_type, "data": block.blob}})
                lines.append(describe(block))
            else:
                lines.append(_as_text(block))
        value = "\n".join(lines)
    response: dict[str, Any] = {"error": result.error if blocks is None else value} if result.is_error \
        else {"output": value}
    body: dict[str, Any] = {}
    call_id: Any = result.id
    if call is not None and "provider_call_id" in call.metadata:
        call_id = call.metadata["provider_call_id"]
    if call_id:
        body["id"] = call_id
    body["name"] = result.name
    body["response"] = response
    if parts:
        body["parts"] = parts
    return {"functionResponse": body}


def _mcp_block(block: Content) -> dict[str, Any]:
    if isinstance(block, TextContent):
        return {"type": "text", "text": block.text}
    if isinstance(block, (ImageContent, AudioContent)):
        return {"type": "image" if isinstance(block, ImageContent) else "audio",
                "data": block.data, "mimeType": block.mime_type}
    if block.text is None and block.blob is None:
        link: dict[str, Any] = {"type": "resource_link", "uri": block.uri, "name": _file_name(block)}
        if block.mime_type:
            link["mimeType"] = block.mime_type
        return link
    resource: dict[str, Any] = {"uri": block.uri}
    if block.mime_type:
        resource["mimeType"] = block.mime_type
    if block.text is not None:
        resource["text"] = block.text
    else:
        resource["blob"] = block.blob
    return {"type": "resource", "resource": resource}


def _mcp_result(result: ToolResult, blocks: list[Content] | None) -> dict[str, Any]:
    content = [{"type": "text", "text": result.output}] if blocks is None else [_mcp_block(b) for b in blocks]
    out: dict[str, Any] = {"content": content}
    structured = result.output_structured
    if isinstance(structured, Mapping):  # MCP's structuredContent is an object
        out["structuredContent"] = structured
        # "a tool that returns structured content SHOULD also return the serialized JSON in a
        # TextContent block": unless some text block already is that JSON, add one
        if not any(block.get("type") == "text" and _is_json_of(block["text"], structured) for block in content):
            content.append({"type": "text", "text": json.dumps(structured, ensure_ascii=False)})
    out["isError"] = result.is_error
    return out


def _is_json_of(text: str, value: Any) -> bool:
    try:
        return bool(json.loads(text) == value)
    except ValueError:
        return False
