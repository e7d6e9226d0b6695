"""`DurableBackend`: nexus.durable's `nexus_core.Durability`, on DBOS.

- `await_answer`: the approval becomes a pending DBOS workflow (`_workflows`); this process's
  approver, when the call has one, is asked in a thread of its own and its answer sent to the
  workflow like any other process's; the first answer the workflow receives is the answer.
- `run_handler`: a call runs in place, as without the backend (no record, no cost), unless it is
  a call this process runs again for a host that was killed: then the handler is a DBOS step,
  and its start is claimed first (`_claims`).
- `recover` (`Nexus.recover()`, called by long-lived hosts; at `started` with `recover: start`):
  take over what killed hosts of this machine left: their pending approvals, and their
  interrupted run_code runs (resumed from their journals).
"""

from __future__ import annotations

import hashlib
import logging
import threading
import uuid
from collections.abc import Callable
from typing import Any

from nexus_core import Answer, CancelToken, Nexus, Question, ToolCall, ToolDef, ToolResult

from . import _engine, _workflows
from ._claims import Claims
from ._records import ANSWER_TOPIC, APPROVAL_WORKFLOW, as_answer, new_record

log = logging.getLogger("nexus_durable")

HANDLER_STEP = "nexus.durable.handler"
#: the metadata key of a call made again in each attempt of its run, unique to the call
#: (run_code's inner calls of a journaled run: nexus_tool_code_exec.host.runner.DURABLE_KEY)
DURABLE_KEY = "durable_key"
#: how long closing waits for a call taken over from a killed host to finish
CLOSE_WAIT_SECONDS = 60.0
#: the statuses of a workflow that has no result yet
WAITING = frozenset({"PENDING", "ENQUEUED", "DELAYED"})
#: what a call still waiting on its approval when its host closes is answered, in that host only
#: (the approval is not answered: it stays pending, and the next long-lived host takes it over)
HOST_CLOSED = ("its host closed while the call waited for approval; the approval stays pending, and the next "
               "long-lived host with this durable database takes it over")


def approval_id_for(key: str) -> str:
    """The approval id of a call with a durable key (`metadata["durable_key"]`): the same for
    every attempt of the call, and unique to it."""
    return "approval-" + hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def possibly_done(call: ToolCall, key: str) -> ToolResult:
    text = (f"interrupted: {call.name} was running when its host stopped (killed, or it crashed), so it may "
            f"have done its work; it is not run again (idempotency key {key})")
    return ToolResult(id=call.id, name=call.name, output=text, error=text, error_kind="failure",
                      metadata={"possibly_done": True, "idempotency_key": key})


