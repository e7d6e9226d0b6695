"""Observer and gate hooks called in one place (`_hookcalls`): `notify` runs every observer,
each contained and attributed; gates are attributed, fail closed, and tell
`nexus_gate_decision` observers of each decision, at no cost when none listens."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from nexus_core import Ask, Nexus, Rewrite, ToolCall, ToolResult, Veto, hookimpl, native_tool
from nexus_core.llm import ModelError, ModelRequest
from nexus_core.plugins import GateDecision


class Seen:
    def __init__(self, name: str, fail: bool = False) -> None:
        self.name, self.fail, self.calls = name, fail, 0

    @hookimpl
    def nexus_tool_result(self, call: ToolCall, result: ToolResult) -> None:
        self.calls += 1
        if self.fail:
            raise RuntimeError(f"{self.name} broke")


def echo_nexus(*plugins: object) -> Nexus:
    return Nexus(autoload=False, plugins=plugins, tools=[native_tool("echo", run=lambda a: dict(a))])


def test_an_observer_that_raises_is_logged_by_name_and_the_others_still_run(caplog: pytest.LogCaptureFixture) -> None:
    first, broken, last = Seen("first"), Seen("broken", fail=True), Seen("last")
    with echo_nexus(first, broken, last) as nx, caplog.at_level(logging.ERROR, "nexus_core"):
        assert nx.invoke("echo", {"a": 1}).output_structured == {"a": 1}
    assert (first.calls, broken.calls, last.calls) == (1, 1, 1)
    assert "plugin 'Seen#2' raised in nexus_tool_result; the other observers still run" in caplog.text


def test_notify_calls_a_packages_or_the_cores_observers_and_refuses_other_kinds() -> None:
    class Registered:
        names: list[str] = []

        @hookimpl
        def nexus_tool_register(self, tool: Any) -> None:
            self.names.append(tool.name)

    watcher = Registered()
    with Nexus(autoload=False, plugins=[watcher]) as nx:
        nx.notify("nexus_tool_register", tool=native_tool("x", run=lambda a: ""))
        assert watcher.names == ["x"]
        nx.notify("nexus_code_exec_stdout", chunk=None)  # nobody implements it: nothing happens
        nx.register(CallGate(lambda call: None))
        with pytest.raises(ValueError, match="nexus_before_tool_invoke is not an observer hook"):
            nx.notify("nexus_before_tool_invoke", call=None, tool=None)  # a gate's failures are vetoes


def test_the_order_is_pluggys_and_wrappers_still_wrap_observers(caplog: pytest.LogCaptureFixture) -> None:
    order: list[str] = []

    class Early:
        @hookimpl(tryfirst=True)
        def nexus_tool_result(self) -> None:
            order.append("early")

    class Plain:
        @hookimpl
        def nexus_tool_result(self) -> None:
            order.append("plain")
            raise RuntimeError("plain broke")

    class Around:
        @hookimpl(wrapper=True)
        def nexus_tool_result(self) -> Any:
            order.append("before")
            result = yield
            order.append("after")
            return result

    with echo_nexus(Early(), Plain(), Around()) as nx, caplog.at_level(logging.ERROR, "nexus_core"):
        nx.invoke("echo")
    assert order == ["before", "early", "plain", "after"]  # the wrapper around, the raise contained
    assert "raised in nexus_tool_result" in caplog.text


class Decisions:
    def __init__(self) -> None:
        self.seen: list[GateDecision] = []

    @hookimpl
    def nexus_gate_decision(self, decision: GateDecision) -> None:
        self.seen.append(decision)


class CallGate:
    def __init__(self, answer: Any) -> None:
        self.answer = answer

    @hookimpl
    def nexus_before_tool_invoke(self, call: ToolCall) -> Any:
        return self.answer(call)


def test_each_gate_decision_is_told_to_nexus_gate_decision() -> None:
    decisions = Decisions()
    rewrite = CallGate(lambda call: Rewrite({"v": 2}) if call.arguments.get("v") == 1 else None)
    with echo_nexus(decisions) as nx:
        nx.register(rewrite, name="rewriter")
        assert nx.invoke("echo", {"v": 1}).output_structured == {"v": 2}
        (rewrote,) = decisions.seen
        assert (rewrote.hook, rewrote.plugin, rewrote.action, rewrote.round) == (
            "nexus_before_tool_invoke", "rewriter", "rewrite", 1)
        assert rewrote.subject.arguments == {"v": 1}
        nx.register(CallGate(lambda call: Veto("no echo") if call.arguments.get("v") == 2 else None), name="vetoer")
        decisions.seen.clear()
        assert nx.invoke("echo", {"v": 1}).error == "vetoed: no echo"
        assert [(d.plugin, d.action, d.round, d.reason) for d in decisions.seen] == [
            ("rewriter", "rewrite", 1, ""), ("vetoer", "veto", 2, "no echo")]


def test_an_ask_and_the_persons_answer_are_decisions_too() -> None:
    decisions = Decisions()
    with Nexus(autoload=False, plugins=[decisions, CallGate(lambda call: Ask("Echo it?"))], approver=lambda q: False,
               tools=[native_tool("echo", run=lambda a: "x")]) as nx:
        assert nx.invoke("echo").vetoed
    ask, answer = decisions.seen
    assert (ask.action, ask.reason) == ("ask", "Echo it?")
    assert (answer.action, answer.plugin, answer.answer is not None and answer.answer.approved) == ("answer", "user", False)


def test_result_and_request_gates_tell_their_decisions() -> None:
    decisions = Decisions()

    class Redact:
        @hookimpl
        def nexus_before_tool_result(self, result: ToolResult) -> Any:
            return ToolResult(id="", name="", output="[redacted]") if result.output != "[redacted]" else None

    class NoModels:
        @hookimpl
        def nexus_before_model_request(self, request: ModelRequest) -> Any:
            raise RuntimeError("quota service down")

    with echo_nexus(decisions, Redact(), NoModels()) as nx:
        assert nx.invoke("echo", {"a": 1}).output == "[redacted]"
        with pytest.raises(ModelError, match="the gate failed"):
            nx.complete(ModelRequest(provider="p", model="m"))
    replaced, failed = decisions.seen
    assert (replaced.hook, replaced.action) == ("nexus_before_tool_result", "replace")
    assert (failed.hook, failed.action, failed.plugin) == ("nexus_before_model_request", "veto", "NoModels")
    assert failed.reason == "the gate failed (RuntimeError: quota service down)"


def test_a_request_gates_decision_is_told_to_nexus_gate_decision() -> None:
    decisions = Decisions()

    class NoModels:
        @hookimpl
        def nexus_before_model_request(self, request: ModelRequest) -> Any:
            raise RuntimeError("quota service down")

    with Nexus(autoload=False, plugins=[decisions, NoModels()]) as nx:
        with pytest.raises(ModelError, match="the gate failed"):
            nx.complete(ModelRequest(provider="p", model="m"))
    (failed,) = decisions.seen
    assert (failed.hook, failed.action, failed.plugin, failed.round) == ("nexus_before_model_request", "veto",
                                                                          "NoModels", 1)
    assert failed.reason == "the gate failed (RuntimeError: quota service down)"


def test_no_decision_is_built_when_nobody_listens(monkeypatch: pytest.MonkeyPatch) -> None:
    from nexus_core import _hookcalls

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a GateDecision was built with no nexus_gate_decision observer")

    class NoModels:
        @hookimpl
        def nexus_before_model_request(self, request: ModelRequest) -> Any:
            return Veto("no models today")

    monkeypatch.setattr(_hookcalls, "GateDecision", refuse)
    with Nexus(autoload=False, plugins=[NoModels()]) as nx:
        with pytest.raises(ModelError, match="no models today"):
            nx.complete(ModelRequest(provider="p", model="m"))


def test_no_hookimpl_is_changed_and_pluggy_still_calls_what_the_plugin_wrote() -> None:
    """The containment and attribution wrap nothing: HookImpl.function is the plugin's own."""
    gate, seen = CallGate(lambda call: None), Seen("seen")
    with echo_nexus(gate, seen) as nx:
        impls = [i for name in ("nexus_before_tool_invoke", "nexus_tool_result")
                 for i in getattr(nx.plugin_manager.hook, name).get_hookimpls()]
        assert {i.function for i in impls} == {gate.nexus_before_tool_invoke, seen.nexus_tool_result}
