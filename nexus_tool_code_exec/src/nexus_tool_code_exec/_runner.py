"""The host side of one run_code script: launch a child, speak the protocol, answer its tool
calls through `Nexus.invoke` (gates and all), stream its output, enforce the limits.

Everything the child sends is untrusted: a call names a tool by name and the host decides. Only
tools that were bound for this script can be reached (never run_code), each through the gates,
at most `max_tool_calls` of them, in a pool of at most `max_workers` threads.
"""

from __future__ import annotations

import ctypes
import json
import logging
import os
import queue
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import attrs

from nexus_core import CodeExecChunk, Nexus, ToolCall, ToolResult

from . import protocol
from .host.watchdog import Watchdog
from .launchers.base import Child, Launcher
from .protocol import LineReader, PipeReader, SpinPermits

log = logging.getLogger("nexus_tool_code_exec")

MAX_MESSAGE = 32 * 1024 * 1024  # a line longer than this is a protocol violation (or than
# what a result of max_result_bytes needs, if that is more)
#: how much of the inner calls' arguments and outputs one run keeps for calls.jsonl; past it a
#: record says how much it left out (a script must not make the host hold what its own memory
#: limit would not let it hold)
RECORD_BUDGET = 16 * 1024 * 1024
#: the host's encoder: what JSON has no type for (in a tool's output_structured) as its str()
_encode = protocol.encoder(default=str)
MAX_ERROR_CHARS = 8192
#: how long past the timeout a run waits for a reader held up in a tool call before it answers
DEADLINE_GRACE = 0.25
#: how long the host polls for a placed run's first message before it sleeps: about what a
#: trivial script takes, so that its end is read without a wake-up
FIRST_SPIN = 0.001


