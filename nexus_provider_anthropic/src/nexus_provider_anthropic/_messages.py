"""A `ModelRequest` as an Anthropic Messages request with the SDK, and its reply (streamed or not)
as a `ModelResponse`. Tool declarations, tool calls and tool results go through
`nexus_core.adapters`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import anthropic
from nexus_core.adapters import format_tool_call, format_tool_result, parse_tool_call, to_provider_schemas
from nexus_core.llm import ModelError, ModelResponse, Usage

from nexus_core import ToolCall

if TYPE_CHECKING:
    from nexus_core.llm import Message, ModelCall, ModelRequest

FORMAT = "anthropic"
#: Anthropic requires an output limit; used when the request sets none
DEFAULT_MAX_TOKENS = 4096


def make_client(config: dict[str, Any], key: str | None) -> anthropic.Anthropic:
    """The SDK client for the config, with `key`."""
    kwargs: dict[str, Any] = {
        "api_key": key,
        "max_retries": int(config.get("max_retries", 2)),
        "timeout": float(config.get("timeout_seconds", 600)),
    }
    if config.get("base_url"):
        kwargs["base_url"] = config["base_url"]
    return anthropic.Anthropic(**kwargs)


def messages(request: ModelRequest) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for message in request.messages:
        entry = _message(message)
        if entry is not None:
            out.append(entry)
    return out


def _message(message: Message) -> dict[str, Any] | None:
    if message.role == "user":
        return {"role": "user", "content": message.text}
    if message.role == "assistant":
        blocks: list[dict[str, Any]] = []
        if message.text:  # the API refuses an empty text block
            blocks.append({"type": "text", "text": message.text})
        blocks.extend(format_tool_call(c, FORMAT) for c in message.tool_calls)
        return {"role": "assistant", "content": blocks} if blocks else None
    return {"role": "user", "content": [format_tool_result(r, FORMAT) for r in message.tool_results]}


def parse_calls(content: list[Any]) -> tuple[ToolCall, ...]:
    calls = []
    for block in content:
        if getattr(block, "type", None) != "tool_use":
            continue
        try:
            calls.append(parse_tool_call(block, FORMAT))  # the SDK's object, read by the adapters
        except ValueError as exc:
            data = block.model_dump()
            call_id = str(data.get("id") or "")
            calls.append(ToolCall(name=str(data.get("name") or "unknown"), arguments={},
                                  id=call_id or ToolCall(name="").id,
                                  metadata={"provider": FORMAT, "provider_call_id": call_id,
                                            "invalid_arguments": str(exc)}))
    return tuple(calls)


def response_of(message: Any) -> ModelResponse:
    text = "".join(block.text for block in message.content if getattr(block, "type", None) == "text")
    usage = Usage()
    if message.usage is not None:
        u = message.usage
        cached = (getattr(u, "cache_creation_input_tokens", 0) or 0) + (getattr(u, "cache_read_input_tokens", 0) or 0)
        usage = Usage((u.input_tokens or 0) + cached, u.output_tokens or 0)
    return ModelResponse(text=text, tool_calls=parse_calls(message.content), usage=usage,
                         stop_reason=message.stop_reason, model=message.model or "", id=message.id)


def _body_message(body: object) -> str | None:
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return error["message"]
    return None


def failure(exc: Exception, config: dict[str, Any], secret: str | None) -> ModelError:
    """An SDK exception as a ModelError whose message says what a person can do about it."""
    where = config.get("base_url") or "the Anthropic API"
    if isinstance(exc, anthropic.APIStatusError):
        text = f"Anthropic request failed: HTTP {exc.status_code}: {_body_message(exc.body) or exc.message}"
        if exc.status_code in (401, 403):
            text += f" (check the key in ${config.get('api_key_env', 'ANTHROPIC_API_KEY')})"
    elif isinstance(exc, anthropic.APITimeoutError):
        text = f"Anthropic request timed out (timeout_seconds: {config.get('timeout_seconds', 600):g}) at {where}"
    elif isinstance(exc, anthropic.APIConnectionError):
        cause = exc.__cause__ or exc.__context__
        text = f"cannot reach {where}: {type(cause).__name__ + ': ' if cause else ''}{cause or exc.message}"
    else:
        text = f"Anthropic request failed: {type(exc).__name__}: {exc}"
    if secret:
        text = text.replace(secret, "[API key]")
    return ModelError(text)


def tool_options(request: ModelRequest, settings: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The config's `tools.<name>.allowed_callers` for the tools offered (as `nx.schemas` sends
    them), so Claude may call those from its own code execution."""
    callers = {}
    for t in request.tools:  # under the tool's name or an alias: one tool, one setting
        given = next((settings[n]["allowed_callers"] for n in t.names if settings.get(n, {}).get("allowed_callers")), None)
        if given:
            callers[t.name] = given
    return {"allowed_callers": callers} if callers else {}


#: a prompt-cache breakpoint: what comes before it is cached for the next request (5 minutes)
EPHEMERAL = {"type": "ephemeral"}


def cache_breakpoints(params: dict[str, Any]) -> None:
    """Mark what an agent's next request repeats, so Anthropic reads it from its prompt cache
    (billed at a tenth, and faster) instead of processing it again: the tools and the system
    prompt (one breakpoint after them, on the system prompt or else on the last tool) and the
    conversation so far (one on the last block of the last message). Two of the four
    breakpoints the API allows; a prefix shorter than the model's minimum is simply not cached."""
    if params.get("system"):
        params["system"] = [{"type": "text", "text": params["system"], "cache_control": EPHEMERAL}]
    elif params.get("tools"):
        params["tools"][-1] = {**params["tools"][-1], "cache_control": EPHEMERAL}
    if params["messages"]:
        last = params["messages"][-1]
        content = last["content"]
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        if content:
            last["content"] = [*content[:-1], {**content[-1], "cache_control": EPHEMERAL}]


def complete(client: anthropic.Anthropic, config: dict[str, Any], request: ModelRequest, call: ModelCall,
             secret: str | None = None, tool_settings: dict[str, dict[str, Any]] | None = None) -> ModelResponse:
    params: dict[str, Any] = {
        "model": request.model,
        "messages": messages(request),
        "max_tokens": request.max_output_tokens or DEFAULT_MAX_TOKENS,
    }
    if request.system:
        params["system"] = request.system
    if request.tools:
        params["tools"] = to_provider_schemas(request.tools, FORMAT, **tool_options(request, tool_settings or {}))
    if config.get("prompt_caching", True):
        cache_breakpoints(params)
    try:
        if not call.stream:
            return response_of(client.messages.create(**params))
        with client.messages.stream(**params) as stream:
            call.on_cancel(stream.close)
            for event in stream:
                call.check()
                if event.type == "text":
                    call.text(event.text)
            call.check()
            return response_of(stream.get_final_message())
    except ModelError:
        raise
    except anthropic.AnthropicError as exc:
        if call.cancelled:
            raise ModelError("the model request was cancelled", "cancelled") from None
        raise failure(exc, config, secret) from None
