"""Approvals: a gate answers a call with `Ask(question)`, the approver (a callback of the Nexus or
of one invoke) decides; a denial is a veto with the person's reason; with no approver the call
is refused. The `question` tool is answered through the same approver."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from nexus_core import (
    Answer,
    Ask,
    CallContext,
    Nexus,
    Question,
    Rewrite,
    ToolCall,
    ToolDef,
    Veto,
    hookimpl,
    native_tool,
)


def echo_tool(name: str = "echo") -> ToolDef:
    return native_tool(name, "Echo the arguments.", {"type": "object"}, lambda a: a)


class Gate:
    def __init__(self, decide: Callable[[ToolCall], Any]) -> None:
        self.decide = decide

    @hookimpl
    def nexus_before_tool_invoke(self, call: ToolCall, tool: ToolDef) -> Any:
        return self.decide(call)


class AskLog:
    """Records nexus_ask_start / nexus_ask_end with the thread each ran on."""

    def __init__(self) -> None:
        self.events: list[tuple[str, Question, Answer | None, int]] = []
        self.lock = threading.Lock()

    @hookimpl
    def nexus_ask_start(self, question: Question) -> None:
        with self.lock:
            self.events.append(("start", question, None, threading.get_ident()))

    @hookimpl
    def nexus_ask_end(self, question: Question, answer: Answer) -> None:
        with self.lock:
            self.events.append(("end", question, answer, threading.get_ident()))


class Approver:
    def __init__(self, reply: Any) -> None:
        self.reply = reply
        self.asked: list[Question] = []

    def __call__(self, question: Question) -> Any:
        self.asked.append(question)
        return self.reply(question) if callable(self.reply) else self.reply


def make(approver: Any = None, *gates: Any) -> Nexus:
    return Nexus(autoload=False, tools=[echo_tool(), echo_tool("delete")], plugins=list(gates), approver=approver)


def asks_on_delete(call: ToolCall) -> Ask | None:
    return Ask(f"Delete {call.arguments.get('path')}?") if call.name == "delete" else None


def test_an_approved_call_runs_and_the_approver_sees_the_question() -> None:
    approver = Approver(True)
    with make(approver, Gate(asks_on_delete)) as nx:
        result = nx.invoke("delete", {"path": "notes.txt"})
        assert not result.is_error and result.output_structured == {"path": "notes.txt"}
        assert nx.invoke("echo", {"x": 1}).output_structured == {"x": 1}  # nobody asked about this one
    [question] = approver.asked
    assert question.kind == "approval"
    assert question.text == "Delete notes.txt?"
    assert question.call.name == "delete" and question.call.arguments == {"path": "notes.txt"}
    assert question.asked_by == ("Gate",)
    assert question.tool is not None and question.tool.name == "delete"


def test_a_denial_is_a_veto_carrying_the_persons_reason() -> None:
    with make(Approver(Veto("it holds my notes")), Gate(asks_on_delete)) as nx:
        result = nx.invoke("delete", {"path": "notes.txt"})
    assert result.error_kind == "vetoed"
    assert result.error == "vetoed: denied by the user: it holds my notes"
    assert result.metadata["vetoed_by"] == "user"
    assert result.metadata["asked_by"] == ["Gate"]


def test_false_denies_without_a_reason_and_an_answer_names_who_answered() -> None:
    with make(Approver(False), Gate(asks_on_delete)) as nx:
        assert nx.invoke("delete", {"path": "x"}).error == "vetoed: denied by the user"
    with make(Approver(Answer(False, "policy", by="nexus ask --no")), Gate(asks_on_delete)) as nx:
        result = nx.invoke("delete", {"path": "x"})
    assert result.error == "vetoed: denied by nexus ask --no: policy"
    assert result.metadata["vetoed_by"] == "nexus ask --no"


def test_with_no_approver_the_call_is_refused_with_a_clear_message() -> None:
    with make(None, Gate(asks_on_delete)) as nx:
        result = nx.invoke("delete", {"path": "notes.txt"})
    assert result.error_kind == "vetoed"
    assert "asks 'Delete notes.txt?'" in result.error
    assert "no one can answer here" in result.error and "approver" in result.error
    assert result.error.endswith("the call is refused")


def test_deny_wins_over_ask_and_the_person_is_not_bothered() -> None:
    approver = Approver(True)
    with make(approver, Gate(asks_on_delete), Gate(lambda call: Veto("read-only session"))) as nx:
        result = nx.invoke("delete", {"path": "x"})
    assert result.error == "vetoed: read-only session"
    assert approver.asked == []


@pytest.mark.parametrize("reply", ["yes", 1, {"ok": True}])
def test_an_approver_that_returns_something_unusable_denies(reply: Any) -> None:
    with make(Approver(reply), Gate(asks_on_delete)) as nx:
        result = nx.invoke("delete", {"path": "x"})
    assert result.error_kind == "vetoed"
    assert f"the approver failed (TypeError: the approver returned {type(reply).__name__}" in result.error


def test_an_approver_that_raises_denies(caplog: pytest.LogCaptureFixture) -> None:
    def broken(question: Question) -> bool:
        raise OSError("the terminal went away")

    with make(broken, Gate(asks_on_delete)) as nx:
        result = nx.invoke("delete", {"path": "x"})
    assert result.error_kind == "vetoed"
    assert "the approver failed (OSError: the terminal went away)" in result.error


def test_several_gates_asking_make_one_question() -> None:
    approver = Approver(True)
    first = Gate(lambda call: Ask("Is this the right file?"))
    second = Gate(lambda call: Ask("Deleting cannot be undone: go on?"))
    same = Gate(lambda call: Ask("Is this the right file?"))
    with make(approver, first, second, same) as nx:
        assert not nx.invoke("delete", {"path": "x"}).is_error
    [question] = approver.asked
    assert sorted(question.text.splitlines()) == ["Deleting cannot be undone: go on?", "Is this the right file?"]
    assert len(question.asked_by) == 3


def test_the_person_approves_the_call_as_rewritten() -> None:
    """A rewrite and an ask in one round: the rewrite is applied first, and the gates (the asking
    one included) see the final call; the person is asked about what will actually run."""
    approver = Approver(True)

    def cap(call: ToolCall) -> Rewrite | None:
        limit = call.arguments.get("limit", 0)
        return Rewrite({**call.arguments, "limit": 100}) if limit > 100 else None

    def ask_big(call: ToolCall) -> Ask | None:
        return Ask(f"fetch {call.arguments['limit']} rows?") if call.arguments.get("limit", 0) >= 50 else None

    with make(approver, Gate(cap), Gate(ask_big)) as nx:
        result = nx.invoke("echo", {"limit": 5000})
    assert result.output_structured == {"limit": 100}
    [question] = approver.asked
    assert question.text == "fetch 100 rows?"
    assert question.call.arguments == {"limit": 100}


def test_an_ask_about_the_original_call_only_lapses_when_a_rewrite_makes_it_safe() -> None:
    approver = Approver(True)

    def cap(call: ToolCall) -> Rewrite | None:
        return Rewrite({"limit": 10}) if call.arguments.get("limit", 0) > 10 else None

    def ask_big(call: ToolCall) -> Ask | None:
        return Ask("big fetch?") if call.arguments.get("limit", 0) > 10 else None

    with make(approver, Gate(cap), Gate(ask_big)) as nx:
        assert nx.invoke("echo", {"limit": 5000}).output_structured == {"limit": 10}
    assert approver.asked == []


def test_an_ask_without_a_question_is_a_veto() -> None:
    with make(Approver(True), Gate(lambda call: Ask("  "))) as nx:
        result = nx.invoke("echo")
    assert result.error_kind == "vetoed" and "asked without a question" in result.error


def test_the_invoke_approver_wins_and_inner_calls_inherit_it() -> None:
    """An inner call (made by a tool, on another thread, with parent_call_id) is answered by the
    approver of the call that made it, as run_code's inner calls are."""
    nexus_wide = Approver(Veto("the Nexus's approver says no"))
    per_call = Approver(True)

    def outer(arguments: dict[str, Any], ctx: CallContext) -> Any:
        inner = ToolCall(name="delete", arguments={"path": "inner.txt"}, parent_call_id=ctx.call_id)
        with ThreadPoolExecutor(1) as pool:
            result = pool.submit(ctx.nexus.invoke, inner).result()
        return {"inner_error": result.error}

    with make(nexus_wide, Gate(asks_on_delete)) as nx:
        nx.add_tool(native_tool("outer", "Calls delete.", {"type": "object"}, run=outer, ctx=True))
        assert nx.invoke("outer", approver=per_call).output_structured == {"inner_error": None}
        assert [q.call.parent_call_id is not None for q in per_call.asked] == [True]
        # without its own approver, the same call falls back to the Nexus's
        denied = nx.invoke("outer").output_structured["inner_error"]
        assert denied == "vetoed: denied by the user: the Nexus's approver says no"


