"""Serving one script's run, from its START to its end (runs in the host): speak the protocol with
the child, answer its tool calls through `Nexus.invoke` (gates and all), stream its output, keep
its calls, enforce the limits, end the child, and say how the run ended (`Outcome`).

Everything the child sends is untrusted: each message is counted against the run's budget, then
read through `protocol.read_child` (every field checked once; anything that is not the protocol
ends the run), and from there on the runner handles only typed messages. A call names a tool by
name and the host decides. Only tools that were bound for this script can be reached (never
run_code), each through the gates, at most `max_tool_calls` of them, in a pool of at most
`max_workers` threads. One inner call, from its CALL to its RESULT, is answered in one method,
`ScriptRun._answer_call`.

The thread that called run_code reads the child until the script ends or makes its first tool
call (a trivial script, or one that only prints, costs no thread hop). From the first call on, a
reader thread answers the calls and this thread waits for it with the deadline, so that a tool
that hangs cannot hold run_code past `timeout_seconds` (+ DEADLINE_GRACE); at the deadline the
watchdog kills the child, whatever either thread is doing.
"""

from __future__ import annotations

import difflib
import json
import logging
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import attrs

from nexus_core import CancelToken, Nexus, ToolCall, ToolResult

from .. import protocol
from ..child.errors import where_text
from .events import CodeExecChunk
from ..launchers.base import Child, Launcher
from ..protocol import CallMessage, DoneMessage, ErrorMessage, LineReader, PipeReader, ProtocolError
from . import fastpath
from .fastpath import Seat
from .journal import POSSIBLY_DONE, Cursor, Divergence, Journal, Placement
from .settings import DEFAULT_MAX_CHILD_BYTES, DEFAULT_MAX_CHILD_MESSAGES
from .streaming import Ledger, Streamer
from .watchdog import Watchdog

log = logging.getLogger("nexus_tool_code_exec")

#: the metadata key of an inner call of a journaled run that is unique to the run and the same in
#: every attempt of it (`<journal run id>/<call id>`): nexus.durable keys the call's approval by it
DURABLE_KEY = "durable_key"

#: a line longer than this is a protocol violation (or than what a result of max_result_bytes
#: needs, if that is more)
MAX_MESSAGE = 32 * 1024 * 1024
MAX_ERROR_CHARS = 8192
#: how long past the timeout a run waits for a reader held up in a tool call before it answers
DEADLINE_GRACE = 0.25
#: how long a suspended run waits for the journal lines of its last calls (written by their threads
#: just after their answers) before it resumes
JOURNAL_SETTLE = 10.0
#: while a run's clock is stopped (a person decides about an inner call), how often the waiting
#: thread looks again
PAUSED_POLL = 0.5

# -- the host's budget for one run: what a script can make the host hold or do -----------------
#: calls the host holds for one run at a time (received, not yet answered), per max_workers: a
#: script whose parallel.map keeps every worker busy has max_workers; past twice that, the host
#: stops reading the child until one is answered (the child's writes then wait in its pipe)
CALLS_IN_FLIGHT_PER_WORKER = 2
#: bytes of call messages the host holds for one run at a time; past it the run is stopped (one
#: call alone may be up to MAX_MESSAGE)
MAX_PENDING_CALL_BYTES = 128 * 1024 * 1024
#: calls refused past max_tool_calls before the run is stopped: each still costs the host a
#: refusal through the result gates and observers, and a line of calls.jsonl
MAX_CALLS_PAST_LIMIT = 100
#: output the host reads past max_output_bytes (and drops) before it stops the run: the runtime
#: honours the cap itself, so only a forged message goes past it; one, up to MAX_MESSAGE, is
#: dropped like any output past the cap, an endless stream of them is not read for ever
OUTPUT_SLACK_BYTES = MAX_MESSAGE
#: OUT messages per byte of max_output_bytes, and some: the runtime never sends an empty one but
#: the one that says the output was cut
OUTPUT_SLACK_MESSAGES = 1024
#: how often a reader held back by the in-flight bound looks whether its run is over
_BACKPRESSURE_POLL = 0.1
# Messages (of any kind) and bytes a script's process may send the host in one run (settings.py's
# DEFAULT_MAX_CHILD_MESSAGES and DEFAULT_MAX_CHILD_BYTES, `max_child_messages`, `max_child_bytes`):
# each is read and parsed by the host, in Python, under its GIL; past either the run is stopped.
# The final message is not counted against them.

# -- nothing outlives its run ------------------------------------------------------------------
#: when a run ends (its result, an error, its timeout, its caller's cancel), the inner calls it
#: made that are still running are cancelled (their CancelToken) and waited for this long, all
#: together: a tool that honours its token (the shell kills the command's processes) stops at
#: once; one that does not gets this long to finish, and the run says which did what
STOP_GRACE = 1.0

#: the host's encoder: what JSON has no type for (in a tool's output_structured) as its str()
_encode = protocol.encoder(default=str)


