"""A model request's messages as the GenAI semantic conventions record them on a `chat` span,
when content is captured: `gen_ai.system_instructions`, `gen_ai.input.messages` and
`gen_ai.output.messages`, each the conventions' JSON shape (a list of `{"role", "parts"}`
messages, a part `{"type": "text", "content"}`, `{"type": "tool_call", "id", "name",
"arguments"}` or `{"type": "tool_call_response", "id", "response"}`), as a JSON string, since a
span attribute cannot hold the structure itself.

Bounded, and saying so: a text longer than `MAX_PART_CHARS` keeps its start and says how long it
was; when the messages' JSON is longer than `MAX_MESSAGES_CHARS`, the oldest messages are left
out (the latest are the ones a reader of a trace wants) and `nexus.gen_ai.input.messages_omitted`
says how many.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nexus_core import ToolCall, ToolResult
    from nexus_core.llm import Message, ModelRequest, ModelResponse

#: how much of one text (a message's, a tool call's arguments as JSON, a tool result's) is kept
MAX_PART_CHARS = 8192
#: how long the JSON of one attribute's messages may be
MAX_MESSAGES_CHARS = 64 * 1024
#: the attribute that says how many of the oldest input messages were left out
INPUT_OMITTED = "nexus.gen_ai.input.messages_omitted"

#: providers' stop reasons -> the conventions' finish_reason (others pass through as they are)
_FINISH = {"end_turn": "stop", "stop": "stop", "stop_sequence": "stop", "STOP": "stop",
           "max_tokens": "length", "length": "length", "MAX_TOKENS": "length",
           "tool_use": "tool_call", "tool_calls": "tool_call", "content_filter": "content_filter",
           "SAFETY": "content_filter", "refusal": "content_filter"}


def clip(text: str) -> str:
    """`text`, or its first MAX_PART_CHARS characters and how long it was."""
    if len(text) <= MAX_PART_CHARS:
        return text
    return f"{text[:MAX_PART_CHARS]}... (truncated: {len(text)} characters)"


def _arguments(arguments: Any) -> Any:
    """A tool call's arguments as they are, or, when their JSON is too long, that JSON clipped."""
    try:
        encoded = json.dumps(arguments, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return clip(repr(arguments))
    return arguments if len(encoded) <= MAX_PART_CHARS else clip(encoded)


def _call_part(call: ToolCall) -> dict[str, Any]:
    return {"type": "tool_call", "id": call.id, "name": call.name, "arguments": _arguments(call.arguments)}


def _result_part(result: ToolResult) -> dict[str, Any]:
    text = (result.error or result.output) if result.error is not None else result.output
    return {"type": "tool_call_response", "id": result.id, "response": clip(text)}


def _parts(text: str, calls: Iterable[ToolCall] = (), results: Iterable[ToolResult] = ()) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = [{"type": "text", "content": clip(text)}] if text else []
    parts += [_call_part(c) for c in calls]
    parts += [_result_part(r) for r in results]
    return parts


def _message(message: Message) -> dict[str, Any]:
    return {"role": message.role, "parts": _parts(message.text, message.tool_calls, message.tool_results)}


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def system_instructions(request: ModelRequest) -> str | None:
    """`gen_ai.system_instructions` of a request, or None when it has no system prompt."""
    return _dumps([{"type": "text", "content": clip(request.system)}]) if request.system else None


def input_messages(request: ModelRequest) -> tuple[str, int]:
    """`gen_ai.input.messages` of a request, and how many of its oldest messages were left out
    to keep it within MAX_MESSAGES_CHARS (the latest is always kept)."""
    messages = [_message(m) for m in request.messages]
    sizes = [len(_dumps(m)) + 2 for m in messages]  # each with its ", " in the list
    total, first = sum(sizes), 0
    while total > MAX_MESSAGES_CHARS and first < len(messages) - 1:
        total -= sizes[first]
        first += 1
    kept = messages[first:]
    if total > MAX_MESSAGES_CHARS:  # one message of many parts (a turn's tool results): its first parts
        kept = [_within(kept[0], MAX_MESSAGES_CHARS)]
    return _dumps(kept), first


def _within(message: dict[str, Any], budget: int) -> dict[str, Any]:
    """`message` with as many of its parts as fit in `budget` characters, then a text part
    saying how many were left out."""
    parts: list[dict[str, Any]] = []
    used = len(_dumps({**message, "parts": []})) + 100  # room for the closing note
    for part in message["parts"]:
        used += len(_dumps(part)) + 2
        if used > budget:
            break
        parts.append(part)
    left = len(message["parts"]) - len(parts)
    return {**message, "parts": [*parts, {"type": "text", "content": f"... (truncated: {left} more parts)"}]}


def output_messages(response: ModelResponse) -> str:
    """`gen_ai.output.messages` of a response: one assistant message with its finish reason."""
    reason = "tool_call" if response.tool_calls else _FINISH.get(response.stop_reason or "", response.stop_reason)
    return _dumps([{"role": "assistant", "parts": _parts(response.text, response.tool_calls),
                    "finish_reason": reason or "stop"}])
