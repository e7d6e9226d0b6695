"""What a run keeps of what its script did (runs in the host): its output, streamed to
`nexus_code_exec_stdout` as it comes and capped (`Streamer`), and its inner tool calls, each a line
of calls.jsonl (`Ledger`)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

import attrs

from nexus_core import CodeExecChunk, ToolCall, ToolResult

from .. import protocol

#: how much of the inner calls' arguments and outputs one run keeps for calls.jsonl; past it a
#: record says how much it left out (a script must not make the host hold what its own memory
#: limit would not let it hold)
RECORD_BUDGET = 16 * 1024 * 1024


class Streamer:
    """Output chunks for `nexus_code_exec_stdout`: at each newline, when 512 bytes are pending,
    and a final chunk. Also keeps the capped transcript for the result: the head the child sent
    as it went, and, when it held some back, the line saying how much was dropped, then its tail."""

    def __init__(self, emit: Callable[[CodeExecChunk], None], call_id: str, cap: int) -> None:
        self._emit = emit
        self._call_id = call_id
        self._budget = cap
        self.truncated = False
        #: the child's head is full: what follows comes as its tail, at the end (or not at all)
        self.held = False
        self.parts: list[str] = []
        self._pending: dict[str, str] = {"stdout": "", "stderr": ""}

    def mark(self, dropped: int | None) -> None:
        """Where output was dropped between the head and the tail (`dropped` bytes; None: the
        tail never came), a line saying so, in the transcript and the stream."""
        if dropped is not None:
            self.held = False
        if dropped == 0:
            return
        self.truncated = True
        text = (f"[... {dropped} bytes dropped ...]" if dropped is not None
                else "[... the rest of the output is lost: the script did not finish ...]")
        last = self.parts[-1] if self.parts else ""
        line = ("" if not last or last.endswith("\n") else "\n") + text + "\n"
        self.parts.append(line)
        for stream in ("stderr", "stdout"):
            if self._pending[stream]:
                self._send(stream, self._pending[stream])
                self._pending[stream] = ""
        self._send("stdout", line)

    def feed(self, stream: str, data: str) -> None:
        if stream not in self._pending or not isinstance(data, str):
            return
        raw = data.encode("utf-8", "replace")
        if len(raw) > self._budget:
            raw = raw[: self._budget]
            data = raw.decode("utf-8", "ignore")
            self.truncated = True
        if not data:
            return
        self._budget -= len(raw)
        self.parts.append(data)
        pending = self._pending[stream] + data
        while True:
            nl = pending.find("\n")
            if nl >= 0 and nl < protocol.OUTPUT_CHUNK:
                self._send(stream, pending[: nl + 1])
                pending = pending[nl + 1:]
            elif len(pending.encode("utf-8", "replace")) >= protocol.OUTPUT_CHUNK:
                head = pending.encode("utf-8", "replace")[:protocol.OUTPUT_CHUNK].decode("utf-8", "ignore")
                self._send(stream, head)
                pending = pending[len(head):]
            else:
                break
        self._pending[stream] = pending

    def finish(self) -> None:
        """The rest of stderr, then the final chunk: the rest of stdout (maybe empty)."""
        if self.held:
            self.mark(None)
        if self._pending["stderr"]:
            self._send("stderr", self._pending["stderr"])
        self._send("stdout", self._pending["stdout"], final=True)
        self._pending = {"stdout": "", "stderr": ""}

    def _send(self, stream: str, data: str, final: bool = False) -> None:
        self._emit(CodeExecChunk(call_id=self._call_id, data=data, stream=stream, final=final))  # type: ignore[arg-type]


class Ledger:
    """A run's inner calls, as the lines of calls.jsonl, within RECORD_BUDGET. Each call is
    recorded by the thread that answered it, right after the answer went out (while the child
    reads it): the end of the run then only joins the lines."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lines: list[str] = []
        self._recorded = 0

    def record(self, call: ToolCall, result: ToolResult, size: int) -> None:
        """One call, whose arguments took `size` bytes on the pipe, and its result."""
        cost = size + len(result.output)
        with self._lock:
            keep = self._recorded + cost <= RECORD_BUDGET
            if keep:
                self._recorded += cost
        arguments: Any = call.arguments
        if not keep:
            note = f"not kept: this run's record budget of {RECORD_BUDGET} bytes is spent"
            arguments = {"_omitted": f"{size} bytes of arguments {note}"}
            result = attrs.evolve(result, output=f"{len(result.output)} characters {note}", output_structured=None)
        line = record_line(call.id, call.name, arguments, result)
        with self._lock:
            self._lines.append(line)

    def lines(self) -> list[str]:
        with self._lock:
            return list(self._lines)


#: calls.jsonl's encoder: UTF-8 as is, anything JSON has no type for as its str()
_record_encode = json.JSONEncoder(ensure_ascii=False, default=str).encode


def record_line(call_id: str, name: str, arguments: Any, result: ToolResult) -> str:
    """One line of calls.jsonl (with its newline): the call and its whole result."""
    return _record_encode({"id": call_id, "name": name, "arguments": arguments, "result": {
        "id": result.id, "name": result.name, "output": result.output, "error": result.error,
        "output_file": result.output_file, "output_structured": result.output_structured,
        "error_kind": result.error_kind, "metadata": result.metadata, "is_error": result.error is not None,
    }}) + "\n"
