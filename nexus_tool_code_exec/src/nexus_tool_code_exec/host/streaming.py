"""What a run keeps of what its script did (runs in the host): its output, streamed to
`nexus_code_exec_stdout` as it comes and capped (`Streamer`), and its inner tool calls, each a line
of calls.jsonl (`Ledger`)."""

from __future__ import annotations

import hashlib
import json
import json.encoder
import threading
from collections.abc import Callable
from typing import Any

import attrs

from nexus_core import ToolCall, ToolResult

from .. import protocol
from .events import CodeExecChunk


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
        self._cap = cap
        self._sent = 0  # characters sent to the observers
        self._quiet = 0  # characters a resumed attempt prints again, not sent twice

    def restart(self) -> None:
        """A resumed attempt of the run prints from the start again: its transcript is made anew,
        and what observers were already sent is not sent again (the script makes the same calls
        and gets the same results, so it prints the same)."""
        for stream in ("stderr", "stdout"):  # what was pending had not been sent
            self._pending[stream] = ""
        self.parts = []
        self._budget = self._cap
        self.truncated = self.held = False
        self._quiet = self._sent
        self._sent = 0

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
        self._sent += len(data)
        if self._quiet:
            skip = min(self._quiet, len(data))
            self._quiet -= skip
            data = data[skip:]
            if not data and not final:
                return
        self._emit(CodeExecChunk(call_id=self._call_id, data=data, stream=stream, final=final))  # type: ignore[arg-type]


class Ledger:
    """A run's inner calls, as the lines of calls.jsonl. Every call gets its line, whatever the
    script did before it: its id and name, the size and the SHA-256 of its arguments (compact
    JSON, keys sorted, UTF-8: anyone holding the arguments can check them against it), and
    the size of its output. Its arguments and result are kept whole within RECORD_BUDGET per
    run; past it, each string is cut to CUT_CHARS characters and each list or object to
    CUT_ITEMS items, and the line says `"cut": true`: a few huge calls cannot blind the record
    of the ones after them (a write's path still shows, with the hash of what it wrote).

    Each line also says when the call came in (`started_at`, seconds since the epoch), how long
    the host took to answer it (`duration_seconds`: gates, handler and result gates) and which of
    the script's `parallel` calls made it (`parallel`: 1, 2, ..., or false), for `nexus runs show`.

    Each call is recorded by the thread that answered it, right after the answer went out (while
    the child reads it): the end of the run then only joins the lines."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lines: list[str] = []
        self._recorded = 0

    def record(self, call: ToolCall, result: ToolResult, size: int, started_at: float = 0.0,
               duration: float = 0.0, parallel: int | bool = False, from_journal: bool = False,
               hashed: tuple[str, int, str] | None = None) -> str | None:
        """One call, whose message took `size` bytes on the pipe, and its result: it came in at
        `started_at` (epoch seconds), took `duration` seconds, and was made by the script's
        `parallel` call number `parallel` (1, 2, ...), or outside one (False); `from_journal`:
        it was answered from the run's journal, without running (a resumed run); `hashed`: the
        arguments' canonical JSON, its size in bytes and its SHA-256, where the journal has them
        already. Returns the line, unless it was cut (None)."""
        if hashed is None:
            arguments = _canonical(call.arguments)
            data = arguments.encode("utf-8", "surrogatepass")
            size_bytes, digest = len(data), hashlib.sha256(data).hexdigest()
        else:
            arguments, size_bytes, digest = hashed
        output_chars = len(result.output)
        cost = size_bytes + output_chars
        with self._lock:
            keep = self._recorded + cost <= RECORD_BUDGET
            if keep:
                self._recorded += cost
        # the facts, as record_line would write them from a dict (written out: this is every call's)
        facts = (f'"arguments_bytes": {size_bytes}, "arguments_sha256": {_string(digest)}, '
                 f'"output_chars": {output_chars}, "started_at": {_json(round(started_at, 6))}, '
                 f'"duration_seconds": {_json(round(duration, 6))}, "parallel": {_json(parallel)}')
        if from_journal:  # answered from the run's journal: the tool did not run in this attempt
            facts += ', "from_journal": true'
        if not keep:
            arguments = _canonical(_cut(call.arguments))
            result = attrs.evolve(result, output=_cut(result.output), output_structured=_cut(result.output_structured),
                                  metadata=_cut(result.metadata))
            facts += ', "cut": true'
        line = _line(call.id, call.name, arguments, result, facts)
        with self._lock:
            self._lines.append(line)
        return line if keep else None

    def lines(self) -> list[str]:
        with self._lock:
            return list(self._lines)


#: what a run keeps whole of its calls' arguments and outputs for calls.jsonl (a script must not
#: make the host hold what its own memory limit would not let it hold); past it, values are cut
RECORD_BUDGET = 16 * 1024 * 1024
#: a string of a call past the budget: its first characters
CUT_CHARS = 256
#: a list or object of a call past the budget: its first items (and nesting this deep)
CUT_ITEMS = 32
CUT_DEPTH = 8


def _cut(value: Any, depth: int = 0) -> Any:
    """`value`, each string cut to CUT_CHARS characters and each container to CUT_ITEMS items
    (saying how much was left out), CUT_DEPTH deep."""
    if isinstance(value, str):
        return value if len(value) <= CUT_CHARS else f"{value[:CUT_CHARS]}... ({len(value)} characters)"
    if isinstance(value, dict):
        if depth >= CUT_DEPTH:
            return f"(an object of {len(value)} keys)"
        out = {str(k): _cut(v, depth + 1) for k, v in list(value.items())[:CUT_ITEMS]}
        if len(value) > CUT_ITEMS:
            out["..."] = f"({len(value) - CUT_ITEMS} more keys)"
        return out
    if isinstance(value, (list, tuple)):
        if depth >= CUT_DEPTH:
            return f"(a list of {len(value)} items)"
        items = [_cut(v, depth + 1) for v in value[:CUT_ITEMS]]
        if len(value) > CUT_ITEMS:
            items.append(f"... ({len(value) - CUT_ITEMS} more items)")
        return items
    return value


def _encoder(sort_keys: bool, separators: tuple[str, str], check_circular: bool) -> Callable[[Any], str]:
    """A JSON encoder (UTF-8 as is, anything JSON has no type for as its str()) made once: each
    `json.JSONEncoder.encode` call builds its C encoder anew, which costs more than encoding a
    small call's line (this runs once per inner call, on the thread that answered it)."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:  # an interpreter without the C accelerator
        encode = json.JSONEncoder(ensure_ascii=False, sort_keys=sort_keys, separators=separators, default=str,
                                  check_circular=check_circular).encode
        return encode
    item_sep, key_sep = separators
    if not check_circular:
        run = make(None, str, json.encoder.encode_basestring, None, key_sep, item_sep, sort_keys, False, True)
        return lambda value: "".join(run(value, 0))
    # the markers (for circular references) are per call: a fresh dict each time
    return lambda value: "".join(make({}, str, json.encoder.encode_basestring, None, key_sep, item_sep,
                                      sort_keys, False, True)(value, 0))


