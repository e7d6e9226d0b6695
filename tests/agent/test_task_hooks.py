"""The agent loop's own hooks (`nexus_agent_task_start`, `nexus_agent_task_end`): each task is
opened and closed once, on the thread that sent it, around its model requests and tool calls;
the tool calls, run on the session's workers, see the context variables of the task's thread.
With the real OpenAI SDK against the fake provider server on loopback."""

from __future__ import annotations

import contextvars
import threading
from typing import Any

from fakes.providers import Call, FakeProviders, Raw, chat_completion
from nexus_core.llm import ModelRequest

from nexus_agent import AgentResult
from nexus_core import Nexus, ToolCall, hookimpl, native_tool

from .conftest import Workspace

#: what a tracer would make current for the task (its span)
current_task: contextvars.ContextVar[str | None] = contextvars.ContextVar("current_task", default=None)


class TaskWatcher:
    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []
        self.threads: dict[str, int] = {}
        self._reset: contextvars.Token[str | None] | None = None

    @hookimpl
    def nexus_agent_task_start(self, session: Any, text: str) -> None:
        self.events.append(("start", text))
        self.threads["start"] = threading.get_ident()
        self._reset = current_task.set(f"task of {session.id}")

    @hookimpl
    def nexus_model_request_start(self, request: ModelRequest) -> None:
        self.events.append(("request", current_task.get()))

    @hookimpl
    def nexus_tool_call_start(self, call: ToolCall) -> None:
        self.events.append(("call " + call.arguments.get("who", "?"), current_task.get()))
        self.threads.setdefault("calls", threading.get_ident())

    @hookimpl
    def nexus_agent_task_end(self, session: Any, result: AgentResult | None) -> None:
        assert self._reset is not None
        current_task.reset(self._reset)
        self.events.append(("end", result.stop_reason if result is not None else None))
        self.threads["end"] = threading.get_ident()


def test_a_task_is_opened_and_closed_around_its_requests_and_calls(fake: FakeProviders,
                                                                   workspace: Workspace) -> None:
    tool = native_tool("greet", "Greet someone.", {"type": "object", "properties": {"who": {"type": "string"}}},
                       run=lambda a: f"hello {a['who']}")
    fake.script("openai.chat", chat_completion(None, [Call("greet", {"who": "ann"}), Call("greet", {"who": "bob"})]),
                chat_completion("Greeted both."))
    watcher = TaskWatcher()
    with Nexus.from_config(workspace.config(), tools=[tool], plugins=[watcher]) as nx:
        with nx.plugin("nexus.agent").session(model="openai:gpt-4.1") as session:
            result = session.send("greet ann and bob")
            task = f"task of {session.id}"
    assert result.stop_reason == "final_answer"
    assert watcher.events[0] == ("start", "greet ann and bob")
    assert watcher.events[-1] == ("end", "final_answer")
    # the calls ran on the session's workers, in the task's context
    middle = watcher.events[1:-1]
    assert middle[0] == ("request", task) and middle[-1] == ("request", task)
    assert sorted(middle[1:3]) == [("call ann", task), ("call bob", task)]
    assert watcher.threads["start"] == watcher.threads["end"] == threading.get_ident()
    assert watcher.threads["calls"] != threading.get_ident()


def test_a_task_that_fails_is_closed_too(fake: FakeProviders, workspace: Workspace) -> None:
    fake.script("openai.chat", Raw(500, {"error": {"message": "the model is down"}}))
    watcher = TaskWatcher()
    with Nexus.from_config(workspace.config(), plugins=[watcher]) as nx:
        result = nx.plugin("nexus.agent").run("hi", model="openai:gpt-4.1")
    assert result.stop_reason == "error"
    assert [e for e, _ in watcher.events] == ["start", "request", "end"]
    assert watcher.events[-1] == ("end", "error")
