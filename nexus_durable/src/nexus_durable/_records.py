"""What is stored of a pending approval (the record, plain JSON-able data), and the answer
message: one format, read by the workflow, the Python API and the `nexus approvals` command.

A record holds the question (the gates' text, who asked), the whole call (name, arguments, id,
where it comes from), its rendering by `nexus_core.terminal.render_question` (folded and whole,
so a front end in another process shows a person exactly what the host's console would), when
it was asked and when it expires.
"""

from __future__ import annotations

import time
from typing import Any

import attrs
from nexus_core.terminal import render_question

from nexus_core import Answer, Question

APPROVAL_WORKFLOW = "nexus.durable.approval"
ANSWER_TOPIC = "nexus.durable.answer"
#: an approval with no expiry waits this long (DBOS's recv needs a timeout)
NO_EXPIRY_SECONDS = 10 * 365 * 24 * 3600.0
#: the longest note kept with an answer
MAX_NOTE = 2000


def new_record(approval_id: str, question: Question, expiry: float | None, asker: str, executor: str) -> dict[str, Any]:
    call = question.call
    now = time.time()
    timeout = float(expiry) if expiry else NO_EXPIRY_SECONDS
    return {
        "id": approval_id,
        "call": {"id": call.id, "name": call.name, "arguments": call.arguments,
                 "parent_call_id": call.parent_call_id, "metadata": _json_safe(call.metadata)},
        "tool": question.tool.name if question.tool is not None else call.name,
        "question": question.text,
        "asked_by": list(question.asked_by),
        "chain": [c.name for c in question.chain],
        "rendered": render_question(question).text,
        "rendered_full": render_question(question, full=True).text,
        "asked_at": now,
        "timeout": timeout,
        "expires_at": now + timeout if expiry else None,
        "asker": asker,
        "executor": executor,
    }


def _json_safe(value: Any) -> Any:
    import json

    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return {}


def answer_message(approved: bool, note: str = "", by: str = "user") -> dict[str, Any]:
    """The message an answer is sent as."""
    return {"approved": bool(approved), "text": str(note)[:MAX_NOTE], "by": str(by)[:200] or "user"}


def answer_from_message(message: Any) -> dict[str, Any]:
    """The answer a received message stands for; anything unreadable refuses (fail closed)."""
    if (isinstance(message, dict) and isinstance(message.get("approved"), bool)
            and isinstance(message.get("text", ""), str) and isinstance(message.get("by", "user"), str)):
        return answer_message(message["approved"], message.get("text", ""), message.get("by", "user"))
    return {"approved": False, "text": "the answer sent could not be read, so the call is refused", "by": "nobody"}


def expired_answer(record: dict[str, Any]) -> dict[str, Any]:
    return {"approved": False, "by": "nobody",
            "text": f"the approval expired: no one answered it within {_duration(float(record['timeout']))}"}


def as_answer(data: dict[str, Any]) -> Answer:
    return Answer(bool(data["approved"]), str(data.get("text", "")), str(data.get("by", "user")))


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:g} s"
    if seconds < 7200:
        return f"{seconds / 60:g} min"
    return f"{seconds / 3600:g} h"


@attrs.frozen
class PendingApproval:
    """A pending approval as a front end shows it: `rendered` is what to show a person (escaped,
    long values folded; `rendered_full` folds nothing), `call` the whole call as data."""

    id: str
    tool: str
    call: dict[str, Any]
    question: str
    asked_by: tuple[str, ...]
    rendered: str
    rendered_full: str
    asked_at: float
    expires_at: float | None
    #: the DBOS executor of the host that asked (`nexus:<host>:<pid>:<random>`)
    executor: str

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> PendingApproval:
        return cls(id=record["id"], tool=record["tool"], call=record["call"], question=record["question"],
                   asked_by=tuple(record["asked_by"]), rendered=record["rendered"],
                   rendered_full=record["rendered_full"], asked_at=record["asked_at"],
                   expires_at=record.get("expires_at"), executor=record.get("executor", ""))

    def to_json(self) -> dict[str, Any]:
        """JSON-able data (`nexus approvals --json`)."""
        return attrs.asdict(self)
