"""Tool schemas in each LLM provider's format (OpenAI, Anthropic, Gemini, MCP)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ._models import ToolDef

FORMATS = ("openai", "anthropic", "gemini", "mcp")


def to_provider_schemas(tools: Iterable[ToolDef], format: str) -> Any:
    """`tools` in the named provider's tool-declaration format."""
    tools = list(tools)
    if format == "openai":
        return [
            {"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.input_schema}}
            for t in tools
        ]
    if format == "anthropic":
        return [{"name": t.name, "description": t.description, "input_schema": t.input_schema} for t in tools]
    if format == "gemini":
        return [{"functionDeclarations": [
            {"name": t.name, "description": t.description, "parameters": t.input_schema} for t in tools
        ]}]
    if format == "mcp":
        out = []
        for t in tools:
            entry: dict[str, Any] = {"name": t.name, "description": t.description, "inputSchema": t.input_schema}
            if t.output_schema is not None:
                entry["outputSchema"] = t.output_schema
            out.append(entry)
        return out
    raise ValueError(f"unknown schema format {format!r}: expected one of {', '.join(FORMATS)}")
