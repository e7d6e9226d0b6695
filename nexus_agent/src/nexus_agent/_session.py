"""The loop: one conversation with a model, its tool calls run through `Nexus.invoke`.

A task (`Session.send(text)`) goes: ask the model (`Nexus.complete`, so request gates and
response observers see every request) -> if it asked for no tool, that text is the answer ->
else run its calls, several at once, each through `Nexus.invoke` (gates, approvals, observers)
-> give it the results -> again. It stops on a final answer, on `max_turns` model requests, once
the token budget `max_tokens` is spent, when the person interrupts (`cancel()`), when a request
gate vetoes a request, or when a request fails. Calls the model asked for but that will not run
(the limit was reached, the task was interrupted) get an error result each, so the conversation
stays well formed for the next task.
"""

from __future__ import annotations

import contextvars
import fcntl
import logging
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, wait
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
from nexus_core.llm import Message, ModelCall, ModelError, ModelRequest, ModelResponse, Usage, split_model
from nexus_core.skills import skills_prompt
from nexus_core.wire import converter

from nexus_core import Answer, CancelToken, Question, ToolCall, ToolResult, Veto

from ._events import (
    AgentEvent,
    AgentResult,
    ModelResponded,
    StoppedCall,
    StopReason,
    TaskStopped,
    TextDelta,
    ToolCallFinished,
    ToolCallStarted,
)
from ._settings import PLUGIN_ID, Settings
from ._transcript import Transcript, read_transcript

if TYPE_CHECKING:
    from nexus_core import Nexus

log = logging.getLogger("nexus_agent")

#: how often a task waiting for tool calls checks whether it was interrupted
_POLL_SECONDS = 0.05
#: the reason a person's interrupt gives the task's token (the shell's result quotes it)
INTERRUPTED = "interrupted by the user"
#: what a resumed task answers for a call that was running when its host stopped
POSSIBLY_DONE = ("possibly done: {name} was running when this task's host stopped, and is not run again: its "
                 "effect may or may not have happened (its idempotency key is {key!r})")
#: the metadata key of a call that is unique to it and the same when its turn is resumed in
#: another host (`<session id>/<call id>`): a durable backend keys the call's approval by it
DURABLE_KEY = "durable_key"


def new_session_id() -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + os.urandom(4).hex()


def _call_json(call: ToolCall) -> dict[str, Any]:
    return {"id": call.id, "name": call.name, "arguments": call.arguments}


def _result_json(result: ToolResult) -> dict[str, Any]:
    data: dict[str, Any] = converter.unstructure(result)
    data.pop("is_error", None)
    return {k: v for k, v in data.items() if v not in (None, {}, "") or k == "output"}


def _usage_json(usage: Usage) -> dict[str, int]:
    return {"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens,
            "total_tokens": usage.total_tokens}


def _reply_json(reply: Any) -> dict[str, Any]:
    """What an approver answered, for the transcript (before the core reads it as an Answer)."""
    if isinstance(reply, Answer):
        return {"approved": reply.approved, "text": reply.text, "by": reply.by}
    if isinstance(reply, Veto):
        return {"approved": False, "text": reply.reason, "by": "user"}
    if isinstance(reply, bool):
        return {"approved": reply, "by": "user"}
    if isinstance(reply, str):
        return {"approved": True, "text": reply, "by": "user"}
    return {"approved": False, "reply": repr(reply)}


