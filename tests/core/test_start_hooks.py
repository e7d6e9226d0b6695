"""The observer hooks that open a call and a model request (`nexus_tool_call_start`,
`nexus_model_request_start`, and `nexus_model_request_error` that closes a request with no
response): every call and request is announced once, before its gates, refusals included, on
its own thread, and closed once; nothing is called when no plugin implements them."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from nexus_core.llm import Message, ModelCall, ModelError, ModelRequest, ModelResponse, Usage

from nexus_core import Nexus, ToolCall, Veto, hookimpl, native_tool


class Journal:
    """Records, in order, each hook it sees with the call (or request) id and the thread."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, str | None]] = []
        self.threads: dict[str, set[int]] = {}

    def _note(self, event: str, key: str, extra: str | None = None) -> None:
        self.events.append((event, key, extra))
        self.threads.setdefault(key, set()).add(threading.get_ident())

    @hookimpl
    def nexus_tool_call_start(self, call: ToolCall, tool: Any) -> None:
        self._note("start", call.id, tool.name if tool is not None else None)

    @hookimpl
    def nexus_before_tool_invoke(self, call: ToolCall) -> None:
        self._note("gate", call.id)

    @hookimpl
    def nexus_tool_result(self, call: ToolCall, result: Any) -> None:
        self._note("result", call.id, result.error_kind)

    @hookimpl
    def nexus_model_request_start(self, request: ModelRequest) -> None:
        self._note("request", request.id, request.model)

    @hookimpl
    def nexus_before_model_request(self, request: ModelRequest) -> None:
        self._note("request gate", request.id)

    @hookimpl
    def nexus_model_response(self, request: ModelRequest, response: ModelResponse) -> None:
        self._note("response", request.id, response.text)

    @hookimpl
    def nexus_model_request_error(self, request: ModelRequest, error: ModelError) -> None:
        self._note("error", request.id, error.kind)


class NoDeletes:
    @hookimpl
    def nexus_before_tool_invoke(self, call: ToolCall) -> Veto | None:
        return Veto("no deleting") if call.name == "delete" else None


def _tools() -> list[Any]:
    return [native_tool("echo", "Echo.", {"type": "object"}, lambda a: a.get("text", "")),
            native_tool("delete", "Delete.", {"type": "object"}, lambda a: "gone")]


def test_every_call_is_announced_once_before_its_gates_refusals_included() -> None:
    journal = Journal()
    with Nexus(autoload=False, plugins=[journal, NoDeletes()], tools=_tools()) as nx:
        ok = nx.invoke(ToolCall(id="c1", name="echo", arguments={"text": "hi"}))
        vetoed = nx.invoke(ToolCall(id="c2", name="delete"))
        unknown = nx.invoke(ToolCall(id="c3", name="nope"))
        refused = nx.refuse(ToolCall(id="c4", name="echo"), "not run: the limit is reached", "cancelled")
    assert not ok.is_error and vetoed.error_kind == "vetoed"
    assert unknown.error_kind == "unknown_tool" and refused.error_kind == "cancelled"
    assert journal.events == [
        ("start", "c1", "echo"), ("gate", "c1", None), ("result", "c1", None),
        ("start", "c2", "delete"), ("gate", "c2", None), ("result", "c2", "vetoed"),
        ("start", "c3", None), ("result", "c3", "unknown_tool"),
        ("start", "c4", "echo"), ("result", "c4", "cancelled"),
    ]


def test_a_call_opens_and_closes_on_its_own_thread() -> None:
    journal = Journal()
    with Nexus(autoload=False, plugins=[journal], tools=_tools()) as nx:
        threads = [threading.Thread(target=nx.invoke, args=(ToolCall(id=f"t{i}", name="echo"),)) for i in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
    for i in range(4):
        assert len(journal.threads[f"t{i}"]) == 1  # start, gate, result: one thread
        assert [e for e, key, _ in journal.events if key == f"t{i}"] == ["start", "gate", "result"]


def test_a_start_observer_that_raises_does_not_stop_the_call(caplog: pytest.LogCaptureFixture) -> None:
    class Broken:
        @hookimpl
        def nexus_tool_call_start(self, call: ToolCall) -> None:
            raise RuntimeError("boom")

    with Nexus(autoload=False, plugins=[Broken()], tools=_tools()) as nx:
        assert nx.invoke("echo", {"text": "still here"}).output == "still here"
    assert "nexus_tool_call_start" in caplog.text and "boom" in caplog.text


def test_nothing_is_called_when_no_plugin_implements_the_start_hooks() -> None:
    with Nexus(autoload=False, tools=_tools()) as nx:
        implemented = nx.plugin_manager.implemented  # type: ignore[attr-defined]
        assert "nexus_tool_call_start" not in implemented
        assert "nexus_model_request_start" not in implemented
        assert nx.invoke("echo", {"text": "x"}).output == "x"


class Parrot:
    name = "parrot"

    def __init__(self, fail: BaseException | None = None) -> None:
        self.fail = fail

    @hookimpl
    def nexus_register_providers(self, register: Any) -> None:
        register(self)

    def complete(self, request: ModelRequest, call: ModelCall) -> ModelResponse:
        if self.fail is not None:
            raise self.fail
        return ModelResponse(text=request.messages[-1].text, usage=Usage(3, 2), model=request.model)


class NoBigModels:
    @hookimpl
    def nexus_before_model_request(self, request: ModelRequest) -> Veto | None:
        return Veto("too big") if request.model == "big" else None


def _ask(model: str, rid: str) -> ModelRequest:
    return ModelRequest(provider="parrot", model=model, messages=(Message.user("hello"),), id=rid)


def test_every_model_request_is_opened_before_its_gates_and_closed_once() -> None:
    journal = Journal()
    with Nexus(autoload=False, plugins=[journal, NoBigModels(), Parrot()]) as nx:
        assert nx.complete(_ask("small", "r1")).text == "hello"
        with pytest.raises(ModelError):
            nx.complete(_ask("big", "r2"))
        with pytest.raises(ModelError):
            nx.complete(ModelRequest(provider="nobody", model="m", id="r3"))
        call = ModelCall()
        call.cancel()
        with pytest.raises(ModelError):
            nx.complete(_ask("small", "r4"), call)
    assert journal.events == [
        ("request", "r1", "small"), ("request gate", "r1", None), ("response", "r1", "hello"),
        ("request", "r2", "big"), ("request gate", "r2", None), ("error", "r2", "vetoed"),
        ("request", "r3", "m"), ("request gate", "r3", None), ("error", "r3", "unknown_provider"),
        ("request", "r4", "small"), ("error", "r4", "cancelled"),
    ]


@pytest.mark.parametrize("raised, kind", [(RuntimeError("the socket broke"), "failed"),
                                          (KeyboardInterrupt(), "cancelled")])
def test_a_provider_that_raises_closes_the_request_for_observers(raised: BaseException, kind: str) -> None:
    journal = Journal()
    with Nexus(autoload=False, plugins=[journal, Parrot(fail=raised)]) as nx:
        with pytest.raises((ModelError, KeyboardInterrupt)):
            nx.complete(_ask("small", "r1"))
    assert journal.events[-1] == ("error", "r1", kind)
