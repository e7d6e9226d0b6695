"""Adapters: tool declarations, tool calls and tool results in OpenAI, Anthropic, Gemini and MCP
wire formats, checked against each provider's documented shape (tests/core/data/providers/
shapes.json) and round-tripped through samples of their real JSON (the other files there)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import attrs
import pytest
from nexus_core.adapters import (
    FORMATS,
    GeminiSchemaError,
    StrictSchemaError,
    drop_optional_nulls,
    format_tool_call,
    format_tool_result,
    gemini_schema,
    parse_tool_call,
    parse_tool_calls,
    strict_schema,
    to_provider_schemas,
)
from nexus_core.cli import main as cli_main
from nexus_core.content import AudioContent, ImageContent, ResourceContent, TextContent
from provider_shapes import assert_shape, sample

from nexus_core import Nexus, ToolCall, ToolResult, failure, native_tool, tool, toolkit

# -- tools used throughout ------------------------------------------------------------------


@tool
def get_current_weather(location: str, unit: Literal["celsius", "fahrenheit"] = "fahrenheit") -> str:
    """Get the current weather in a given location.

    Args:
        location: The city and state, e.g. San Francisco, CA.
        unit: The temperature unit.
    """
    return f"{location}: 22 degrees {unit}, sunny"


@attrs.define
class WeatherData:
    temperature: float
    conditions: str
    humidity: int


@tool
def get_weather_data(location: str) -> WeatherData:
    """Structured weather data for a location."""
    return WeatherData(temperature=22.5, conditions="Partly cloudy", humidity=65)


@attrs.define
class Address:
    street: str
    zip_code: str | None = None


@tool
def file_report(title: str, tags: list[str], address: Address, scores: dict[str, int] | None = None,
                level: Literal[1, 2, 3] = 1, note: str | None = None) -> str:
    """A tool whose schema has every construct the adapters must carry or clean."""
    return title


ping = native_tool("ping", run=lambda args: "pong")  # no description, no parameters

ALL_TOOLS = [get_current_weather, get_weather_data, file_report, ping]


@pytest.fixture
def tk() -> Iterator[Nexus]:
    with toolkit(ALL_TOOLS) as nx:
        yield nx


# -- declarations ---------------------------------------------------------------------------


def test_openai_schemas_have_the_documented_shape(tk: Nexus) -> None:
    schemas = tk.schemas("openai")
    assert [s["function"]["name"] for s in schemas] == ["file_report", "get_current_weather", "get_weather_data", "ping"]
    for entry in schemas:
        assert_shape(entry, "openai_tool")
    weather = next(s for s in schemas if s["function"]["name"] == "get_current_weather")
    assert weather["function"]["description"] == "Get the current weather in a given location."
    assert weather["function"]["parameters"]["required"] == ["location"]
    assert schemas[-1] == {"type": "function",
                           "function": {"name": "ping", "description": "", "parameters": {"type": "object"}}}


def test_anthropic_schemas_have_the_documented_shape(tk: Nexus) -> None:
    schemas = tk.schemas("anthropic")
    for entry in schemas:
        assert_shape(entry, "anthropic_tool")
    assert schemas[-1] == {"name": "ping", "description": "", "input_schema": {"type": "object"}}


def test_gemini_schemas_are_one_tool_with_every_declaration(tk: Nexus) -> None:
    schemas = tk.schemas("gemini")
    assert_shape(schemas, "gemini_tools")
    assert len(schemas) == 1
    names = [d["name"] for d in schemas[0]["functionDeclarations"]]
    assert names == ["file_report", "get_current_weather", "get_weather_data", "ping"]


def test_gemini_schemas_with_no_tools_are_still_one_element() -> None:
    with toolkit([]) as nx:
        assert nx.schemas("gemini") == [{"functionDeclarations": []}]
    assert to_provider_schemas([], "gemini") == [{"functionDeclarations": []}]


def test_gemini_declares_a_tool_without_parameters_without_a_parameters_field(tk: Nexus) -> None:
    # Gemini answers 400 "properties: should be non-empty for OBJECT type" otherwise
    ping_decl = next(d for d in tk.schemas("gemini")[0]["functionDeclarations"] if d["name"] == "ping")
    assert ping_decl == {"name": "ping", "description": ""}


def test_gemini_parameters_drop_what_gemini_rejects_recursively(tk: Nexus) -> None:
    # file_report without its map argument: the rest fits Gemini's `parameters` subset
    schema = dict(tk.tool("file_report").input_schema)
    schema["properties"] = {k: v for k, v in schema["properties"].items() if k != "scores"}
    params = gemini_schema(schema)
    text = json.dumps(params)
    assert "additionalProperties" not in text
    assert "$schema" not in text
    assert params["required"] == ["title", "tags", "address"]
    assert params["properties"]["tags"] == {"type": "array", "items": {"type": "string"}}
    # Optional[attrs class] (anyOf with null) is the class's schema, nullable
    address = params["properties"]["address"]
    assert address["type"] == "object" and address["required"] == ["street"]
    assert address["properties"]["zip_code"] == {"type": "string", "nullable": True, "default": None}
    # type: ["string", "null"] becomes nullable
    assert params["properties"]["note"] == {"type": "string", "nullable": True, "default": None}
    # Gemini's enum takes strings only: an integer enum keeps its type, its values move into the description
    assert params["properties"]["level"] == {"type": "integer", "description": "one of: 1, 2, 3", "default": 1}


def test_gemini_declares_a_map_argument_as_json_schema_not_as_an_empty_object(tk: Nexus) -> None:
    # dict[str, int] | None has no form in Gemini's `parameters` (an OBJECT needs named
    # properties): the whole declaration uses parametersJsonSchema, which keeps the value type
    decl = next(d for d in tk.schemas("gemini")[0]["functionDeclarations"] if d["name"] == "file_report")
    assert set(decl) == {"name", "description", "parametersJsonSchema"}
    params = decl["parametersJsonSchema"]
    assert params["properties"]["scores"] == {"type": ["object", "null"], "additionalProperties": {"type": "integer"}}
    assert params["properties"]["level"] == {"enum": [1, 2, 3], "type": "integer", "description": "default: 1"}
    # the other tools still use `parameters`
    others = [d for d in tk.schemas("gemini")[0]["functionDeclarations"] if d["name"] != "file_report"]
    assert all("parametersJsonSchema" not in d for d in others)


def test_gemini_json_schema_option(tk: Nexus) -> None:
    always = tk.schemas("gemini", json_schema=True)[0]["functionDeclarations"]
    assert all("parametersJsonSchema" in d and "parameters" not in d for d in always)
    with pytest.raises(GeminiSchemaError, match=r"tool 'file_report': .*/properties/scores: an object without named"):
        tk.schemas("gemini", json_schema=False)


def test_gemini_schema_cleaning_rules() -> None:
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "urn:x",
        "type": "object",
        "additionalProperties": False,
        "$defs": {"Point": {"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"],
                            "additionalProperties": False}},
        "properties": {
            "point": {"$ref": "#/$defs/Point", "description": "Where."},
            "mode": {"const": "fast"},
            "kind": {"oneOf": [{"type": "string"}, {"type": "integer"}]},
            "either": {"type": ["string", "integer"]},
            "count": {"type": "integer", "exclusiveMinimum": 0, "multipleOf": 2, "minimum": 1, "default": 2},
            "url": {"type": "string", "format": "uri", "description": "A link"},
            "when": {"type": "string", "format": "date-time"},
            "merged": {"allOf": [{"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
                                 {"properties": {"b": {"type": "string"}}}]},
            "pair": {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}]},
            "maybe": {"enum": ["a", "b", None]},
            "free": {"type": "object", "properties": {"x1": {"type": "string"}},
                     "patternProperties": {"^x": {"type": "string"}}, "unevaluatedProperties": False},
            "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
            "level": {"enum": [1, 2]},
        },
        "required": ["point", "ghost"],
    }
    out = gemini_schema(schema)
    assert set(out) == {"type", "properties", "required"}
    assert out["required"] == ["point"]  # a required key with no property would be rejected
    props = out["properties"]
    assert props["point"] == {"type": "object", "description": "Where.", "properties": {"x": {"type": "number"}},
                              "required": ["x"]}
    assert props["mode"] == {"type": "string", "enum": ["fast"]}
    assert props["kind"] == {"anyOf": [{"type": "string"}, {"type": "integer"}]}
    assert props["either"] == {"anyOf": [{"type": "string"}, {"type": "integer"}]}
    # what Gemini has no field for is kept in the description, never dropped without a word
    assert props["count"] == {"type": "integer", "minimum": 1, "default": 2,
                              "description": "exclusiveMinimum: 0; multipleOf: 2"}
    assert props["url"] == {"type": "string", "description": "A link (format: uri)"}
    assert props["when"] == {"type": "string", "format": "date-time"}
    assert props["merged"] == {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "string"}},
                               "required": ["a"]}
    assert props["pair"] == {"type": "array", "items": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
                             "description": 'items in this order: {"type": "string"}, {"type": "integer"}'}
    assert props["maybe"] == {"type": "string", "enum": ["a", "b"], "nullable": True}
    assert props["free"] == {"type": "object", "properties": {"x1": {"type": "string"}},
                             "description": 'unevaluatedProperties: false; keys matching: {"^x": {"type": "string"}}'}
    assert props["tags"] == {"type": "array", "items": {"type": "string"}, "description": "uniqueItems: true"}
    # every node typed: an int enum with no type gets "integer"
    assert props["level"] == {"type": "integer", "description": "one of: 1, 2"}
    assert_shape([{"functionDeclarations": [{"name": "x", "parameters": out}]}], "gemini_tools")


@pytest.mark.parametrize(("schema", "path", "reason"), [
    ({"type": "object", "$defs": {"Node": {"type": "object", "properties": {
        "value": {"type": "string"}, "child": {"$ref": "#/$defs/Node"}}}},
      "properties": {"root": {"$ref": "#/$defs/Node"}}},
     "/properties/root/properties/child", "a recursive $ref"),
    ({"type": "object", "properties": {"m": {"type": "object", "additionalProperties": {"type": "integer"}}}},
     "/properties/m", "an object without named properties"),
    ({"type": "object", "properties": {"any": {}}}, "/properties/any", "a value of any type"),
    ({"type": "object", "properties": {"any": True}}, "/properties/any", "a value of any type"),
    ({"type": "object", "properties": {"list": {"type": "array"}}}, "/properties/list", "an array without an item"),
    ({"type": "object", "properties": {"r": {"$ref": "https://example.com/s.json"}}}, "/properties/r",
     "does not point into $defs"),
])
def test_gemini_schema_refuses_what_its_subset_cannot_express(schema: dict[str, Any], path: str, reason: str) -> None:
    # an empty OBJECT or an untyped node would be refused by Gemini or be a guess: say so instead
    with pytest.raises(GeminiSchemaError) as info:
        gemini_schema(schema)
    assert info.value.path == path and reason in info.value.reason
    # and the declaration falls back to parametersJsonSchema, which says it all
    t = native_tool("t", run=lambda a: "", input_schema=schema)
    (decl,) = to_provider_schemas([t], "gemini")[0]["functionDeclarations"]
    assert "parameters" not in decl and decl["parametersJsonSchema"]["properties"] == schema["properties"]


def test_gemini_schema_leaves_the_input_unchanged() -> None:
    schema = {"type": "object", "additionalProperties": False, "properties": {"a": {"type": ["string", "null"]}}}
    before = json.dumps(schema, sort_keys=True)
    gemini_schema(schema)
    assert json.dumps(schema, sort_keys=True) == before


def test_mcp_tools_have_the_documented_shape(tk: Nexus) -> None:
    tools = tk.schemas("mcp")
    for entry in tools:
        assert_shape(entry, "mcp_tool")
    by_name = {t["name"]: t for t in tools}
    assert "outputSchema" not in by_name["get_current_weather"]
    # an attrs return annotation becomes the tool's output schema
    assert by_name["get_weather_data"]["outputSchema"]["required"] == ["temperature", "conditions", "humidity"]
    assert by_name["ping"]["inputSchema"] == {"type": "object"}


def test_mcp_tools_carry_only_the_annotations_mcp_defines() -> None:
    t = attrs.evolve(native_tool("reader", "Reads", run=lambda a: ""),
                     annotations={"readOnlyHint": True, "title": "Reader", "internal": "x"})
    (entry,) = to_provider_schemas([t], "mcp")
    assert entry["annotations"] == {"title": "Reader", "readOnlyHint": True}
    assert_shape(entry, "mcp_tool")


def test_declarations_do_not_share_schema_objects_with_the_registry(tk: Nexus) -> None:
    tk.schemas("openai")[0]["function"]["parameters"]["type"] = "changed"
    assert tk.tool("file_report").input_schema["type"] == "object"


def test_an_unknown_format_is_a_clear_error(tk: Nexus) -> None:
    with pytest.raises(ValueError, match=r"unknown format 'cohere'.*openai, openai-responses, anthropic, gemini, mcp"):
        tk.schemas("cohere")


def test_nexus_schemas_cli_prints_each_format(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "nexus.yaml"
    config.write_text("skills: []\nplugins:\n  active: [nexus.tool.todo]\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    for fmt in FORMATS:
        assert cli_main(["--trust-config", "--config", str(config), "schemas", "--format", fmt]) == 0
        printed = json.loads(capsys.readouterr().out)
        with Nexus.from_config(str(config)) as nx:
            assert printed == nx.schemas(fmt)


# -- tool calls in, results out: the providers' own samples, round-tripped -------------------


def test_openai_round_trip() -> None:
    message = sample("openai_tool_call.json")["choices"][0]["message"]
    for entry in message["tool_calls"]:
        assert_shape(entry, "openai_tool_call")
    calls = parse_tool_calls(message, "openai")
    assert [(c.id, c.name, c.arguments) for c in calls] == [
        ("call_abc123", "get_current_weather", {"location": "Boston, MA"}),
        ("call_def456", "get_current_weather", {"location": "Paris, France", "unit": "celsius"}),
    ]
    with toolkit([get_current_weather]) as nx:
        replies = [format_tool_result(nx.invoke(c), "openai") for c in calls]
    for reply in replies:
        assert_shape(reply, "openai_tool_message")
    assert replies == sample("openai_tool_result.json")


def test_anthropic_round_trip() -> None:
    message = sample("anthropic_tool_use.json")
    calls = parse_tool_calls(message, "anthropic")  # the text block is not a call
    assert len(calls) == 1
    assert_shape(message["content"][1], "anthropic_tool_use")
    assert calls[0].id == "toolu_01A09q90qw90lq917835lq9"
    assert calls[0].arguments == {"location": "San Francisco, CA", "unit": "celsius"}
    with toolkit([get_current_weather]) as nx:
        blocks = [format_tool_result(nx.invoke(c), "anthropic") for c in calls]
    for block in blocks:
        assert_shape(block, "anthropic_tool_result")
    assert {"role": "user", "content": blocks} == sample("anthropic_tool_result.json")


def test_gemini_round_trip() -> None:
    response = sample("gemini_function_call.json")
    candidate = response["candidates"][0]
    for part in candidate["content"]["parts"]:
        assert_shape(part, "gemini_function_call_part")
    calls = parse_tool_calls(candidate, "gemini")
    assert [c.arguments["location"] for c in calls] == ["Zurich, Switzerland", "Lisbon, Portugal"]
    assert calls[0].id == "8f2b1a3c"
    assert calls[1].id.startswith("call_")  # Gemini gave none: one is made for Nexus
    with toolkit([get_current_weather]) as nx:
        parts = [format_tool_result(nx.invoke(c), "gemini", call=c) for c in calls]
    for part in parts:
        assert_shape(part, "gemini_function_response_part")
    # the call that came without an id is answered without one
    assert {"role": "user", "parts": parts} == sample("gemini_function_response.json")


def test_mcp_round_trip() -> None:
    request = sample("mcp_tools_call.json")
    assert_shape(request["params"], "mcp_call_tool_params")
    call = parse_tool_call(request, "mcp")
    assert (call.id, call.name, call.arguments) == ("2", "get_current_weather", {"location": "New York"})
    assert parse_tool_call(request["params"], "mcp").arguments == {"location": "New York"}
    with toolkit([get_current_weather]) as nx:
        result = format_tool_result(nx.invoke(call), "mcp")
    assert_shape(result, "mcp_call_tool_result")
    expected = sample("mcp_call_tool_result.json")
    assert {"jsonrpc": "2.0", "id": call.metadata["provider_call_id"], "result": result} == expected


def test_mcp_structured_content_round_trip() -> None:
    request = {"jsonrpc": "2.0", "id": 5, "method": "tools/call",
               "params": {"name": "get_weather_data", "arguments": {"location": "Los Angeles"}}}
    call = parse_tool_call(request, "mcp")
    with toolkit([get_weather_data]) as nx:
        result = format_tool_result(nx.invoke(call), "mcp")
    assert_shape(result, "mcp_call_tool_result")
    assert {"jsonrpc": "2.0", "id": 5, "result": result} == sample("mcp_call_tool_result_structured.json")


# -- results, errors included ---------------------------------------------------------------

ERROR = ToolResult(id="toolu_01", name="charge", output="amount must be positive",
                   error="amount must be positive", error_kind="failure")


def test_error_results_in_each_format() -> None:
    assert format_tool_result(ERROR, "openai") == {"role": "tool", "tool_call_id": "toolu_01",
                                                   "content": "amount must be positive"}
    assert format_tool_result(ERROR, "anthropic") == {"type": "tool_result", "tool_use_id": "toolu_01",
                                                      "content": "amount must be positive", "is_error": True}
    assert format_tool_result(ERROR, "gemini") == {"functionResponse": {
        "id": "toolu_01", "name": "charge", "response": {"error": "amount must be positive"}}}
    mcp = format_tool_result(ERROR, "mcp")
    assert mcp == {"content": [{"type": "text", "text": "amount must be positive"}], "isError": True}
    assert_shape(mcp, "mcp_call_tool_result")


def test_an_unknown_tool_from_a_provider_call_is_an_error_result_for_the_model() -> None:
    call = parse_tool_call({"type": "tool_use", "id": "toolu_9", "name": "nosuch", "input": {}}, "anthropic")
    with toolkit([get_current_weather]) as nx:
        block = format_tool_result(nx.invoke(call), "anthropic")
    assert block["is_error"] is True and "unknown tool" in block["content"]
    assert block["tool_use_id"] == "toolu_9"


def test_structured_output_goes_to_gemini_as_the_value_and_to_mcp_only_when_an_object() -> None:
    listing = ToolResult(id="c1", name="ls", output='["a", "b"]', output_structured=["a", "b"])
    assert format_tool_result(listing, "gemini")["functionResponse"]["response"] == {"output": ["a", "b"]}
    mcp = format_tool_result(listing, "mcp")
    assert "structuredContent" not in mcp  # MCP's structuredContent must be an object
    assert mcp["content"] == [{"type": "text", "text": '["a", "b"]'}]


def test_a_failure_value_reaches_each_format_as_an_error() -> None:
    charge = native_tool("charge", run=lambda a: failure("amount must be positive"))
    with toolkit([charge]) as nx:
        result = nx.invoke(ToolCall(name="charge", id="toolu_01"))
    assert format_tool_result(result, "anthropic")["is_error"] is True
    assert format_tool_result(result, "mcp")["isError"] is True


def test_format_tool_result_wants_a_tool_result() -> None:
    with pytest.raises(TypeError, match="ToolResult"):
        format_tool_result({"output": "x"}, "openai")  # type: ignore[arg-type]


# -- bad input ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("block", "format", "message"),
    [
        ({"id": "call_1", "type": "function"}, "openai", "OpenAI tool call 'call_1': missing field 'function'"),
        ({"type": "function", "function": {"name": "x", "arguments": "{}"}}, "openai", "missing field 'id'"),
        ({"id": "call_1", "type": "function", "function": {"arguments": "{}"}}, "openai",
         "OpenAI tool call 'call_1': missing field 'function.name'"),
        ({"id": "call_1", "type": "function", "function": {"name": "x", "arguments": "{not json"}}, "openai",
         "field 'function.arguments' is not valid JSON"),
        ({"id": "call_1", "type": "function", "function": {"name": "x", "arguments": "[1, 2]"}}, "openai",
         "field 'function.arguments' must be a JSON object, got list"),
        ({"id": "call_1", "type": "custom", "custom": {"name": "x", "input": "y"}}, "openai",
         "field 'type' is 'custom'; only 'function' calls are supported"),
        ({"type": "tool_use", "name": "x", "input": {}}, "anthropic", "missing field 'id'"),
        ({"type": "tool_use", "id": "toolu_1", "input": {}}, "anthropic", "missing field 'name'"),
        ({"type": "tool_use", "id": "toolu_1", "name": "x", "input": "a=1"}, "anthropic",
         "field 'input' must be a JSON object, got str"),
        ({"type": "text", "text": "hi"}, "anthropic", "field 'type' is 'text', not 'tool_use'"),
        ({"functionCall": {"args": {}}}, "gemini", "missing field 'name'"),
        ({"functionCall": {"name": "x", "args": [1]}}, "gemini", "field 'args' must be a JSON object"),
        ({"functionCall": "x"}, "gemini", "Gemini part: field 'functionCall' must be a JSON object, got str"),
        ({"arguments": {}}, "mcp", "missing field 'name'"),
        ({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, "mcp", "field 'method' is 'tools/list', not 'tools/call'"),
        ({"jsonrpc": "2.0", "id": 1, "method": "tools/call"}, "mcp", "missing field 'params'"),
        ({"name": "x", "arguments": "{}"}, "mcp", "field 'arguments' must be a JSON object, got str"),
        (["not", "an", "object"], "anthropic", "expected a JSON object, got list"),
    ],
)
def test_bad_tool_calls_raise_a_value_error_naming_the_field(block: Any, format: str, message: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_tool_call(block, format)
    assert message in str(info.value)


def test_mcp_arguments_are_strict_json_objects_but_openai_arguments_are_json_text() -> None:
    # OpenAI sends arguments as JSON text; an object is accepted too (some compatible servers)
    call = parse_tool_call({"id": "c", "type": "function", "function": {"name": "x", "arguments": {"a": 1}}}, "openai")
    assert call.arguments == {"a": 1}
    # a call without arguments
    assert parse_tool_call({"name": "x"}, "mcp").arguments == {}
    assert parse_tool_call({"functionCall": {"name": "x"}}, "gemini").arguments == {}
    empty = parse_tool_call({"id": "c", "type": "function", "function": {"name": "x", "arguments": ""}}, "openai")
    assert empty.arguments == {}


def test_parse_tool_calls_of_replies_without_calls() -> None:
    assert parse_tool_calls({"role": "assistant", "content": "Hello"}, "openai") == []
    assert parse_tool_calls({"role": "assistant", "content": "Hello", "tool_calls": None}, "openai") == []
    assert parse_tool_calls({"role": "assistant", "content": "Hello"}, "anthropic") == []
    assert parse_tool_calls({"role": "model", "parts": [{"text": "Hello"}]}, "gemini") == []
    with pytest.raises(ValueError, match="field 'tool_calls' must be a list"):
        parse_tool_calls({"tool_calls": {"id": "x"}}, "openai")


def test_parsed_calls_remember_the_provider() -> None:
    call = parse_tool_call({"type": "tool_use", "id": "toolu_1", "name": "x", "input": {}}, "anthropic")
    assert call.metadata == {"provider": "anthropic", "provider_call_id": "toolu_1"}


def test_an_unknown_format_for_calls_and_results() -> None:
    with pytest.raises(ValueError, match="unknown format"):
        parse_tool_call({}, "cohere")
    with pytest.raises(ValueError, match="unknown format"):
        format_tool_result(ERROR, "cohere")


# -- the Responses API ----------------------------------------------------------------------


def test_responses_declarations_and_calls(tk: Nexus) -> None:
    tools = tk.schemas("openai-responses")
    for entry in tools:
        assert_shape(entry, "responses_tool")
    weather = next(t for t in tools if t["name"] == "get_current_weather")
    assert weather["strict"] is False  # written out: the Responses API treats a missing one as strict
    assert weather["parameters"] == tk.tool("get_current_weather").input_schema
    item = {"type": "function_call", "id": "fc_1", "call_id": "call_9", "name": "get_current_weather",
            "arguments": '{"location": "Rome"}', "status": "completed"}
    call = parse_tool_call(item, "openai-responses")
    assert (call.id, call.name, call.arguments) == ("call_9", "get_current_weather", {"location": "Rome"})
    assert call.metadata == {"provider": "openai-responses", "provider_call_id": "call_9",
                             "provider_data": {"id": "fc_1"}}
    assert format_tool_call(call, "openai-responses") == {k: v for k, v in item.items() if k != "status"}
    with toolkit([get_current_weather]) as nx:
        output = format_tool_result(nx.invoke(call), "openai-responses", call=call)
    assert output == {"type": "function_call_output", "call_id": "call_9", "output": "Rome: 22 degrees fahrenheit, sunny"}
    assert_shape(output, "responses_function_call_output")


@pytest.mark.parametrize(("item", "message"), [
    ({"type": "function_call", "name": "x", "arguments": "{}"}, "missing field 'call_id'"),
    ({"type": "function_call", "call_id": "c", "arguments": "{}"}, "function_call 'c': missing field 'name'"),
    ({"type": "function_call", "call_id": "c", "name": "x", "arguments": "[]"}, "field 'arguments' must be a JSON object"),
    ({"type": "message", "role": "assistant", "content": []}, "field 'type' is 'message', not 'function_call'"),
])
def test_bad_responses_items(item: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_tool_call(item, "openai-responses")


def test_responses_output_lists_skip_items_that_are_not_calls() -> None:
    output = [{"type": "reasoning", "id": "rs_1", "summary": []},
              {"type": "function_call", "call_id": "c1", "name": "x", "arguments": "{}"},
              {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "hi"}]}]
    assert [c.id for c in parse_tool_calls(output, "openai-responses")] == ["c1"]
    done = {"type": "response.output_item.done", "output_index": 2, "item": output[2]}
    assert parse_tool_calls(done, "openai-responses") == []
    with pytest.raises(ValueError, match="output item 1 is a string 'oops', not an output item"):
        parse_tool_calls([output[1], "oops"], "openai-responses")


# -- options --------------------------------------------------------------------------------


@pytest.mark.parametrize(("format", "options", "message"), [
    ("anthropic", {"strict": True}, "Anthropic tools ('anthropic') have no 'strict' option; it is for 'openai' and"),
    ("gemini", {"strict": True}, "have no 'strict' option"),
    ("openai", {"allowed_callers": ["direct"]}, ("OpenAI tools ('openai') have no 'allowed_callers' option; it is for "
                                                "'anthropic' and 'openai-responses'")),
    ("mcp", {"json_schema": True}, "have no 'json_schema' option; it is for 'gemini'"),
    ("anthropic", {"allowed_callers": {"nosuch": ["direct"]}}, "allowed_callers names tools that are not declared: 'nosuch'"),
    ("anthropic", {"allowed_callers": []}, "allowed_callers for 'file_report' is empty"),
    ("anthropic", {"allowed_callers": "direct"}, "allowed_callers for 'file_report' must be a list of caller names"),
    ("openai-responses", {"allowed_callers": {"ping": [1]}}, "allowed_callers for 'ping' must be a list"),
])
def test_an_option_a_format_does_not_have_is_an_error(tk: Nexus, format: str, options: dict[str, Any],
                                                      message: str) -> None:
    with pytest.raises(ValueError) as info:
        tk.schemas(format, **options)
    assert message in str(info.value)


def test_allowed_callers_for_every_tool_or_some(tk: Nexus) -> None:
    every = tk.schemas("anthropic", allowed_callers=["direct", "code_execution_20250825"])
    assert all(t["allowed_callers"] == ["direct", "code_execution_20250825"] for t in every)
    some = tk.schemas("openai-responses", allowed_callers={"ping": ["programmatic"]})
    assert [(t["name"], t.get("allowed_callers")) for t in some if "allowed_callers" in t] == [("ping", ["programmatic"])]
    for entry in every:
        assert_shape(entry, "anthropic_tool")


# -- strict mode ----------------------------------------------------------------------------


def test_strict_makes_every_property_required_and_optional_ones_nullable() -> None:
    with toolkit([get_current_weather, ping]) as nx:
        strict = nx.schemas("openai", strict=True)
    (weather,) = [t for t in strict if t["function"]["name"] == "get_current_weather"]
    assert weather["function"]["strict"] is True
    assert weather["function"]["parameters"] == {
        "type": "object",
        "properties": {
            "location": {"type": "string", "description": "The city and state, e.g. San Francisco, CA."},
            "unit": {"type": ["string", "null"], "enum": ["celsius", "fahrenheit", None],
                     "description": 'The temperature unit. (default: "fahrenheit")'},
        },
        "required": ["location", "unit"],
        "additionalProperties": False,
    }
    (no_parameters,) = [t for t in strict if t["function"]["name"] == "ping"]
    assert no_parameters["function"]["parameters"] == {"type": "object", "properties": {}, "required": [],
                                              "additionalProperties": False}


def test_strict_schema_rules() -> None:
    schema = {
        "type": "object",
        "$defs": {"Point": {"type": "object", "properties": {"x": {"type": "number", "default": 0}}}},
        "properties": {
            "point": {"$ref": "#/$defs/Point"},
            "where": {"$ref": "#/$defs/Point", "description": "Where."},
            "name": {"type": "string", "minLength": 1, "maxLength": 20, "format": "uri"},
            "when": {"type": "string", "format": "date-time"},
            "kind": {"oneOf": [{"type": "string"}, {"type": "integer"}]},
            "mode": {"const": "fast"},
            "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True, "maxItems": 3},
            "pair": {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}]},
            "merged": {"allOf": [{"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
                                 {"properties": {"b": {"type": "integer"}}}]},
            "maybe": {"type": ["string", "null"]},
            "level": {"enum": [1, 2]},
            "legacy": {"type": "integer", "nullable": True},
            "extra": {"type": "object", "properties": {"k": {"type": "string"}}, "additionalProperties": {"type": "string"}},
        },
        "required": ["point", "name", "when", "kind", "mode", "tags", "pair", "merged", "maybe", "level", "legacy",
                     "extra"],
    }
    before = json.dumps(schema, sort_keys=True)
    out = strict_schema(schema)
    assert json.dumps(schema, sort_keys=True) == before  # the input is not changed
    props = out["properties"]
    assert out["required"] == list(schema["properties"]) and out["additionalProperties"] is False
    assert props["point"] == {"$ref": "#/$defs/Point"}
    # the definition itself is made strict; a default moves into the description
    assert out["$defs"]["Point"] == {"type": "object", "properties": {
        "x": {"type": ["number", "null"], "description": "default: 0"}}, "required": ["x"], "additionalProperties": False}
    # a $ref with a sibling is inlined (strict mode takes nothing beside a $ref), optional: nullable
    assert props["where"]["description"] == "Where." and props["where"]["type"] == ["object", "null"]
    assert props["name"] == {"type": "string", "description": "minLength: 1; maxLength: 20; format: uri"}
    assert props["when"] == {"type": "string", "format": "date-time"}
    assert props["kind"] == {"anyOf": [{"type": "string"}, {"type": "integer"}]}
    assert props["mode"] == {"enum": ["fast"]}
    assert props["tags"] == {"type": "array", "maxItems": 3, "items": {"type": "string"},
                             "description": "uniqueItems: true"}
    assert props["pair"]["items"] == {"anyOf": [{"type": "string"}, {"type": "integer"}]}
    assert props["pair"]["description"].startswith("items in this order:")
    assert props["merged"] == {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": ["integer", "null"]}},
                               "required": ["a", "b"], "additionalProperties": False}
    assert props["maybe"] == {"type": ["string", "null"]}
    assert props["level"] == {"enum": [1, 2]}
    assert props["legacy"] == {"type": ["integer", "null"]}
    assert props["extra"]["additionalProperties"] is False
    assert props["extra"]["description"] == 'other keys allowed: {"type": "string"}'


def test_optional_properties_without_a_plain_type_are_made_nullable_by_wrapping() -> None:
    schema = {"type": "object", "$defs": {"P": {"type": "object", "properties": {"x": {"type": "number"}},
                                                "required": ["x"]}},
              "properties": {"p": {"$ref": "#/$defs/P"}, "e": {"enum": ["a", "b"]},
                             "u": {"anyOf": [{"type": "string"}, {"type": "integer"}], "description": "Either."}}}
    props = strict_schema(schema)["properties"]
    assert props["p"] == {"anyOf": [{"$ref": "#/$defs/P"}, {"type": "null"}]}
    assert props["e"] == {"enum": ["a", "b", None]}
    assert props["u"] == {"anyOf": [{"type": "string"}, {"type": "integer"}, {"type": "null"}], "description": "Either."}


def test_a_recursive_schema_stays_a_reference() -> None:
    schema = {"type": "object", "$defs": {"Node": {"type": "object", "properties": {
        "value": {"type": "string"}, "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}}},
        "required": ["value", "children"]}}, "properties": {"root": {"$ref": "#/$defs/Node"}}, "required": ["root"]}
    out = strict_schema(schema)
    assert out["properties"]["root"] == {"$ref": "#/$defs/Node"}
    assert out["$defs"]["Node"]["properties"]["children"]["items"] == {"$ref": "#/$defs/Node"}


@pytest.mark.parametrize(("schema", "problem"), [
    ({"type": "object", "properties": {"m": {"type": "object", "additionalProperties": {"type": "integer"}}}},
     "/properties/m: an object without named properties"),
    ({"type": "object", "properties": {"any": {}}}, "/properties/any: a value of any type"),
    ({"type": "object", "properties": {"any": True}}, "/properties/any: a value of any type (`true`)"),
    ({"type": "object", "properties": {"l": {"type": "array"}}}, "/properties/l: an array without an item schema"),
    ({"type": "object", "patternProperties": {"^x": {"type": "string"}}}, "/: an object whose keys are patterns"),
    ({"type": "array", "items": {"type": "string"}}, "/: the root must be an object"),
    ({"type": "object", "properties": {"r": {"$ref": "other.json#/x"}}}, "/properties/r: $ref 'other.json#/x' does not"),
    ({"type": "object", "additionalProperties": {"type": "string"}}, "/: an object without named properties"),
])
def test_what_strict_mode_cannot_say_is_reported_with_its_place(schema: dict[str, Any], problem: str) -> None:
    with pytest.raises(StrictSchemaError) as info:
        strict_schema(schema)
    assert problem in str(info.value)


def test_every_tool_that_cannot_be_strict_is_named_in_one_error() -> None:
    bag = native_tool("bag", run=lambda a: "", input_schema={"type": "object", "properties": {
        "items": {"type": "object"}, "anything": {}}})
    with toolkit([bag, file_report, get_current_weather]) as nx, pytest.raises(StrictSchemaError) as info:
        nx.schemas("openai-responses", strict=True)
    assert info.value.tools == ["bag", "file_report"]
    message = str(info.value)
    assert message.startswith("cannot make 2 tool(s) strict ('bag', 'file_report') under OpenAI's strict-mode rules")
    assert "'bag' at /properties/items: an object without named properties" in message
    assert "'bag' at /properties/anything: a value of any type" in message
    assert "'file_report' at /properties/scores" in message


def test_nulls_for_optional_arguments_are_dropped_where_the_tool_has_no_null(tk: Nexus) -> None:
    schema = tk.tool("file_report").input_schema
    args = {"title": "T", "tags": [], "address": {"street": "Main", "zip_code": None}, "scores": None,
            "level": None, "note": None}
    # `level` is optional and cannot be null: dropped; `scores`, `note`, `zip_code` accept null: kept
    assert drop_optional_nulls(args, schema) == {"title": "T", "tags": [], "address": {"street": "Main", "zip_code": None},
                                                 "scores": None, "note": None}
    nested = {"type": "object", "$defs": {"I": {"type": "object", "properties": {"n": {"type": "integer"}}}},
              "properties": {"items": {"type": "array", "items": {"$ref": "#/$defs/I"}},
                             "must": {"type": "string"}}, "required": ["must"]}
    assert drop_optional_nulls({"items": [{"n": None}, {"n": 1}], "must": None}, nested) == \
        {"items": [{}, {"n": 1}], "must": None}  # a required null stays, for validation to refuse
    block = {"id": "c", "type": "function", "function": {"name": "file_report", "arguments": json.dumps(args)}}
    assert "level" not in parse_tool_call(block, "openai", tools=tk).arguments
    assert parse_tool_call(block, "openai", tools=tk.tools()).arguments == parse_tool_call(block, "openai", tools=tk).arguments
    assert parse_tool_call(block, "openai").arguments["level"] is None  # left alone without tools=


# -- calls back out -------------------------------------------------------------------------


def test_format_tool_call_gives_back_what_parse_read() -> None:
    samples = {
        "openai": {"id": "call_1", "type": "function", "function": {"name": "x", "arguments": '{"a": 1}'}},
        "openai-responses": {"type": "function_call", "call_id": "call_1", "name": "x", "arguments": '{"a": 1}',
                             "id": "fc_1", "caller": {"type": "direct"}},
        "anthropic": {"type": "tool_use", "id": "toolu_1", "name": "x", "input": {"a": 1},
                      "caller": {"type": "direct"}},
        "gemini": {"functionCall": {"id": "f1", "name": "x", "args": {"a": 1}}, "thoughtSignature": "c2ln+/8="},
        "mcp": {"name": "x", "arguments": {"a": 1}},
    }
    for format, block in samples.items():
        assert format_tool_call(parse_tool_call(block, format), format) == block, format
    # a Gemini call that came without an id goes back without one; a call made here gets its id
    bare = parse_tool_call({"functionCall": {"name": "x", "args": {}}}, "gemini")
    assert format_tool_call(bare, "gemini") == {"functionCall": {"name": "x", "args": {}}}
    mine = ToolCall(name="x", arguments={"a": 1}, id="call_7")
    assert format_tool_call(mine, "gemini") == {"functionCall": {"id": "call_7", "name": "x", "args": {"a": 1}}}
    assert format_tool_call(mine, "anthropic") == {"type": "tool_use", "id": "call_7", "name": "x", "input": {"a": 1}}
    # provider data stays with its provider: an Anthropic caller is not sent to OpenAI
    anthropic_call = parse_tool_call(samples["anthropic"], "anthropic")
    assert "caller" not in format_tool_call(anthropic_call, "openai-responses")
    with pytest.raises(TypeError, match="takes a ToolCall"):
        format_tool_call({"name": "x"}, "openai")  # type: ignore[arg-type]


# -- rich results ---------------------------------------------------------------------------

PNG = bytes.fromhex("89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c489")
IMAGE = ImageContent.from_bytes(PNG, "image/png")
RICH = ToolResult(id="toolu_7", name="chart", output="A chart.\n[image: image/png, 33 bytes]",
                  content=(TextContent("A chart."), IMAGE))


def test_a_result_with_blocks_in_each_format() -> None:
    assert format_tool_result(RICH, "openai") == {"role": "tool", "tool_call_id": "toolu_7", "content":
        "A chart.\n[image: image/png, 33 bytes] (not shown: this API takes text only in tool results)"}
    assert format_tool_result(RICH, "openai-responses")["output"] == [
        {"type": "input_text", "text": "A chart."},
        {"type": "input_image", "image_url": "data:image/png;base64," + IMAGE.data}]
    anthropic = format_tool_result(RICH, "anthropic")
    assert anthropic["content"] == [{"type": "text", "text": "A chart."}, {"type": "image", "source": {
        "type": "base64", "media_type": "image/png", "data": IMAGE.data}}]
    assert_shape(anthropic, "anthropic_tool_result")
    gemini = format_tool_result(RICH, "gemini")
    assert gemini == {"functionResponse": {"id": "toolu_7", "name": "chart", "response": {
        "output": "A chart.\n[image: image/png, 33 bytes]"}, "parts": [{"inlineData": {"mimeType": "image/png",
                                                                                     "data": IMAGE.data}}]}}
    assert_shape(gemini, "gemini_function_response_part")
    mcp = format_tool_result(RICH, "mcp")
    assert mcp == {"content": [{"type": "text", "text": "A chart."},
                               {"type": "image", "data": IMAGE.data, "mimeType": "image/png"}], "isError": False}
    assert_shape(mcp, "mcp_call_tool_result")


def test_blocks_a_provider_has_no_form_for_become_text() -> None:
    blocks = (ImageContent.from_bytes(b"BM..", "image/bmp"), AudioContent.from_bytes(b"RIFF", "audio/wav"),
              ResourceContent(uri="file:///n.md", mime_type="text/markdown", text="# N"),
              ResourceContent(uri="https://x/y.zip", mime_type="application/zip", name="y.zip"),
              ResourceContent.from_bytes("file:///a.docx", b"PK..", "application/msword"))
    result = ToolResult(id="c", name="t", content=blocks)
    anthropic = format_tool_result(result, "anthropic")["content"]
    assert [b["type"] for b in anthropic] == ["text", "text", "document", "text", "text"]
    assert anthropic[0]["text"].startswith("[image: image/bmp") and "not shown" in anthropic[0]["text"]
    assert anthropic[2]["source"] == {"type": "text", "media_type": "text/plain", "data": "# N"}
    assert [i["type"] for i in format_tool_result(result, "openai-responses")["output"]] == ["input_text"] * 5
    gemini = format_tool_result(result, "gemini")["functionResponse"]
    assert "parts" not in gemini and "[audio: audio/wav" in gemini["response"]["output"]
    mcp = format_tool_result(result, "mcp")
    assert [b["type"] for b in mcp["content"]] == ["image", "audio", "resource", "resource_link", "resource"]
    assert mcp["content"][3] == {"type": "resource_link", "uri": "https://x/y.zip", "name": "y.zip",
                                 "mimeType": "application/zip"}
    assert_shape(mcp, "mcp_call_tool_result")


def test_an_output_file_is_sent_as_the_file(tmp_path: Path) -> None:
    chart = tmp_path / "chart.png"
    chart.write_bytes(PNG)
    result = ToolResult(id="toolu_8", name="plot", output="Plotted.", output_file=str(chart))
    anthropic = format_tool_result(result, "anthropic")
    assert anthropic["content"] == [{"type": "text", "text": "Plotted."}, {"type": "image", "source": {
        "type": "base64", "media_type": "image/png", "data": IMAGE.data}}]
    assert format_tool_result(result, "mcp")["content"][1] == {"type": "image", "data": IMAGE.data,
                                                               "mimeType": "image/png"}
    too_big = format_tool_result(result, "anthropic", max_file_bytes=8)["content"]
    assert too_big[1]["text"].endswith("not sent (over 8 bytes)]")
    gone = ToolResult(id="toolu_9", name="plot", output="", output_file=str(tmp_path / "gone.png"))
    assert "cannot be read" in format_tool_result(gone, "openai")["content"]


def test_mcp_text_carries_the_structured_result_as_json() -> None:
    # output text that is not the JSON (a tool's own summary): the JSON is added as a text block
    summary = ToolResult(id="c", name="w", output="Sunny, 22 degrees.",
                         output_structured={"temperature": 22, "conditions": "sunny"})
    mcp = format_tool_result(summary, "mcp")
    assert mcp["content"] == [{"type": "text", "text": "Sunny, 22 degrees."},
                              {"type": "text", "text": '{"temperature": 22, "conditions": "sunny"}'}]
    assert mcp["structuredContent"] == {"temperature": 22, "conditions": "sunny"}
    # output that already is the JSON: not twice
    plain = ToolResult(id="c", name="w", output='{"conditions": "sunny", "temperature": 22}',
                       output_structured={"temperature": 22, "conditions": "sunny"})
    assert len(format_tool_result(plain, "mcp")["content"]) == 1


def test_nexus_schemas_passes_options_through() -> None:
    with toolkit([get_current_weather, ping]) as nx:
        assert nx.schemas("openai", strict=True) == to_provider_schemas(nx.tools(), "openai", strict=True)
        with pytest.raises(TypeError, match="unexpected keyword argument 'strictly'"):
            nx.schemas("openai", strictly=True)
