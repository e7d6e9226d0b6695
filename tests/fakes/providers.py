"""A fake LLM provider for tests: one loopback HTTP server that speaks OpenAI Chat Completions and
Responses, Anthropic Messages and Gemini generateContent (each streamed or not), answers with
responses the test scripts, and keeps every request body for the test to check.

The real SDKs (openai, anthropic, google-genai) talk to it as to the real service:

    with FakeProviders() as fake:          # or the `fake_providers` fixture (tests/conftest.py)
        fake.script("openai.chat", chat_completion(calls=[("get_weather", {"city": "Paris"})]),
                                   chat_completion(text="Sunny."))
        client = openai.OpenAI(base_url=fake.openai_base_url, api_key="test", max_retries=0)
        completion = client.chat.completions.create(model="gpt-4o", messages=[...], tools=[...])
        fake.last("openai.chat").body["tools"]   # what the SDK sent

Endpoints (`ENDPOINTS`), each with its own queue of scripted replies, taken in order:

| endpoint             | path                                                    | streamed when           |
|----------------------|---------------------------------------------------------|-------------------------|
| "openai.chat"        | POST /v1/chat/completions                               | `"stream": true`        |
| "openai.responses"   | POST /v1/responses                                      | `"stream": true`        |
| "anthropic.messages" | POST /v1/messages                                       | `"stream": true`        |
| "gemini.generate"    | POST /{version}/models/{model}:generateContent          | `:streamGenerateContent`|

A scripted reply is the API's non-streamed JSON body (the builders below make realistic ones:
`chat_completion`, `responses_response`, `anthropic_message`, `gemini_response`); when the
request asks for a stream, the server sends the same reply as that API's stream of events
(server-sent events), so one script serves both. `Raw(status, body)` sends a reply as it is (an
error, a rate limit). A request with nothing left in its queue gets a 400 whose message says
so (never a retried 5xx), and is recorded all the same.

Every request is kept as a `Captured` (endpoint, path, query, headers, parsed JSON body,
whether it streamed), in `fake.requests` or per endpoint with `fake.requests_for(...)`.
"""

from __future__ import annotations

import copy
import itertools
import json
import threading
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self
from urllib.parse import parse_qs, urlsplit

ENDPOINTS = ("openai.chat", "openai.responses", "anthropic.messages", "gemini.generate")


@dataclass(frozen=True)
class Raw:
    """A reply sent as it is: `status`, a JSON `body` (or bytes), extra `headers`."""

    status: int = 200
    body: Any = None
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Captured:
    """One request the fake received."""

    endpoint: str
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: Any
    stream: bool