class DurableBackend:
    def __init__(self, nexus: Nexus, url: str, expiry: float | None, recover: str = "auto") -> None:
        self.nexus = nexus
        self.url = url
        self.expiry = expiry
        self.recover_mode = recover
        self._recovered_runs: set[str] = set()  # run_code calls this host resumed (once each)
        self._turns: dict[str, CancelToken] = {}  # session id -> the token of an agent turn taken over here
        self._turn_threads: list[threading.Thread] = []
        self._turns_lock = threading.Lock()
        self._claims: Claims | None = None
        self._closed = False
        self._closing = threading.Event()  # set as the host closes: the waits of this process end

    # -- nexus_core.Durability ---------------------------------------------------------------

    def await_answer(self, question: Question, ask_here: Callable[[], Answer] | None,
                     cancel: CancelToken | None = None) -> Answer:
        from dbos import DBOS, SetWorkflowID

        again = _workflows.resuming()
        if again is not None and question.call.id == again.call_id:
            return again.answer  # the recovered call's gates ask again: the answer is recorded
        key = question.call.metadata.get(DURABLE_KEY) if isinstance(question.call.metadata, dict) else None
        if isinstance(key, str) and key:
            # a call that is made again in each attempt of its run (an inner call of a journaled
            # run_code run): its approval is keyed by the call, so the attempt after a host that
            # stopped finds the one asked before (listed once), and waits on it or takes its answer
            approval_id = approval_id_for(key)
            handle = self._asked_before(approval_id)
            if handle is not None:
                log.warning("approval %s (%s) was asked before its run's host stopped: waiting on it (nexus "
                            "approvals answer %s allow|deny)", approval_id, question.call.name, approval_id)
                return self._wait(approval_id, handle, cancel)
        else:
            approval_id = f"approval-{uuid.uuid4().hex[:12]}"
        record = new_record(approval_id, question, self.expiry, _workflows.PROCESS_TOKEN, _engine.executor_id())
        with SetWorkflowID(approval_id):
            handle = DBOS.start_workflow(_workflows.approval_workflow, record)
        if ask_here is not None:
            threading.Thread(target=self._answer_here, args=(approval_id, ask_here), daemon=True,
                             name=f"nexus-durable-ask-{approval_id}").start()
        else:
            log.warning("approval %s (%s) waits for an answer: nexus approvals answer %s allow|deny",
                        approval_id, question.call.name, approval_id)
        return self._wait(approval_id, handle, cancel)

    def _wait(self, approval_id: str, handle: Any, cancel: CancelToken | None) -> Answer:
        forget = cancel.on_cancel(lambda: self._stopped(approval_id, cancel)) if cancel is not None else None
        try:
            # the workflow's status, polled (as DBOS's own get_result polls it), so that this
            # host's close ends the wait: the approval then stays pending, for the next host
            while handle.get_status().status in WAITING:
                if self._closing.wait(_engine.POLL_SECONDS):
                    log.info("approval %s still waits as its host closes: it stays pending, for the next host",
                             approval_id)
                    return Answer(False, HOST_CLOSED, by="nobody")
            outcome = handle.get_result()
        finally:
            if forget is not None:
                forget()
        return as_answer(outcome["answer"])

    @staticmethod
    def _asked_before(approval_id: str) -> Any:
        """The handle of approval `approval_id` when it was asked already (pending or answered),
        else None. A pending one whose host has ended is taken over here: it only waits for its
        answer (an inner call's approval never runs its call), which this process then receives."""
        from dbos import DBOS

        status = DBOS.get_workflow_status(approval_id)
        if status is None:
            return None
        if status.status == "PENDING" and _engine._alive_here(status.executor_id or "") is False:
            log.info("approval %s: its host ended; this process waits for its answer", approval_id)
            return DBOS.resume_workflow(approval_id)
        return DBOS.retrieve_workflow(approval_id)

    @staticmethod
    def _stopped(approval_id: str, cancel: CancelToken) -> None:
        """The asking call was stopped (Ctrl-C, its run_code script ended): the approval is
        answered as a refusal, so the wait ends and nobody answers a call no one waits for."""
        from dbos import DBOS

        why = f" ({cancel.reason})" if cancel.reason else ""
        try:
            DBOS.send(approval_id, {"approved": False, "by": "nobody",
                                    "text": f"the call was stopped while it waited for approval{why}"},
                      topic=ANSWER_TOPIC)
        except Exception:
            log.exception("could not end the wait of approval %s", approval_id)

    @staticmethod
    def _answer_here(approval_id: str, ask_here: Callable[[], Answer]) -> None:
        from dbos import DBOS

        answer = ask_here()
        try:
            # a workflow that has its answer already (from another process, or expired) ignores it
            DBOS.send(approval_id, {"approved": answer.approved, "text": answer.text, "by": answer.by},
                      topic=ANSWER_TOPIC)
        except Exception:
            log.exception("could not send this process's answer to approval %s", approval_id)

    def run_handler(self, call: ToolCall, tool: ToolDef, run: Callable[[str], ToolResult]) -> ToolResult:
        if not _workflows.running_resumed:  # the path of nearly every call: run it in place
            return run(call.id)
        again = _workflows.resuming()
        if again is None or call.id != again.call_id:
            return run(call.id)
        from dbos import DBOS

        key = f"{again.approval_id}/{call.id}"

        def once() -> ToolResult:
            if not self._claim(key):
                log.warning("call %s (%s) was running when its host stopped: reported as possibly done, not run "
                            "again", call.id, call.name)
                return possibly_done(call, key)
            return run(key)

        result: ToolResult = DBOS.run_step({"name": HANDLER_STEP}, once)
        return result

    def started(self) -> None:
        _workflows.set_host(self)
        if self.recover_mode == "start":
            self.recover()

    def recover(self) -> None:
        """This Nexus is a long-lived host (`Nexus.recover()`): take over what the killed hosts of
        this machine left. The approvals they waited on go on waiting here (and a direct call
        runs here once answered); each interrupted run_code run is resumed here, in a thread of
        its own, from its journal: a run that was waiting on an approval waits on the same one
        again (suspended after `suspend_after_seconds`), and goes on once it is answered. Nothing
        with `recover: off`."""
        if self.recover_mode == "off" or self._closed:
            return
        try:
            _engine.recover_dead((APPROVAL_WORKFLOW,))
        except Exception:
            log.exception("could not recover the durable calls of ended processes")
        self._resume_runs()
        self._resume_turns()

    def _resume_turns(self) -> None:
        """Take over the agent turns of this session folder that were cut while a call waited for
        its approval (nexus.agent's `interrupted_turns`: each comes with its session's lock, so
        one host takes it): each waits in a thread of its own for its approvals, then goes on."""
        agent = self.nexus.plugin("nexus.agent")
        find = getattr(agent, "interrupted_turns", None)
        if not callable(find):
            return
        try:
            turns = find()
        except Exception:
            log.exception("could not list the interrupted agent turns")
            return
        for turn in turns:
            thread = threading.Thread(target=self._resume_turn, args=(turn,), daemon=True,
                                      name=f"nexus-durable-turn-{turn.session_id}"[:60])
            with self._turns_lock:
                self._turn_threads.append(thread)
            thread.start()

    def _resume_turn(self, turn: Any) -> None:
        """Wait until every approval the turn's calls waited on is answered (or expired), then
        go on with the turn here (`turn.resume()`: its transcript gets the rest). A close before
        that leaves the turn as it was, its lock let go, for the next host."""
        from dbos import DBOS

        sid = turn.session_id
        try:
            for key in turn.waiting:
                approval_id = approval_id_for(key)
                while True:
                    status = DBOS.get_workflow_status(approval_id)
                    if status is None or status.status not in WAITING:
                        break  # answered (or never asked: the turn asks it again)
                    if self._closing.wait(_engine.POLL_SECONDS):
                        log.info("agent session %s still waits on approval %s as its host closes: left to the next "
                                 "host", sid, approval_id)
                        turn.release()
                        return
            if self._closing.is_set():
                turn.release()
                return
            log.info("agent session %s: its turn was cut while it waited for approval; going on with it here", sid)
            token = CancelToken()
            with self._turns_lock:
                self._turns[sid] = token
            if self._closing.is_set():
                token.cancel("its host closed")
            result = turn.resume(token)
        except LookupError as exc:  # it ended, or another process has it
            log.info("agent session %s is not resumed here: %s", sid, exc)
            return
        except Exception:
            log.exception("could not go on with agent session %s", sid)
            turn.release()
            return
        finally:
            with self._turns_lock:
                self._turns.pop(sid, None)
        log.info("agent session %s, resumed here, stopped: %s", sid, result.stop_reason)

    def _resume_runs(self) -> None:
        """Resume the interrupted run_code runs of this session folder (nexus.tool.code_exec's
        journal: runs whose host stopped before they ended), each in a thread of its own."""
        try:
            from nexus_tool_code_exec import engine_for
        except ImportError:
            return
        engine = engine_for(self.nexus)
        if engine is None:
            return
        for call_id in engine.interrupted_runs():
            if call_id in self._recovered_runs:
                continue
            self._recovered_runs.add(call_id)
            threading.Thread(target=self._resume_run, args=(engine, call_id), daemon=True,
                             name=f"nexus-durable-run-{call_id}"[:60]).start()

    @staticmethod
    def _resume_run(engine: Any, call_id: str) -> None:
        log.info("run_code call %s was interrupted when its host stopped: resuming it here", call_id)
        try:
            result = engine.resume(call_id)
        except LookupError as exc:  # it ended meanwhile, or another host resumed it first
            log.info("run_code call %s is not resumed here: %s", call_id, exc)
            return
        except Exception:
            log.exception("could not resume run_code call %s", call_id)
            return
        log.info("run_code call %s, resumed here, ended: %s", call_id,
                 "error: " + result.error if result.error else "ok")

    # -- the rest ------------------------------------------------------------------------------

    def resume(self, record: dict[str, Any], answer: dict[str, Any]) -> dict[str, Any]:
        """Run a recovered approval's call here (the workflow's thread)."""
        return _workflows.run_resumed(self.nexus, record, answer)

    def _stop_turns(self) -> None:
        """At close: the agent turns taken over here stop (`Session.cancel`: interrupted, as a
        person's Ctrl-C would) and their threads end before the engine does."""
        with self._turns_lock:
            tokens = list(self._turns.values())
            threads = list(self._turn_threads)
        for token in tokens:
            token.cancel("its host closed")
        for thread in threads:
            thread.join(CLOSE_WAIT_SECONDS)
            if thread.is_alive():
                log.warning("closing while an agent turn taken over here still runs (%s)", thread.name)

    def _claim(self, key: str) -> bool:
        if self._claims is None:
            self._claims = Claims(self.url)
        return self._claims.claim(key, _engine.executor_id())

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._closing.set()
        _workflows.clear_host(self)
        self._stop_turns()
        # a call this process took over from a killed host finishes before the engine stops (a
        # short-lived `nexus` command may have taken one): cut short, it would be reported as
        # possibly done in the next host instead of done
        if not _workflows.wait_resumed(CLOSE_WAIT_SECONDS):
            log.warning("closing while a call taken over from a killed host still runs; the next host reports it "
                        "as possibly done")
        if self._claims is not None:
            self._claims.close()
        _engine.release()