class _ThreadCache:
    """Reader threads, reused across runs (starting a thread per run costs more than the run's
    own work); a new one whenever none is idle, so concurrent runs never wait for each other."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: list[queue.SimpleQueue[Callable[[], None]]] = []

    def submit(self, fn: Callable[[], None]) -> None:
        with self._lock:
            inbox = self._idle.pop() if self._idle else None
        if inbox is None:
            inbox = queue.SimpleQueue()
            threading.Thread(target=self._work, args=(inbox,), daemon=True, name="run_code-reader").start()
        inbox.put(fn)

    def _work(self, inbox: queue.SimpleQueue[Callable[[], None]]) -> None:
        while True:
            try:
                fn = inbox.get(timeout=60)
            except queue.Empty:
                with self._lock:
                    if inbox in self._idle:  # nobody took it meanwhile: this thread may end
                        self._idle.remove(inbox)
                        return
                continue  # a submitter took it and is putting work in
            fn()
            with self._lock:
                self._idle.append(inbox)


_readers = _ThreadCache()


def _host_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


#: the host's: one spinning reader per CPU but one, so a run's child always has a CPU to run on
HOST_PERMITS = SpinPermits(_host_cpus() - 1)


@attrs.define
class _ReadState:
    """The pipe being read, and what was read from it and not yet handled: passed from the
    thread that starts reading to the one that goes on, at the first tool call."""

    reader: PipeReader
    lines: LineReader
    pending: tuple[dict[str, Any], int] | None = None  # the call that ended the first thread's turn


#: runs going on in this process (guarded by _active_lock): placement only pays for a lone run
_active = [0]
_active_lock = threading.Lock()

try:
    _sched_getcpu: Callable[[], int] | None = ctypes.CDLL(None).sched_getcpu
    _sched_getcpu.restype = ctypes.c_int  # type: ignore[union-attr]
except (OSError, AttributeError):
    _sched_getcpu = None


@attrs.define(eq=False)
class _Placement:
    """Where a lone run's processes are kept, so that the side that waits (and spins) never
    shares a CPU with the side it waits for: the child off the CPU of the thread that started
    the run, and from the first tool call on, the reader thread on one CPU and the child on the
    others. Left to itself the scheduler tends to put a process woken through a pipe on the
    writer's CPU (a pipe write is a "sync" wake-up: the kernel expects the writer to sleep
    next), and two spinners sharing one CPU each run at half speed."""

    child_pid: int
    child_cpus: set[int]  # what the child had, to give back
    reader_tid: int | None = None
    reader_cpus: set[int] | None = None
    undone: bool = False

    def undo(self) -> None:
        """Give both their CPUs back (any thread may: affinity is set by thread id)."""
        if self.undone:
            return
        self.undone = True
        for tid, cpus in ((self.reader_tid, self.reader_cpus), (self.child_pid, self.child_cpus)):
            if tid is None or cpus is None:
                continue
            try:
                os.sched_setaffinity(tid, cpus)
            except OSError:
                pass  # the child may be gone already


#: placements in force (guarded by _active_lock)
_placed: list[_Placement] = []


def _run_starts() -> None:
    with _active_lock:
        _active[0] += 1
        undo = list(_placed) if _active[0] > 1 else []  # two runs now: let the scheduler spread them
        if undo:
            _placed.clear()
    for placement in undo:
        placement.undo()


def _run_ends() -> None:
    with _active_lock:
        _active[0] -= 1


def _can_place() -> bool:
    return _sched_getcpu is not None and hasattr(os, "sched_setaffinity") and HOST_PERMITS.n >= 1


def _place_child(child: Child) -> _Placement | None:
    """A lone run: the child off the CPU this (the run's first) thread is on. None where
    nothing was changed (concurrent runs, one CPU, not allowed)."""
    if not _can_place():
        return None
    with _active_lock:
        if _active[0] != 1:
            return None  # concurrent runs: pinning them would only get in the load balancer's way
        try:
            theirs = os.sched_getaffinity(child.pid)
            cpu = _sched_getcpu()  # type: ignore[misc]
            if cpu < 0 or not theirs - {cpu}:
                return None
            os.sched_setaffinity(child.pid, theirs - {cpu})
        except OSError:
            return None
        placement = _Placement(child.pid, theirs)
        _placed.append(placement)
        return placement


def _place_reader(placement: _Placement | None) -> bool:
    """From the first tool call on: this reader thread stays on the CPU it is on, the child on
    the others. False where that is not done (the run is not alone, or was not placed)."""
    if placement is None:
        return False
    with _active_lock:
        if placement.undone or placement not in _placed:
            return False  # another run started meanwhile
        try:
            mine = os.sched_getaffinity(0)
            cpu = _sched_getcpu()  # type: ignore[misc]
            if cpu < 0 or cpu not in mine or not placement.child_cpus - {cpu}:
                return False
            os.sched_setaffinity(0, {cpu})
            placement.reader_tid, placement.reader_cpus = threading.get_native_id(), mine
            os.sched_setaffinity(placement.child_pid, placement.child_cpus - {cpu})
        except OSError:
            return False
        return True


def _unplace(placement: _Placement | None) -> None:
    if placement is None:
        return
    with _active_lock:
        if placement in _placed:
            _placed.remove(placement)
    placement.undo()


@attrs.define
class Settings:
    timeout_seconds: float
    max_output_bytes: int
    max_workers: int
    max_tool_calls: int
    max_result_bytes: int
    cpu_seconds: float | None = None  # the child's RLIMIT_CPU, to name a SIGKILL it led to


@attrs.define
class Outcome:
    """How a script ended. `error` starts with one of the brief's prefixes when set."""

    stdout: str = ""
    stdout_truncated: bool = False
    result: Any = None
    result_json: str | None = None
    error: str | None = None
    #: the inner calls, each a line of calls.jsonl (JSON, with its newline)
    call_lines: list[str] = attrs.field(factory=list)
    duration: float = 0.0

    @property
    def calls(self) -> list[dict[str, Any]]:
        """The inner calls: id, name, arguments and result, as calls.jsonl has them."""
        return [json.loads(line) for line in self.call_lines]


class _Streamer:
    """Output chunks for `nexus_code_exec_stdout`: at each newline, when 512 bytes are pending,
    and a final chunk. Also keeps the capped transcript for the result."""

    def __init__(self, emit: Callable[[CodeExecChunk], None], call_id: str, cap: int) -> None:
        self._emit = emit
        self._call_id = call_id
        self._budget = cap
        self.truncated = False
        self.parts: list[str] = []
        self._pending: dict[str, str] = {"stdout": "", "stderr": ""}

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
        if self._pending["stderr"]:
            self._send("stderr", self._pending["stderr"])
        self._send("stdout", self._pending["stdout"], final=True)
        self._pending = {"stdout": "", "stderr": ""}

    def _send(self, stream: str, data: str, final: bool = False) -> None:
        self._emit(CodeExecChunk(call_id=self._call_id, data=data, stream=stream, final=final))  # type: ignore[arg-type]


#: calls.jsonl's encoder: UTF-8 as is, anything JSON has no type for as its str()
_record_encode = json.JSONEncoder(ensure_ascii=False, default=str).encode


def record_line(call_id: str, name: str, arguments: Any, result: ToolResult) -> str:
    """One line of calls.jsonl (with its newline): the call and its whole result."""
    return _record_encode({"id": call_id, "name": name, "arguments": arguments, "result": {
        "id": result.id, "name": result.name, "output": result.output, "error": result.error,
        "output_file": result.output_file, "output_structured": result.output_structured,
        "error_kind": result.error_kind, "metadata": result.metadata, "is_error": result.error is not None,
    }}) + "\n"


@attrs.define(eq=False)
class EarlyChild:
    """A run's child, taken before its script is checked (see `take_early`)."""

    child: Child
    placement: _Placement | None
    woken: bool = False  # it was sent the script's source, to compile while the host checks it
    used: bool = False  # a run took it over (and ends it)

    def abandon(self) -> None:
        """The script will not run after all (rejected): let the child go unused. (A spare's
        replacement is forked once it is gone.)"""
        self.used = True
        _unplace(self.placement)
        _run_ends()
        self.child.kill()
        self.child.close()


#: how long a child told that its script is coming polls for it before it sleeps again
WAKE_SPIN = 0.003


def take_early(launcher: Launcher, script: str) -> EarlyChild | None:
    """Take a child for `script` now, while the host still checks it, and tell it the script
    is coming, with its source: a process that has slept for a while takes 0.2-0.3 ms to wake
    on a small VM, so it wakes, and compiles the source, while the host checks it. Nothing of
    the script runs before the host's start message, which comes only for a script that passed
    its check (a rejected one's child is let go). Only for a lone run, placed on a CPU other
    than this thread's (a child polling on this thread's CPU would slow it down); otherwise the
    child is taken when the script is ready, as usual. None: nothing taken."""
    if not _can_place() or not launcher.children_wait_ready:
        return None  # (a fresh interpreter takes ~30 ms to start: nothing to win, a spawn to waste)
    with _active_lock:
        if _active[0] != 0:
            return None
    try:
        child = launcher.launch()
    except Exception:  # noqa: BLE001 - the run proper launches again, and reports what fails
        return None
    _run_starts()
    placement = _place_child(child)
    if placement is None:
        return EarlyChild(child, None)
    try:
        wake: protocol.WakeMessage = {"t": protocol.WAKE, "spin": int(WAKE_SPIN * 1e6), "script": script}
        protocol.write_all(child.wfd, _encode(wake))
    except OSError:
        pass  # it is gone: the run finds out
    return EarlyChild(child, placement, woken=True)


class ProtocolError(Exception):
    """The child sent something that is not the protocol."""


class ScriptRun:
    def __init__(
        self,
        nexus: Nexus,
        call_id: str,
        settings: Settings,
        bound_tools: frozenset[str],
        emit_chunk: Callable[[CodeExecChunk], None],
    ) -> None:
        self.nexus = nexus
        self.call_id = call_id
        self.settings = settings
        self.bound_tools = bound_tools
        self.streamer = _Streamer(emit_chunk, call_id, settings.max_output_bytes)
        #: the inner calls, as lines of calls.jsonl (`record_line`)
        self.call_lines: list[str] = []
        self._calls_lock = threading.Lock()
        self._recorded = 0
        self._write_lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._call_count = 0
        self._child: Child | None = None
        self._messages = 0  # messages read from the child
        self._lost_before_start = False  # set by a run whose child died with its zygote (see run)
        # "done" carries the result's JSON text inside a JSON string: escaping at most doubles it
        self.max_message = max(MAX_MESSAGE, 2 * settings.max_result_bytes + 65536)

    # -- answering tool calls ---------------------------------------------------------------

    def _answer(self, msg: dict[str, Any], size: int = 0) -> None:
        try:
            self._answer_call(msg, size)
        except Exception as exc:  # a waiting script must get an answer, not wait for its timeout
            log.exception("run_code: answering a call of %s failed", self.call_id)
            self._refuse(msg, f"the host could not answer this call: {type(exc).__name__}: {exc}")

    def _answer_call(self, msg: dict[str, Any], size: int) -> None:
        rid, name, args = msg.get("id"), msg.get("name"), msg.get("args")
        call = ToolCall(name=str(name), arguments=args if isinstance(args, dict) else {},
                        parent_call_id=self.call_id)
        if name not in self.bound_tools:
            result = ToolResult(id=call.id, name=call.name, output=f"unknown tool: {name!r}",
                                error=f"unknown tool: {name!r}", error_kind="unknown_tool")
        else:
            result = self.nexus.invoke(call)
        # the child needs these five (only those set are sent); calls.jsonl keeps the whole result
        reply: dict[str, Any] = {"output": result.output}
        if result.error is not None:
            reply["error"] = result.error
            reply["error_kind"] = result.error_kind
        if result.output_file is not None:
            reply["output_file"] = result.output_file
        if result.output_structured is not None:
            reply["output_structured"] = result.output_structured
        self._send({"t": protocol.RESULT, "id": rid, "result": reply})
        # turned into its line of calls.jsonl now, while the child reads the answer: the end of
        # the run then only joins the lines
        self._record(call, result, size)

    def _record(self, call: ToolCall, result: ToolResult, size: int) -> None:
        cost = size + len(result.output)
        with self._calls_lock:
            keep = self._recorded + cost <= RECORD_BUDGET
            if keep:
                self._recorded += cost
            arguments: Any = call.arguments
            if not keep:
                note = f"not kept: this run's record budget of {RECORD_BUDGET} bytes is spent"
                arguments = {"_omitted": f"{size} bytes of arguments {note}"}
                result = attrs.evolve(result, output=f"{len(result.output)} characters {note}",
                                      output_structured=None)
        line = record_line(call.id, call.name, arguments, result)
        with self._calls_lock:
            self.call_lines.append(line)

    def _refuse(self, msg: dict[str, Any], reason: str) -> None:
        self._send({"t": protocol.RESULT, "id": msg.get("id"),
                    "result": {"output": reason, "error": reason, "error_kind": "failure"}})

    def _send(self, msg: Any) -> None:
        data = _encode(msg)
        # the child is read under the lock: once the run has let go of it (and closed its fds,
        # whose numbers the process may reuse at once), a late answer is dropped, not written
        # into whatever file took the number
        with self._write_lock:
            child = self._child
            if child is None:
                return
            try:
                protocol.write_all(child.wfd, data)
            except OSError:
                pass  # the child is gone; its end of the run is handled by the reader

    def _dispatch_call(self, msg: dict[str, Any], size: int = 0) -> None:
        if not isinstance(msg.get("id"), int) or not isinstance(msg.get("name"), str) or not isinstance(msg.get("args"), dict):
            raise ProtocolError("a call needs an integer id, a tool name and an arguments object")
        self._call_count += 1
        if self._call_count > self.settings.max_tool_calls:
            self._refuse(msg, f"tool call limit reached: a script may make at most {self.settings.max_tool_calls} calls")
            return
        if msg.get("p"):
            # made inside parallel.map: answered concurrently, at most max_workers at once
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.settings.max_workers, thread_name_prefix="run_code-call")
            self._pool.submit(self._answer, msg, size)
        else:
            # a lone sequential call: answered right here on the reading thread, no hop. The
            # run's caller waits on the reader with the deadline, so a tool that hangs here
            # cannot hold run_code past it.
            self._answer(msg, size)

    # -- the run ----------------------------------------------------------------------------

    def run(self, launcher: Launcher, start: dict[str, Any], meanwhile: Callable[[], None] | None = None,
            early: EarlyChild | None = None) -> Outcome:
        """Run the script of `start` in a child of `launcher` (or in `early`'s, taken already).
        `meanwhile` is called once the script is on its way, while the child starts it (this
        thread has nothing else to do)."""
        outcome = self._run(launcher, start, meanwhile, early)
        if self._lost_before_start:
            # its child went down with the zygote that made it (a spare set to die with its
            # parent, or one that found its parent gone while it set itself up) before the
            # script could do anything: the launcher starts a new zygote, and the script gets a
            # child of that one
            self._lost_before_start = False
            outcome = self._run(launcher, start, None, None)
        return outcome

    def _run(self, launcher: Launcher, start: dict[str, Any], meanwhile: Callable[[], None] | None,
             early: EarlyChild | None) -> Outcome:
        began = time.monotonic()
        outcome = Outcome()
        if early is None:
            try:
                child = launcher.launch()
            except Exception as exc:
                outcome.error = f"runtime error: could not start the script's process: {exc}"
                return outcome
            _run_starts()  # paired with _run_ends() in the finally below
            placement = _place_child(child)
        else:
            early.used = True
            child, placement = early.child, early.placement  # counted and placed already
        self._child = child
        watchdog = Watchdog(child, self.settings.timeout_seconds).start()
        final: dict[str, Any] | None = None
        violation: str | None = None
        finished = threading.Event()
        box: list[tuple[dict[str, Any] | None, str | None]] = []
        # the child's fds are released by whichever of this thread and a reader thread lets go
        # last: a reader held up in a tool call must not read a closed fd whose number was reused
        holders = [1]
        holders_lock = threading.Lock()

        def release() -> None:
            with holders_lock:
                holders[0] -= 1
                last = holders[0] == 0
            if last:
                child.close()

        # no spinning unless the run is placed (see _Placement): a spinning reader could keep
        # the child off the CPU the scheduler put it on
        state = _ReadState(PipeReader(child.rfd, permits=HOST_PERMITS, eager=False), LineReader(self.max_message))

        def read_on() -> None:
            if _place_reader(placement):
                state.reader.expect()  # on CPUs of their own: answers and calls come quickly
            try:
                ended = self._read_loop(child, state, hand_off=False)
                assert ended is not None  # only a hand-off returns None
                box.append(ended)
            except Exception as exc:  # noqa: BLE001 - the run must end with an error, not hang
                log.exception("run_code: reading the script's process of %s failed", self.call_id)
                box.append((None, f"the host failed reading it: {type(exc).__name__}"))
            finally:
                finished.set()
                release()

        if child.bindings_key is not None and child.bindings_key == start.get("bindings_key"):
            start = {k: v for k, v in start.items() if k != "bindings"}  # it has them compiled
        try:
            if placement is not None:
                start = {**start, "spin": True}  # it may poll for its first call's answer too
            self._send({"t": protocol.START, **start})
            if meanwhile is not None:
                meanwhile()
            if placement is not None:
                state.reader.expect(FIRST_SPIN)  # a short script's end comes within it
            # This thread reads until the script ends or makes its first tool call (a trivial
            # script, or one that only prints, costs no thread hop). Tool calls are answered by
            # a reader thread, which takes over the pipe here: this thread then waits for it
            # with the deadline, so a tool call that hangs cannot hold run_code past it. (The
            # watchdog kills the child at the deadline; a read here then ends at once.)
            try:
                ended = self._read_loop(child, state, hand_off=True)
            except Exception as exc:  # noqa: BLE001 - the run must end with an error, not hang
                log.exception("run_code: reading the script's process of %s failed", self.call_id)
                ended = (None, f"the host failed reading it: {type(exc).__name__}")
            if ended is not None:
                final, violation = ended
            else:
                with holders_lock:
                    holders[0] += 1
                _readers.submit(read_on)
                wait = self.settings.timeout_seconds + DEADLINE_GRACE - (time.monotonic() - began)
                if finished.wait(max(wait, 0.0)) and box:
                    final, violation = box[0]
        finally:
            _run_ends()
            _unplace(placement)
            watchdog.cancel()
            status: int | None = None
            if final is not None and final.get("t") == protocol.DONE and not violation:
                child.end()  # it finished: it is exiting by itself; make sure of it without waiting
            else:
                child.kill()
                status = child.wait(timeout=2.0)
            if self._pool is not None:
                # a script that finished honestly has no call in flight; one still running was
                # left by a script that did not wait for it (or forged it): its answer has no one
                # to go to, and waiting for it would hold run_code past its deadline
                self._pool.shutdown(wait=False, cancel_futures=True)
            with self._write_lock:
                self._child = None
            release()
            child.finished()
            self.streamer.finish()
        outcome.duration = time.monotonic() - began
        outcome.stdout = "".join(self.streamer.parts)
        outcome.stdout_truncated = self.streamer.truncated or bool(final and final.get("truncated"))
        with self._calls_lock:
            outcome.call_lines = list(self.call_lines)
        if watchdog.fired:
            outcome.error = f"script timed out after {self.settings.timeout_seconds:g}s"
        elif violation:
            outcome.error = f"runtime error: the script's process broke the protocol ({violation}) and was stopped"
        elif final is None:
            outcome.error = self._death_message(status, child.cpu_seconds, self.settings.cpu_seconds)
        elif final.get("t") == protocol.DONE:
            sent = final.get("result")
            text = sent if isinstance(sent, str) else "null"
            if len(text) > self.settings.max_result_bytes:  # the child checks too; it is not trusted
                outcome.error = (f"result is not JSON-serializable: the result is too large: {len(text)} bytes "
                                 f"(the limit is {self.settings.max_result_bytes})")
            else:
                try:
                    outcome.result = json.loads(text)
                    outcome.result_json = text
                except (ValueError, RecursionError):
                    outcome.error = "result is not JSON-serializable: the script's process sent invalid JSON"
        else:
            outcome.error = self._error_message(final)
        # nothing from the child but (maybe) its sandbox's error: the script never started
        never_started = not watchdog.fired and not violation and (
            (final is None and self._messages == 0)
            or (final is not None and final.get("kind") == protocol.SANDBOX and self._messages == 1))
        self._lost_before_start = never_started and child.died_with_its_maker()
        if outcome.error is not None and len(outcome.error) > MAX_ERROR_CHARS:
            outcome.error = outcome.error[:MAX_ERROR_CHARS] + f"... ({len(outcome.error)} characters in all)"
        return outcome

    def _read_loop(self, child: Child, state: _ReadState,
                   hand_off: bool) -> tuple[dict[str, Any] | None, str | None] | None:
        """Handle the child's messages until the end: the final message, or a protocol violation.
        With `hand_off`, stop instead at the first tool call and return None: the call is left
        in `state` for the thread that goes on reading."""
        lines, read = state.lines, state.reader.read
        if state.pending is not None:
            call, size = state.pending
            state.pending = None
            try:
                self._dispatch_call(call, size)
            except ProtocolError as exc:
                return None, str(exc)
        while True:
            try:
                msg = lines.next()
                if msg is None:
                    try:
                        data = read()
                    except OSError:
                        data = b""
                    if not data:
                        return None, None
                    lines.feed(data)
                    continue
                self._messages += 1
                kind = msg.get("t")
                if kind == protocol.OUT:
                    self.streamer.feed(str(msg.get("s")), msg.get("d"))  # type: ignore[arg-type]
                    if msg.get("truncated") is True:
                        self.streamer.truncated = True
                elif kind == protocol.CALL:
                    if hand_off:
                        state.pending = (msg, lines.size)
                        return None
                    self._dispatch_call(msg, lines.size)
                elif kind in (protocol.DONE, protocol.ERROR):
                    return msg, None
                else:
                    return None, f"an unknown message type {kind!r}"
            except (ProtocolError, protocol.FramingError) as exc:
                return None, str(exc)

    def _error_message(self, final: dict[str, Any]) -> str:
        kind, message = final.get("kind"), str(final.get("message", ""))
        if kind == "memory":
            return "memory limit exceeded"
        if kind == "result":
            return f"result is not JSON-serializable: {message}"
        if kind == "result_size":
            return f"result is not JSON-serializable: the result is too large: {message}"
        if kind == "sandbox":
            return f"runtime error: the sandbox could not be set up: {message}"
        return f"runtime error: {message}"

    @staticmethod
    def _death_message(status: int | None, cpu_used: float | None = None, cpu_limit: float | None = None) -> str:
        if status is not None and status < 0:
            sig = -status
            if sig == signal.SIGXCPU:  # RLIMIT_CPU: cpu_seconds of CPU time used up
                return "CPU time limit exceeded"
            if (sig == signal.SIGKILL and cpu_used is not None and cpu_limit is not None
                    and cpu_used >= cpu_limit - 0.05):
                return "CPU time limit exceeded"  # it ignored SIGXCPU; the hard limit killed it
            if sig == signal.SIGSEGV:
                return "memory limit exceeded"
            name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else str(sig)
            return f"runtime error: the script's process was killed by {name}"
        if status is not None:
            return f"runtime error: the script's process exited with status {status} before it finished"
        return "runtime error: the script's process ended before it finished"