def test_concurrent_asks_each_get_one_start_and_one_end_on_their_own_thread() -> None:
    log = AskLog()
    gate_ready = threading.Barrier(6, timeout=30)

    def approve(question: Question) -> bool:
        gate_ready.wait()  # every call is waiting for the person at the same time
        return question.call.arguments["n"] % 2 == 0

    with make(approve, Gate(lambda call: Ask(f"call {call.arguments['n']}?")), log) as nx:
        with ThreadPoolExecutor(6) as pool:
            results = list(pool.map(lambda n: nx.invoke("echo", {"n": n}), range(6)))
    assert [r.is_error for r in results] == [False, True, False, True, False, True]
    starts = {e[1].call.id: e[3] for e in log.events if e[0] == "start"}
    ends = {e[1].call.id: (e[2], e[3]) for e in log.events if e[0] == "end"}
    assert len(starts) == len(ends) == 6
    for call_id, thread in starts.items():
        answer, end_thread = ends[call_id]
        assert end_thread == thread and answer is not None


def test_ask_events_show_a_refusal_for_want_of_an_approver() -> None:
    log = AskLog()
    with make(None, Gate(asks_on_delete), log) as nx:
        nx.invoke("delete", {"path": "x"})
    (_, q1, _, _), (_, q2, answer, _) = log.events
    assert q1 == q2 and q1.kind == "approval"
    assert answer is not None and not answer.approved and answer.by == "nobody"


