"""Issue 21, item 3, end to end: the person asked about one of run_code's inner calls is shown
that a script makes it, the whole script, and the line that makes the call, from the call a real
run_code run made (its `script_line` and the chain of calls it came through), not a hand-built one."""

from __future__ import annotations

import textwrap
from typing import Any

from nexus_core import Ask, Question, ToolCall, ToolDef, hookimpl
from nexus_core.terminal import render_question
from nexus_core.testing import NexusFactory

CE = "nexus.tool.code_exec"


def echo(arguments: dict[str, Any]) -> str:
    return arguments["text"]


DELETE = ToolDef(name="delete", handler=echo, description="Delete the text.",
                 input_schema={"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]})


class AsksOnDelete:
    @hookimpl
    def nexus_before_tool_invoke(self, call: ToolCall, tool: ToolDef) -> Ask | None:
        return Ask("Delete it?") if tool.name == "delete" else None


SCRIPT = textwrap.dedent("""\
    import tools


    def run(ctx):
        first = 'build'
        tools.delete(text=first + '; rm -rf ~')
        return 'done'
    """)


def test_an_inner_calls_question_shows_its_script_and_line(nexus_factory: NexusFactory) -> None:
    asked: list[Question] = []

    def approver(question: Question) -> bool:
        asked.append(question)
        return False

    nx = nexus_factory(plugins=[CE, AsksOnDelete()], config={"plugins": {CE: {"timeout_seconds": 60}}},
                       tools=[DELETE])
    result = nx.invoke(ToolCall(id="call_script", name="run_code", arguments={"script": SCRIPT}),
                       approver=approver)
    assert result.is_error  # the person said no: the script's call was vetoed, so the script failed
    [question] = asked
    assert question.call.name == "delete" and question.call.parent_call_id == "call_script"
    assert question.call.metadata.get("script_line") == 6
    assert [c.name for c in question.chain] == ["run_code"]
    shown = render_question(question).text
    assert "from: run_code call call_script, line 6 of its script" in shown, shown
    assert "> 6 |     tools.delete(text=first + '; rm -rf ~')" in shown, shown
    for number, line in enumerate(SCRIPT.splitlines(), 1):
        assert f"{number} | {line}".rstrip() in shown, (number, shown)