class Session:
    """One conversation: its history, its transcript, and the tasks sent to it one at a time.

    Made by `nx.plugin("nexus.agent").session(...)`. `send(text)` runs a task and returns an
    `AgentResult`; `cancel()`, from any thread, stops the running task (not the session: the
    next `send` goes on with the same history). Close it when done (or use it as a context
    manager): that ends its transcript and stops what still runs.

    Each task has a `CancelToken` of its own: its model requests (`ModelCall`) and its tool calls
    (`Nexus.invoke(..., cancel=token)`) are stopped through it. Tool calls run on daemon threads
    (at most `max_parallel_calls` at once), so a call that ignores its token cannot keep the
    process from exiting.
    """

    def __init__(self, nexus: Nexus, settings: Settings, *, model: str,
                 approver: Callable[[Question], Any] | None = None,
                 on_event: Callable[[AgentEvent], None] | None = None,
                 transcript: bool | None = None, resume: str | None = None,
                 lock: SessionLock | None = None) -> None:
        self.nexus = nexus
        self.settings = settings
        self.model = model
        self.provider, self.model_name = split_model(model)
        self.id = resume or new_session_id()
        self.history: list[Message] = []
        self.usage = Usage()
        self.approver = approver
        self.on_event = on_event
        keep = settings.transcripts if transcript is None else transcript
        path = transcript_path(nexus, self.id) if keep or resume else None
        #: what a resumed session goes on from: its transcript's records so far
        self._earlier: list[dict[str, Any]] = []
        #: held while the session is open: a session is open in one process at a time
        self._lock = lock if lock is not None or path is None else SessionLock.take(path)
        if resume is not None:
            assert path is not None
            if self._lock is None:
                raise LookupError(f"session {resume} is open in another process (a host goes on with it); "
                                  "it is not resumed twice")
            try:
                self._earlier = read_transcript(path)
            except (OSError, ValueError) as exc:
                self._lock.release()
                raise LookupError(f"no session {resume!r} to resume: cannot read {path}: {exc}") from None
            self.history = history_of(self._earlier)
        self.transcript = Transcript(path, self._earlier)
        self._token = CancelToken()  # the running task's (a new one for each task)
        self._slots = threading.BoundedSemaphore(settings.max_parallel_calls)
        self._stopped: list[StoppedCall] = []
        self._shown: set[str] = set()  # the ids of this task's calls whose result was shown
        self._busy = threading.Lock()
        self._closed = False
        self.transcript.write("session" if resume is None else "resumed", id=self.id, provider=self.provider,
                              model=self.model_name, workspace=str(nexus.config.workspace),
                              max_turns=settings.max_turns, max_tokens=settings.max_tokens)

    @property
    def transcript_path(self) -> str | None:
        return str(self.transcript.path) if self.transcript.path is not None else None

    # -- what a front end calls ---------------------------------------------------------------

    def send(self, text: str) -> AgentResult:
        """Run one task: `text` from the person, then the model and its tool calls until it
        stops. Never raises for the model's or a tool's failure: the result says why it
        stopped. One task at a time: a second `send` while one runs is a RuntimeError."""
        if self._closed:
            raise RuntimeError("this session is closed")
        if not self._busy.acquire(blocking=False):
            raise RuntimeError("a task is already running in this session")
        try:
            self._token = CancelToken()
            self._stopped, self._shown = [], set()
            result: AgentResult | None = None
            self.nexus.notify("nexus_agent_task_start", session=self, text=text)
            try:
                result = self._task(text)
                return result
            finally:
                self.nexus.notify("nexus_agent_task_end", session=self, result=result)
        finally:
            self._busy.release()

    def resume(self, cancel: CancelToken | None = None) -> AgentResult:
        """Go on with the task that was running when this session's host stopped (killed, or
        it crashed): a session made with `resume=ID` has the history of its transcript; the
        calls of the model's last response that have a result there are not run again, the
        others run now (a call whose approval was asked before waits on that approval, or takes
        its answer, with nexus.durable on), and the loop goes on with the model. No model
        request that has its response in the transcript is made again. `cancel`: the task's
        token (default: a new one; `cancel()` stops it either way). Raises LookupError when the
        session's last task ended."""
        pending = interrupted_task(self._earlier)
        if pending is None:
            raise LookupError(f"session {self.id}: its last task ended; nothing to resume")
        if not self._busy.acquire(blocking=False):
            raise RuntimeError("a task is already running in this session")
        try:
            self._token = cancel if cancel is not None else CancelToken()
            self._stopped, self._shown = [], set()
            calls, done, turns = pending
            results = {r.id: r for r in done}
            todo = tuple(c for c in calls if c.id not in results)
            if todo:  # (with every result in the transcript, the history has them already)
                for result in self._run_calls(self._pending_calls(todo)):
                    results[result.id] = result
                self.history.append(Message.tool(tuple(results[c.id] for c in calls)))
            return self._loop(turns, Usage(), "")
        finally:
            self._busy.release()

    def _resumed_calls(self, calls: tuple[ToolCall, ...]) -> tuple[ToolCall, ...]:
        """The calls a resumed task makes again. A run_code call whose run was interrupted is
        resumed from its journal (nexus.tool.code_exec), so its completed inner calls do not run
        again."""
        try:
            from nexus_tool_code_exec import engine_for
        except ImportError:
            return calls
        engine = engine_for(self.nexus)
        if engine is None:
            return calls
        interrupted = set(engine.interrupted_runs())
        return tuple(attrs.evolve(c, metadata={**c.metadata, "resume_run": True}) if c.id in interrupted else c
                     for c in calls)

    def _pending_calls(self, calls: tuple[ToolCall, ...]) -> tuple[ToolCall, ...]:
        """The calls of the interrupted task's last response that have no result: each made
        again, unless it had started and was not waiting for a person when its host stopped
        (it may have had its effect: it is answered as possibly done, never repeated); a run_code
        run that was interrupted is resumed from its journal instead."""
        started: set[str] = set()
        waiting: dict[str, bool] = {}
        for record in self._earlier:
            kind = record.get("type")
            if kind == "call" and isinstance(record.get("call"), dict):
                started.add(str(record["call"].get("id")))
            elif kind in ("waiting", "answered"):
                waiting[str(record.get("call_id"))] = kind == "waiting"
        runs = {c.id for c in self._resumed_calls(calls) if c.metadata.get("resume_run")}
        made = []
        for call in calls:
            if call.id in runs:
                made.append(attrs.evolve(call, metadata={**call.metadata, "resume_run": True}))
            elif call.id in started and not waiting.get(call.id, False):
                made.append(attrs.evolve(call, metadata={**call.metadata, "possibly_done": True}))
            else:
                made.append(call)
        return tuple(made)

    def cancel(self, reason: str = INTERRUPTED) -> None:
        """Stop the running task now: its model request ends (its connection closed), no new
        request or call starts, and the running tool calls are cancelled (their `CancelToken`:
        the shell kills the command's processes, run_code its script). The task returns once
        they have ended, or after `stop_grace_seconds` for a call that does not stop; the
        result's `stopped` says what became of each. Safe from any thread, also when nothing
        runs (then it does nothing)."""
        self._token.cancel(reason)

    @property
    def cancelled(self) -> bool:
        return self._token.cancelled

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.cancel("the session was closed")
        self.transcript.close()
        if self._lock is not None:
            self._lock.release()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the loop -----------------------------------------------------------------------------

    def system_prompt(self) -> str:
        """The configured system prompt, the workspace, and the skills prompt (when skills exist)."""
        parts = [self.settings.system_prompt.strip(), f"The workspace is {self.nexus.config.workspace}."]
        skills = skills_prompt(self.nexus).strip()
        if skills:
            parts.append(skills)
        return "\n\n".join(p for p in parts if p)

    def _task(self, text: str) -> AgentResult:
        self.history.append(Message.user(text))
        self.transcript.write("message", role="user", text=text)
        return self._loop(0, Usage(), "")

    def _loop(self, turns: int, usage: Usage, last_text: str) -> AgentResult:
        system = self.system_prompt()
        while True:
            if self.cancelled:
                return self._stop("interrupted", last_text, turns, usage)
            turns += 1
            request = ModelRequest(
                provider=self.provider, model=self.model_name, messages=tuple(self.history), system=system,
                tools=tuple(self.nexus.model_tools()), max_output_tokens=self.settings.max_output_tokens,
                metadata={"session": self.id, "turn": turns},
            )
            self.transcript.write("request", turn=turns, id=request.id, provider=request.provider,
                                  model=request.model, messages=len(request.messages),
                                  tools=[t.name for t in request.tools])
            try:
                response = self._complete(request)
            except ModelError as exc:
                reason: StopReason = {"vetoed": "vetoed", "cancelled": "interrupted"}.get(exc.kind, "error")  # type: ignore[assignment]
                if self.cancelled:
                    reason = "interrupted"
                error = None if reason == "interrupted" else str(exc)
                return self._stop(reason, last_text, turns, usage, error=error)
            usage += response.usage
            self.usage += response.usage
            last_text = response.text
            self.transcript.write("response", turn=turns, id=response.id, model=response.model,
                                  text=response.text, tool_calls=[_call_json(c) for c in response.tool_calls],
                                  usage=_usage_json(response.usage), stop_reason=response.stop_reason)
            self._emit(ModelResponded(turns, response))
            self.history.append(Message.assistant(response.text, response.tool_calls))
            if not response.tool_calls:
                return self._stop("final_answer", response.text, turns, usage)
            limit = self._limit(turns, usage)
            if limit is not None:
                reason, why = limit
                self._not_run(response.tool_calls, f"not run: {why}")
                return self._stop(reason, last_text, turns, usage)
            results = self._run_calls(response.tool_calls)
            self.history.append(Message.tool(tuple(results)))

    def _complete(self, request: ModelRequest) -> ModelResponse:
        streamed: list[str] = []

        def on_text(delta: str) -> None:
            streamed.append(delta)
            self._emit(TextDelta(delta))

        call = ModelCall(on_text=on_text, stream=self.settings.stream)
        forget = self._token.on_cancel(call.cancel)  # at once, if the task was cancelled already
        try:
            response = self.nexus.complete(request, call)
        except ModelError:
            if streamed:  # what the person saw of a response that never ended
                self.transcript.write("partial_response", turn=request.metadata.get("turn"), text="".join(streamed))
            raise
        finally:
            forget()
        if response.text and not streamed and not self.cancelled:  # not streamed: the text whole
            self._emit(TextDelta(response.text))
        return response

    def _limit(self, turns: int, usage: Usage) -> tuple[StopReason, str] | None:
        if turns >= self.settings.max_turns:
            return "max_turns", f"the turn limit ({self.settings.max_turns} model requests) is reached"
        budget = self.settings.max_tokens
        if budget is not None and usage.total_tokens >= budget:
            return "max_tokens", f"the token budget ({usage.total_tokens} of {budget} tokens) is spent"
        return None

    def _not_run(self, calls: tuple[ToolCall, ...], why: str) -> None:
        """Answer calls that will not run (through the result gates and observers), so the
        conversation has a result for each call the model made."""
        results = []
        for call in calls:
            result = self.nexus.refuse(call, why, "cancelled")
            self._record_result(call, result)
            results.append(result)
        self.history.append(Message.tool(tuple(results)))

    def _run_calls(self, calls: tuple[ToolCall, ...]) -> list[ToolResult]:
        """Run the calls at once (at most `max_parallel_calls` at a time) and wait for them. When
        the task is cancelled meanwhile, the calls are too (the task's token): wait for them to
        end, `stop_grace_seconds` at most; what became of each that was still running is the
        task's `stopped`, and is not shown as a finished call."""
        token = self._token
        futures = {self._start(call, token): call for call in calls}
        pending = set(futures)
        while pending and not token.cancelled:
            _, pending = wait(pending, timeout=_POLL_SECONDS, return_when=FIRST_COMPLETED)
        if pending:  # interrupted: the calls' token is cancelled too; give them the time to end
            _, pending = wait(pending, timeout=self.settings.stop_grace_seconds)
        results: list[ToolResult] = []
        for future, call in futures.items():
            if future in pending:
                result = ToolResult(
                    id=call.id, name=call.name, error_kind="cancelled",
                    output=f"interrupted by the user; the call had not ended {self.settings.stop_grace_seconds:g}s later",
                    error=f"interrupted by the user; the call had not ended {self.settings.stop_grace_seconds:g}s later")
                self.transcript.write("tool_interrupted", call=_call_json(call))
            else:
                result = future.result()
            if call.id not in self._shown:  # it ended after the interrupt, or has not ended
                self._stopped.append(StoppedCall(call, result, ended=future not in pending))
            results.append(result)
        return results

    def _start(self, call: ToolCall, token: CancelToken) -> Future[ToolResult]:
        """The call, on a daemon thread of its own once a slot is free."""
        future: Future[ToolResult] = Future()

        # in a copy of this thread's context variables, as asyncio.to_thread does: what a tracer
        # made current for the task (its span) is current for the task's calls too
        context = contextvars.copy_context()

        def run() -> None:
            with self._slots:
                try:
                    future.set_result(context.run(self._invoke, call, token))
                except BaseException as exc:  # noqa: BLE001 - the task's thread reads it
                    future.set_exception(exc)

        threading.Thread(target=run, name=f"nexus-agent-call-{call.name}", daemon=True).start()
        return future

    def _invoke(self, call: ToolCall, token: CancelToken) -> ToolResult:
        self._emit(ToolCallStarted(call))
        invalid = call.metadata.get("invalid_arguments")
        if invalid:  # the provider could not read the arguments the model wrote
            result = self.nexus.refuse(call, f"invalid arguments for {call.name}: {invalid}", "invalid_arguments")
        elif call.metadata.get("resume_run"):  # a run_code run interrupted with its host: from its journal
            result = self._resume_run(call, token)
        elif call.metadata.get("possibly_done"):  # it was running when the turn's host stopped
            # the key its handler was given (ctx.idempotency_key: an ordinary call's id)
            result = self.nexus.refuse(call, POSSIBLY_DONE.format(name=call.name, key=call.id), "failure")
            result = attrs.evolve(result, metadata={**result.metadata, "possibly_done": True, "idempotency_key": call.id})
        else:
            # keyed by the session, so that the turn resumed in another host finds its approval;
            # its start is recorded first, so that a resumed turn does not run again a call that
            # may have had its effect (it was running, not waiting for a person, when its host stopped)
            keyed = attrs.evolve(call, metadata={**call.metadata, DURABLE_KEY: self._key(call)})
            self.transcript.write("call", call=_call_json(call))
            result = self.nexus.invoke(keyed, approver=self._approver(), context={"session": self.id}, cancel=token)
        self._record_result(call, result, token)
        return result

    def _key(self, call: ToolCall) -> str:
        return f"{self.id}/{call.id}"

    def asking(self, call_id: str, waiting: bool) -> None:
        """A person is asked about the call `call_id` of this session (`waiting`), or answered
        (the agent plugin's nexus_ask_start / nexus_ask_end): a resumed turn makes a call that
        was waiting for a person again, and does not repeat one that was running."""
        self.transcript.write("waiting" if waiting else "answered", call_id=call_id)

    def _resume_run(self, call: ToolCall, token: CancelToken) -> ToolResult:
        from nexus_tool_code_exec import engine_for

        engine = engine_for(self.nexus)
        try:
            assert engine is not None
            return engine.resume(call.id, approver=self._approver(), cancel=token)
        except LookupError as exc:  # another host resumed it meanwhile: it is not run twice
            text = f"run_code call {call.id} was not resumed here: {exc}; see `nexus runs show {call.id}`"
            return self.nexus.refuse(call, text, "failure")

    def _record_result(self, call: ToolCall, result: ToolResult, token: CancelToken | None = None) -> None:
        if token is not None and token.cancelled:
            # the task was interrupted: what this call came to is the task's `stopped`, said
            # once by the front end; a result after the task returned is only recorded
            late = {"late": True} if self._token is not token or not self._busy.locked() else {}
            self.transcript.write("tool_result", call=_call_json(call), result=_result_json(result), **late)
            return
        self.transcript.write("tool_result", call=_call_json(call), result=_result_json(result))
        self._shown.add(call.id)
        self._emit(ToolCallFinished(call, result))

    def _approver(self) -> Callable[[Question], Any] | None:
        inner = self.approver if self.approver is not None else self.nexus.approver
        if inner is None:
            return None

        def recorded(question: Question) -> Any:
            self.transcript.write("ask", kind=question.kind, call=_call_json(question.call), text=question.text,
                                  options=list(question.options), asked_by=list(question.asked_by))
            if self.cancelled:
                reply: Any = Answer(False, "the task was interrupted", by="nobody")
            else:
                reply = inner(question)
            self.transcript.write("answer", call_id=question.call.id, **_reply_json(reply))
            return reply

        return recorded

    def _stop(self, reason: StopReason, text: str, turns: int, usage: Usage, error: str | None = None) -> AgentResult:
        result = AgentResult(text=text, stop_reason=reason, turns=turns, usage=usage, session_id=self.id,
                             transcript=self.transcript_path, error=error, stopped=tuple(self._stopped))
        self.transcript.write("stop", reason=reason, text=text, turns=turns, usage=_usage_json(usage),
                              error=error)
        self._emit(TaskStopped(result))
        return result

    def _emit(self, event: AgentEvent) -> None:
        if self.on_event is None:
            return
        try:
            self.on_event(event)
        except Exception:
            log.exception("the session's on_event callback raised on %s", type(event).__name__)