@attrs.define
class Settings:
    timeout_seconds: float
    max_output_bytes: int
    max_workers: int
    max_tool_calls: int
    max_result_bytes: int
    cpu_seconds: float | None = None  # the child's RLIMIT_CPU, to name a SIGKILL it led to
    max_child_messages: int = DEFAULT_MAX_CHILD_MESSAGES
    max_child_bytes: int = DEFAULT_MAX_CHILD_BYTES
    #: a run whose inner call waits this long for a person is suspended (None: never)
    suspend_after_seconds: float | None = None


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
    #: why the run's record (its session folder) could not be written, when it could not
    record_error: str | None = None
    #: for a timeout or a memory error: the script's line that was running (`at line 4: while
    #: True:`), which the text a model reads adds to `error`
    where: str | None = None
    #: run_code's own call was cancelled by its caller (the error starts with `cancelled:`)
    cancelled: bool = False
    #: the inner calls still running (or queued) when the run ended, each with what became of it
    #: (`shell (stopped)`, `write (finished: its effect happened)`)
    stopped_calls: list[str] = attrs.field(factory=list)
    #: the run was resumed from its journal: after a suspension in this process, or by
    #: `CodeExec.resume` after its host stopped
    resumed: bool = False
    #: the inner calls its last attempt got answered from the journal, without running them
    journal_calls: int = 0
    #: how often it was suspended in this process (its child ended while a person decided)
    suspensions: int = 0
    #: replay: the script ended before it made every call of the record (a resumed run's error)
    ended_short: str | None = None
    #: its host closed while it went on (`ScriptRun.leave`): left to be resumed, as after a kill
    #: of the host (its journal stays, its pending approvals too; no record is written)
    left: bool = False

    @property
    def stopped_text(self) -> str:
        """What became of the inner calls that were still running when the run ended."""
        n = len(self.stopped_calls)
        if not n:
            return ""
        return (f"{n} inner call{'s were' if n != 1 else ' was'} still running and "
                f"{'were' if n != 1 else 'was'} stopped: {', '.join(self.stopped_calls)}")

    @property
    def calls(self) -> list[dict[str, Any]]:
        """The inner calls: id, name, arguments and result, as calls.jsonl has them."""
        return [json.loads(line) for line in self.call_lines]


class BudgetExceeded(ProtocolError):
    """The child made the host hold or do more than one run may: the run is stopped, and its
    error is this exception's message as it stands (it names the limit)."""


class JournalDiverged(BudgetExceeded):
    """A resumed script asked for another call than its journal holds: the run is stopped, its
    error (`journal diverged: ...`) names both calls."""


@attrs.define
class _Ending:
    """How serving one child ended: its final message (DONE or ERROR), or the protocol violation
    that stopped it, or neither (it went away); and what the host then learnt of it."""

    final: DoneMessage | ErrorMessage | None = None
    violation: str | None = None
    error: str | None = None  # the host's own failure to serve it, or a budget it exceeded
    timed_out: bool = False
    status: int | None = None  # its exit status, where it had to be killed
    cpu_seconds: float | None = None
    messages: int = 0  # messages read from it
    lost: bool = False  # it died with its zygote (see ScriptRun.run)
    maker_gone: bool = False  # the zygote that made it died while it ran
    maker: str = "the zygote that forked it"  # what made it (`Child.maker_text`), for the error
    local: bool = True  # a child of this machine (`Child.local`); a remote one's loss is retried once


def _parallel_group(msg: CallMessage) -> int | bool:
    """Which of the script's `parallel` calls made the call `msg` (its `g`, 1, 2, ...), else
    whether one did (`p`): for calls.jsonl. The child says so, and it is only shown, never acted on."""
    return msg.get("g") or msg.get("p", False)


class _InnerCall:
    """An inner call the host took from the child, from its admission to its end (a plain
    slotted class: one is made per call)."""

    __slots__ = ("msg", "size", "future", "result", "done", "placement")

    def __init__(self, msg: CallMessage, size: int) -> None:
        self.msg = msg
        self.size = size  # its message's bytes, held against the run's budget until it ends
        self.future: Future[None] | None = None  # queued on the run's pool (a parallel call)
        self.result: ToolResult | None = None
        self.done = False
        self.placement: Placement | None = None  # where the journal has it, for a journaled run


@attrs.define(eq=False)
class _Pipe:
    """The child's pipe as the run reads it, passed from the thread that starts reading to the
    one that goes on at the first tool call (with that call). The child's fds are closed by
    whichever of the two threads lets go last: a reader held up in a tool call must not read a
    closed fd whose number was reused."""

    child: Child
    reader: PipeReader
    lines: LineReader
    first_call: tuple[CallMessage, int] | None = None
    _holders: int = 1
    _lock: threading.Lock = attrs.field(factory=threading.Lock)

    def hold(self) -> None:
        with self._lock:
            self._holders += 1

    def let_go(self) -> None:
        with self._lock:
            self._holders -= 1
            last = self._holders == 0
        if last:
            self.child.close()


