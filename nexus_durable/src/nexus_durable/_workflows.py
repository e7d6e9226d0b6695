"""The DBOS workflow of a pending approval, and what runs a call again after its host died.

A pending approval is one DBOS workflow, its id the approval's id and its input the approval's
record (`_records`): it waits in `DBOS.recv` for the answer (sent by this process's approver or
by any other process, `DBOSClient.send`), with the approval's expiry as the timeout, which DBOS
keeps across a restart. Listing the pending approvals is listing these workflows.

While the host that asked lives, the workflow only returns the answer, and the asking thread
goes on as it would with any approver. When the host was killed, another host on the database
recovers the workflow (`_engine.recover_dead`); DBOS replays what it recorded (the answer, once
received) and the workflow, now in a process that did not ask, runs the call itself: through
that host's `Nexus.invoke`, so its gates decide again (their question is answered with the
recorded answer), with the handler as a DBOS step, so a handler that completed is not run again,
and one that was running when that host died too is reported as possibly done, not repeated
(`Claims`: DBOS steps are at-least-once, so the handler's start is recorded outside the step).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from typing import Any

import attrs
from dbos import DBOS

from nexus_core import Answer, ToolCall

from ._records import ANSWER_TOPIC, APPROVAL_WORKFLOW, answer_from_message, expired_answer

log = logging.getLogger("nexus_durable")

#: this process, as the asker of an approval: a recovered workflow whose asker is another
#: process runs the call itself
PROCESS_TOKEN = uuid.uuid4().hex
#: how long a recovered workflow waits for this process's Nexus to finish starting
HOST_WAIT_SECONDS = 120.0

_host_lock = threading.Condition()
_host: Any = None  # the _backend.DurableBackend of this process that runs recovered calls


def set_host(backend: Any) -> None:
    global _host
    with _host_lock:
        _host = backend
        _host_lock.notify_all()


def clear_host(backend: Any) -> None:
    global _host
    with _host_lock:
        if _host is backend:
            _host = None


def _wait_for_host() -> Any:
    deadline = time.monotonic() + HOST_WAIT_SECONDS
    with _host_lock:
        while _host is None and time.monotonic() < deadline:
            _host_lock.wait(timeout=1.0)
        return _host


@attrs.frozen
class Resuming:
    """The call a recovered approval runs in this thread, and the answer it was given."""

    approval_id: str
    call_id: str
    answer: Answer


_resuming = threading.local()
#: how many recovered calls run in this process now: while none does (nearly always), a call's
#: handler runs without even a look at the thread's state
running_resumed = 0
_count_lock = threading.Lock()


def wait_resumed(timeout: float) -> bool:
    """Wait (at most `timeout` seconds) until no recovered call runs in this process; True when none does."""
    deadline = time.monotonic() + timeout
    while running_resumed and time.monotonic() < deadline:
        time.sleep(0.05)
    return not running_resumed


def resuming() -> Resuming | None:
    """The recovered call this thread runs, if any."""
    if not running_resumed:
        return None
    found: Resuming | None = getattr(_resuming, "value", None)
    return found


@DBOS.workflow(name=APPROVAL_WORKFLOW)
def approval_workflow(record: dict[str, Any]) -> dict[str, Any]:
    """Wait for the answer to one approval; when recovered in another process, run its call."""
    message = DBOS.recv(ANSWER_TOPIC, timeout_seconds=float(record["timeout"]))
    answer = answer_from_message(message) if message is not None else expired_answer(record)
    outcome: dict[str, Any] = {"answer": answer}
    if (record.get("asker") == PROCESS_TOKEN or record["call"].get("parent_call_id")
            or (record["call"].get("metadata") or {}).get("durable_key")):
        # the asker is here and goes on itself; an inner call's run, and a keyed call's (an agent
        # turn's, which `Agent.resume` continues), is its own caller's to resume
        return outcome
    host = _wait_for_host()
    if host is None:
        log.error("approval %s was answered, but no durable Nexus runs in this process to run its call",
                  record["id"])
        outcome["result"] = None
        return outcome
    outcome["result"] = host.resume(record, answer)
    return outcome


def run_resumed(nexus: Any, record: dict[str, Any], answer: dict[str, Any]) -> dict[str, Any]:
    """Run the recorded call through `nexus` (in the workflow's thread), its question answered
    with `answer`; the result as JSON-able data."""
    from nexus_core.wire import converter

    data = record["call"]
    call = ToolCall(name=data["name"], arguments=dict(data["arguments"]), id=data["id"],
                    metadata={**data.get("metadata", {}), "durable_approval": record["id"]})
    global running_resumed
    _resuming.value = Resuming(record["id"], call.id, Answer(**answer))
    with _count_lock:
        running_resumed += 1
    try:
        result = nexus.invoke(call)
    finally:
        with _count_lock:
            running_resumed -= 1
        _resuming.value = None
    log.info("approval %s: its call %s (%s) ran here after its host ended: %s", record["id"], call.id, call.name,
             "error: " + result.error if result.error else "ok")
    unstructured: dict[str, Any] = converter.unstructure(result)
    return unstructured
