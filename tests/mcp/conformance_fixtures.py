"""The tools the MCP conformance suite (0.1.16) calls on a server under test, as a Nexus plugin
(`test.conformance`), each built the way any plugin's tool is: the suite's scenarios then check
what `nexus mcp serve` makes of ordinary Nexus tools (their content blocks, `ctx.progress`,
log records, a question put to the person).

Installed for the `nexus` subprocess with `FakePlugins` (test_conformance.py); a skill folder
beside it gives the prompt the prompt scenarios get (`test_simple_prompt`).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from nexus_core.content import AudioContent, ImageContent, ResourceContent, TextContent

from nexus_core import Question, ToolCall, ToolResult, hookimpl, native_tool, tool

log = logging.getLogger("nexus_conformance")

#: a 1x1 red PNG, and a short WAV header: what the suite asks for ("a minimal test image")
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
WAV = "UklGRiQAAABXQVZFZm10IBAAAAABAAEARKwAAIhYAQACABAAZGF0YQAAAAA="


def _result(*blocks: Any) -> ToolResult:
    return ToolResult(id="", name="", output="", content=blocks)


@tool
def test_simple_text() -> str:
    """Return a simple text."""
    return "This is a simple text response for testing."


def image(arguments: dict[str, Any]) -> ToolResult:
    return _result(ImageContent(data=PNG, mime_type="image/png"))


def audio(arguments: dict[str, Any]) -> ToolResult:
    return _result(AudioContent(data=WAV, mime_type="audio/wav"))


def embedded(arguments: dict[str, Any]) -> ToolResult:
    return _result(ResourceContent(uri="test://embedded-resource", mime_type="text/plain",
                                   text="This is an embedded resource content."))


def mixed(arguments: dict[str, Any]) -> ToolResult:
    return _result(TextContent(text="Multiple content types test:"), ImageContent(data=PNG, mime_type="image/png"),
                   ResourceContent(uri="test://mixed-content-resource", mime_type="application/json",
                                   text='{"test":"data","value":123}'))


def with_logging(arguments: dict[str, Any]) -> str:
    log.info("Tool execution started")
    time.sleep(0.05)
    log.info("Tool processing data")
    time.sleep(0.05)
    log.info("Tool execution completed")
    return "Tool with logging executed successfully"


def failing(arguments: dict[str, Any]) -> str:
    raise RuntimeError("This tool intentionally returns an error for testing")


def with_progress(arguments: dict[str, Any], ctx: Any) -> str:
    for done in (0, 50, 100):
        ctx.progress(done, 100, f"Completed step {done // 50 + 1} of 3")
        if done < 100:
            time.sleep(0.05)
    return "Tool with progress completed"


def elicitation(arguments: dict[str, Any], ctx: Any) -> str:
    """A question to the person, as the `question` tool asks it: through the call's approver,
    which `nexus mcp serve` makes an elicitation of its client."""
    call = ToolCall(name=ctx.tool_name, arguments=dict(arguments), id=ctx.call_id)
    answer = ctx.nexus.ask(Question("question", call, arguments["message"]), approver=ctx.approver)
    return f"User response: approved={answer.approved} text={answer.text!r} by={answer.by}"


JSON_SCHEMA_2020_12 = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "$defs": {"address": {"type": "object", "properties": {"street": {"type": "string"},
                                                           "city": {"type": "string"}}}},
    "properties": {"name": {"type": "string"}, "address": {"$ref": "#/$defs/address"}},
    "additionalProperties": False,
}

EMPTY = {"type": "object"}


@hookimpl
def nexus_register_tools(register: Any) -> None:
    register(test_simple_text)
    register(native_tool("test_image_content", "Return an image.", EMPTY, run=image))
    register(native_tool("test_audio_content", "Return audio.", EMPTY, run=audio))
    register(native_tool("test_embedded_resource", "Return an embedded resource.", EMPTY, run=embedded))
    register(native_tool("test_multiple_content_types", "Return text, an image and a resource.", EMPTY, run=mixed))
    register(native_tool("test_tool_with_logging", "Log three records while running.", EMPTY, run=with_logging))
    register(native_tool("test_error_handling", "Fail.", EMPTY, run=failing))
    register(native_tool("test_tool_with_progress", "Report progress three times.", EMPTY, run=with_progress,
                         ctx=True))
    register(native_tool("test_elicitation", "Ask the person.",
                         {"type": "object", "properties": {"message": {"type": "string"}}, "required": ["message"]},
                         run=elicitation, ctx=True))
    register(native_tool("json_schema_2020_12_tool", "A tool whose schema is JSON Schema 2020-12.",
                         JSON_SCHEMA_2020_12, run=lambda a: "ok"))