class FakeProviders:
    """The server: `start()` / `close()` (or a `with` block), `script(...)`, then read
    `requests`. Thread-safe; each request is served on its own thread."""

    def __init__(self) -> None:
        self._queues: dict[str, deque[Any]] = {name: deque() for name in ENDPOINTS}
        self._requests: list[Captured] = []
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> Self:
        handler = type("Handler", (_Handler,), {"fake": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="fake-providers", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def url(self) -> str:
        """`http://127.0.0.1:PORT`: Anthropic's and Gemini's base URL."""
        if self._server is None:
            raise RuntimeError("the fake provider server is not started")
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def openai_base_url(self) -> str:
        return self.url + "/v1"

    anthropic_base_url = url
    gemini_base_url = url

    # -- scripting and reading --------------------------------------------------------------

    def script(self, endpoint: str, *replies: Any) -> None:
        """Queue `replies` (JSON bodies or `Raw`) for `endpoint`, answered in order."""
        if endpoint not in self._queues:
            raise ValueError(f"unknown endpoint {endpoint!r}: expected one of {', '.join(ENDPOINTS)}")
        with self._lock:
            self._queues[endpoint].extend(copy.deepcopy(r) for r in replies)

    def pending(self, endpoint: str | None = None) -> int:
        """How many scripted replies are still unused (for one endpoint, or all)."""
        with self._lock:
            queues = [self._queues[endpoint]] if endpoint else list(self._queues.values())
            return sum(len(q) for q in queues)

    @property
    def requests(self) -> list[Captured]:
        with self._lock:
            return list(self._requests)

    def requests_for(self, endpoint: str) -> list[Captured]:
        return [r for r in self.requests if r.endpoint == endpoint]

    def last(self, endpoint: str) -> Captured:
        found = self.requests_for(endpoint)
        if not found:
            raise AssertionError(f"the fake provider got no {endpoint} request")
        return found[-1]

    def _take(self, captured: Captured) -> Any:
        with self._lock:
            self._requests.append(captured)
            queue = self._queues.get(captured.endpoint)
            return queue.popleft() if queue else None


class _Handler(BaseHTTPRequestHandler):
    fake: FakeProviders
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet: tests read captures instead
        pass

    def _route(self, path: str) -> tuple[str | None, bool]:
        if path == "/v1/chat/completions":
            return "openai.chat", False
        if path == "/v1/responses":
            return "openai.responses", False
        if path == "/v1/messages":
            return "anthropic.messages", False
        if "/models/" in path and path.endswith(":generateContent"):
            return "gemini.generate", False
        if "/models/" in path and path.endswith(":streamGenerateContent"):
            return "gemini.generate", True
        return None, False

    def do_POST(self) -> None:
        url = urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")
        endpoint, gemini_stream = self._route(url.path)
        if endpoint is None:
            self._send_json(404, {"error": {"message": f"fake provider: no endpoint at POST {url.path}"}})
            return
        stream = gemini_stream or (isinstance(body, dict) and body.get("stream") is True)
        captured = Captured(endpoint=endpoint, method="POST", path=url.path, query=parse_qs(url.query),
                            headers={k.lower(): v for k, v in self.headers.items()}, body=body, stream=stream)
        reply = self.fake._take(captured)
        if reply is None:
            self._send_json(400, {"error": {"type": "invalid_request_error", "code": "fake_provider_empty",
                                            "message": f"fake provider: no scripted reply left for {endpoint}"}})
            return
        if isinstance(reply, Raw):
            data = reply.body if isinstance(reply.body, bytes) else json.dumps(reply.body).encode()
            self._send(reply.status, data, {"Content-Type": "application/json", **reply.headers})
            return
        if not stream:
            self._send_json(200, reply)
            return
        events = _STREAMERS[endpoint](reply, body if isinstance(body, dict) else {})
        self._send_stream(events)

    def _send(self, status: int, data: bytes, headers: Mapping[str, str]) -> None:
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _send_json(self, status: int, body: Any) -> None:
        self._send(status, json.dumps(body).encode(), {"Content-Type": "application/json"})

    def _send_stream(self, events: Iterable[tuple[str | None, Any]]) -> None:
        # no Content-Length: the stream ends when the connection closes, as SSE allows
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        for name, data in events:
            text = data if isinstance(data, str) else json.dumps(data)
            frame = (f"event: {name}\n" if name else "") + f"data: {text}\n\n"
            self.wfile.write(frame.encode())
            self.wfile.flush()


# -- streaming: one scripted reply as each API's stream of events -----------------------------


def _halves(text: str) -> list[str]:
    """Text in two deltas (or one), so a client must join them."""
    if len(text) < 2:
        return [text] if text else []
    cut = len(text) // 2
    return [text[:cut], text[cut:]]


def _chat_stream(reply: dict[str, Any], request: dict[str, Any]) -> Iterator[tuple[str | None, Any]]:
    base = {k: reply[k] for k in ("id", "created", "model", "system_fingerprint", "service_tier") if k in reply}
    base["object"] = "chat.completion.chunk"

    def chunk(delta: dict[str, Any], finish: str | None = None, index: int = 0) -> dict[str, Any]:
        return {**base, "choices": [{"index": index, "delta": delta, "logprobs": None, "finish_reason": finish}]}

    for choice in reply.get("choices", []):
        message = choice.get("message", {})
        index = choice.get("index", 0)
        yield None, chunk({"role": "assistant", "content": "", "refusal": None}, index=index)
        for piece in _halves(message.get("content") or ""):
            yield None, chunk({"content": piece}, index=index)
        for i, call in enumerate(message.get("tool_calls") or []):
            yield None, chunk({"tool_calls": [{"index": i, "id": call["id"], "type": "function",
                                               "function": {"name": call["function"]["name"], "arguments": ""}}]},
                              index=index)
            for piece in _halves(call["function"]["arguments"]):
                yield None, chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]}, index=index)
        yield None, chunk({}, finish=choice.get("finish_reason"), index=index)
    if (request.get("stream_options") or {}).get("include_usage") and "usage" in reply:
        yield None, {**base, "choices": [], "usage": reply["usage"]}
    yield None, "[DONE]"