def test_the_question_tool_is_answered_by_the_approver() -> None:
    log = AskLog()
    approver = Approver(lambda q: "blue" if q.kind == "question" else True)
    with Nexus(plugins=[log], approver=approver, autoload=False) as nx:
        from nexus_core.builtins.question import QuestionPlugin

        nx.register(QuestionPlugin)
        result = nx.invoke("question", {"question": "Which colour?", "options": ["red", "blue"]})
    assert result.output == "blue"
    assert result.output_structured["status"] == "answered"
    [asked] = approver.asked
    assert asked.kind == "question" and asked.text == "Which colour?" and asked.options == ("red", "blue")
    assert [e[0] for e in log.events] == ["start", "end"]


def test_an_unanswered_question_stays_pending() -> None:
    from nexus_core.builtins.question import QuestionPlugin

    with Nexus(approver=Approver(None), autoload=False, plugins=[QuestionPlugin]) as nx:
        result = nx.invoke("question", {"question": "Which colour?"})
        assert result.output_structured["status"] == "pending"
    with Nexus(autoload=False, plugins=[QuestionPlugin]) as nx:  # no approver: pending, nobody asked
        assert nx.invoke("question", {"question": "Which colour?"}).metadata["pending"] is True


def test_nexus_ask_can_be_called_by_a_tool_of_its_own() -> None:
    def confirm(arguments: dict[str, Any], ctx: CallContext) -> str:
        answer = ctx.nexus.ask(Question("approval", ToolCall(name="confirm", id=ctx.call_id),
                                        "really?"), approver=ctx.approver)
        return "confirmed" if answer.approved else f"not confirmed ({answer.by})"

    tool = native_tool("confirm", "Confirm.", {"type": "object"}, run=confirm, ctx=True)
    with Nexus(autoload=False, tools=[tool]) as nx:
        assert nx.invoke("confirm").output == "not confirmed (nobody)"
        assert nx.invoke("confirm", approver=lambda q: True).output == "confirmed"
