"""A `ModelRequest` as an OpenAI Responses API request (`api: responses`), and its reply (streamed
or not) as a `ModelResponse`. Tool declarations, calls and results go through
`nexus_core.adapters` ("openai-responses").

The conversation is sent whole each turn, as with Chat Completions: nothing depends on the
server keeping state (`store` is a setting, off by default), so any turn can go to any
replica or be replayed from a transcript. A call goes back without its item id (which would
refer to an item the server may not have kept, and to reasoning this loop does not send back);
its `call_id` pairs it with its output.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import openai
from nexus_core.adapters import format_tool_call, format_tool_result, parse_tool_call, to_provider_schemas
from nexus_core.llm import ModelError, ModelResponse, Usage

from nexus_core import ToolCall

from ._chat import failure

if TYPE_CHECKING:
    from nexus_core.llm import Message, ModelCall, ModelRequest
    from openai.types.responses import Response

    from ._settings import Settings

FORMAT = "openai-responses"


def _call_item(call: ToolCall) -> dict[str, Any]:
    item = format_tool_call(call, FORMAT)
    item.pop("id", None)
    raw = call.metadata.get("raw_arguments")
    if isinstance(raw, str):  # arguments that could not be read go back as the model wrote them
        item["arguments"] = raw
    return item


def input_items(request: ModelRequest) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for message in request.messages:
        out.extend(_items(message))
    return out


def _items(message: Message) -> list[dict[str, Any]]:
    if message.role == "user":
        return [{"role": "user", "content": message.text}]
    if message.role == "assistant":
        items: list[dict[str, Any]] = [{"role": "assistant", "content": message.text}] if message.text else []
        return items + [_call_item(c) for c in message.tool_calls]
    return [format_tool_result(result, FORMAT) for result in message.tool_results]


def parse_calls(output: list[Any]) -> tuple[ToolCall, ...]:
    """The reply's function_call items as ToolCalls. One whose arguments are not a JSON object
    is kept, marked `invalid_arguments`, so the loop can answer the model with the error."""
    calls = []
    for item in output:
        if getattr(item, "type", None) != "function_call":
            continue
        try:
            calls.append(parse_tool_call(item, FORMAT))
        except ValueError as exc:
            call_id = str(getattr(item, "call_id", "") or "")
            raw = getattr(item, "arguments", None)
            calls.append(ToolCall(
                name=str(getattr(item, "name", "") or "unknown"), arguments={}, id=call_id or ToolCall(name="").id,
                metadata={"provider": FORMAT, "provider_call_id": call_id, "invalid_arguments": str(exc),
                          "raw_arguments": raw if isinstance(raw, str) else None},
            ))
    return tuple(calls)


def response_of(response: Response) -> ModelResponse:
    if response.status == "failed" and response.error is not None:
        raise ModelError(f"OpenAI response failed: {response.error.code}: {response.error.message}")
    usage = Usage()
    if response.usage is not None:
        usage = Usage(response.usage.input_tokens or 0, response.usage.output_tokens or 0)
    stop: str | None = response.status
    if response.status == "incomplete" and response.incomplete_details is not None:
        stop = response.incomplete_details.reason  # max_output_tokens, content_filter
    return ModelResponse(text=response.output_text, tool_calls=parse_calls(response.output), usage=usage,
                         stop_reason=stop, model=response.model or "", id=response.id)


def complete(client: openai.OpenAI, settings: Settings, request: ModelRequest, call: ModelCall,
             secret: str | None = None) -> ModelResponse:
    params: dict[str, Any] = {"model": request.model, "input": input_items(request), "store": settings.store}
    if request.system:
        params["instructions"] = request.system
    if request.tools:
        params["tools"] = to_provider_schemas(request.tools, FORMAT)
    if request.max_output_tokens is not None:
        params["max_output_tokens"] = request.max_output_tokens
    try:
        if not call.stream:
            return response_of(client.responses.create(**params))
        with client.responses.stream(**params) as stream:
            final: Response | None = None
            for event in stream:
                call.check()
                if event.type == "response.output_text.delta":
                    call.text(event.delta)
                elif event.type in ("response.completed", "response.incomplete", "response.failed"):
                    final = event.response
            call.check()
            if final is None:
                raise ModelError("the OpenAI response stream ended before the response did")
            return response_of(final)
    except ModelError:
        raise
    except openai.OpenAIError as exc:
        if call.cancelled:
            raise ModelError("the model request was cancelled", "cancelled") from None
        raise failure(exc, settings, secret) from None


__all__ = ["FORMAT", "complete", "input_items", "response_of"]
