"""Core built-in plugin `nexus.tool.question`: the `question` tool, with which the model asks the
user something.

Who answers, in order: an answer the host passed for this call (`nx.invoke(..., answer=...)`,
which the tool reads as `CallContext.answer`), then the first plugin whose
`nexus_question_answer(question, options, call)` returns one, then the person behind the front
end: the approver of the call (or of the Nexus) is asked, as it is when a gate answers a call
with `Ask` (`nexus chat` asks at its prompt). With no answer the result is
*pending*, not an error: it says what was asked, with `metadata["pending"]` true and
`output_structured["status"] == "pending"`, so an agent loop can ask the user and invoke the
call again with `answer=`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import attrs

from .._markers import hookimpl
from .._models import CallContext, Question, ToolCall, ToolResult
from .._plugin import Plugin
from .._tool import native_tool

if TYPE_CHECKING:
    from .._nexus import Nexus

NEXUS_PLUGIN_ID = "nexus.tool.question"

QUESTION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "question": {"type": "string", "minLength": 1, "description": "The question, complete and specific."},
        "options": {"type": "array", "items": {"type": "string"},
                    "description": "Suggested answers; the user may answer otherwise."},
    },
    "required": ["question"],
    "additionalProperties": False,
}

DESCRIPTION = (
    "Ask the user a question when you need a decision or information only they have. Offer "
    "options when the choice is among a few. Called directly, the user's answer comes back as "
    "the result; a result starting with 'pending:' means the answer will come later."
)


#: what a run_code script reads of it (when to ask is advice for the direct call)
CODE_DESCRIPTION = "Ask the user; 'pending' when nobody can answer now."

#: the structured result, for programs and run_code scripts
QUESTION_OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "status": {"enum": ["answered", "pending"]},
        "answer": {"description": "text (or a plugin's data); None while pending"},
    },
    "required": ["status"],
}


def _answer_text(answer: Any) -> str:
    return answer if isinstance(answer, str) else json.dumps(answer, ensure_ascii=False)


def pending_result(question: str, options: list[str]) -> ToolResult:
    """The result of a question nobody has answered yet."""
    text = f"pending: waiting for the user's answer to: {question}"
    if options:
        text += " (options: " + ", ".join(options) + ")"
    return ToolResult(
        id="", name="", output=text,
        output_structured={"status": "pending", "question": question, "options": options},
        metadata={"pending": True},
    )


def make_question_tool(nexus: Nexus) -> Any:
    def run(arguments: dict[str, Any], ctx: CallContext) -> ToolResult:
        question = arguments["question"]
        options = list(arguments.get("options") or [])
        answer = ctx.answer
        if answer is None:
            call = ToolCall(name=ctx.tool_name or "question", arguments=dict(arguments), id=ctx.call_id,
                            parent_call_id=ctx.parent_call_id)
            answer = nexus.hook.nexus_question_answer(question=question, options=options, call=call)
            if answer is None and ctx.approver is not None:
                reply = nexus.ask(Question("question", call, question, tuple(options)), approver=ctx.approver)
                answer = reply.text if reply.approved else None
        if answer is None:
            return pending_result(question, options)
        return ToolResult(
            id="", name="", output=_answer_text(answer),
            output_structured={"status": "answered", "question": question, "options": options, "answer": answer},
        )

    tool = native_tool("question", DESCRIPTION, QUESTION_SCHEMA, run=run, ctx=True, output_schema=QUESTION_OUTPUT_SCHEMA)
    return attrs.evolve(tool, code_description=CODE_DESCRIPTION)


class QuestionPlugin(Plugin[None]):
    """The plugin object of one Nexus (the entry point names this class); it takes no settings."""

    NEXUS_PLUGIN_ID = NEXUS_PLUGIN_ID

    @hookimpl
    def nexus_register_tools(self, register: Callable[..., Any]) -> None:
        register(make_question_tool(self.nexus))