def transcript_path(nexus: Nexus, session_id: str) -> Path:
    if not session_id or "/" in session_id or session_id.startswith("."):
        raise LookupError(f"no session {session_id!r}: a session id is a transcript's name")
    return Path(nexus.config.session_dir) / "plugins" / PLUGIN_ID / f"{session_id}.jsonl"


class SessionLock:
    """An exclusive lock on a session's transcript (`<id>.lock` beside it, `flock`): held by the
    process whose session is open, so that two hosts never go on with one session; the kernel
    lets it go when that process ends, killed or not."""

    def __init__(self, fd: int) -> None:
        self._fd: int | None = fd

    @classmethod
    def take(cls, transcript: Path) -> SessionLock | None:
        """The lock of the session whose transcript is `transcript`, or None when another process
        (or another open session of this one) holds it."""
        transcript.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(transcript.with_suffix(".lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return None
        return cls(fd)

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # (closing the last descriptor of the open file lets the flock go)


@attrs.frozen
class InterruptedTurn:
    """A session whose last task was cut while some of its calls waited for a person (its host
    killed, or closed): `waiting` holds those calls' durable keys (`<session id>/<call id>`,
    what a durable backend keys their approvals by). `AgentPlugin.interrupted_turns()` makes it
    with the session's lock taken: `resume()` goes on with the task (and lets the lock go after
    it), `release()` leaves the session to another host."""

    session_id: str
    waiting: tuple[str, ...]
    lock: SessionLock
    plugin: Any = attrs.field(repr=False)

    def resume(self, cancel: CancelToken | None = None) -> AgentResult:
        """Go on with the task (`Session.resume(cancel)`), in this thread, and close the
        session after it."""
        try:
            session: Session = self.plugin.session(resume=self.session_id, lock=self.lock)
        except BaseException:
            self.lock.release()
            raise
        with session:
            return session.resume(cancel)

    def release(self) -> None:
        self.lock.release()


def waiting_calls(records: list[dict[str, Any]]) -> tuple[str, ...] | None:
    """The ids of the calls of an interrupted task (`interrupted_task`) that have no result and
    were waiting for a person when its host stopped (their last `waiting` has no `answered`);
    None when the task ended or no call of it waits."""
    pending = interrupted_task(records)
    if pending is None:
        return None
    calls, done, _ = pending
    finished = {r.id for r in done}
    waiting: dict[str, bool] = {}
    for record in records:
        if record.get("type") in ("waiting", "answered"):
            waiting[str(record.get("call_id"))] = record.get("type") == "waiting"
    ids = tuple(c.id for c in calls if c.id not in finished and waiting.get(c.id, False))
    return ids or None


def interrupted_sessions(nexus: Nexus) -> list[tuple[str, tuple[str, ...]]]:
    """`AgentPlugin.interrupted_sessions`: each session whose last task did not end and whose
    lock is free, with the calls of it that wait for a person."""
    folder = Path(nexus.config.session_dir) / "plugins" / PLUGIN_ID
    found: list[tuple[str, tuple[str, ...]]] = []
    for path in sorted(folder.glob("*.jsonl")) if folder.is_dir() else ():
        try:
            records = read_transcript(path)
        except (OSError, ValueError):
            continue
        if interrupted_task(records) is None:
            continue
        lock = SessionLock.take(path)
        if lock is None:  # open in a live process
            continue
        lock.release()
        found.append((path.stem, waiting_calls(records) or ()))
    return found


def interrupted_turns(plugin: Any, nexus: Nexus) -> list[InterruptedTurn]:
    """The sessions of this session folder whose task waits for a person and that no process has
    open, each with its lock taken (see `InterruptedTurn`)."""
    folder = Path(nexus.config.session_dir) / "plugins" / PLUGIN_ID
    turns: list[InterruptedTurn] = []
    for path in sorted(folder.glob("*.jsonl")) if folder.is_dir() else ():
        try:
            ids = waiting_calls(read_transcript(path))
        except (OSError, ValueError):
            continue
        if ids is None:
            continue
        lock = SessionLock.take(path)
        if lock is None:  # open in a live process (its host), or taken over by another host
            continue
        try:  # read again under the lock: another host may have gone on with it meanwhile
            ids = waiting_calls(read_transcript(path))
        except (OSError, ValueError):
            ids = None
        if ids is None:
            lock.release()
            continue
        turns.append(InterruptedTurn(path.stem, tuple(f"{path.stem}/{i}" for i in ids), lock, plugin))
    return turns


def _call_of(data: dict[str, Any]) -> ToolCall:
    return ToolCall(id=str(data["id"]), name=str(data["name"]), arguments=dict(data.get("arguments") or {}))


def _result_of(data: dict[str, Any]) -> ToolResult:
    result: ToolResult = converter.structure(data, ToolResult)
    return result


def history_of(records: list[dict[str, Any]]) -> list[Message]:
    """A conversation's messages from its transcript: the person's, the model's responses, and
    the results of each response's calls (a response whose calls have not all ended, the last
    one of an interrupted task, gets no results here: `interrupted_task`)."""
    history: list[Message] = []
    calls: list[ToolCall] = []
    results: dict[str, ToolResult] = {}

    def flush() -> None:
        if calls and all(c.id in results for c in calls):
            history.append(Message.tool(tuple(results[c.id] for c in calls)))
        calls.clear()
        results.clear()

    for record in records:
        kind = record.get("type")
        if kind == "message" and record.get("role") == "user":
            flush()
            history.append(Message.user(str(record.get("text", ""))))
        elif kind == "response":
            flush()
            calls.extend(_call_of(c) for c in record.get("tool_calls") or ())
            history.append(Message.assistant(str(record.get("text") or ""), tuple(calls)))
        elif kind == "tool_result" and isinstance(record.get("call"), dict) and isinstance(record.get("result"), dict):
            call_id = str(record["call"].get("id"))
            if any(c.id == call_id for c in calls):
                results[call_id] = _result_of(record["result"])
    flush()
    return history


def interrupted_task(records: list[dict[str, Any]]) -> tuple[tuple[ToolCall, ...], list[ToolResult], int] | None:
    """Where the transcript's last task stopped when it did not end (no `stop` after its last
    message): the calls of its last response, the results the transcript has for them, and how
    many model requests it made; None when it ended."""
    start = max((i for i, r in enumerate(records) if r.get("type") == "message" and r.get("role") == "user"),
                default=None)
    if start is None or any(r.get("type") == "stop" for r in records[start:]):
        return None
    task = records[start:]
    turns = sum(1 for r in task if r.get("type") == "request")
    responses = [r for r in task if r.get("type") == "response"]
    if not responses:
        return (), [], turns
    calls = tuple(_call_of(c) for c in responses[-1].get("tool_calls") or ())
    ids = {c.id for c in calls}
    after = task[task.index(responses[-1]):]
    done = [_result_of(r["result"]) for r in after if r.get("type") == "tool_result"
            and isinstance(r.get("call"), dict) and r["call"].get("id") in ids and isinstance(r.get("result"), dict)]
    return calls, done, turns