class ScriptRun:
    def __init__(
        self,
        nexus: Nexus,
        call_id: str,
        settings: Settings,
        bound_tools: frozenset[str],
        emit_chunk: Callable[[CodeExecChunk], None],
        journal: Journal | None = None,
        resumed: bool = False,
    ) -> None:
        self.nexus = nexus
        self.call_id = call_id
        self.settings = settings
        self.bound_tools = bound_tools
        self.streamer = Streamer(emit_chunk, call_id, settings.max_output_bytes)
        self.ledger = Ledger()
        self._calls = 0
        self._pool: ThreadPoolExecutor | None = None
        self._child: Child | None = None  # the child answers go to, while the run has it
        self._write_lock = threading.Lock()
        self._messages = 0
        self._watchdog: Watchdog | None = None  # the deadline of the child being served
        self._pauses = 0  # pauses asked for before a watchdog was running (or between two)
        self._tell_spin = False  # the next answer tells the child to poll for the ones after it
        # the host's budget for this run (see MAX_PENDING_CALL_BYTES and the rest)
        # taken as a plain lock on every call (`_admit`, `_settle`); waited on only by a reader held
        # back by the in-flight bound and by the run's end, which count themselves in
        # `_budget_waiters` so that a call's end notifies only when someone waits
        self._budget_lock = threading.Lock()
        self._budget = threading.Condition(self._budget_lock)
        self._budget_waiters = 0
        self._in_flight = 0  # calls received, not yet answered
        self._pending_bytes = 0  # their messages' bytes
        #: id() of each such message -> the call, until it ends (the run's end waits for these)
        self._held: dict[int, _InnerCall] = {}
        self._past_limit = 0  # calls refused past max_tool_calls
        self._out_bytes = 0
        self._out_messages = 0
        self._serving = False  # a child is being served: a reader held back may go on waiting
        self._exceeded: str | None = None  # the budget error that stopped the run
        self.max_in_flight = CALLS_IN_FLIGHT_PER_WORKER * max(1, settings.max_workers)
        self.max_output = settings.max_output_bytes + OUTPUT_SLACK_BYTES
        self.max_out_messages = settings.max_output_bytes + OUTPUT_SLACK_MESSAGES
        self.stopped_calls: list[str] = []  # what became of each inner call the run's end found running
        self.where_line: int | None = None  # the line the child last said was running
        self._script = ""
        self._script_lines = 0
        # DONE carries the result's JSON text inside a JSON string: escaping at most doubles it
        self.max_message = max(MAX_MESSAGE, 2 * settings.max_result_bytes + 65536)
        self._received = 0  # messages from the script's process, this run
        self._received_bytes = 0
        #: the inner calls' token: cancelled when the run ends, whichever way
        self.cancel = CancelToken()
        self._stopped: str | None = None  # why run_code's own caller stopped it
        self._wake: threading.Event | None = None  # what the run's caller waits on, once a reader took over
        # -- the journal (journal.py): where each call falls in it, and suspending the run
        self.journal = journal
        self.resumed = resumed
        self._cursor: Cursor | None = None  # this attempt's, made as its child starts
        self._live: dict[str, Placement] = {}  # live calls by id, until they are answered
        self._suspend_timer: threading.Timer | None = None
        self._suspending = False  # the child was ended to suspend the run, not the run itself
        self.suspensions = 0
        self._used = 0.0  # seconds of the timeout earlier attempts used
        self._ended_short: str | None = None  # the script ended before making every journaled call
        self._leaving = False  # its host closes: the run is left to be resumed (`leave`)

    # -- the run ------------------------------------------------------------------------------

    def run(self, launcher: Launcher, seat: Seat, start: protocol.StartMessage,
            meanwhile: Callable[[], None] | None = None) -> Outcome:
        """Run the script of `start` in `seat`'s child, from START to its end. `meanwhile` is
        called once, while the child starts the script (this thread has nothing else to do).

        A child that died with its zygote before the script could do anything (a spare set to
        die with its parent, or one that found its parent gone while it set itself up) gets a
        successor: a child of a new zygote from `launcher`, which runs the script from the
        start. Nothing was lost: a script acts only through messages, and it sent none."""
        began = time.monotonic()
        self._script = start.get("script") or ""
        self._script_lines = self._script.count("\n") + 1
        ending = self._serve(seat, start, meanwhile)
        remote_losses = 0
        while (ending.lost or self._suspending) and not self._leaving:
            if ending.lost and not ending.local:
                remote_losses += 1
                if remote_losses > 1:  # a node's pool lost it twice: said, not tried a third time
                    ending.lost = False
                    break
            if self._suspending:  # resumed once its held calls (the one a person decides) are answered
                if not self._await_held_calls():
                    ending = _Ending()  # stopped by its caller while suspended
                    if not self._leaving:
                        self._stop_inner_calls(self._end_reason(ending, False))
                    break
                self._suspending = False
                self.suspensions += 1
                self.resumed = True
                self.ledger = Ledger()  # the resumed attempt records every call again
                self.streamer.restart()
                start = self._resumed_start(start)
            try:
                ending = self._serve(Seat.take(launcher), start, None)
            except Exception as exc:
                ending = _Ending(error=f"runtime error: could not start the script's process: {exc}")
                break
        if self._cursor is not None and self.resumed and ending.final is not None and \
                ending.final.get("t") == protocol.DONE and ending.error is None and not ending.violation:
            try:
                self._cursor.finish()
            except Divergence as exc:
                self._ended_short = str(exc)
        self.streamer.finish()
        return self._outcome(ending, time.monotonic() - began)

    def _resumed_start(self, start: protocol.StartMessage) -> protocol.StartMessage:
        """The START of a resumed attempt: the time left of the timeout (suspended time is not
        counted, the attempts' own is)."""
        sent = dict(start)
        sent["timeout"] = max(self.settings.timeout_seconds - self._used, 0.001)
        return sent  # type: ignore[return-value]

    def _await_held_calls(self) -> bool:
        """While suspended: wait for the calls still held (the one a person decides, and any
        running beside it) to end, so that their results are in the journal. False if the run's
        caller stopped it meanwhile."""
        with self._budget:
            while self._held:
                if self._stopped is not None:
                    return False
                self._budget_wait(PAUSED_POLL)
        if self.journal is not None:  # and their ends written (each goes out just after its answer)
            self.journal.settle(JOURNAL_SETTLE)
        return self._stopped is None

    def suspend(self) -> None:
        """An inner call has waited `suspend_after_seconds` for a person: end the child (its
        memory and process are freed), keep the journal; the run resumes in a fresh child once
        the calls it waits for are answered."""
        with self._write_lock:
            self._suspend_timer = None
            child = self._child
            if (not self._pauses or child is None or self._stopped is not None or self.journal is None
                    or not self.journal.resumable):
                return
            self._suspending = True
        log.info("run_code: %s suspended while a person decides about one of its calls", self.call_id)
        child.kill()

    def _serve(self, seat: Seat, start: protocol.StartMessage, meanwhile: Callable[[], None] | None) -> _Ending:
        """Serve one child: START, then its messages until its end; then end it."""
        seat.used = True
        child = seat.child
        self._messages = 0
        with self._write_lock:
            self._child = child
            if self._stopped is not None:  # its caller stopped the run while the child was coming
                child.kill()
        if self.journal is not None:
            self._cursor = Cursor(self.call_id, self.journal.entries(), live=not self.journal.closed)
        watchdog = Watchdog(child, max(self.settings.timeout_seconds - self._used, 0.0)).start()
        with self._write_lock:
            self._watchdog = watchdog
            for _ in range(self._pauses):
                watchdog.pause()
        pipe = _Pipe(child, fastpath.reader_of(child), LineReader(self.max_message))
        ending = _Ending()
        with self._budget:
            self._serving = True
        try:
            self._send(self._start_for(child, start))
            if meanwhile is not None:
                meanwhile()
            ending.final, ending.violation = self._read_to_the_end(seat, pipe)
        finally:
            seat.release()
            with self._budget:
                self._serving = False  # a reader held back by the in-flight bound lets go
                self._budget.notify_all()
            with self._write_lock:
                self._watchdog = None
            watchdog.cancel()
            if ending.final is not None and ending.final["t"] == protocol.DONE and not ending.violation:
                child.end()  # it finished: it is exiting by itself; make sure of it without waiting
            else:
                child.kill()
                ending.status = child.wait(timeout=2.0)
                ending.cpu_seconds = child.cpu_seconds
            with self._write_lock:
                self._child = None  # an answer that comes now is dropped: nobody waits for it
            self._used += watchdog.used()
            if not self._suspending and not self._leaving:
                self._stop_inner_calls(self._end_reason(ending, watchdog.fired))
            pipe.let_go()
            child.finished()
        ending.timed_out, ending.messages = watchdog.fired, self._messages
        # nothing from the child but (maybe) its sandbox's error: the script never started
        final = ending.final
        never_started = not ending.timed_out and not ending.violation and (
            (final is None and ending.messages == 0)
            or (final is not None and final["t"] == protocol.ERROR and final["kind"] == protocol.SANDBOX
                and ending.messages == 1))
        died_with_its_maker = child.died_with_its_maker()
        ending.lost = never_started and died_with_its_maker
        ending.maker_gone = final is None and died_with_its_maker
        ending.maker, ending.local = child.maker_text(), child.local
        return ending

    @staticmethod
    def _start_for(child: Child, start: protocol.StartMessage) -> protocol.StartMessage:
        """The START this child gets: without the bindings where it has them compiled."""
        if child.bindings_key is not None and child.bindings_key == start.get("bindings_key"):
            sent = dict(start)
            del sent["bindings"]
            return sent  # type: ignore[return-value]
        return start

    def _read_to_the_end(self, seat: Seat, pipe: _Pipe) -> tuple[DoneMessage | ErrorMessage | None, str | None]:
        """The final message, or the protocol violation, or (None, None) if the child went away
        or the deadline passed while a reader thread was held up in a tool call."""
        began = time.monotonic()
        try:
            ended = self._read_loop(pipe, hand_off=True)
        except Exception as exc:  # noqa: BLE001 - the run must end with an error, not hang
            log.exception("run_code: reading the script's process of %s failed", self.call_id)
            return None, f"the host failed reading it: {type(exc).__name__}"
        if ended is not None:
            return ended
        # the first tool call: a reader thread takes over the pipe, this thread waits for it
        finished = threading.Event()
        box: list[tuple[DoneMessage | ErrorMessage | None, str | None]] = []

        def read_on() -> None:
            if seat.place_reader():
                # on CPUs of their own: calls and answers come quickly, both sides poll for them
                pipe.reader.expect()
                self._tell_spin = True
            try:
                ended = self._read_loop(pipe, hand_off=False)
                assert ended is not None  # only a hand-off returns None
                box.append(ended)
            except Exception as exc:  # noqa: BLE001 - the run must end with an error, not hang
                log.exception("run_code: reading the script's process of %s failed", self.call_id)
                box.append((None, f"the host failed reading it: {type(exc).__name__}"))
            finally:
                finished.set()
                pipe.let_go()

        pipe.hold()
        self._wake = finished  # run_code's caller stopping the run wakes this thread too
        fastpath.readers.submit(read_on)
        while True:  # until the reader ends, or the deadline (which a pause moves on) passes
            left = self._time_left(began)
            if left is not None and left <= 0:
                return None, None
            if finished.wait(PAUSED_POLL if left is None else left):
                return box[0] if box else (None, None)
            if self._stopped is not None:
                return None, None

    def _time_left(self, began: float) -> float | None:
        """Seconds until this thread stops waiting for the reader (the deadline and its grace),
        or None while the clock is stopped for a person."""
        watchdog = self._watchdog
        if watchdog is None:
            return self.settings.timeout_seconds + DEADLINE_GRACE - (time.monotonic() - began)
        left = watchdog.remaining()
        return None if left is None else left + DEADLINE_GRACE

    def stop(self, reason: str) -> None:
        """run_code's own call was cancelled (Ctrl-C in the agent): end the run now, whatever it
        is doing. From any thread; the run then ends as `cancelled: ...`."""
        with self._write_lock:
            if self._stopped is not None:
                return
            self._stopped = reason or "its caller stopped it"
            child = self._child
        # the run's end cancels its inner calls and says what became of each (_stop_inner_calls)
        if child is not None:
            child.kill()
        wake = self._wake
        if wake is not None:
            wake.set()

    def leave(self) -> None:
        """Its host closes while the run goes on (`CodeExec.leave_runs`): end the child, as a
        kill of the host would, and leave the run to the next host: its inner calls are not
        cancelled (an approval one of them waits on stays pending, neither refused nor asked
        again), and it ends with `left` (its journal is kept, no record written)."""
        with self._write_lock:
            if self._stopped is not None:
                return
            self._leaving = True
            self._stopped = "its host closed"
            child = self._child
        if self.journal is not None:
            self.journal.close(keep=True)  # as a kill leaves it: what a call ends with from now on is not kept
        if child is not None:
            child.kill()
        wake = self._wake
        if wake is not None:
            wake.set()

    def pause(self) -> None:
        """Stop the run's clock: an inner call waits for a person (nestable; see `resume`)."""
        with self._write_lock:
            self._pauses += 1
            watchdog = self._watchdog
            after = self.settings.suspend_after_seconds
            if after is not None and self.journal is not None and self._suspend_timer is None:
                self._suspend_timer = threading.Timer(after, self.suspend)
                self._suspend_timer.daemon = True
                self._suspend_timer.start()
        if watchdog is not None:
            watchdog.pause()

    def resume(self) -> None:
        with self._write_lock:
            if not self._pauses:
                return
            self._pauses -= 1
            watchdog = self._watchdog
            timer = self._suspend_timer if not self._pauses else None
            if timer is not None:
                self._suspend_timer = None
                timer.cancel()
        if watchdog is not None:
            watchdog.resume()

    def _read_loop(self, pipe: _Pipe, hand_off: bool) -> tuple[DoneMessage | ErrorMessage | None, str | None] | None:
        """Handle the child's messages until the end: the final message, or a protocol violation.
        With `hand_off`, stop instead at the first tool call and return None: the call is left
        in `pipe` for the thread that goes on reading. Each message is counted against the run's
        budget, then read as what it is (`protocol.read_child`: every field checked once); from
        there on only typed messages are handled."""
        lines, read = pipe.lines, pipe.reader.read
        if pipe.first_call is not None:
            call, size = pipe.first_call
            pipe.first_call = None
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
                    msg = lines.take(data)
                    if msg is None:
                        continue
                self._messages += 1
                kind = msg.get("t")
                if kind != protocol.DONE and kind != protocol.ERROR:
                    self._count_message(lines.size)
                typed = protocol.read_child(msg)
                if typed is None:  # output of no stream of the script's: dropped, and counted
                    self._count_output(None)
                elif typed["t"] == protocol.OUT:
                    text = typed["d"]
                    self._count_output(text)
                    dropped = typed.get("dropped")
                    if dropped is not None:
                        self.streamer.mark(dropped)  # the tail follows
                    self.streamer.feed(typed["s"], text)
                    if typed.get("truncated"):
                        self.streamer.truncated = True
                    elif typed.get("held"):
                        self.streamer.held = True
                elif typed["t"] == protocol.CALL:
                    if hand_off:
                        pipe.first_call = (typed, lines.size)
                        return None
                    self._dispatch_call(typed, lines.size)
                elif typed["t"] == protocol.WHERE:
                    line = typed.get("line")
                    if line is not None:
                        self.where_line = line
                else:  # DONE or ERROR: the end
                    return typed, None
            except ProtocolError as exc:  # FramingError too
                return None, str(exc)

    # -- the host's budget ------------------------------------------------------------------------

    def _count_message(self, size: int) -> None:
        """Any message but the last: the run's budget of messages and bytes the host reads."""
        self._received += 1
        self._received_bytes += size + 1
        if self._received > self.settings.max_child_messages:
            self._exceeded = (
                f"host limit exceeded: the script's process sent more than {self.settings.max_child_messages} "
                "messages (max_child_messages), the most the host reads for one run; it was stopped")
            raise BudgetExceeded(self._exceeded)
        if self._received_bytes > self.settings.max_child_bytes:
            self._exceeded = (
                f"host limit exceeded: the script's process sent more than {self.settings.max_child_bytes} bytes "
                f"(max_child_bytes) in {self._received} messages, the most the host reads for one run; it was stopped")
            raise BudgetExceeded(self._exceeded)

    def _count_output(self, data: str | None) -> None:
        """An OUT message: the child honours max_output_bytes itself, so one that goes far past
        it (or sends pieces without output) is not the runtime speaking."""
        self._out_messages += 1
        if data is not None:
            self._out_bytes += len(data)
        if self._out_bytes > self.max_output or self._out_messages > self.max_out_messages:
            raise ProtocolError(f"more output than max_output_bytes ({self.settings.max_output_bytes}) allows")

    def _admit(self, msg: CallMessage, size: int, parallel: bool) -> _InnerCall:
        """Take the call `msg` of `size` bytes into the run's budget, or stop the run. A parallel call
        beyond the calls in flight the host holds waits here, on the thread that reads the
        child, so the child's further messages wait in its pipe. From here to its end the call
        is one the run's end waits for (`_stop_inner_calls`)."""
        inner = _InnerCall(msg, size)
        with self._budget_lock:
            if parallel:
                while self._in_flight >= self.max_in_flight and self._serving:
                    self._budget_wait(_BACKPRESSURE_POLL)
            if not self._serving:  # the run ended while this reader waited: nobody to answer
                raise ProtocolError("a call after the run was over")
            if self._in_flight and self._pending_bytes + size > MAX_PENDING_CALL_BYTES:
                self._exceeded = (
                    f"host limit exceeded: the script's calls waiting for an answer held more than "
                    f"{MAX_PENDING_CALL_BYTES >> 20} MiB of arguments at once, the most the host keeps for one run "
                    f"({self._in_flight + 1} calls, {self._pending_bytes + size} bytes); it was stopped")
                raise BudgetExceeded(self._exceeded)
            self._in_flight += 1
            self._pending_bytes += size
            self._held[id(msg)] = inner
        return inner

    def _settle(self, msg: CallMessage) -> None:
        """The call `msg` has ended (its answer about to go out, or it was refused): its place in
        the budget is free. Once per call, whichever way it ends (later calls do nothing)."""
        with self._budget_lock:
            inner = self._held.pop(id(msg), None)  # the message is alive until then: its id is its own
            if inner is None:
                return
            inner.done = True
            self._in_flight -= 1
            self._pending_bytes -= inner.size
            if self._budget_waiters:
                self._budget.notify_all()

    def _budget_wait(self, timeout: float) -> None:
        """Wait on the budget (its lock held) for a call's end or the run's, up to `timeout`."""
        self._budget_waiters += 1
        try:
            self._budget.wait(timeout)
        finally:
            self._budget_waiters -= 1

    # -- answering tool calls -------------------------------------------------------------------

    def _dispatch_call(self, msg: CallMessage, size: int = 0) -> None:
        """Take the call `msg` (checked by `protocol.read_child`): refuse it past max_tool_calls,
        else answer it here (a sequential call) or on the run's pool (a parallel one)."""
        self._calls += 1
        if self._calls > self.settings.max_tool_calls:
            self._past_limit += 1
            if self._past_limit > MAX_CALLS_PAST_LIMIT:
                self._exceeded = (
                    f"tool call limit exceeded: the script went on calling after its limit of "
                    f"{self.settings.max_tool_calls} calls ({MAX_CALLS_PAST_LIMIT} more were refused); it was stopped")
                raise BudgetExceeded(self._exceeded)
            limit = f"tool call limit reached: a script may make at most {self.settings.max_tool_calls} calls"
            call = self._call_of(msg)
            inner = self._admit(msg, size, parallel=False)
            try:
                self._reply(msg, call, self.nexus.refuse(call, limit, "failure"), size, time.time(), 0.0)
            finally:
                self._settle(msg)
            return
        parallel = msg.get("p", False)
        placement = self._place(msg) if self._cursor is not None else None
        inner = self._admit(msg, size, parallel)
        if placement is not None:
            inner.placement = placement
            if not placement.live:  # answered from the journal: no tool runs, no gate asks
                self._answer_from_journal(msg, size, placement)
                return
            self._live[placement.key] = placement
            assert self.journal is not None and placement.hashed is not None
            self.journal.placed(placement.entry, placement.hashed[0])
        if parallel:
            # made inside parallel.map: answered concurrently, at most max_workers at once. Under
            # the budget's lock: a call admitted just before the run ended must not start on a
            # new pool after `_stop_inner_calls` took the run's away (it ran so, past the stop)
            with self._budget_lock:
                serving = self._serving
                if serving:
                    if self._pool is None:
                        self._pool = ThreadPoolExecutor(self.settings.max_workers, thread_name_prefix="run_code-call")
                    inner.future = self._pool.submit(self._answer, msg, size, inner)
            if not serving:
                call = self._call_of(msg)
                inner.result = self.nexus.refuse(call, f"cancelled: {call.name} was not run, the run was over",
                                                 "cancelled")
                self.ledger.record(call, inner.result, size, time.time(), 0.0, _parallel_group(msg))
                self._settle(msg)
        else:
            # a lone sequential call: answered right here on the reading thread, no hop. The
            # run's caller waits on the reader with the deadline, so a tool that hangs here
            # cannot hold run_code past it.
            self._answer(msg, size, inner)

    def _answer(self, msg: CallMessage, size: int, inner: _InnerCall) -> None:
        try:
            self._answer_call(msg, size, inner)
        except Exception as exc:  # a waiting script must get an answer, not wait for its timeout
            log.exception("run_code: answering a call of %s failed", self.call_id)
            self._refuse(msg, f"the host could not answer this call: {type(exc).__name__}: {exc}", size)
        finally:
            if not inner.done:  # answering it failed on the way (the answer settles it otherwise)
                self._settle(msg)

    def _call_of(self, msg: CallMessage, placement: Placement | None = None) -> ToolCall:
        line = msg.get("line")
        # the line the child says made it (a script can claim any of its lines, no other)
        metadata: dict[str, Any] = {"script_line": line} if line is not None and line <= self._script_lines else {}
        if placement is not None:
            # the same id in every attempt of the run: the call's idempotency key (ctx.call_id);
            # and a key unique to the run too (call ids come from providers and can repeat across
            # sessions), which a durable backend keys the call's approval by, so that a resumed
            # run waits on the approval asked before its host stopped instead of asking again
            assert self.journal is not None
            metadata[DURABLE_KEY] = f"{self.journal.run_id}/{placement.key}"
            return ToolCall(id=placement.key, name=msg["name"], arguments=msg["args"], parent_call_id=self.call_id,
                            metadata=metadata)
        return ToolCall(name=msg["name"], arguments=msg["args"], parent_call_id=self.call_id, metadata=metadata)

    # -- the journal ------------------------------------------------------------------------------

    def _place(self, msg: CallMessage) -> Placement:
        """Where the call `msg` falls in the journal (see journal.Cursor), or the run stops."""
        assert self._cursor is not None
        group: int | bool | None = (msg.get("g") or True) if msg.get("p") else None
        try:
            return self._cursor.place(msg["name"], msg["args"], group)
        except Divergence as exc:
            self._exceeded = str(exc)
            raise JournalDiverged(self._exceeded) from None

    def _answer_from_journal(self, msg: CallMessage, size: int, placement: Placement) -> None:
        """Answer a call the journal holds: its recorded result; or, for one that was running when
        the host stopped, an error saying it may have happened (it is not run again)."""
        call = self._call_of(msg, placement)
        recorded = placement.recorded
        if recorded is not None:
            result = attrs.evolve(recorded, id=call.id, name=call.name)
        else:
            text = POSSIBLY_DONE.format(name=call.name, key=placement.key)
            result = self.nexus.refuse(call, text, "failure")  # result gates and observers see it
            # as nexus.durable marks a direct call it will not repeat
            result = attrs.evolve(result, metadata={**result.metadata, "possibly_done": True,
                                                    "idempotency_key": placement.key})
        self._reply(msg, call, result, size, time.time(), 0.0, placement)

    def asking(self, call: ToolCall, waiting: bool) -> None:
        """A person decides about the inner call `call` (`waiting`), or has answered: the journal
        says so, so that a host stopping meanwhile leaves it to be made again, not "possibly
        done" (nothing of it ran)."""
        placement = self._live.get(call.id)
        if placement is not None and self.journal is not None:
            self.journal.asking(placement.entry, waiting)

    def _answer_call(self, msg: CallMessage, size: int, inner: _InnerCall) -> None:
        """One inner call, from its CALL to its RESULT: the tool call it asks for, through the gates
        (`Nexus.invoke`, with the run's cancel token) or refused (a name not bound for this
        script), answered to the child and recorded (in the journal too: `inner.placement`). The
        one place an admitted call that runs is answered (`_answer_from_journal`: one that does not)."""
        started_at, started = time.time(), time.perf_counter()
        call = self._call_of(msg, inner.placement)
        if call.name not in self.bound_tools:
            # a name the script was not given (forged, or a tool registered after it started):
            # refused, and the refusal takes the result gates and observers like any result
            close = difflib.get_close_matches(call.name, sorted(self.bound_tools), n=1) if len(call.name) <= 200 else []
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            result = self.nexus.refuse(call, f"unknown tool: {call.name!r}{hint}", "unknown_tool")
        else:
            # the run's token: cancelled when the run ends, so nothing it started outlives it
            result = self.nexus.invoke(call, cancel=self.cancel)
        inner.result = result
        if inner.placement is not None:
            self._live.pop(call.id, None)
        self._reply(msg, call, result, size, started_at, time.perf_counter() - started, inner.placement)

    # -- the end of the run: nothing it started outlives it ---------------------------------------

    def _end_reason(self, ending: _Ending, timed_out: bool) -> str:
        if self._stopped is not None:
            return f"run_code was cancelled: {self._stopped}"
        if timed_out:
            return f"run_code's script timed out after {self.settings.timeout_seconds:g}s"
        if self._exceeded is not None:
            return "run_code's script was stopped at a limit"
        return "run_code's script ended"

    def _stop_inner_calls(self, reason: str) -> None:
        """The run is over (its child is gone): cancel the inner calls' token, refuse the calls
        still queued (they never start), and wait up to STOP_GRACE for the running ones, noting
        what became of each in `stopped_calls`."""
        with self._budget:
            still = list(self._held.values())
            pool, self._pool = self._pool, None
        if not still:
            if pool is not None:
                pool.shutdown(wait=False)
            return
        running: list[_InnerCall] = []
        for inner in still:  # the queued ones first: a running call that stops frees its worker for them
            if inner.future is not None and inner.future.cancel():  # queued: it never starts
                call = self._call_of(inner.msg)
                text = f"cancelled: {call.name} was not run, its caller stopped it ({reason})"
                self.ledger.record(call, self.nexus.refuse(call, text, "cancelled"), inner.size, time.time(), 0.0,
                                   _parallel_group(inner.msg))
                self._settle(inner.msg)
                self.stopped_calls.append(f"{call.name} (queued: never started)")
            else:
                running.append(inner)
        if pool is not None:
            pool.shutdown(wait=False)
        self.cancel.cancel(reason)
        deadline = time.monotonic() + STOP_GRACE
        with self._budget:
            while not all(inner.done for inner in running):
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._budget_wait(left)
        for inner in running:
            result = inner.result
            if not inner.done:
                what = f"still running after {STOP_GRACE:g}s: it did not stop when asked, its effect may yet happen"
            elif result is not None and result.error_kind == "cancelled":
                what = "never started"  # the cancel came before its handler (core refused it)
            elif result is None or result.is_error:
                what = "stopped"
            else:
                what = "finished: its effect happened"
            self.stopped_calls.append(f"{inner.msg['name']} ({what})")

    def _reply(self, msg: CallMessage, call: ToolCall, result: ToolResult, size: int,
               started_at: float, duration: float, placement: Placement | None = None) -> None:
        """Send the script the answer to its call `msg`, and record the call in the ledger (and,
        for a journaled run, in the journal: `placement` says where)."""
        rid = msg["id"]
        # the child needs these five (only those set are sent); calls.jsonl keeps the whole result
        reply: protocol.CallResult = {"output": result.output}
        if result.error is not None:
            reply["error"] = result.error
            reply["error_kind"] = result.error_kind
        if result.output_file is not None:
            reply["output_file"] = result.output_file
        if result.output_structured is not None:
            reply["output_structured"] = result.output_structured
        # the journal's own copy first: a suspended run resumes once its held calls are settled,
        # and then answers this one from the journal (its line is written below); the ledger is
        # this attempt's (a resumed attempt starts one of its own, and records this call again)
        ledger = self.ledger
        fresh = placement is not None and (placement.live or placement.entry.result is None)
        if fresh:
            assert placement is not None
            placement.entry.result = result
        # settled before the answer goes out: the call the child makes next, once it has it,
        # then never finds this one still counted
        self._settle(msg)
        answer: protocol.ResultMessage = {"t": protocol.RESULT, "id": rid, "result": reply}
        if self._tell_spin:
            self._tell_spin = False
            answer["spin"] = True
        self._send(answer)
        # turned into its line of calls.jsonl now, while the child reads the answer
        line = ledger.record(call, result, size, started_at, duration, _parallel_group(msg),
                                  from_journal=placement is not None and not placement.live,
                                  hashed=placement.hashed if placement is not None else None)
        if fresh and self.journal is not None:
            assert placement is not None
            self.journal.finished(placement.entry, result, line)

    def _refuse(self, msg: CallMessage, reason: str, size: int) -> None:
        self._settle(msg)
        self._send({"t": protocol.RESULT, "id": msg["id"],
                    "result": {"output": reason, "error": reason, "error_kind": "failure"}})

    def _send(self, msg: protocol.StartMessage | protocol.ResultMessage) -> None:
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

    # -- how it ended -------------------------------------------------------------------------

    def _outcome(self, ending: _Ending, duration: float) -> Outcome:
        final = ending.final
        outcome = Outcome(duration=duration, stdout="".join(self.streamer.parts),
                          stdout_truncated=self.streamer.truncated or bool(
                              final is not None and final["t"] == protocol.DONE and final.get("truncated")),
                          call_lines=self.ledger.lines(), stopped_calls=list(self.stopped_calls),
                          resumed=self.resumed, suspensions=self.suspensions,
                          journal_calls=self._cursor.from_journal if self._cursor is not None else 0)
        if self._leaving:
            outcome.error = ("suspended: run_code's host closed while the script ran; its journal is kept, and the "
                             "next long-lived host (or nexus runs resume) resumes it")
            outcome.left = True
        elif self._stopped is not None:
            outcome.error = f"cancelled: run_code was stopped by its caller ({self._stopped})"
            outcome.cancelled = True
        elif ending.error is not None:
            outcome.error = ending.error
        elif self._exceeded is not None:
            outcome.error = self._exceeded
        elif ending.timed_out:
            outcome.error = f"script timed out after {self.settings.timeout_seconds:g}s"
            outcome.where = where_text(self.where_line, self._script)
        elif ending.violation:
            outcome.error = f"runtime error: the script's process broke the protocol ({ending.violation}) and was stopped"
        elif final is None and ending.maker_gone:
            outcome.error = (f"runtime error: the script's process died with {ending.maker} (killed or "
                             "crashed: the next run is served by a new one)")
        elif final is None:
            outcome.error = self._death_message(ending.status, ending.cpu_seconds, self.settings.cpu_seconds)
        elif final["t"] == protocol.DONE:
            text = final["result"]
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
            line = final.get("line")
            if final["kind"] == protocol.MEMORY and line is not None:
                outcome.where = where_text(line, self._script)
        if self._ended_short is not None:
            if self.journal is not None and self.journal.closed:
                outcome.ended_short = self._ended_short  # replay: the result stands, the calls differ
            else:
                outcome.error, outcome.result, outcome.result_json = self._ended_short, None, None
        if outcome.error is not None and outcome.stopped_calls:
            outcome.error += f"; {outcome.stopped_text}"
        if outcome.error is not None and len(outcome.error) > MAX_ERROR_CHARS:
            outcome.error = outcome.error[:MAX_ERROR_CHARS] + f"... ({len(outcome.error)} characters in all)"
        return outcome

    @staticmethod
    def _error_message(final: ErrorMessage) -> str:
        kind, message = final["kind"], final["message"]
        if kind == protocol.MEMORY:
            return "memory limit exceeded"
        if kind == protocol.UNSERIALIZABLE:
            return f"result is not JSON-serializable: {message}"
        if kind == protocol.TOO_LARGE:
            return f"result is not JSON-serializable: the result is too large: {message}"
        if kind == protocol.SANDBOX:
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
