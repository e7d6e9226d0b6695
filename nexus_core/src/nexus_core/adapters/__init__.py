"""Tools, tool calls and tool results in each LLM provider's wire format: OpenAI Chat
Completions ("openai") and Responses ("openai-responses"), Anthropic Messages ("anthropic"),
Gemini generateContent ("gemini") and MCP ("mcp", as plain dicts in MCP's JSON shape). No
provider SDK is needed or imported: the SDKs' objects are read by duck typing.

Four directions:
- `to_provider_schemas(tools, format, **options)`: the tool declarations to send
  (`nx.schemas(format, **options)`), OpenAI's strict mode among the options
  (`mcp_output_schema(schema)`: an output schema as MCP's outputSchema, an object);
- `parse_tool_calls(reply, format)` / `parse_tool_call(block, format)`: what the model asked
  for, as `ToolCall`s for `nx.invoke`, from the SDK's reply object or its JSON;
- `format_tool_result(result, format, call=call)`: a `ToolResult` as the message (or block, or
  part) that carries it back, images and documents included where the provider takes them;
- `format_tool_call(call, format)`: a `ToolCall` back in the provider's shape, for a loop that
  rebuilds the model's turn from ToolCalls.

Malformed input raises `ValueError` naming the provider and the field. The modules behind this
one are private; these names are the API.
"""

from ._calls import format_tool_call, parse_tool_call, parse_tool_calls
from ._common import FORMATS, Format
from ._declare import OPTION_FORMATS, AllowedCallers, SchemaOptions, mcp_output_schema, to_provider_schemas
from ._gemini import GeminiSchemaError, gemini_json_schema, gemini_schema
from ._replies import format_tool_result
from ._strict import StrictSchemaError, drop_optional_nulls, strict_schema

__all__ = [
    "FORMATS",
    "OPTION_FORMATS",
    "AllowedCallers",
    "Format",
    "GeminiSchemaError",
    "SchemaOptions",
    "StrictSchemaError",
    "drop_optional_nulls",
    "format_tool_call",
    "format_tool_result",
    "gemini_json_schema",
    "gemini_schema",
    "mcp_output_schema",
    "parse_tool_call",
    "parse_tool_calls",
    "strict_schema",
    "to_provider_schemas",
]
