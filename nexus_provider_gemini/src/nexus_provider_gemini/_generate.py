"""A `ModelRequest` as a Gemini generateContent request with the google-genai SDK, and its reply
(streamed or not) as a `ModelResponse`. Tool declarations, tool calls and tool results go through
`nexus_core.adapters`, the same conversion a hand-written loop would use (Gemini's schema
dialect, thought signatures sent back with the calls they came with, function responses matched
to their calls)."""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from functools import cache
from typing import TYPE_CHECKING, Any

from google import genai
from google.genai import errors, types
from nexus_core.adapters import format_tool_call, format_tool_result, parse_tool_calls, to_provider_schemas
from nexus_core.llm import ModelError, ModelResponse, Usage, http_library, make_stoppable

from nexus_core import ToolCall

if TYPE_CHECKING:
    from nexus_core.llm import Message, ModelCall, ModelRequest

    from ._settings import Settings

FORMAT = "gemini"


@cache
def _http_errors(name: str) -> tuple[type[Exception], ...]:
    """The HTTP library's exception class `name`, from httpx and from httpx2 (the fork the SDK
    uses where it is installed): whichever the SDK's client raises."""
    found = []
    for library in ("httpx", "httpx2"):
        try:
            found.append(getattr(importlib.import_module(library), name))
        except (ImportError, AttributeError):
            continue
    return tuple(found)


def _failures() -> tuple[type[Exception], ...]:
    """What a request can raise that is the API's or the network's doing."""
    return (errors.APIError, *_http_errors("HTTPError"))


def http_client() -> Any:
    """The HTTP client the SDK is given: httpx2's (httpx's where it is not installed, as the SDK
    picks), made stoppable: a cancelled `ModelCall` ends its request at once, before the first
    byte as in the stream (`nexus_core.llm.make_stoppable`). The SDK does not close a client it
    was given: its owner does."""
    return make_stoppable(importlib.import_module(http_library()).Client())


def make_client(settings: Settings, key: str | None, client: Any = None) -> genai.Client:
    """The SDK client for the settings, with `key`, sending through the HTTP `client` (default:
    `http_client()`)."""
    options: dict[str, Any] = {
        "timeout": int(float(settings.timeout_seconds) * 1000),  # milliseconds, to the SDK
        "retry_options": types.HttpRetryOptions(attempts=settings.max_retries + 1),
        "httpx_client": client if client is not None else http_client(),
    }
    if settings.base_url:
        options["base_url"] = settings.base_url
    if settings.api_version:
        options["api_version"] = settings.api_version
    # vertexai=False: the Gemini API with this key, whatever GOOGLE_GENAI_USE_VERTEXAI says
    return genai.Client(api_key=key, vertexai=False, http_options=types.HttpOptions(**options))


def contents(request: ModelRequest) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    calls: dict[str, ToolCall] = {}
    for message in request.messages:
        if message.role == "assistant":
            calls.update((c.id, c) for c in message.tool_calls)
        entry = _content(message, calls)
        if entry["parts"]:
            out.append(entry)
    return out


def _content(message: Message, calls: dict[str, ToolCall]) -> dict[str, Any]:
    if message.role == "user":
        return {"role": "user", "parts": [{"text": message.text}] if message.text else []}
    if message.role == "assistant":
        parts: list[dict[str, Any]] = [{"text": message.text}] if message.text else []
        # each call as the model sent it, its thought signature included (Gemini checks it)
        parts.extend(format_tool_call(c, FORMAT) for c in message.tool_calls)
        return {"role": "model", "parts": parts}
    # function responses go back in a user turn, each matched to its call (a call the model sent
    # without an id gets a response without one)
    return {"role": "user", "parts": [format_tool_result(r, FORMAT, call=calls.get(r.id))
                                      for r in message.tool_results]}


def _config(request: ModelRequest) -> dict[str, Any]:
    config: dict[str, Any] = {
        # the loop runs the tools, through the gates: the SDK must never call anything itself
        "automatic_function_calling": {"disable": True},
    }
    if request.system:
        config["system_instruction"] = request.system
    if request.tools:
        config["tools"] = to_provider_schemas(request.tools, FORMAT)
    if request.max_output_tokens is not None:
        config["max_output_tokens"] = request.max_output_tokens
    return config


