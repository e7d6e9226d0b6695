"""A provider server on loopback that starts a streamed reply and then stalls, the way a slow model
does, so tests can interrupt a turn in the middle of a stream.

It speaks OpenAI Chat Completions (`POST /v1/chat/completions`), Anthropic Messages
(`POST /v1/messages`) and Gemini (`POST /{version}/models/{model}:streamGenerateContent`), streamed. Each request takes the next scripted step:
`Silent()` sends nothing at all, not even the status line, the way a loaded model server keeps a
client waiting for its first byte, until the client goes away (`disconnected` is then set) or
`release()`; `Stall("some text")` streams that text and then holds the connection open, writing a keep-alive
comment now and then, until the client goes away (`disconnected` is then set: proof the client
closed its stream) or `release()`; `Answer("text")` streams a whole reply that ends the turn.
"""

from __future__ import annotations

import json
import select
import socket
import threading
from collections import deque
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Silent:
    """Answer nothing: the request waits for its first byte."""


@dataclass(frozen=True)
class Stall:
    text: str = "Thinking"


@dataclass(frozen=True)
class Answer:
    text: str


class StallingServer:
    def __init__(self, *steps: Silent | Stall | Answer) -> None:
        self.steps: deque[Silent | Stall | Answer] = deque(steps)
        self.stalled = threading.Event()  # a stream is stalled now
        self.disconnected = threading.Event()  # the client closed a stalled stream
        self._release = threading.Event()
        self.bodies: list[Any] = []
        self._lock = threading.Lock()
        handler = type("Handler", (_Handler,), {"server_state": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def release(self) -> None:
        self._release.set()

    def next_step(self, body: Any) -> Silent | Stall | Answer:
        with self._lock:
            self.bodies.append(body)
            return self.steps.popleft() if self.steps else Answer("(no step left)")

    def __enter__(self) -> StallingServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._release.set()
        self._server.shutdown()
        self._server.server_close()


class _Handler(BaseHTTPRequestHandler):
    server_state: StallingServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"null")
        state = self.server_state
        step = state.next_step(body)
        if isinstance(step, Silent):
            self._wait_silently()
            return
        anthropic = self.path.endswith("/v1/messages")
        gemini = ":streamGenerateContent" in self.path
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        final = isinstance(step, Answer)
        events = _anthropic_events(step.text, final) if anthropic else _gemini_events(step.text, final) if gemini \
            else _openai_events(step.text, final)
        for event in events:
            self._event(event, anthropic)
        if isinstance(step, Answer):
            return
        state.stalled.set()
        try:
            while not state._release.wait(0.05):
                # a comment (an empty line for Gemini's SDK, which reads any other line as data);
                # the write fails once the client has gone
                self.wfile.write(b"\n" if gemini else b": still thinking\n\n")
                self.wfile.flush()
        except OSError:
            state.disconnected.set()
        finally:
            state.stalled.clear()

    def _wait_silently(self) -> None:
        """Hold the request without a byte of answer until the client closes its end (an end of
        file on the socket) or the server is released."""
        state = self.server_state
        self.close_connection = True
        state.stalled.set()
        try:
            while not state._release.is_set():
                ready, _, _ = select.select([self.connection], [], [], 0.05)
                if ready and not self.connection.recv(1, socket.MSG_PEEK):
                    state.disconnected.set()
                    return
        except OSError:
            state.disconnected.set()
        finally:
            state.stalled.clear()

    def _event(self, event: dict[str, Any] | str, anthropic: bool) -> None:
        data = event if isinstance(event, str) else json.dumps(event)
        name = f"event: {event['type']}\n" if anthropic and isinstance(event, dict) else ""
        self.wfile.write(f"{name}data: {data}\n\n".encode())
        self.wfile.flush()


def _openai_events(text: str, final: bool) -> list[dict[str, Any] | str]:
    base = {"id": "chatcmpl-stall", "object": "chat.completion.chunk", "created": 1767225600, "model": "gpt-4.1"}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**base, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}

    events: list[dict[str, Any] | str] = [chunk({"role": "assistant", "content": ""}), chunk({"content": text})]
    if final:
        events += [chunk({}, "stop"), {**base, "choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 5,
                                                                        "total_tokens": 15}}, "[DONE]"]
    return events


def _gemini_events(text: str, final: bool) -> list[dict[str, Any] | str]:
    chunk: dict[str, Any] = {"candidates": [{"content": {"role": "model", "parts": [{"text": text}]}, "index": 0}],
                             "modelVersion": "gemini-2.5-flash", "responseId": "stall"}
    if final:
        chunk["candidates"][0]["finishReason"] = "STOP"
        chunk["usageMetadata"] = {"promptTokenCount": 10, "candidatesTokenCount": 5, "totalTokenCount": 15}
    return [chunk]


def _anthropic_events(text: str, final: bool) -> list[dict[str, Any] | str]:
    message = {"id": "msg_stall", "type": "message", "role": "assistant", "model": "claude-sonnet-4-6",
               "content": [], "stop_reason": None, "stop_sequence": None,
               "usage": {"input_tokens": 10, "output_tokens": 1}}
    events: list[dict[str, Any] | str] = [
        {"type": "message_start", "message": message},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}},
    ]
    if final:
        events += [{"type": "content_block_stop", "index": 0},
                   {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                    "usage": {"output_tokens": 5}},
                   {"type": "message_stop"}]
    return events
