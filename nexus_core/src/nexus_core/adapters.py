"""Tools, tool calls and tool results in each LLM provider's wire format: OpenAI (Chat
Completions), Anthropic (Messages), Gemini (generateContent) and MCP (as plain dicts in MCP's JSON
shape; the mcp package is not needed).

Three directions:
- `to_provider_schemas(tools, format)`: the tool declarations to send (`nx.schemas(format)`);
- `parse_tool_call(block, format)` / `parse_tool_calls(message, format)`: what the model asked
  for, as `ToolCall`s for `nx.invoke`;
- `format_tool_result(result, format)`: a `ToolResult` as the message (or block, or part) that
  carries it back to the model.

Malformed input raises `ValueError` naming the provider and the field.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Mapping
from typing import Any, Literal

from ._models import ToolCall, ToolDef, ToolResult, new_call_id

Format = Literal["openai", "anthropic", "gemini", "mcp"]
FORMATS: tuple[str, ...] = ("openai", "anthropic", "gemini", "mcp")

#: ToolDef.annotations keys that MCP defines as ToolAnnotations
_MCP_ANNOTATIONS = ("title", "readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint")


def _check_format(format: str) -> None:
    if format not in FORMATS:
        raise ValueError(f"unknown format {format!r}: expected one of {', '.join(FORMATS)}")


def _object_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """Every provider wants an object schema at the top; a schema with no type gets one."""
    out = dict(schema)
    if "type" not in out:
        out = {"type": "object", **out}
    return out


# -- declarations ---------------------------------------------------------------------------


def to_provider_schemas(tools: Iterable[ToolDef], format: str) -> list[dict[str, Any]]:
    """`tools` in the named provider's tool-declaration format.

    - "openai": `[{"type": "function", "function": {name, description, parameters}}]`
    - "anthropic": `[{name, description, input_schema}]`
    - "gemini": `[{"functionDeclarations": [...]}]`, one element even with no tools; each
      schema cleaned to the OpenAPI subset Gemini accepts (see `gemini_schema`)
    - "mcp": MCP `Tool` objects: `{name, description, inputSchema, outputSchema?, annotations?}`
    """
    _check_format(format)
    tools = list(tools)
    if format == "openai":
        return [
            {"type": "function",
             "function": {"name": t.name, "description": t.description, "parameters": _object_schema(t.input_schema)}}
            for t in tools
        ]
    if format == "anthropic":
        return [{"name": t.name, "description": t.description, "input_schema": _object_schema(t.input_schema)}
                for t in tools]
    if format == "gemini":
        return [{"functionDeclarations": [_gemini_declaration(t) for t in tools]}]
    out = []
    for t in tools:
        entry: dict[str, Any] = {"name": t.name, "description": t.description,
                                 "inputSchema": _object_schema(t.input_schema)}
        if t.output_schema is not None:
            entry["outputSchema"] = _object_schema(t.output_schema)
        hints = {k: t.annotations[k] for k in _MCP_ANNOTATIONS if k in t.annotations}
        if hints:
            entry["annotations"] = hints
        out.append(entry)
    return out


def _gemini_declaration(tool: ToolDef) -> dict[str, Any]:
    declaration: dict[str, Any] = {"name": tool.name, "description": tool.description}
    parameters = gemini_schema(_object_schema(tool.input_schema))
    # Gemini rejects an OBJECT with no properties ("properties: should be non-empty for OBJECT
    # type"); a tool without parameters is declared without `parameters`, as its SDK does.
    if parameters.get("properties") or parameters.get("type") != "object":
        declaration["parameters"] = parameters
    return declaration


# The fields of Gemini's Schema object (the "select subset of an OpenAPI 3.0 schema object" in
# https://ai.google.dev/api/caching#Schema). Anything else is rejected with "Unknown name".
_GEMINI_FIELDS = frozenset({
    "type", "format", "title", "description", "nullable", "enum", "maxItems", "minItems",
    "properties", "required", "minProperties", "maxProperties", "minLength", "maxLength",
    "pattern", "example", "anyOf", "propertyOrdering", "default", "items", "minimum", "maximum",
})
# the formats the Gemini Developer API accepts, per type; others fail the request
_GEMINI_FORMATS = {"string": {"enum", "date-time"}, "number": {"float", "double"}, "integer": {"int32", "int64"}}


def gemini_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """A JSON Schema as Gemini's `Schema`: only the fields Gemini documents are kept,
    recursively. Conversions: `type: [x, "null"]` and `anyOf: [.., {type: null}]` become
    `nullable: true`; `oneOf` becomes `anyOf`; `allOf` is merged; `const` becomes a one-value
    `enum`; local `$ref`s are inlined from `$defs` / `definitions`; `enum` values that are not
    strings (Gemini allows only strings) and formats Gemini does not take move into the
    description, so the model still reads them.
    """
    root = dict(schema)
    defs = {**root.get("definitions", {}), **root.get("$defs", {})}
    return _gemini(root, defs, ())


def _append_note(out: dict[str, Any], note: str) -> None:
    out["description"] = f"{out['description']} ({note})" if out.get("description") else note


def _resolve_ref(ref: str, defs: Mapping[str, Any], seen: tuple[str, ...]) -> dict[str, Any] | None:
    for prefix in ("#/$defs/", "#/definitions/"):
        if ref.startswith(prefix) and ref[len(prefix):] in defs and ref not in seen:
            return dict(defs[ref[len(prefix):]])
    return None


def _gemini(node: Any, defs: Mapping[str, Any], seen: tuple[str, ...]) -> dict[str, Any]:
    if not isinstance(node, Mapping):
        return {}  # `true` (anything) has no Gemini form; an unconstrained schema is the nearest
    node = dict(node)
    if "$ref" in node:
        ref = str(node.pop("$ref"))
        target = _resolve_ref(ref, defs, seen)
        if target is None:  # remote or recursive: what is left describes it as far as it can
            return _gemini({**node, "type": node.get("type", "object")}, defs, seen)
        return _gemini({**target, **node}, defs, (*seen, ref))
    if "allOf" in node:
        merged: dict[str, Any] = {}
        for part in [*node.pop("allOf"), node]:
            if isinstance(part, Mapping):
                part = dict(part)
                if "$ref" in part:
                    part = _resolve_ref(part.pop("$ref"), defs, seen) or part
                props = {**merged.get("properties", {}), **part.get("properties", {})}
                required = [*merged.get("required", []), *part.get("required", [])]
                merged.update(part)
                if props:
                    merged["properties"] = props
                if required:
                    merged["required"] = list(dict.fromkeys(required))
        node = merged
    if "oneOf" in node and "anyOf" not in node:
        node["anyOf"] = node.pop("oneOf")
    if "const" in node and "enum" not in node:
        node["enum"] = [node.pop("const")]

    out: dict[str, Any] = {}
    nullable = bool(node.get("nullable"))
    kind = node.get("type")
    if isinstance(kind, list):
        kinds = [k for k in kind if k != "null"]
        nullable = nullable or len(kinds) < len(kind)
        if len(kinds) == 1:
            kind = kinds[0]
        elif kinds:
            kind = None
            node["anyOf"] = [{"type": k} for k in kinds]
        else:
            kind = "null"
    if isinstance(kind, str):
        out["type"] = kind

    for key in ("title", "description", "pattern", "minLength", "maxLength", "minItems", "maxItems",
                "minProperties", "maxProperties", "minimum", "maximum", "example", "default",
                "propertyOrdering"):
        if key in node:
            out[key] = copy.deepcopy(node[key])
    if "examples" in node and "example" not in out and isinstance(node["examples"], list) and node["examples"]:
        out["example"] = copy.deepcopy(node["examples"][0])

    if "format" in node:
        fmt = node["format"]
        if fmt in _GEMINI_FORMATS.get(str(kind), set()):
            out["format"] = fmt
        else:
            _append_note(out, f"format: {fmt}")

    if "enum" in node:
        values = list(node["enum"])
        if None in values:
            nullable = True
            values = [v for v in values if v is not None]
        if values and all(isinstance(v, str) for v in values):
            out["enum"] = values
            out.setdefault("type", "string")
        elif values:
            _append_note(out, "one of: " + ", ".join(json.dumps(v) for v in values))

    if "properties" in node and isinstance(node["properties"], Mapping):
        out["properties"] = {k: _gemini(v, defs, seen) for k, v in node["properties"].items()}
        out.setdefault("type", "object")
    if "required" in node and isinstance(node["required"], list):
        known = set(out.get("properties", {}))
        required = [r for r in node["required"] if r in known]
        if required:
            out["required"] = required
    if "items" in node:
        items = node["items"]
        if isinstance(items, list):  # draft-4 tuple form: any of the item schemas
            items = {"anyOf": items} if len(items) > 1 else (items[0] if items else {})
        out["items"] = _gemini(items, defs, seen)
        out.setdefault("type", "array")
    elif "prefixItems" in node and isinstance(node["prefixItems"], list) and node["prefixItems"]:
        prefix = node["prefixItems"]
        out["items"] = _gemini({"anyOf": prefix} if len(prefix) > 1 else prefix[0], defs, seen)
        out.setdefault("type", "array")

    if "anyOf" in node and isinstance(node["anyOf"], list):
        options = []
        for option in node["anyOf"]:
            if isinstance(option, Mapping) and option.get("type") == "null" and len(option) == 1:
                nullable = True
                continue
            options.append(_gemini(option, defs, seen))
        if len(options) == 1:  # `X | None`: X itself, nullable
            for key, value in options[0].items():
                if key == "description" and out.get("description"):
                    continue
                out.setdefault(key, value)
        elif options:
            out["anyOf"] = options

    if nullable and out.get("type") != "null":
        out["nullable"] = True
    return {k: v for k, v in out.items() if k in _GEMINI_FIELDS}


# -- tool calls in ------------------------------------------------------------------------------


_KIND_NAMES: dict[type, str] = {str: "a string", Mapping: "a JSON object", dict: "a JSON object", list: "a list"}


def _need(data: Any, field: str, where: str, kind: type = str, label: str | None = None) -> Any:
    """`data[field]`, or a ValueError naming `where` and the field (`label`, for a nested one)
    when it is missing or of the wrong type. ValueError even for a wrong type: to the caller
    it is malformed provider JSON, one kind of error for one kind of mistake."""
    label = label or field
    if not isinstance(data, Mapping):
        raise ValueError(f"{where}: expected a JSON object, got {type(data).__name__}")  # noqa: TRY004
    if field not in data or data[field] is None:
        raise ValueError(f"{where}: missing field {label!r}")
    value = data[field]
    if not isinstance(value, kind):
        expected = _KIND_NAMES.get(kind, kind.__name__)
        raise ValueError(f"{where}: field {label!r} must be {expected}, got {type(value).__name__}")  # noqa: TRY004
    return value


def _arguments(value: Any, field: str, where: str, json_text: bool = False) -> dict[str, Any]:
    """Arguments as a dict: an object, or (with `json_text`, OpenAI's way) JSON text of one."""
    if value is None:
        return {}
    if isinstance(value, str) and json_text:
        if not value.strip():
            return {}  # some OpenAI-compatible servers send "" for a call without arguments
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{where}: field {field!r} is not valid JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(value, dict):
        raise ValueError(f"{where}: field {field!r} must be a JSON object, got {type(value).__name__}")  # noqa: TRY004
    return value


def _call(name: str, arguments: dict[str, Any], call_id: Any, format: str) -> ToolCall:
    metadata = {"provider": format, "provider_call_id": call_id}
    return ToolCall(name=name, arguments=arguments, id=str(call_id) if call_id not in (None, "") else new_call_id(),
                    metadata=metadata)


def parse_tool_call(block: Mapping[str, Any], format: str) -> ToolCall:
    """One tool call from a provider's response, as a `ToolCall` (id kept when given):

    - "openai": an entry of `message.tool_calls`: `{"id", "type": "function",
      "function": {"name", "arguments": "<JSON text>"}}`
    - "anthropic": a `{"type": "tool_use", "id", "name", "input"}` content block
    - "gemini": a part `{"functionCall": {"name", "args", "id"?}}` (or the functionCall itself)
    - "mcp": `tools/call` params `{"name", "arguments"}`, or the whole JSON-RPC request

    The provider's own id is kept in `metadata["provider_call_id"]`. Raises ValueError naming
    the missing or malformed field.
    """
    _check_format(format)
    if format == "openai":
        where = "OpenAI tool call"
        if isinstance(block, Mapping) and block.get("type", "function") != "function":
            raise ValueError(f"{where}: field 'type' is {block.get('type')!r}; only 'function' calls are supported")
        call_id = _need(block, "id", where)
        where = f"OpenAI tool call {call_id!r}"
        function = _need(block, "function", where, Mapping)
        name = _need(function, "name", where, label="function.name")
        arguments = _arguments(function.get("arguments"), "function.arguments", where, json_text=True)
        return _call(name, arguments, call_id, format)
    if format == "anthropic":
        where = "Anthropic tool_use block"
        if isinstance(block, Mapping) and block.get("type", "tool_use") != "tool_use":
            raise ValueError(f"{where}: field 'type' is {block.get('type')!r}, not 'tool_use'")
        call_id = _need(block, "id", where)
        name = _need(block, "name", f"{where} {call_id!r}")
        return _call(name, _arguments(block.get("input"), "input", f"{where} {call_id!r}"), call_id, format)
    if format == "gemini":
        where = "Gemini functionCall"
        if isinstance(block, Mapping) and "functionCall" in block:
            block = _need(block, "functionCall", "Gemini part", Mapping)
        name = _need(block, "name", where)
        call_id = block.get("id")
        return _call(name, _arguments(block.get("args"), "args", f"{where} {name!r}"), call_id, format)
    where = "MCP tools/call"
    request_id = None
    if isinstance(block, Mapping) and "method" in block:
        if block["method"] != "tools/call":
            raise ValueError(f"{where}: field 'method' is {block['method']!r}, not 'tools/call'")
        request_id = block.get("id")
        block = _need(block, "params", "MCP request", Mapping)
    name = _need(block, "name", f"{where} params")
    return _call(name, _arguments(block.get("arguments"), "arguments", f"{where} {name!r}"), request_id, format)


def parse_tool_calls(message: Any, format: str) -> list[ToolCall]:
    """Every tool call in a model's reply, in order:

    - "openai": an assistant message (`message["tool_calls"]`, absent or null → none) or the list
    - "anthropic": a message (`message["content"]`) or its list of content blocks; only
      `tool_use` blocks count
    - "gemini": a `Content` (`{"role": "model", "parts": [...]}`), a candidate
      (`{"content": {...}}`) or a list of parts; only `functionCall` parts count
    - "mcp": one `tools/call` (params or request), as a one-element list
    """
    _check_format(format)
    if format == "openai":
        entries = message.get("tool_calls") if isinstance(message, Mapping) else message
        return [parse_tool_call(e, format) for e in _list(entries, "OpenAI message: field 'tool_calls'")]
    if format == "anthropic":
        blocks = message.get("content") if isinstance(message, Mapping) else message
        if isinstance(blocks, str):
            return []  # a plain-text reply
        return [parse_tool_call(b, format) for b in _list(blocks, "Anthropic message: field 'content'")
                if isinstance(b, Mapping) and b.get("type") == "tool_use"]
    if format == "gemini":
        parts = message
        if isinstance(parts, Mapping) and "content" in parts:
            parts = parts["content"]
        if isinstance(parts, Mapping):
            parts = parts.get("parts")
        return [parse_tool_call(p, format) for p in _list(parts, "Gemini content: field 'parts'")
                if isinstance(p, Mapping) and "functionCall" in p]
    return [parse_tool_call(message, format)]


def _list(value: Any, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ValueError(f"{where} must be a list, got {type(value).__name__}")  # noqa: TRY004
    return value


# -- tool results out -----------------------------------------------------------------------


def format_tool_result(result: ToolResult, format: str, *, call: ToolCall | None = None) -> dict[str, Any]:
    """A result as the provider's tool-result message (errors included: the model reads them):

    - "openai": `{"role": "tool", "tool_call_id", "content"}`
    - "anthropic": `{"type": "tool_result", "tool_use_id", "content", "is_error"}` (goes in the
      content of the next user message)
    - "gemini": a part `{"functionResponse": {"id"?, "name", "response"}}`, the response being
      `{"output": ...}` or `{"error": ...}` as Gemini's docs suggest
    - "mcp": a `CallToolResult` `{"content": [text], "structuredContent"?, "isError"}`

    `call` is the call the result answers, when you have it: a Gemini call that came without
    an id is answered without one.
    """
    _check_format(format)
    if not isinstance(result, ToolResult):
        raise TypeError(f"format_tool_result() takes a ToolResult, not {type(result).__name__}")
    if format == "openai":
        return {"role": "tool", "tool_call_id": result.id, "content": result.output}
    if format == "anthropic":
        return {"type": "tool_result", "tool_use_id": result.id, "content": result.output,
                "is_error": result.is_error}
    if format == "gemini":
        if result.is_error:
            response: dict[str, Any] = {"error": result.error}
        else:
            value = result.output_structured if result.output_structured is not None else result.output
            response = {"output": value}
        body: dict[str, Any] = {}
        call_id: Any = result.id
        if call is not None and "provider_call_id" in call.metadata:
            call_id = call.metadata["provider_call_id"]
        if call_id:
            body["id"] = call_id
        body["name"] = result.name
        body["response"] = response
        return {"functionResponse": body}
    out: dict[str, Any] = {"content": [{"type": "text", "text": result.output}]}
    if isinstance(result.output_structured, dict):  # MCP's structuredContent is an object
        out["structuredContent"] = result.output_structured
    out["isError"] = result.is_error
    return out


__all__ = [
    "FORMATS",
    "Format",
    "format_tool_result",
    "gemini_schema",
    "parse_tool_call",
    "parse_tool_calls",
    "to_provider_schemas",
]
