"""A `ModelRequest` as a Chat Completions request with the OpenAI SDK, and its reply (streamed or
not) as a `ModelResponse`. Tool declarations, tool calls and tool results go through
`nexus_core.adapters`, the same conversion a hand-written loop would use."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import openai
from nexus_core.adapters import format_tool_call, format_tool_result, parse_tool_call, to_provider_schemas
from nexus_core.llm import ModelError, ModelResponse, Usage, make_stoppable

from nexus_core import ToolCall

if TYPE_CHECKING:
    from nexus_core.llm import Message, ModelCall, ModelRequest
    from openai.types.chat import ChatCompletion

    from ._settings import Settings

FORMAT = "openai"


def make_client(settings: Settings, key: str | None) -> openai.OpenAI:
    """The SDK client for the settings, with `key` (None: a server that takes none). Its HTTP
    client, the SDK's default one, is made stoppable: a cancelled `ModelCall` ends its request
    at once, before the first byte as in the stream (`nexus_core.llm.make_stoppable`)."""
    kwargs: dict[str, Any] = {
        "api_key": key or "unused",  # a server that takes no key still gets a header from the SDK
        "max_retries": settings.max_retries,
        "timeout": float(settings.timeout_seconds),
        "http_client": make_stoppable(openai.DefaultHttpxClient()),
    }
    if settings.base_url:
        kwargs["base_url"] = settings.base_url
    return openai.OpenAI(**kwargs)


def _call_json(call: ToolCall) -> dict[str, Any]:
    """A call the model made, as it goes back in the assistant message that made it; one whose
    arguments could not be read goes back as the model wrote it."""
    block = format_tool_call(call, FORMAT)
    raw = call.metadata.get("raw_arguments")
    if isinstance(raw, str):
        block["function"]["arguments"] = raw
    return block


def messages(request: ModelRequest) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if request.system:
        out.append({"role": "system", "content": request.system})
    for message in request.messages:
        out.extend(_message(message))
    return out


def _message(message: Message) -> list[dict[str, Any]]:
    if message.role == "user":
        return [{"role": "user", "content": message.text}]
    if message.role == "assistant":
        entry: dict[str, Any] = {"role": "assistant", "content": message.text or None}
        if message.tool_calls:
            entry["tool_calls"] = [_call_json(c) for c in message.tool_calls]
        return [entry]
    return [format_tool_result(result, FORMAT) for result in message.tool_results]


def parse_calls(tool_calls: list[Any] | None) -> tuple[ToolCall, ...]:
    """The SDK's tool calls as ToolCalls. A call whose arguments are not a JSON object (a reply
    cut short, a model's slip) is kept, marked `invalid_arguments`, so the loop can answer the
    model with the error instead of losing the call."""
    calls = []
    for entry in tool_calls or []:
        try:
            calls.append(parse_tool_call(entry, FORMAT))  # the SDK's object, read by the adapters
        except ValueError as exc:
            data = entry.model_dump() if hasattr(entry, "model_dump") else dict(entry)
            function = data.get("function") or {}
            call_id = str(data.get("id") or "")
            calls.append(ToolCall(
                name=str(function.get("name") or "unknown"), arguments={}, id=call_id or ToolCall(name="").id,
                metadata={"provider": FORMAT, "provider_call_id": call_id, "invalid_arguments": str(exc),
                          "raw_arguments": function.get("arguments") if isinstance(function.get("arguments"), str) else None},
            ))
    return tuple(calls)


def response_of(completion: ChatCompletion | Any) -> ModelResponse:
    if not completion.choices:
        raise ModelError("the OpenAI reply holds no choices")
    choice = completion.choices[0]
    message = choice.message
    text = message.content or getattr(message, "refusal", None) or ""
    usage = Usage()
    if completion.usage is not None:
        usage = Usage(completion.usage.prompt_tokens or 0, completion.usage.completion_tokens or 0)
    return ModelResponse(text=text, tool_calls=parse_calls(message.tool_calls), usage=usage,
                         stop_reason=choice.finish_reason, model=completion.model or "", id=completion.id)


def _body_message(body: object) -> str | None:
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return error["message"]
        if isinstance(error, str):
            return error
    return None


def failure(exc: Exception, settings: Settings, secret: str | None) -> ModelError:
    """An SDK exception as a ModelError whose message says what a person can do about it."""
    where = settings.base_url or "the OpenAI API"
    if isinstance(exc, openai.APIStatusError):
        text = f"OpenAI request failed: HTTP {exc.status_code}: {_body_message(exc.body) or exc.message}"
        if exc.status_code in (401, 403):
            text += f" (check the key in ${settings.api_key_env or '(none configured)'})"
    elif isinstance(exc, openai.APITimeoutError):
        text = f"OpenAI request timed out (timeout_seconds: {settings.timeout_seconds:g}) at {where}"
    elif isinstance(exc, openai.APIConnectionError):
        cause = exc.__cause__ or exc.__context__
        text = f"cannot reach {where}: {type(cause).__name__ + ': ' if cause else ''}{cause or exc.message}"
    else:
        text = f"OpenAI request failed: {type(exc).__name__}: {exc}"
    if secret:
        text = text.replace(secret, "[API key]")
    return ModelError(text)


def complete(client: openai.OpenAI, settings: Settings, request: ModelRequest, call: ModelCall,
             secret: str | None = None) -> ModelResponse:
    params: dict[str, Any] = {"model": request.model, "messages": messages(request)}
    if request.tools:
        params["tools"] = to_provider_schemas(request.tools, FORMAT)
    if request.max_output_tokens is not None:
        params[settings.max_tokens_parameter] = request.max_output_tokens
    try:
        if not call.stream:
            return response_of(client.chat.completions.create(**params))
        if settings.stream_usage:
            params["stream_options"] = {"include_usage": True}
        with client.chat.completions.stream(**params) as stream:
            for event in stream:
                call.check()
                if event.type == "content.delta":
                    call.text(event.delta)
            call.check()
            # the snapshot, not get_final_completion(): that one raises on a reply cut short
            # ("length"), which the loop must see as a reply like any other
            return response_of(stream.current_completion_snapshot)
    except ModelError:
        raise
    except openai.OpenAIError as exc:
        if call.cancelled:
            raise ModelError("the model request was cancelled", "cancelled") from None
        raise failure(exc, settings, secret) from None