def _usage(metadata: Any) -> Usage:
    if metadata is None:
        return Usage()
    # thinking is billed as output: count it there
    output = (metadata.candidates_token_count or 0) + (metadata.thoughts_token_count or 0)
    return Usage(metadata.prompt_token_count or 0, output)


def _stop_reason(value: Any) -> str | None:
    if value is None:
        return None
    return str(getattr(value, "value", value))


class _Reply:
    """What the reply said so far: whole, or gathered chunk by chunk from a stream."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.parts: list[Any] = []
        self.usage = Usage()
        self.stop_reason: str | None = None
        self.model = ""
        self.id: str | None = None
        self.candidates = False
        self.blocked: str | None = None

    def add(self, chunk: types.GenerateContentResponse, call: ModelCall | None = None) -> None:
        if chunk.usage_metadata is not None:
            self.usage = _usage(chunk.usage_metadata)
        self.model = chunk.model_version or self.model
        self.id = chunk.response_id or self.id
        feedback = chunk.prompt_feedback
        if feedback is not None and feedback.block_reason is not None:
            self.blocked = _stop_reason(feedback.block_reason)
        if not chunk.candidates:
            return
        self.candidates = True
        candidate = chunk.candidates[0]
        if candidate.finish_reason is not None:
            self.stop_reason = _stop_reason(candidate.finish_reason)
        for part in (candidate.content.parts if candidate.content is not None else None) or []:
            if part.function_call is not None:
                self.parts.append(part)
            elif part.text and not part.thought:  # a thought summary is not the answer
                self.text.append(part.text)
                if call is not None:
                    call.text(part.text)

    def response(self) -> ModelResponse:
        if not self.candidates:
            why = f" (the prompt was blocked: {self.blocked})" if self.blocked else ""
            raise ModelError(f"the Gemini reply holds no candidates{why}")
        calls = tuple(parse_tool_calls(self.parts, FORMAT)) if self.parts else ()
        return ModelResponse(text="".join(self.text), tool_calls=calls, usage=self.usage,
                             stop_reason=self.stop_reason, model=self.model, id=self.id)


def response_of(chunks: Iterable[types.GenerateContentResponse], call: ModelCall | None = None) -> ModelResponse:
    reply = _Reply()
    for chunk in chunks:
        if call is not None:
            call.check()
        reply.add(chunk, call)
    if call is not None:
        call.check()
    return reply.response()


def failure(exc: Exception, settings: Settings, secret: str | None) -> ModelError:
    """An SDK or transport exception as a ModelError whose message says what a person can do."""
    where = settings.base_url or "the Gemini API"
    if isinstance(exc, errors.APIError):
        text = f"Gemini request failed: HTTP {exc.code}: {exc.message or exc.status or 'no message'}"
        if exc.code in (401, 403) or "API key" in (exc.message or ""):
            text += f" (check the key in ${settings.api_key_env})"
    elif isinstance(exc, _http_errors("TimeoutException")):
        text = f"Gemini request timed out (timeout_seconds: {settings.timeout_seconds:g}) at {where}"
    elif isinstance(exc, _http_errors("TransportError")):
        text = f"cannot reach {where}: {type(exc).__name__}: {exc}"
    else:
        text = f"Gemini request failed: {type(exc).__name__}: {exc}"
    if secret:
        text = text.replace(secret, "[API key]")
    return ModelError(text)


def complete(client: genai.Client, settings: Settings, request: ModelRequest, call: ModelCall,
             secret: str | None = None) -> ModelResponse:
    params: dict[str, Any] = {"model": request.model, "contents": contents(request),
                              "config": _config(request)}
    if not params["contents"]:
        raise ModelError("the request has no message with content: Gemini needs at least one")
    try:
        if not call.stream:
            return response_of([client.models.generate_content(**params)])
        return response_of(client.models.generate_content_stream(**params), call)
    except ModelError:
        raise
    except _failures() as exc:
        if call.cancelled:
            raise ModelError("the model request was cancelled", "cancelled") from None
        raise failure(exc, settings, secret) from None
