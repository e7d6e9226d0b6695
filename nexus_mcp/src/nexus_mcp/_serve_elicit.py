"""The approver of a call made by an MCP client: a gate's `Ask` and the `question` tool are put
to the client's user through elicitation (`elicitation/create`, form mode), when the client
declares it can ask and the connection can carry a request to it.

Else, the Nexus's own approver answers if the operator gave it one; with none, the call is
refused with a text that says what the server's operator can change (an MCP user cannot give
the Nexus an approver). A 2026-07-28 (sessionless) connection has no way to send the client a
request in the middle of a call, so it gets the refusal too.

The message shows the whole decision: the gates' question, which gates ask, the tool, and its
arguments (as JSON, cut to `MAX_ARGUMENTS_CHARS`, saying how much more there is), and the
run_code script line that made the call; every part with its control characters made visible.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
from collections.abc import Callable
from typing import Any

import mcp_types as types

from nexus_core import Answer, CancelToken, Nexus, Question

from ._calls import visible

log = logging.getLogger("nexus_mcp")

#: the most of a call's arguments an approval shows (the rest is counted)
MAX_ARGUMENTS_CHARS = 4000

APPROVAL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "approve": {"type": "boolean", "title": "Run this call?", "default": False},
        "reason": {"type": "string", "title": "Why not (optional, for the model)"},
    },
    "required": ["approve"],
}


def _question_schema(options: tuple[str, ...]) -> dict[str, Any]:
    answer: dict[str, Any] = {"type": "string", "title": "Your answer"}
    if options:
        answer["description"] = "Suggested: " + "; ".join(visible(o, 200) for o in options)
    return {"type": "object", "properties": {"answer": answer}, "required": ["answer"]}


def approval_text(question: Question) -> str:
    """What the client's user reads before approving a call."""
    call = question.call
    arguments = json.dumps(call.arguments, ensure_ascii=False, sort_keys=True, default=str)
    shown = visible(arguments, MAX_ARGUMENTS_CHARS)
    gates = ", ".join(question.asked_by) or "a gate"
    lines = [f"{visible(question.text)}", "", f"Asked by: {visible(gates, 500)}",
             f"Tool: {visible(call.name, 200)}", f"Arguments: {shown}"]
    line = call.metadata.get("script_line") if isinstance(call.metadata, dict) else None
    if call.parent_call_id is not None:
        where = f"line {line} of " if isinstance(line, int) else ""
        lines.append(f"Made by: {where}the run_code script of call {visible(call.parent_call_id, 100)}")
    return "\n".join(lines)


def refusal(question: Question, why: str) -> str:
    """The text of an `Answer` nobody could give: what happened, and what the operator can do."""
    if question.kind == "approval":
        settings = " or ".join(f"plugins.{visible(p, 100)}" for p in question.asked_by) or "plugins.<gate>"
        return (f"{why}; no one can approve the call here, and the operator of this server decides what needs "
                f"approval: the asking gate's settings in the Nexus's config ({settings}), or whether that "
                f"gate is active (plugins.active)")
    return f"{why}; no one can answer the question here"


def client_can_elicit(session: Any) -> str | None:
    """None when `session`'s client can be asked, else why not."""
    if getattr(session, "client_capabilities", True) is None:
        return ("this MCP connection does not know what the client can do (a --stateless server keeps no "
                "session), so it cannot ask the client's user")
    try:
        declared = session.check_client_capability(types.ClientCapabilities(elicitation=types.ElicitationCapability()))
    except Exception:
        declared = False
    if not declared:
        return "the MCP client does not declare elicitation (it cannot ask its user)"
    if not getattr(session, "can_send_request", True):
        return "this MCP connection cannot carry a request to the client during a call (a 2026-07-28 sessionless one)"
    return None


def mcp_approver(nexus: Nexus, session: Any, request_id: Any, cancel: CancelToken,
                 loop: asyncio.AbstractEventLoop) -> Callable[[Question], Any]:
    """The approver of one call from `session`, and of the calls it makes (a run_code script's
    inner calls inherit it): run from whichever thread asks, it waits for the client's user on
    the server's event loop `loop`, and gives up when `cancel` is cancelled (the client
    cancelled the call: nobody is left to answer)."""
    cannot = client_can_elicit(session)

    def approve(question: Question) -> Any:
        if cannot is not None:
            if nexus.approver is not None:  # the embedding program's own (the core reads its reply)
                return nexus.approver(question)
            return Answer(False, refusal(question, cannot), by="nobody")
        asking = asyncio.run_coroutine_threadsafe(_elicit(session, request_id, question), loop)
        forget = cancel.on_cancel(lambda: loop.call_soon_threadsafe(asking.cancel))
        try:
            return asking.result()
        except concurrent.futures.CancelledError:
            return Answer(False, refusal(question, f"the call was cancelled ({cancel.reason or 'its caller stopped it'})"),
                          by="nobody")
        finally:
            forget()

    return approve


async def _elicit(session: Any, request_id: Any, question: Question) -> Answer:
    if question.kind == "approval":
        message, schema = approval_text(question), APPROVAL_SCHEMA
    else:
        message, schema = visible(question.text), _question_schema(question.options)
    try:
        result = await session.elicit_form(message, schema, related_request_id=request_id)
    except Exception as exc:
        log.warning("asking the MCP client's user failed: %s", exc)
        return Answer(False, refusal(question, f"asking the MCP client's user failed ({visible(str(exc), 300)})"),
                      by="nobody")
    content = result.content or {}
    if result.action != "accept":
        what = "declined" if result.action == "decline" else "dismissed the question"
        return Answer(False, f"the user {what}" if question.kind == "question" else "", by="user")
    if question.kind == "approval":
        if content.get("approve") is True:
            return Answer(True, by="user")
        reason = content.get("reason")
        return Answer(False, reason if isinstance(reason, str) else "", by="user")
    answer = content.get("answer")
    if isinstance(answer, str) and answer.strip():
        return Answer(True, answer, by="user")
    return Answer(False, by="user")
