"""The `anthropic` provider marks what each turn of an agent repeats (the tools, the system prompt,
the conversation so far) for Anthropic's prompt cache, through the real SDK against the fake
server: two breakpoints a request, the second moving to the end of the conversation as it grows,
and none with `prompt_caching: false`."""

from __future__ import annotations

import json
from typing import Any

from fakes.providers import Call, FakeProviders, anthropic_message
from nexus_core.llm import Message, ModelCall, ModelRequest

from nexus_core import Nexus, native_tool

from .conftest import Workspace

ENDPOINT = "anthropic.messages"
EPHEMERAL = {"type": "ephemeral"}


def config(workspace: Workspace, caching: bool | None = None) -> dict[str, Any]:
    section: dict[str, Any] = {"base_url": workspace.base_url, "max_retries": 0}
    if caching is not None:
        section["prompt_caching"] = caching
    return workspace.config(model="anthropic:claude-sonnet-4-5", nexus__provider__anthropic=section)


def breakpoints(body: dict[str, Any]) -> int:
    return json.dumps(body).count('"cache_control"')


def test_each_turn_marks_the_tools_system_prompt_and_conversation_for_the_cache(
        fake: FakeProviders, workspace: Workspace) -> None:
    (workspace.root / "a.txt").write_text("alpha\n")
    fake.script(ENDPOINT, anthropic_message("Reading.", [Call("read", {"path": "a.txt"}, id="toolu_1")]),
                anthropic_message("It says alpha."))
    with Nexus.from_config(config(workspace)) as nx:
        result = nx.plugin("nexus.agent").run("what is in a.txt?")
    assert result.text == "It says alpha."
    first, second = (r.body for r in fake.requests_for(ENDPOINT))

    # the first turn: after the system prompt (which the tools precede), and after the question
    [system] = first["system"]
    assert system["cache_control"] == EPHEMERAL and system["text"].startswith("You are an agent")
    assert all("cache_control" not in tool for tool in first["tools"])
    assert first["messages"] == [{"role": "user", "content": [
        {"type": "text", "text": "what is in a.txt?", "cache_control": EPHEMERAL}]}]
    assert breakpoints(first) == 2

    # the second: the conversation's breakpoint moved to its new end, the tool's result
    question, answer, results = second["messages"]
    assert question == {"role": "user", "content": "what is in a.txt?"}
    assert "cache_control" not in json.dumps(answer)
    [result_block] = results["content"]
    assert result_block["type"] == "tool_result" and result_block["tool_use_id"] == "toolu_1"
    assert result_block["cache_control"] == EPHEMERAL and "alpha" in json.dumps(result_block["content"])
    assert breakpoints(second) == 2


def test_without_a_system_prompt_the_last_tool_carries_the_breakpoint(fake: FakeProviders,
                                                                      workspace: Workspace) -> None:
    tools = [native_tool(name, f"Tool {name}.", {"type": "object"}, run=lambda a: "ok") for name in ("one", "two")]
    fake.script(ENDPOINT, anthropic_message("Hi."))
    with Nexus.from_config(config(workspace), tools=tools) as nx:
        offered = tuple(t for t in nx.tools() if t.name in ("one", "two"))
        nx.complete(ModelRequest(provider="anthropic", model="claude-sonnet-4-5", messages=(Message.user("hi"),),
                                 tools=offered), ModelCall(stream=False))
    body = fake.last(ENDPOINT).body
    assert "system" not in body
    assert [t.get("cache_control") for t in body["tools"]] == [None, EPHEMERAL]
    assert breakpoints(body) == 2


def test_prompt_caching_can_be_turned_off(fake: FakeProviders, workspace: Workspace) -> None:
    fake.script(ENDPOINT, anthropic_message("Hi."))
    with Nexus.from_config(config(workspace, caching=False)) as nx:
        nx.plugin("nexus.agent").run("hello")
    body = fake.last(ENDPOINT).body
    assert breakpoints(body) == 0
    assert isinstance(body["system"], str) and body["messages"] == [{"role": "user", "content": "hello"}]