def _responses_stream(reply: dict[str, Any], request: dict[str, Any]) -> Iterator[tuple[str | None, Any]]:
    sequence = itertools.count()
    in_progress = {**reply, "status": "in_progress", "output": [], "usage": None}

    def event(kind: str, **fields: Any) -> tuple[str, dict[str, Any]]:
        return kind, {"type": kind, "sequence_number": next(sequence), **fields}

    yield event("response.created", response=in_progress)
    yield event("response.in_progress", response=in_progress)
    for index, item in enumerate(reply.get("output", [])):
        if item["type"] == "function_call":
            yield event("response.output_item.added", output_index=index,
                        item={**item, "arguments": "", "status": "in_progress"})
            for piece in _halves(item["arguments"]):
                yield event("response.function_call_arguments.delta", output_index=index, item_id=item["id"],
                            delta=piece)
            yield event("response.function_call_arguments.done", output_index=index, item_id=item["id"],
                        arguments=item["arguments"], name=item["name"])
        elif item["type"] == "message":
            yield event("response.output_item.added", output_index=index,
                        item={**item, "content": [], "status": "in_progress"})
            for part_index, part in enumerate(item.get("content", [])):
                empty = {**part, "text": ""} if part.get("type") == "output_text" else part
                yield event("response.content_part.added", output_index=index, item_id=item["id"],
                            content_index=part_index, part=empty)
                if part.get("type") == "output_text":
                    for piece in _halves(part["text"]):
                        yield event("response.output_text.delta", output_index=index, item_id=item["id"],
                                    content_index=part_index, delta=piece, logprobs=[])
                    yield event("response.output_text.done", output_index=index, item_id=item["id"],
                                content_index=part_index, text=part["text"], logprobs=[])
                yield event("response.content_part.done", output_index=index, item_id=item["id"],
                            content_index=part_index, part=part)
        else:
            yield event("response.output_item.added", output_index=index, item=item)
        yield event("response.output_item.done", output_index=index, item=item)
    yield event("response.completed", response=reply)


def _anthropic_stream(reply: dict[str, Any], request: dict[str, Any]) -> Iterator[tuple[str | None, Any]]:
    usage = reply.get("usage", {})
    start = {**reply, "content": [], "stop_reason": None, "stop_sequence": None,
             "usage": {**usage, "output_tokens": 1}}
    yield "message_start", {"type": "message_start", "message": start}
    for index, block in enumerate(reply.get("content", [])):
        if block["type"] == "text":
            yield "content_block_start", {"type": "content_block_start", "index": index,
                                          "content_block": {**block, "text": ""}}
            for piece in _halves(block["text"]):
                yield "content_block_delta", {"type": "content_block_delta", "index": index,
                                              "delta": {"type": "text_delta", "text": piece}}
        elif block["type"] == "tool_use":
            yield "content_block_start", {"type": "content_block_start", "index": index,
                                          "content_block": {**block, "input": {}}}
            for piece in _halves(json.dumps(block["input"])):
                yield "content_block_delta", {"type": "content_block_delta", "index": index,
                                              "delta": {"type": "input_json_delta", "partial_json": piece}}
        else:
            yield "content_block_start", {"type": "content_block_start", "index": index, "content_block": block}
        yield "content_block_stop", {"type": "content_block_stop", "index": index}
    yield "message_delta", {"type": "message_delta",
                            "delta": {"stop_reason": reply.get("stop_reason"), "stop_sequence": None},
                            "usage": {"output_tokens": usage.get("output_tokens", 0)}}
    yield "message_stop", {"type": "message_stop"}


def _gemini_stream(reply: dict[str, Any], request: dict[str, Any]) -> Iterator[tuple[str | None, Any]]:
    """One chunk per part (Gemini sends each function call whole), the finish reason and usage
    on the last."""
    rest = {k: v for k, v in reply.items() if k not in ("candidates", "usageMetadata")}
    candidates = reply.get("candidates") or [{}]
    parts = ((candidates[0].get("content") or {}).get("parts")) or []
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        candidate: dict[str, Any] = {"content": {"role": "model", "parts": [part]}, "index": 0}
        chunk: dict[str, Any] = {**rest, "candidates": [candidate]}
        if last:
            candidate.update({k: v for k, v in candidates[0].items() if k not in ("content",)})
            if "usageMetadata" in reply:
                chunk["usageMetadata"] = reply["usageMetadata"]
        yield None, chunk
    if not parts:
        yield None, reply


_STREAMERS = {"openai.chat": _chat_stream, "openai.responses": _responses_stream,
              "anthropic.messages": _anthropic_stream, "gemini.generate": _gemini_stream}


# -- builders: recorded response shapes --------------------------------------------------------

_ids = itertools.count(1)


def _next_id(prefix: str) -> str:
    return f"{prefix}{next(_ids):024x}"


@dataclass(frozen=True)
class Call:
    """A tool call for a scripted reply: `name`, `arguments`; `id` (made when None); Gemini's
    `thought_signature` (base64 text) when given; `gemini_id=False` leaves a Gemini call without
    an id, as older Gemini models send them."""

    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)
    id: str | None = None
    thought_signature: str | None = None
    gemini_id: bool = True


def _calls(calls: Sequence[Call | tuple[str, Mapping[str, Any]]]) -> list[Call]:
    return [c if isinstance(c, Call) else Call(c[0], c[1]) for c in calls]


