"""The tools the adapter tests drive through each provider's SDK (test_adapters_sdk.py), in a
module of their own so the MCP server those tests start imports only these (and no SDK)."""

from __future__ import annotations

import base64
from typing import Any, Literal

import attrs
from nexus_core.content import ImageContent, ResourceContent, TextContent

from nexus_core import ToolCall, Veto, hookimpl, tool

PNG = base64.b64decode(  # a 1x1 transparent PNG
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==")
PDF = b"%PDF-1.4\n1 0 obj << /Type /Catalog >> endobj\ntrailer << /Root 1 0 R >>\n%%EOF\n"


@tool
def get_weather(city: str, unit: Literal["celsius", "fahrenheit"] = "celsius") -> str:
    """The current weather in a city.

    Args:
        city: The city, e.g. Paris.
    """
    return f"{city}: 22 degrees {unit}, sunny"


@tool
def explode(reason: str) -> str:
    """A tool that fails."""
    raise RuntimeError(reason)


@tool
def delete_file(path: str) -> str:
    """Delete a file (a gate refuses it)."""
    raise AssertionError("a vetoed tool must not run")


@tool
def render_chart(title: str) -> list[Any]:
    """Draw a chart: a caption, the image, and the report as a PDF."""
    return [TextContent(f"Chart: {title}"), ImageContent.from_bytes(PNG, "image/png"),
            ResourceContent.from_bytes("file:///reports/q3.pdf", PDF, "application/pdf", name="q3.pdf")]


@tool
def tally(counts: dict[str, int]) -> int:
    """Add up counts by name (a map argument: no strict form, no Gemini `parameters` form)."""
    return sum(counts.values())


class NoDeletes:
    @hookimpl
    def nexus_before_tool_invoke(self, call: ToolCall, tool: Any) -> Veto | None:
        return Veto("deleting files is not allowed") if call.name == "delete_file" else None


@attrs.define
class WeatherData:
    temperature: float
    conditions: str
    humidity: int


@tool
def get_weather_data(location: str) -> WeatherData:
    """Structured weather data for a location."""
    return WeatherData(temperature=22.5, conditions="Partly cloudy", humidity=65)


LOOP_TOOLS = [get_weather, explode, delete_file, render_chart]
