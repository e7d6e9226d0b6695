"""A run_code script whose inner call waits for a person: the approver of the run_code call
answers it, and the script's timeout stands still while the person decides."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from nexus_core import Answer, Ask, Nexus, Question, ToolCall, ToolDef, hookimpl

from .conftest import Workspace

SCRIPT = """\
import tools

def run(ctx):
    tools.write(path="approved.txt", content="yes")
    return "written"
"""


class AskBeforeWriting:
    def __init__(self) -> None:
        self.events: list[tuple[str, str | None]] = []

    @hookimpl
    def nexus_before_tool_invoke(self, call: ToolCall, tool: ToolDef) -> Ask | None:
        return Ask("Write approved.txt?") if tool.name == "write" else None

    @hookimpl
    def nexus_ask_start(self, question: Question) -> None:
        self.events.append(("start", question.call.parent_call_id))

    @hookimpl
    def nexus_ask_end(self, question: Question, answer: Answer) -> None:
        self.events.append(("end", question.call.parent_call_id))


def test_the_scripts_calls_are_answered_by_the_run_code_calls_approver(workspace: Workspace) -> None:
    gate = AskBeforeWriting()
    asked: list[Question] = []

    def person(question: Question) -> bool:
        asked.append(question)
        return True

    with Nexus.from_config(workspace.config(), plugins=[gate]) as nx:
        call = ToolCall(name="run_code", arguments={"script": SCRIPT})
        result = nx.invoke(call, approver=person)
    assert not result.is_error, result.error
    assert (workspace.root / "approved.txt").read_text() == "yes"
    [question] = asked
    assert question.call.parent_call_id == call.id and question.call.name == "write"
    assert gate.events == [("start", call.id), ("end", call.id)]


def test_the_question_says_which_script_makes_the_call(workspace: Workspace) -> None:
    """`question.chain` holds the run_code call (its script), so a front end can say where the
    call comes from and show the script; a direct call's question has an empty chain."""
    from nexus_core.terminal import render_question

    gate = AskBeforeWriting()
    asked: list[Question] = []

    def person(question: Question) -> bool:
        asked.append(question)
        return False

    with Nexus.from_config(workspace.config(), plugins=[gate]) as nx:
        call = ToolCall(name="run_code", arguments={"script": SCRIPT})
        nx.invoke(call, approver=person)
        nx.invoke("write", {"path": "direct.txt", "content": "x"}, approver=person)
    inner, direct = asked
    assert [(c.id, c.name, c.arguments) for c in inner.chain] == [(call.id, "run_code", {"script": SCRIPT})]
    assert direct.chain == ()
    shown = render_question(inner).text
    assert f"  from: run_code call {call.id}" in shown
    assert ' 4 |     tools.write(path="approved.txt", content="yes")' in shown  # marked > once the line is known
    assert "  from: a direct call, not from a script" in render_question(direct).text
    assert not (workspace.root / "approved.txt").exists() and not (workspace.root / "direct.txt").exists()


def test_the_scripts_timeout_stands_still_while_a_person_decides(workspace: Workspace) -> None:
    """The person takes longer than the script's whole timeout; the script still finishes. (The
    timeout leaves the script's own work, one call, time enough on a busy machine.)"""
    decided = threading.Event()

    def slow_person(question: Question) -> Any:
        decided.wait(6)  # thinking, past the script's 5 s timeout (nothing asserts on this time)
        return True

    config = workspace.config(nexus__tool__code_exec={"timeout_seconds": 5})
    with Nexus.from_config(config, plugins=[AskBeforeWriting()]) as nx:
        result = nx.invoke("run_code", {"script": SCRIPT}, approver=slow_person)
    assert not result.is_error, result.error
    assert result.output_structured["result"] == "written"
    assert (workspace.root / "approved.txt").read_text() == "yes"


def test_the_clock_runs_again_once_the_person_has_answered(workspace: Workspace) -> None:
    """A pause is not a way out of the timeout: after the answer, the script's time runs on."""

    def slow_person(question: Question) -> Any:
        threading.Event().wait(1.5)  # past the whole 1 s timeout
        return True

    script = SCRIPT.replace('    return "written"', '    while True:\n        pass')
    config = workspace.config(nexus__tool__code_exec={"timeout_seconds": 1})
    with Nexus.from_config(config, plugins=[AskBeforeWriting()]) as nx:
        result = nx.invoke("run_code", {"script": script}, approver=slow_person)
        assert result.error in ("script timed out after 1s", "CPU time limit exceeded"), result.error
        assert (workspace.root / "approved.txt").read_text() == "yes"  # the approved call ran
        after = nx.invoke("run_code", {"script": "def run(ctx):\n    return 'next'\n"})
        assert after.output_structured["result"] == "next"


def test_a_watchdog_paused_does_not_fire_and_its_deadline_moves_on() -> None:
    from nexus_tool_code_exec.host.watchdog import Watchdog

    class FakeChild:
        killed = 0

        def kill(self) -> None:
            self.killed += 1

    child = FakeChild()
    dog = Watchdog(child, 0.05).start()  # type: ignore[arg-type]
    first = dog.deadline
    dog.pause()
    dog.pause()  # nested: two asks at once
    assert dog.remaining() is None
    threading.Event().wait(0.2)  # well past the first deadline: the timer thread found it paused
    dog.fire()
    assert child.killed == 0 and not dog.fired
    dog.resume()
    assert dog.remaining() is None  # one pause still holds
    dog.resume()
    assert dog.deadline > first + 0.1 and not dog.fired
    dog.resume()  # an extra resume changes nothing
    deadline = dog.deadline
    for _ in range(600):  # 50 ms from now; 30 s for a busy machine to run the timer thread
        if dog.fired:
            break
        threading.Event().wait(0.05)
    assert dog.fired and child.killed == 1 and dog.deadline == deadline