def chat_completion(text: str | None = None, calls: Sequence[Call | tuple[str, Mapping[str, Any]]] = (),
                    model: str = "gpt-4o-2024-08-06", usage: tuple[int, int] = (82, 17)) -> dict[str, Any]:
    """An OpenAI Chat Completions response: an assistant message with `text` and `calls`."""
    tool_calls = [{"id": c.id or _next_id("call_"), "type": "function",
                   "function": {"name": c.name, "arguments": json.dumps(c.arguments)}} for c in _calls(calls)]
    message: dict[str, Any] = {"role": "assistant", "content": text, "refusal": None, "annotations": []}
    if tool_calls:
        message["tool_calls"] = tool_calls
    prompt, completion = usage
    return {
        "id": _next_id("chatcmpl-"), "object": "chat.completion", "created": 1767225600, "model": model,
        "choices": [{"index": 0, "message": message, "logprobs": None,
                     "finish_reason": "tool_calls" if tool_calls else "stop"}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
                  "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
                  "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
                                                "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}},
        "service_tier": "default", "system_fingerprint": "fp_f33640a400",
    }


def responses_response(text: str | None = None, calls: Sequence[Call | tuple[str, Mapping[str, Any]]] = (),
                       model: str = "gpt-4.1-2025-04-14", usage: tuple[int, int] = (291, 23)) -> dict[str, Any]:
    """An OpenAI Responses API response: `function_call` items for `calls`, then a message
    with `text`."""
    output: list[dict[str, Any]] = [
        {"type": "function_call", "id": _next_id("fc_"), "call_id": c.id or _next_id("call_"), "name": c.name,
         "arguments": json.dumps(c.arguments), "status": "completed"} for c in _calls(calls)]
    if text is not None:
        output.append({"type": "message", "id": _next_id("msg_"), "status": "completed", "role": "assistant",
                       "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]})
    prompt, completion = usage
    return {
        "id": _next_id("resp_"), "object": "response", "created_at": 1767225600, "status": "completed",
        "completed_at": 1767225601, "error": None, "incomplete_details": None, "instructions": None,
        "max_output_tokens": None, "model": model, "output": output, "parallel_tool_calls": True,
        "previous_response_id": None, "reasoning": {"effort": None, "summary": None}, "store": True,
        "temperature": 1.0, "text": {"format": {"type": "text"}, "verbosity": "medium"}, "tool_choice": "auto",
        "tools": [], "top_p": 1.0, "truncation": "disabled",
        "usage": {"input_tokens": prompt, "input_tokens_details": {"cached_tokens": 0},
                  "output_tokens": completion, "output_tokens_details": {"reasoning_tokens": 0},
                  "total_tokens": prompt + completion},
        "user": None, "metadata": {},
    }


def anthropic_message(text: str | None = None, calls: Sequence[Call | tuple[str, Mapping[str, Any]]] = (),
                      model: str = "claude-sonnet-4-6", usage: tuple[int, int] = (472, 91)) -> dict[str, Any]:
    """An Anthropic Messages API response: a text block for `text`, then a tool_use block per call."""
    content: list[dict[str, Any]] = []
    if text is not None:
        content.append({"type": "text", "text": text})
    content.extend({"type": "tool_use", "id": c.id or _next_id("toolu_"), "name": c.name, "input": dict(c.arguments)}
                   for c in _calls(calls))
    prompt, completion = usage
    return {
        "id": _next_id("msg_"), "type": "message", "role": "assistant", "model": model, "content": content,
        "stop_reason": "tool_use" if calls else "end_turn", "stop_sequence": None,
        "usage": {"input_tokens": prompt, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
                  "output_tokens": completion, "service_tier": "standard"},
    }


def gemini_response(text: str | None = None, calls: Sequence[Call | tuple[str, Mapping[str, Any]]] = (),
                    model: str = "gemini-2.5-flash", usage: tuple[int, int] = (120, 34)) -> dict[str, Any]:
    """A Gemini generateContent response: a text part for `text`, then a functionCall part per
    call (with its thoughtSignature when the call has one)."""
    parts: list[dict[str, Any]] = []
    if text is not None:
        parts.append({"text": text})
    for c in _calls(calls):
        function: dict[str, Any] = {"name": c.name, "args": dict(c.arguments)}
        if c.gemini_id:
            function = {"id": c.id or _next_id("")[-8:], **function}
        part: dict[str, Any] = {"functionCall": function}
        if c.thought_signature:
            part["thoughtSignature"] = c.thought_signature
        parts.append(part)
    prompt, completion = usage
    return {
        "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}],
        "usageMetadata": {"promptTokenCount": prompt, "candidatesTokenCount": completion,
                          "totalTokenCount": prompt + completion},
        "modelVersion": model, "responseId": _next_id("")[-22:],
    }
