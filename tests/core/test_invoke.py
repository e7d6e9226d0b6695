"""The one invocation path: lookup, gates (veto, rewrite), validation, handler, result gates and
observers, each failure an error result and never an exception."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from nexus_core import (
    CallContext,
    CancelToken,
    Nexus,
    Rewrite,
    ToolCall,
    ToolDef,
    ToolResult,
    Veto,
    _registry,
    hookimpl,
    native_tool,
)

ITEMS_SCHEMA = {
    "type": "object",
    "properties": {
        "items": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"name": {"type": "string"}, "qty": {"type": "integer", "minimum": 1}},
                "required": ["name"],
                "additionalProperties": False,
            },
        },
        "mode": {"enum": ["fast", "safe"]},
    },
    "required": ["items"],
    "additionalProperties": False,
}


def echo_tool(name: str = "echo", schema: dict[str, Any] | None = None) -> ToolDef:
    return native_tool(name, "Echo the arguments.", schema or {"type": "object"}, lambda a: a)


class Recorder:
    """Observes everything, so tests can assert on who saw what."""

    def __init__(self) -> None:
        self.registered: list[str] = []
        self.invoked: list[ToolCall] = []
        self.results: list[tuple[ToolCall, ToolResult]] = []
        self.result_gate_saw: list[ToolResult] = []

    @hookimpl
    def nexus_tool_register(self, tool: ToolDef) -> None:
        self.registered.append(tool.name)

    @hookimpl
    def nexus_tool_invoke(self, call: ToolCall, tool: ToolDef) -> None:
        self.invoked.append(call)

    @hookimpl
    def nexus_before_tool_result(self, call: ToolCall, result: ToolResult) -> None:
        self.result_gate_saw.append(result)

    @hookimpl
    def nexus_tool_result(self, call: ToolCall, result: ToolResult) -> None:
        self.results.append((call, result))


class Gate:
    """A call gate whose answer is a function of the call."""

    def __init__(self, decide: Callable[[ToolCall], Any]) -> None:
        self.decide = decide
        self.seen: list[dict[str, Any]] = []

    @hookimpl
    def nexus_before_tool_invoke(self, call: ToolCall, tool: ToolDef) -> Any:
        self.seen.append(dict(call.arguments))
        return self.decide(call)


class ResultGate:
    def __init__(self, decide: Callable[[ToolCall, ToolResult], Any]) -> None:
        self.decide = decide

    @hookimpl
    def nexus_before_tool_result(self, call: ToolCall, result: ToolResult) -> Any:
        return self.decide(call, result)


@pytest.fixture
def nx() -> Iterator[Nexus]:
    with Nexus(autoload=False, tools=[echo_tool(), echo_tool("items", ITEMS_SCHEMA)]) as nexus:
        yield nexus


@pytest.fixture
def recorder(nx: Nexus) -> Recorder:
    rec = Recorder()
    nx.register(rec)
    return rec


# -- lookup and the handler -------------------------------------------------------------------


def test_a_call_returns_the_handlers_result_under_the_calls_id(nx: Nexus) -> None:
    result = nx.invoke(ToolCall(id="c1", name="echo", arguments={"x": 1}))
    assert (result.id, result.name, result.is_error) == ("c1", "echo", False)
    assert result.output_structured == {"x": 1} and result.output == '{"x": 1}'
    fresh = nx.invoke("echo", {"y": 2})
    assert fresh.id.startswith("call_") and fresh.output_structured == {"y": 2}


def test_unknown_tool_is_an_error_result_that_observers_and_result_gates_see(nx: Nexus, recorder: Recorder) -> None:
    result = nx.invoke("nope", {"a": 1})
    assert result.is_error and result.error_kind == "unknown_tool"
    assert result.error == result.output == "unknown tool: 'nope'"
    assert recorder.invoked == []  # it never reached the handler
    assert [r for _, r in recorder.results] == [result] and recorder.result_gate_saw == [result]


def test_an_unknown_tool_close_to_a_real_one_says_did_you_mean(nx: Nexus) -> None:
    assert nx.invoke("ehco").error == "unknown tool: 'ehco' (did you mean 'echo'?)"
    assert nx.invoke("x" * 10_000).error == f"unknown tool: {'x' * 10_000!r}"  # no fuzzy search of junk


def test_a_refused_call_takes_the_result_gates_and_observers_like_any_other(nx: Nexus, recorder: Recorder) -> None:
    call = ToolCall(name="echo", arguments={"x": 1}, parent_call_id="call_script")
    result = nx.refuse(call, "tool call limit reached", "failure")
    assert (result.id, result.name, result.error, result.error_kind) == (
        call.id, "echo", "tool call limit reached", "failure")
    assert recorder.invoked == []  # never ran
    assert recorder.result_gate_saw == [result] and recorder.results == [(call, result)]
    nx.register(ResultGate(lambda c, r: Veto("audited refusals are withheld")))
    assert nx.refuse(call, "again").error == "vetoed: audited refusals are withheld"


@pytest.mark.parametrize("exc", [ValueError("bad input"), KeyError("k"), SystemExit(3)])
def test_a_handler_exception_becomes_an_error_result(nx: Nexus, exc: BaseException, recorder: Recorder) -> None:
    def boom(arguments: dict[str, Any]) -> None:
        raise exc

    nx.add_tool(native_tool("boom", run=boom))
    result = nx.invoke("boom")
    assert result.is_error and result.error_kind == "exception"
    assert result.error == f"{type(exc).__name__}: {exc}"
    assert recorder.results[-1][1] == result


def test_invoke_refuses_mixed_forms_of_a_call(nx: Nexus) -> None:
    with pytest.raises(TypeError, match="the call carries them"):
        nx.invoke(ToolCall(name="echo"), {"x": 1})
    with pytest.raises(TypeError, match="must be a mapping"):
        nx.invoke("echo", [1, 2])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="tool name or a ToolCall"):
        nx.invoke(42)  # type: ignore[arg-type]


def test_a_context_tool_gets_call_ids_host_data_and_the_answer(nx: Nexus) -> None:
    seen: list[CallContext] = []

    def handler(arguments: dict[str, Any], ctx: CallContext) -> str:
        seen.append(ctx)
        return "ok"

    nx.add_tool(native_tool("ctx_tool", run=handler, ctx=True))
    nx.invoke(ToolCall(id="c9", name="ctx_tool", parent_call_id="c8"), context={"user": "u1"}, answer="yes")
    (ctx,) = seen
    assert (ctx.call_id, ctx.parent_call_id, ctx.tool_name, ctx.answer) == ("c9", "c8", "ctx_tool", "yes")
    assert ctx.data == {"user": "u1"} and ctx.nexus is nx


def test_nested_calls_carry_parent_call_id_through_the_gates(nx: Nexus, recorder: Recorder) -> None:
    def outer(arguments: dict[str, Any], ctx: CallContext) -> str:
        inner = ctx.nexus.invoke(ToolCall(name="echo", arguments={"n": 1}, parent_call_id=ctx.call_id))
        refused = ctx.nexus.invoke(ToolCall(name="echo", arguments={"n": 2}, parent_call_id=ctx.call_id))
        return f"{inner.output} / {refused.error}"

    gate = Gate(lambda call: Veto("no n=2") if call.arguments.get("n") == 2 else None)
    nx.register(gate)
    nx.add_tool(native_tool("outer", run=outer, ctx=True))
    result = nx.invoke(ToolCall(id="top", name="outer"))
    assert result.output == '{"n": 1} / vetoed: no n=2'
    assert [(c.name, c.parent_call_id) for c, _ in recorder.results] == [
        ("echo", "top"), ("echo", "top"), ("outer", None),
    ]
    assert gate.seen == [{}, {"n": 1}, {"n": 2}]


# -- cancellation ------------------------------------------------------------------------------


def test_a_call_cancelled_before_it_runs_is_refused_and_seen_by_observers(nx: Nexus, recorder: Recorder) -> None:
    ran: list[dict[str, Any]] = []
    gate = Gate(lambda call: None)
    nx.register(gate)
    nx.add_tool(native_tool("effect", run=lambda a: ran.append(a) or "done"))
    token = CancelToken()
    token.cancel("Ctrl-C")
    result = nx.invoke("effect", {}, cancel=token)
    assert result.error_kind == "cancelled" and ran == [] and gate.seen == []  # no gate was even asked
    assert result.error == "cancelled: effect was not run, its caller stopped it (Ctrl-C)"
    assert [(c.name, r.error_kind) for c, r in recorder.results] == [("effect", "cancelled")]


def test_a_call_cancelled_while_its_gates_decide_does_not_run() -> None:
    token = CancelToken()
    ran: list[str] = []

    class CancelsWhileDeciding:
        @hookimpl
        def nexus_before_tool_invoke(self, call: ToolCall, tool: ToolDef) -> None:
            token.cancel()  # as a person pressing Ctrl-C during an approval would

    with Nexus(autoload=False, plugins=[CancelsWhileDeciding()],
               tools=[native_tool("effect", run=lambda a: ran.append("ran") or "done")]) as nexus:
        result = nexus.invoke("effect", {}, cancel=token)
    assert (result.error_kind, ran) == ("cancelled", [])


def test_a_running_handler_sees_the_token_and_its_inner_calls_inherit_it(nx: Nexus) -> None:
    token = CancelToken()
    seen: dict[str, Any] = {}

    def inner(arguments: dict[str, Any], ctx: CallContext) -> str:
        seen["inner"] = ctx.cancel
        return "inner ran"

    def outer(arguments: dict[str, Any], ctx: CallContext) -> str:
        seen["outer"] = ctx.cancel
        first = ctx.nexus.invoke(ToolCall(name="inner", parent_call_id=ctx.call_id))
        ctx.cancel.cancel("the script ended")
        second = ctx.nexus.invoke(ToolCall(name="inner", parent_call_id=ctx.call_id))
        own = CancelToken()  # an inner call given its own token keeps it
        third = ctx.nexus.invoke(ToolCall(name="inner", parent_call_id=ctx.call_id), cancel=own)
        return " / ".join(r.output for r in (first, second, third))

    nx.add_tool(native_tool("inner", run=inner, ctx=True))
    nx.add_tool(native_tool("outer", run=outer, ctx=True))
    result = nx.invoke("outer", {}, cancel=token)
    assert seen["outer"] is token and token.cancelled
    assert result.output == ("inner ran / cancelled: inner was not run, its caller stopped it (the script "
                             "ended) / inner ran")
    assert seen["inner"] is not token


def test_a_handler_without_a_token_gets_one_nobody_cancels(nx: Nexus) -> None:
    seen: list[CancelToken] = []
    nx.add_tool(native_tool("ctx_tool", run=lambda a, ctx: seen.append(ctx.cancel) or "ok", ctx=True))
    assert nx.invoke("ctx_tool", {}).output == "ok"
    assert not seen[0].cancelled


def test_on_cancel_runs_at_once_when_cancelled_and_can_be_taken_back() -> None:
    token = CancelToken()
    calls: list[str] = []
    forget = token.on_cancel(lambda: calls.append("a"))
    token.on_cancel(lambda: calls.append("b"))
    forget()
    token.cancel("first")
    token.cancel("second")  # the first reason stands, nothing runs twice
    token.on_cancel(lambda: calls.append("late"))  # registered after: runs at once
    assert calls == ["b", "late"] and token.reason == "first" and token.wait(0)


# -- argument validation ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ({"items": [{"name": "a"}, {"name": "b"}, {"name": 3}]}, "items[2].name: expected string, got 3"),
        ({"items": [{"qty": 1}]}, "items[0].name: required, but missing"),
        ({"items": [{"name": "a", "qty": 0}]}, "items[0].qty: expected a number >= 1, got 0"),
        ({"items": [], "colour": "red"}, "colour: unknown key"),
        ({"items": [], "mode": "slow"}, "mode: expected one of 'fast', 'safe', got 'slow'"),
        ({}, "items: required, but missing"),
        ({"items": "abc"}, "items: expected array, got 'abc'"),
    ],
)
def test_invalid_arguments_name_the_failing_path(nx: Nexus, recorder: Recorder, arguments: dict[str, Any],
                                                 problem: str) -> None:
    result = nx.invoke("items", arguments)
    assert result.error_kind == "invalid_arguments"
    assert result.error == f"invalid arguments for items: {problem}"
    assert recorder.invoked == []  # the handler never ran
    assert recorder.results[-1][1] == result


def test_every_invalid_argument_is_listed(nx: Nexus) -> None:
    result = nx.invoke("items", {"items": [{"name": 1}, {"name": "ok", "qty": "2"}], "x": 0})
    assert result.error == ("invalid arguments for items: items[0].name: expected string, got 1; "
                            "items[1].qty: expected integer, got '2'; x: unknown key")


def test_validators_are_compiled_once_per_tool(monkeypatch: pytest.MonkeyPatch) -> None:
    compiled: list[dict[str, Any]] = []
    real = _registry.compile_schema

    def counting(schema: dict[str, Any]) -> Any:
        compiled.append(schema)
        return real(schema)

    monkeypatch.setattr(_registry, "compile_schema", counting)
    with Nexus(autoload=False, tools=[echo_tool("items", ITEMS_SCHEMA)]) as nexus:
        nexus.register(Gate(lambda call: Rewrite({"items": []})))  # rewritten calls use the same validator
        for _ in range(50):
            assert not nexus.invoke("items", {"items": [{"name": "a"}]}).is_error
        assert nexus.invoke("items", {"items": 1}).is_error is False  # rewritten to a valid call
    assert compiled == [ITEMS_SCHEMA]


def test_a_tool_with_an_empty_schema_takes_any_arguments(nx: Nexus) -> None:
    nx.add_tool(native_tool("free", input_schema={}, run=lambda a: "ok"))
    assert nx.invoke("free", {"anything": [1, 2]}).output == "ok"


# -- call gates -------------------------------------------------------------------------------


ALLOW = Gate(lambda call: None)


@pytest.mark.parametrize("veto_first", [True, False], ids=["veto-registered-first", "veto-registered-last"])
@pytest.mark.parametrize("other", ["allow", "rewrite", "tryfirst-allow"])
def test_nexus_before_tool_invoke_veto_wins_in_any_order(veto_first: bool, other: str, recorder: Recorder,
                                                          nx: Nexus) -> None:
    veto = Gate(lambda call: Veto("echo is off today"))

    class TryFirstAllow:
        @hookimpl(tryfirst=True)
        def nexus_before_tool_invoke(self, call: ToolCall) -> None:
            return None

    others: dict[str, object] = {
        "allow": Gate(lambda call: None),
        "rewrite": Gate(lambda call: Rewrite({"rewritten": True})),
        "tryfirst-allow": TryFirstAllow(),
    }
    plugins = [veto, others[other]] if veto_first else [others[other], veto]
    names = [nx.register(p) for p in plugins]
    result = nx.invoke("echo", {"x": 1})
    assert result.is_error and result.error_kind == "vetoed" and result.vetoed
    assert result.error == result.output == "vetoed: echo is off today"
    assert result.metadata["vetoed_by"] == names[0 if veto_first else 1]
    assert recorder.invoked == []
    assert recorder.results[-1][1] == result


def test_nexus_before_tool_invoke_first_veto_gives_the_reason(nx: Nexus) -> None:
    nx.register(Gate(lambda call: Veto("first registered")), name="policy.a")
    nx.register(Gate(lambda call: Veto("last registered")), name="policy.b")
    result = nx.invoke("echo")
    # pluggy calls the last registered first; whichever speaks first, its plugin is named
    assert (result.error, result.metadata["vetoed_by"]) == ("vetoed: last registered", "policy.b")


def test_nexus_before_tool_invoke_gate_that_raises_is_a_veto_naming_it(nx: Nexus) -> None:
    def explode(call: ToolCall) -> None:
        raise RuntimeError("policy store unreachable")

    # two instances of one class share their code: the name must come from the instance that raised
    nx.register(Gate(lambda call: None), name="policy.fine")
    nx.register(Gate(explode), name="policy.broken")
    nx.register(Gate(lambda call: None), name="policy.also_fine")
    result = nx.invoke("echo")
    assert result.error_kind == "vetoed"
    assert result.error == ("vetoed: gate 'policy.broken' failed (RuntimeError: policy store unreachable); "
                            "the call is refused")
    assert result.metadata["vetoed_by"] == "policy.broken"


@pytest.mark.parametrize("answer", [True, "no", {"arguments": {}}])
def test_nexus_before_tool_invoke_returning_something_else_is_a_veto(nx: Nexus, answer: Any) -> None:
    nx.register(Gate(lambda call: answer), name="sloppy")
    result = nx.invoke("echo")
    assert result.error == f"vetoed: gate 'sloppy' returned {type(answer).__name__}, not Veto, Rewrite, Ask or None"


def test_nexus_before_tool_invoke_rewrite_reaches_the_handler_and_observers(nx: Nexus, recorder: Recorder) -> None:
    def add_limit(call: ToolCall) -> Rewrite | None:
        if "limit" not in call.arguments:
            return Rewrite({**call.arguments, "limit": 10}, reason="default limit")
        return None

    nx.register(Gate(add_limit))
    result = nx.invoke(ToolCall(id="c1", name="echo", arguments={"q": "x"}))
    assert result.output_structured == {"q": "x", "limit": 10}
    assert [c.arguments for c in recorder.invoked] == [{"q": "x", "limit": 10}]
    assert recorder.results[-1][0].arguments == {"q": "x", "limit": 10} and recorder.results[-1][0].id == "c1"


def test_a_rewritten_call_and_its_result_name_the_gates_that_rewrote_it(nx: Nexus, recorder: Recorder) -> None:
    nx.register(Gate(lambda call: Rewrite({"q": "x", "limit": 10}) if "limit" not in call.arguments else None),
                name="acme.limit")
    nx.register(Gate(lambda call: Rewrite({**call.arguments, "safe": True}) if "limit" in call.arguments
                     and "safe" not in call.arguments else None), name="acme.safe")
    result = nx.invoke(ToolCall(id="c1", name="echo", arguments={"q": "x"}))
    assert result.output_structured == {"q": "x", "limit": 10, "safe": True}
    assert result.metadata["rewritten_by"] == ["acme.limit", "acme.safe"]  # in the order of the rounds
    assert recorder.invoked[-1].metadata["rewritten_by"] == ["acme.limit", "acme.safe"]
    # a call no gate rewrote says nothing, whatever its caller put in its metadata
    plain = nx.invoke(ToolCall(id="c2", name="echo", arguments={"q": "y", "limit": 1, "safe": True},
                               metadata={"rewritten_by": ["forged"], "script_line": 3}))
    assert "rewritten_by" not in plain.metadata and "rewritten_by" not in recorder.invoked[-1].metadata
    assert recorder.invoked[-1].metadata["script_line"] == 3
    forged = {"rewritten_by": ["forged"]}
    assert "rewritten_by" not in nx.invoke(ToolCall(id="c4", name="nope", metadata=forged)).metadata
    assert "rewritten_by" not in nx.refuse(ToolCall(id="c5", name="echo", metadata=forged), "no", "failure").metadata
    # a rewritten call that is then vetoed says who rewrote it too
    nx.register(Gate(lambda call: Veto("no safe calls") if call.arguments.get("safe") else None), name="acme.no")
    vetoed = nx.invoke(ToolCall(id="c3", name="echo", arguments={"q": "z"}))
    assert vetoed.error == "vetoed: no safe calls" and vetoed.metadata["rewritten_by"] == ["acme.limit", "acme.safe"]


def test_nexus_before_tool_invoke_gates_all_rerun_on_a_rewritten_call(nx: Nexus) -> None:
    rewriter = Gate(lambda call: Rewrite({"path": "/etc/passwd"}))
    guard = Gate(lambda call: Veto("no /etc") if call.arguments.get("path", "").startswith("/etc") else None)
    nx.register(guard)
    nx.register(rewriter)
    result = nx.invoke("echo", {"path": "notes.txt"})
    assert result.error == "vetoed: no /etc"
    assert guard.seen == [{"path": "notes.txt"}, {"path": "/etc/passwd"}]
    assert rewriter.seen == [{"path": "notes.txt"}, {"path": "/etc/passwd"}]


def test_nexus_before_tool_invoke_conflicting_rewrites_are_refused(nx: Nexus) -> None:
    nx.register(Gate(lambda call: Rewrite({"a": 1})), name="rw.one")
    nx.register(Gate(lambda call: Rewrite({"a": 2})), name="rw.two")
    result = nx.invoke("echo", {"a": 0})
    assert result.error_kind == "vetoed"
    assert result.error in (
        "vetoed: gates rewrote the arguments in conflicting ways ('rw.two' and 'rw.one')",
        "vetoed: gates rewrote the arguments in conflicting ways ('rw.one' and 'rw.two')",
    )


def test_nexus_before_tool_invoke_agreeing_rewrites_are_applied_once(nx: Nexus) -> None:
    one, two = Gate(lambda call: Rewrite({"a": 1})), Gate(lambda call: Rewrite({"a": 1}))
    nx.register(one)
    nx.register(two)
    assert nx.invoke("echo", {"a": 0}).output_structured == {"a": 1}
    assert one.seen == [{"a": 0}, {"a": 1}]


def test_nexus_before_tool_invoke_rewritten_arguments_are_validated(nx: Nexus) -> None:
    nx.register(Gate(lambda call: Rewrite({"items": [{"name": 5}]})))
    result = nx.invoke("items", {"items": []})
    assert result.error == "invalid arguments for items: items[0].name: expected string, got 5"


def test_nexus_before_tool_invoke_endless_rewriting_is_refused(nx: Nexus) -> None:
    nx.register(Gate(lambda call: Rewrite({"n": call.arguments.get("n", 0) + 1})))
    result = nx.invoke("echo", {"n": 0})
    assert result.error == "vetoed: gates still rewriting after 8 rounds"


def test_nexus_before_tool_invoke_rewrite_to_a_non_object_is_refused(nx: Nexus) -> None:
    nx.register(Gate(lambda call: Rewrite(["not", "an", "object"])), name="rw")  # type: ignore[arg-type]
    assert nx.invoke("echo").error == "vetoed: gate 'rw' rewrote the arguments to list, not an object"


def test_nexus_before_tool_invoke_wrappers_still_wrap_gates(nx: Nexus) -> None:
    calls: list[list[Any]] = []

    class Audit:
        @hookimpl(wrapper=True)
        def nexus_before_tool_invoke(self, call: ToolCall) -> Any:
            outcomes = yield
            calls.append(list(outcomes))
            return outcomes

    class Override:
        @hookimpl(wrapper=True)
        def nexus_before_tool_invoke(self, call: ToolCall) -> Any:
            outcomes = yield
            return [*outcomes, Veto("the wrapper says no")]

    nx.register(Gate(lambda call: None))
    nx.register(Audit())
    assert not nx.invoke("echo").is_error and calls == [[]]
    nx.register(Override())
    result = nx.invoke("echo")
    assert result.error == "vetoed: the wrapper says no" and result.metadata["vetoed_by"] == "a hook wrapper"


# -- result gates -----------------------------------------------------------------------------


def test_nexus_before_tool_result_veto_withholds_the_result(nx: Nexus, recorder: Recorder) -> None:
    nx.register(ResultGate(lambda call, result: Veto("contains a secret") if "secret" in result.output else None),
                name="dlp")
    assert nx.invoke("echo", {"v": "public"}).is_error is False
    result = nx.invoke("echo", {"v": "secret"})
    assert (result.error, result.error_kind, result.metadata["vetoed_by"]) == (
        "vetoed: contains a secret", "vetoed", "dlp")
    assert recorder.results[-1][1] == result  # observers see the final result, not the withheld one


def test_nexus_before_tool_result_replacement_belongs_to_the_call(nx: Nexus) -> None:
    seen: list[str] = []

    def redact(call: ToolCall, result: ToolResult) -> ToolResult:
        seen.append(result.output)
        # built from scratch, with its own id, every time: it is still this call's result, and the
        # second round's (equal) replacement is no change
        return ToolResult(id="whatever", name="other", output=result.output.replace("secret", "[redacted]"))

    nx.register(ResultGate(redact))
    result = nx.invoke(ToolCall(id="c7", name="echo", arguments={"v": "secret"}))
    assert (result.id, result.name, result.output) == ("c7", "echo", '{"v": "[redacted]"}')
    assert seen == ['{"v": "secret"}', '{"v": "[redacted]"}']  # re-gated once, then stable


def test_nexus_before_tool_result_conflicting_replacements_are_refused(nx: Nexus) -> None:
    nx.register(ResultGate(lambda call, result: ToolResult(id=call.id, name=call.name, output="A")), name="r.a")
    nx.register(ResultGate(lambda call, result: ToolResult(id=call.id, name=call.name, output="B")), name="r.b")
    result = nx.invoke("echo")
    assert result.error_kind == "vetoed"
    assert result.error in ("vetoed: result gates replaced the result in conflicting ways ('r.b' and 'r.a')",
                            "vetoed: result gates replaced the result in conflicting ways ('r.a' and 'r.b')")


def test_nexus_before_tool_result_gate_that_raises_withholds_the_result(nx: Nexus) -> None:
    def explode(call: ToolCall, result: ToolResult) -> None:
        raise OSError("audit disk full")

    nx.register(ResultGate(explode), name="audit")
    result = nx.invoke("echo", {"v": 1})
    assert result.error == "vetoed: result gate 'audit' failed (OSError: audit disk full); the result is withheld"
    assert "1" not in result.output


def test_nexus_before_tool_result_sees_errors_too(nx: Nexus, recorder: Recorder) -> None:
    nx.register(Gate(lambda call: Veto("no")))
    nx.invoke("echo")
    nx.invoke("nope")
    assert [r.error_kind for r in recorder.result_gate_saw] == ["vetoed", "unknown_tool"]


# -- observers --------------------------------------------------------------------------------


def test_nexus_tool_invoke_sees_only_calls_that_passed_gates_and_validation(nx: Nexus, recorder: Recorder) -> None:
    nx.register(Gate(lambda call: Veto("no") if call.arguments.get("deny") else None))
    nx.invoke(ToolCall(id="ok", name="echo"))
    nx.invoke(ToolCall(id="denied", name="echo", arguments={"deny": True}))
    nx.invoke(ToolCall(id="invalid", name="items", arguments={}))
    nx.invoke(ToolCall(id="unknown", name="nope"))
    assert [c.id for c in recorder.invoked] == ["ok"]


def test_nexus_tool_result_sees_every_result_errors_included(nx: Nexus, recorder: Recorder) -> None:
    nx.register(Gate(lambda call: Veto("no") if call.arguments.get("deny") else None))
    nx.add_tool(native_tool("boom", run=lambda a: 1 / 0))
    results = [
        nx.invoke(ToolCall(id="ok", name="echo")),
        nx.invoke(ToolCall(id="denied", name="echo", arguments={"deny": True})),
        nx.invoke(ToolCall(id="invalid", name="items", arguments={})),
        nx.invoke(ToolCall(id="unknown", name="nope")),
        nx.invoke(ToolCall(id="raised", name="boom")),
    ]
    assert [r for _, r in recorder.results] == results
    assert [(c.id, r.error_kind) for c, r in recorder.results] == [
        ("ok", None), ("denied", "vetoed"), ("invalid", "invalid_arguments"), ("unknown", "unknown_tool"),
        ("raised", "exception"),
    ]


def test_nexus_tool_register_sees_every_tool_at_start_and_later() -> None:
    recorder = Recorder()

    class Giver:
        @hookimpl
        def nexus_register_tools(self, register: Any) -> None:
            register(echo_tool("given"))

    with Nexus(autoload=False, plugins=[recorder, Giver()], tools=[echo_tool("direct")]) as nexus:
        nexus.add_tool(echo_tool("later"))
        nexus.register(echo_tool("via_register"))
        assert recorder.registered == ["given", "direct", "later", "via_register"]


def test_nexus_tool_unregister_sees_each_tool_leave_but_not_a_replacement(caplog: pytest.LogCaptureFixture) -> None:
    class Watcher:
        def __init__(self) -> None:
            self.events: list[tuple[str, str, bool]] = []
            self.nexus: Nexus | None = None

        @hookimpl
        def nexus_tool_register(self, tool: ToolDef) -> None:
            self.events.append(("register", tool.name, True))

        @hookimpl
        def nexus_tool_unregister(self, tool: ToolDef) -> None:
            # called after the tool is gone: the registry no longer has it
            assert self.nexus is not None
            self.events.append(("unregister", tool.name, self.nexus.tool(tool.name) is None))

    class Giver:
        @hookimpl
        def nexus_register_tools(self, register: Any) -> None:
            register(echo_tool("given_a"))
            register(echo_tool("given_b"))

    watcher = Watcher()
    with Nexus(autoload=False, plugins=[watcher], tools=[echo_tool("mine")]) as nexus:
        watcher.nexus = nexus
        name = nexus.register(Giver())
        watcher.events.clear()
        nexus.replace_tool(echo_tool("given_a"), plugin=name)
        assert watcher.events == [("register", "given_a", True)]  # swapped in place: no removal
        assert nexus.remove_tool("mine") is not None
        assert nexus.remove_tool("mine") is None  # nothing left to remove: no event
        nexus.unregister(name)
        assert watcher.events[1:] == [("unregister", "mine", True), ("unregister", "given_a", True),
                                      ("unregister", "given_b", True)]

    class Bad:
        @hookimpl
        def nexus_tool_unregister(self) -> None:
            raise RuntimeError("observer bug")

    with caplog.at_level(logging.ERROR, logger="nexus_core"), \
            Nexus(autoload=False, plugins=[Bad()], tools=[echo_tool("x")]) as nexus:
        assert nexus.remove_tool("x") is not None and nexus.tool("x") is None  # removed all the same
    assert "plugin 'Bad' raised in nexus_tool_unregister; the other observers still run" in caplog.messages


@pytest.mark.parametrize("bad_first", [True, False])
@pytest.mark.parametrize("hook", ["nexus_tool_register", "nexus_tool_invoke", "nexus_tool_result"])
def test_a_raising_observer_does_not_silence_the_others(hook: str, bad_first: bool, caplog: pytest.LogCaptureFixture) -> None:
    class Bad:
        @hookimpl
        def nexus_tool_register(self) -> None:
            raise RuntimeError("observer bug")

        @hookimpl
        def nexus_tool_invoke(self) -> None:
            raise RuntimeError("observer bug")

        @hookimpl
        def nexus_tool_result(self) -> None:
            raise RuntimeError("observer bug")

    good = Recorder()
    plugins = [Bad(), good] if bad_first else [good, Bad()]
    with caplog.at_level(logging.ERROR, logger="nexus_core"), \
            Nexus(autoload=False, plugins=plugins, tools=[echo_tool()]) as nexus:
        result = nexus.invoke("echo", {"x": 1})
    assert not result.is_error and result.output_structured == {"x": 1}  # the result is untouched
    assert good.registered == ["echo"] and len(good.invoked) == 1 and len(good.results) == 1
    messages = [r.getMessage() for r in caplog.records]
    assert f"plugin 'Bad' raised in {hook}; the other observers still run" in messages
    assert all(r.exc_info for r in caplog.records)  # with the traceback


def test_observer_hooks_fired_by_other_code_are_contained_too(caplog: pytest.LogCaptureFixture) -> None:
    """run_code fires nexus_code_exec_* itself, through `nx.hook`: the same containment applies."""
    seen: list[Any] = []

    class Bad:
        @hookimpl
        def nexus_code_exec_stdout(self, chunk: Any) -> None:
            raise ValueError("bad")

    class Good:
        @hookimpl
        def nexus_code_exec_stdout(self, chunk: Any) -> None:
            seen.append(chunk)

    with Nexus(autoload=False, plugins=[Good(), Bad()]) as nexus:
        nexus.hook.nexus_code_exec_stdout(chunk="hello")
    assert seen == ["hello"]
