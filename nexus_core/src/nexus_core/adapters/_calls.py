"""Tool calls in: what a model asked for, found in whatever the caller has of its reply (a whole
response, a part of one, the SDK's object or its JSON, camelCase or snake_case), as `ToolCall`s
for `nx.invoke`; and back out (`format_tool_call`), for a loop that rebuilds its history from
`ToolCall`s."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Mapping
from typing import Any

from .._models import ToolCall, ToolDef, new_call_id
from ._common import PROVIDER, arguments, check_format, describe, get, need, plain, unrecognised
from ._strict import drop_optional_nulls

#: what `parse_tool_calls` finds calls in, per format (the error message says it too)
ACCEPTS = {
    "openai": "a chat completion (`client.chat.completions.create(...)`), one of its choices, its message, "
              "that message's `tool_calls` list, or one tool call",
    "openai-responses": "a Responses API response (`client.responses.create(...)`), its `output` list, "
                        "a `response.completed` or `response.output_item.done` stream event, "
                        "or one `function_call` item",
    "anthropic": "a Messages API message (`client.messages.create(...)`), its `content` list, "
                 "or one `tool_use` block",
    "gemini": "a generateContent response, one of its candidates, a Content (`{role, parts}`), "
              "a list of parts or of FunctionCalls (`response.function_calls`), or one part or FunctionCall",
    "mcp": "a `tools/call` request, its params, or a list of them",
}


def _call(name: str, args: dict[str, Any], call_id: Any, format: str,
          provider_data: Mapping[str, Any] | None = None) -> ToolCall:
    metadata: dict[str, Any] = {"provider": format, "provider_call_id": call_id}
    if provider_data:
        metadata["provider_data"] = dict(provider_data)
    return ToolCall(name=name, arguments=args, id=str(call_id) if call_id not in (None, "") else new_call_id(),
                    metadata=metadata)


def _list(value: Any, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ValueError(f"{where} must be a list, got {type(value).__name__}")  # noqa: TRY004
    return value


def _streamed(format: str, what: str, instead: str) -> ValueError:
    return ValueError(f"{PROVIDER[format]}: {what} is one piece of a stream and holds no whole tool call; "
                      f"{instead}")


# -- one call per format ------------------------------------------------------------------------


def _openai_call(block: Any) -> ToolCall:
    where = "OpenAI tool call"
    if isinstance(block, Mapping) and block.get("type", "function") != "function":
        raise ValueError(f"{where}: field 'type' is {block.get('type')!r}; only 'function' calls are supported")
    call_id = need(block, "id", where)
    where = f"OpenAI tool call {call_id!r}"
    function = need(block, "function", where, Mapping)
    name = need(function, "name", where, label="function.name")
    args = arguments(function.get("arguments"), "function.arguments", where, json_text=True)
    return _call(name, args, call_id, "openai")


#: the fields of a Responses `function_call` item that a follow-up request may need back
_RESPONSES_DATA = ("id", "caller", "namespace")


def _responses_call(item: Any) -> ToolCall:
    where = "OpenAI Responses function_call"
    if isinstance(item, Mapping) and item.get("type", "function_call") != "function_call":
        raise ValueError(f"{where}: field 'type' is {item.get('type')!r}, not 'function_call'")
    call_id = need(item, "call_id", where)
    where = f"{where} {call_id!r}"
    name = need(item, "name", where)
    args = arguments(item.get("arguments"), "arguments", where, json_text=True)
    data = {k: item[k] for k in _RESPONSES_DATA if item.get(k) is not None}
    return _call(name, args, call_id, "openai-responses", data)


def _anthropic_call(block: Any) -> ToolCall:
    where = "Anthropic tool_use block"
    if isinstance(block, Mapping) and block.get("type", "tool_use") != "tool_use":
        raise ValueError(f"{where}: field 'type' is {block.get('type')!r}, not 'tool_use'")
    call_id = need(block, "id", where)
    name = need(block, "name", f"{where} {call_id!r}")
    args = arguments(block.get("input"), "input", f"{where} {call_id!r}")
    data = {k: block[k] for k in ("caller", "toolset_name") if block.get(k) is not None}
    return _call(name, args, call_id, "anthropic", data)


def _gemini_call(part: Any) -> ToolCall:
    where = "Gemini functionCall"
    signature = None
    if isinstance(part, Mapping):
        key = next((k for k in ("functionCall", "function_call") if part.get(k) is not None), None)
        if key is not None:
            signature = get(part, "thoughtSignature", "thought_signature")
            part = need(part, key, "Gemini part", Mapping)
    name = need(part, "name", where)
    args = arguments(part.get("args"), "args", f"{where} {name!r}")
    # Gemini signs its reasoning: a follow-up must send the part back with its signature. It is
    # base64 on the wire; pydantic (the SDK's objects) writes bytes in the URL-safe alphabet:
    # kept in the standard one, as the API documents it (the SDK reads both back)
    if isinstance(signature, (bytes, bytearray)):  # a python-mode model_dump() keeps the bytes
        signature = base64.b64encode(signature).decode("ascii")
    data = {"thoughtSignature": signature.replace("-", "+").replace("_", "/")} \
        if isinstance(signature, str) and signature else None
    return _call(name, args, part.get("id"), "gemini", data)


def _mcp_call(block: Any) -> ToolCall:
    where = "MCP tools/call"
    request_id = None
    if isinstance(block, Mapping) and "method" in block:
        if block["method"] != "tools/call":
            raise ValueError(f"{where}: field 'method' is {block['method']!r}, not 'tools/call'")
        request_id = block.get("id")
        block = need(block, "params", "MCP request", Mapping)
    name = need(block, "name", f"{where} params")
    return _call(name, arguments(block.get("arguments"), "arguments", f"{where} {name!r}"), request_id, "mcp")


_ONE: dict[str, Callable[[Any], ToolCall]] = {
    "openai": _openai_call, "openai-responses": _responses_call, "anthropic": _anthropic_call,
    "gemini": _gemini_call, "mcp": _mcp_call,
}


# -- finding the calls in a reply ---------------------------------------------------------------


def _foreign(data: Mapping[str, Any]) -> str | None:
    """The format `data` is clearly in, when its shape says so."""
    kind = data.get("type")
    if data.get("object") == "response" or kind == "function_call":
        return "openai-responses"
    if str(data.get("object", "")).startswith("chat.completion") or "choices" in data or "tool_calls" in data:
        return "openai"
    if "candidates" in data or "parts" in data or "functionCall" in data or (
            "function_call" in data and "role" not in data):
        return "gemini"
    if data.get("method") == "tools/call":
        return "mcp"
    if kind == "tool_use" or (kind == "message" and ("stop_reason" in data or "model" in data)):
        return "anthropic"
    if kind == "message" and "status" in data:
        return "openai-responses"
    return None


def _fail(format: str, data: Any) -> ValueError:
    error = unrecognised(format, data, ACCEPTS[format])
    other = _foreign(data) if isinstance(data, Mapping) else None
    if other is not None and other != format:
        return ValueError(f"{error} (it looks like format {other!r})")
    return error


def _check_foreign(format: str, data: Any) -> None:
    if isinstance(data, Mapping) and _foreign(data) not in (None, format):
        raise _fail(format, data)


def _only_choice(format: str, data: Mapping[str, Any], key: str, noun: str) -> Any:
    """The one choice / candidate of a response; several are alternatives the caller picks from."""
    options = _list(data.get(key), f"{PROVIDER[format]} response: field {key!r}")
    if len(options) > 1:
        raise ValueError(f"{PROVIDER[format]}: the response has {len(options)} {noun}s (alternative replies); "
                         f"pass the {noun} you continue with")
    return options[0] if options else None


def _openai_find(data: Any) -> list[Any]:
    if isinstance(data, list):
        if any(isinstance(e, Mapping) and "role" in e for e in data):
            raise _fail("openai", data)  # a list of messages, not of tool calls
        return data
    if not isinstance(data, Mapping):
        raise _fail("openai", data)
    _check_foreign("openai", data)
    choices = data.get("choices")
    if data.get("object") == "chat.completion.chunk" or (
            isinstance(choices, list) and any(isinstance(c, Mapping) and "delta" in c for c in choices)):
        raise _streamed("openai", "a chat.completion.chunk",
                        "accumulate the stream first, e.g. `client.chat.completions.stream(...)` and "
                        "`stream.get_final_completion()`")
    if "choices" in data:
        data = _only_choice("openai", data, "choices", "choice")
        if data is None:
            return []
    if isinstance(data, Mapping) and isinstance(data.get("message"), Mapping):
        data = data["message"]
    if not isinstance(data, Mapping):
        raise _fail("openai", data)
    if "function" in data and ("id" in data or data.get("type") == "function"):
        return [data]
    if ("tool_calls" in data or "role" in data) and "type" not in data:
        if data.get("function_call") and not data.get("tool_calls"):
            raise ValueError("OpenAI message: it has a 'function_call' (the deprecated functions API); "
                             "declare the tools with `tools=` to get 'tool_calls'")
        return _list(data.get("tool_calls"), "OpenAI message: field 'tool_calls'")
    raise _fail("openai", data)


def _responses_find(data: Any) -> list[Any]:
    if isinstance(data, Mapping):
        kind = data.get("type")
        if isinstance(kind, str) and kind.startswith("response."):
            if kind in ("response.completed", "response.incomplete") and isinstance(data.get("response"), Mapping):
                data = data["response"]
            elif kind == "response.output_item.done" and isinstance(data.get("item"), Mapping):
                item = data["item"]
                return [item] if item.get("type") == "function_call" else []
            else:
                raise _streamed("openai-responses", f"a {kind!r} event",
                                "use the `response.output_item.done` or `response.completed` events, or "
                                "`stream.get_final_response()`")
        _check_foreign("openai-responses", data)
        if data.get("object") == "response" or "output" in data:
            items = _list(data.get("output"), "OpenAI Responses response: field 'output'")
        elif data.get("type") == "function_call" or ("call_id" in data and "name" in data):
            items = [data]
        else:
            raise _fail("openai-responses", data)
    elif isinstance(data, list):
        items = data
    else:
        raise _fail("openai-responses", data)
    for i, item in enumerate(items):
        if not isinstance(item, Mapping) or not isinstance(item.get("type"), str):
            what = f"OpenAI Responses: output item {i} is {describe(item)}"
            raise ValueError(f"{what}, not an output item (a JSON object with a 'type')")  # noqa: TRY004
    return [item for item in items if item["type"] == "function_call"]


_ANTHROPIC_STREAM = frozenset({"message_start", "content_block_start", "content_block_delta",
                               "content_block_stop", "message_delta", "message_stop"})


def _anthropic_find(data: Any) -> list[Any]:
    if isinstance(data, Mapping):
        kind = data.get("type")
        if kind in _ANTHROPIC_STREAM:
            raise _streamed("anthropic", f"a {kind!r} event",
                            "accumulate the stream first, e.g. `client.messages.stream(...)` and "
                            "`stream.get_final_message()`")
        _check_foreign("anthropic", data)
        if kind in ("message", None) and "content" in data and "role" in data:
            content = data.get("content")
            if isinstance(content, str):
                return []  # a plain-text message
            blocks = _list(content, "Anthropic message: field 'content'")
        elif kind == "tool_use":
            blocks = [data]
        elif kind in ("text", "thinking", "redacted_thinking"):
            return []  # one content block that is no call
        else:
            raise _fail("anthropic", data)
    elif isinstance(data, list):
        blocks = data
    else:
        raise _fail("anthropic", data)
    for i, block in enumerate(blocks):
        if not isinstance(block, Mapping) or not isinstance(block.get("type"), str):
            what = f"Anthropic: content block {i} is {describe(block)}"
            raise ValueError(f"{what}, not a content block (a JSON object with a 'type')")  # noqa: TRY004
    return [block for block in blocks if block["type"] == "tool_use"]


_GEMINI_PART_KEYS = frozenset({
    "text", "functionCall", "function_call", "functionResponse", "function_response", "inlineData",
    "inline_data", "fileData", "file_data", "thought", "thoughtSignature", "thought_signature",
    "executableCode", "executable_code", "codeExecutionResult", "code_execution_result", "videoMetadata",
    "video_metadata", "partMetadata", "part_metadata", "toolCall", "tool_call", "toolResponse", "tool_response",
})
_GEMINI_CANDIDATE_KEYS = frozenset({"finishReason", "finish_reason", "safetyRatings", "safety_ratings", "index",
                                    "citationMetadata", "citation_metadata", "tokenCount", "token_count"})


def _is_part(value: Any) -> bool:
    return isinstance(value, Mapping) and bool(_GEMINI_PART_KEYS & set(value))


def _gemini_find(data: Any) -> list[Any]:
    if isinstance(data, Mapping):
        _check_foreign("gemini", data)
        if "candidates" in data or "promptFeedback" in data or "prompt_feedback" in data:
            data = _only_choice("gemini", data, "candidates", "candidate")
            if data is None:
                return []  # no candidate (the prompt was blocked): no calls
        if isinstance(data, Mapping) and ("content" in data or _GEMINI_CANDIDATE_KEYS & set(data)):
            data = data.get("content")  # a candidate
            if data is None:
                return []  # a candidate without content (stopped for safety, say)
        if isinstance(data, Mapping) and "parts" in data:
            parts = _list(data.get("parts"), "Gemini content: field 'parts'")
        elif _is_part(data):
            parts = [data]
        elif isinstance(data, Mapping) and "name" in data:
            parts = [{"functionCall": data}]  # a FunctionCall
        else:
            raise _fail("gemini", data)
    elif isinstance(data, list):
        parts = []
        for i, item in enumerate(data):
            if _is_part(item):
                parts.append(item)
            elif isinstance(item, Mapping) and "name" in item:
                parts.append({"functionCall": item})
            else:
                raise ValueError(f"Gemini: item {i} is {describe(item)}, neither a part nor a FunctionCall")
    else:
        raise _fail("gemini", data)
    return [p for p in parts if get(p, "functionCall", "function_call") is not None]


def _mcp_find(data: Any) -> list[Any]:
    if isinstance(data, list):
        return data
    if isinstance(data, Mapping):
        _check_foreign("mcp", data)
        return [data]
    raise _fail("mcp", data)


_FIND: dict[str, Callable[[Any], list[Any]]] = {
    "openai": _openai_find, "openai-responses": _responses_find, "anthropic": _anthropic_find,
    "gemini": _gemini_find, "mcp": _mcp_find,
}


# -- public -----------------------------------------------------------------------------------


def _schemas(tools: Any) -> dict[str, dict[str, Any]] | None:
    """Tool name (and each alias) -> input schema, from a Nexus (anything with `.tools()`) or
    ToolDefs."""
    if tools is None:
        return None
    listing = tools.tools() if callable(getattr(tools, "tools", None)) else tools
    out = {}
    for t in listing:
        if not isinstance(t, ToolDef):
            raise TypeError(f"tools= takes a Nexus or ToolDefs, not {type(t).__name__}")
        out.update(dict.fromkeys(t.names, t.input_schema))
    return out


def _fix(call: ToolCall, schemas: dict[str, dict[str, Any]] | None) -> ToolCall:
    if schemas is None or call.name not in schemas:
        return call
    args = drop_optional_nulls(call.arguments, schemas[call.name])
    if args == call.arguments:
        return call
    return ToolCall(name=call.name, arguments=args, id=call.id, parent_call_id=call.parent_call_id,
                    metadata=call.metadata)


def parse_tool_call(block: Any, format: str, *, tools: Any = None) -> ToolCall:
    """One tool call from a provider's reply, as a `ToolCall` (its id kept when given):

    - "openai": an entry of `message.tool_calls`: `{"id", "type": "function",
      "function": {"name", "arguments": "<JSON text>"}}`
    - "openai-responses": a `{"type": "function_call", "call_id", "name", "arguments"}` item
      (its `call_id` is the ToolCall's id)
    - "anthropic": a `{"type": "tool_use", "id", "name", "input"}` content block
    - "gemini": a part `{"functionCall": {"name", "args", "id"?}, "thoughtSignature"?}`, or the
      FunctionCall itself
    - "mcp": `tools/call` params `{"name", "arguments"}`, or the whole JSON-RPC request

    The SDKs' objects are taken as they are, and dicts in camelCase or snake_case.
    `metadata` holds "provider" (the format), "provider_call_id" (the provider's id, None
    when it gave none) and, when a follow-up request needs it, "provider_data": Gemini's
    `thoughtSignature`; a Responses item's `id`, `caller` and `namespace`; an Anthropic block's
    `caller` and `toolset_name`. `format_tool_call` and `format_tool_result` send them back.

    `tools` (a Nexus, or its ToolDefs): when given, a `null` the model sent for an optional
    argument the tool's schema does not let be null is dropped, as strict mode (`strict=True`)
    makes models send them. Raises ValueError naming the missing or malformed field.
    """
    check_format(format)
    return _fix(_ONE[format](plain(block)), _schemas(tools))


def parse_tool_calls(message: Any, format: str, *, tools: Any = None) -> list[ToolCall]:
    """Every tool call in a model's reply, in order. The reply can be what the SDK returned
    (the response object itself, or `.model_dump()` / `.to_dict()` of it), the JSON the API
    sent, or a part of it:

    - "openai": a chat completion, a choice, a message, its `tool_calls`, or one tool call
    - "openai-responses": a response, its `output` items (only `function_call` items count), a
      `response.completed` / `response.output_item.done` stream event, or one item
    - "anthropic": a message, its `content` blocks (only `tool_use` blocks count), or one block
    - "gemini": a response, a candidate, a `Content`, a list of parts (only `functionCall`
      parts count) or of FunctionCalls (`response.function_calls`, which has no thought
      signatures: pass the response to keep them), or one part
    - "mcp": one `tools/call` (params or request) or a list of them

    A reply without calls gives `[]`; anything else raises ValueError naming what it got and
    what it takes (a response with several choices or candidates too: pass the one you
    continue with; a streamed chunk too: accumulate the stream first). `tools`: as for
    `parse_tool_call`.
    """
    check_format(format)
    schemas = _schemas(tools)
    return [_fix(_ONE[format](block), schemas) for block in _FIND[format](plain(message))]


def _provider_data(call: ToolCall, format: str) -> dict[str, Any]:
    if call.metadata.get("provider") != format:
        return {}
    data = call.metadata.get("provider_data")
    return dict(data) if isinstance(data, Mapping) else {}


def format_tool_call(call: ToolCall, format: str) -> dict[str, Any]:
    """A `ToolCall` as the provider's own call block, for a loop that rebuilds the model's turn
    from ToolCalls: what `parse_tool_call` reads, with the provider data it kept (Gemini's
    thought signature, a Responses item id) put back.

    - "openai": `{"id", "type": "function", "function": {"name", "arguments": "<JSON>"}}`
    - "openai-responses": `{"type": "function_call", "call_id", "name", "arguments", "id"?, ...}`
    - "anthropic": `{"type": "tool_use", "id", "name", "input", "caller"?}`
    - "gemini": `{"functionCall": {"id"?, "name", "args"}, "thoughtSignature"?}`
    - "mcp": the `tools/call` params `{"name", "arguments"}`
    """
    check_format(format)
    if not isinstance(call, ToolCall):
        raise TypeError(f"format_tool_call() takes a ToolCall, not {type(call).__name__}")
    data = _provider_data(call, format)
    if format == "openai":
        return {"id": call.id, "type": "function",
                "function": {"name": call.name, "arguments": json.dumps(call.arguments, ensure_ascii=False)}}
    if format == "openai-responses":
        out: dict[str, Any] = {"type": "function_call", "call_id": call.id, "name": call.name,
                               "arguments": json.dumps(call.arguments, ensure_ascii=False)}
        out.update({k: data[k] for k in _RESPONSES_DATA if k in data})
        return out
    if format == "anthropic":
        out = {"type": "tool_use", "id": call.id, "name": call.name, "input": call.arguments}
        out.update({k: data[k] for k in ("caller", "toolset_name") if k in data})
        return out
    if format == "gemini":
        function: dict[str, Any] = {}
        if not (call.metadata.get("provider") == "gemini" and call.metadata.get("provider_call_id") is None):
            function["id"] = call.id
        function.update(name=call.name, args=call.arguments)
        part: dict[str, Any] = {"functionCall": function}
        if data.get("thoughtSignature"):
            part["thoughtSignature"] = data["thoughtSignature"]
        return part
    return {"name": call.name, "arguments": call.arguments}