#: arguments as the hash covers them: compact, keys sorted, characters as they are (they came
#: from JSON: no cycles)
_canonical = _encoder(sort_keys=True, separators=(",", ":"), check_circular=False)
#: calls.jsonl's encoder (a tool's output_structured may be anything a handler returned)
_record_encode = _encoder(sort_keys=False, separators=(", ", ": "), check_circular=True)
_string = json.encoder.encode_basestring


_LITERALS: dict[Any, str] = {None: "null", True: "true", False: "false"}


def _json(value: Any) -> str:
    """`value` as `_record_encode` writes it: the plain values of a small call (text, an int, a
    finite float, null, true, false, an empty object) written here directly, anything else by
    the encoder (a call's line is made on every inner call: the encoder's own setup, per value,
    costs more than these few cases)."""
    kind = type(value)
    if kind is str:
        return _string(value)
    if value is None or kind is bool:
        return _LITERALS[value]
    if kind is int:
        return int.__repr__(value)
    if kind is float and value - value == 0.0:  # finite (NaN and the infinities are the encoder's)
        return float.__repr__(value)
    if kind is dict and not value:
        return "{}"
    return _record_encode(value)


def record_line(call_id: str, name: str, arguments_json: str, result: ToolResult, facts: dict[str, Any]) -> str:
    """One line of calls.jsonl (with its newline): the call (its arguments already as JSON), its
    result, and `facts` (sizes, hash). The same text as `_record_encode` of the whole line,
    made piece by piece."""
    return _line(call_id, name, arguments_json, result,
                 ", ".join(f"{_string(key)}: {_json(value)}" for key, value in facts.items()))


def _line(call_id: str, name: str, arguments_json: str, result: ToolResult, facts: str) -> str:
    """`record_line`, the facts already written (their members, without the braces)."""
    error = result.error
    if error is None and result.output_file is None and result.error_kind is None and not result.metadata \
            and type(result.metadata) is dict:  # most calls: a plain success
        return (f'{{"id": {_string(call_id)}, "name": {_string(name)}, "arguments": {arguments_json}, {facts}, '
                f'"result": {{"id": {_json(result.id)}, "name": {_json(result.name)}, "output": {_json(result.output)}, '
                f'"error": null, "output_file": null, "output_structured": {_json(result.output_structured)}, '
                f'"error_kind": null, "metadata": {{}}, "is_error": false}}}}\n')
    return (f'{{"id": {_string(call_id)}, "name": {_string(name)}, "arguments": {arguments_json}, {facts}, '
            f'"result": {{"id": {_json(result.id)}, "name": {_json(result.name)}, "output": {_json(result.output)}, '
            f'"error": {_json(error)}, "output_file": {_json(result.output_file)}, '
            f'"output_structured": {_json(result.output_structured)}, "error_kind": {_json(result.error_kind)}, '
            f'"metadata": {_json(result.metadata)}, "is_error": {"false" if error is None else "true"}}}}}\n')


def _record_line_by_encoder(call_id: str, name: str, arguments_json: str, result: ToolResult,
                            facts: dict[str, Any]) -> str:
    """`record_line` as the encoder makes it in one piece (what the tests hold it to)."""
    rest = _record_encode({**facts, "result": {
        "id": result.id, "name": result.name, "output": result.output, "error": result.error,
        "output_file": result.output_file, "output_structured": result.output_structured,
        "error_kind": result.error_kind, "metadata": result.metadata, "is_error": result.error is not None,
    }})
    return f'{{"id": {_string(call_id)}, "name": {_string(name)}, "arguments": {arguments_json}, {rest[1:]}\n'
