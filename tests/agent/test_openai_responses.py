"""The `openai` provider with `api: responses`: the real OpenAI SDK's Responses client against the
fake provider server on loopback. The agent's two-turn task through run_code (streamed and whole),
several calls of one turn paired with their outputs by call_id, a vetoed call the model recovers
from, garbled arguments sent back as written, a reply cut short, and errors without the key."""

from __future__ import annotations

from typing import Any

import pytest
from fakes.providers import Call, FakeProviders, Raw, responses_response
from nexus_core.llm import Message, ModelCall, ModelError, ModelRequest

from nexus_agent import AgentEvent, AgentResult, TextDelta
from nexus_core import ConfigError, Nexus

from .conftest import API_KEY, READ_SCRIPT, NoDeletes, Workspace

ENDPOINT = "openai.responses"


def config(workspace: Workspace, store: bool | None = None, **agent: Any) -> dict[str, Any]:
    section: dict[str, Any] = {"base_url": workspace.base_url + "/v1", "max_retries": 0, "api": "responses"}
    if store is not None:
        section["store"] = store
    return workspace.config(agent=agent, nexus__provider__openai=section)


def run(nx: Nexus, prompt: str) -> tuple[AgentResult, list[AgentEvent]]:
    events: list[AgentEvent] = []
    return nx.plugin("nexus.agent").run(prompt, on_event=events.append), events


def outputs(body: dict[str, Any]) -> dict[str, str]:
    return {i["call_id"]: i["output"] for i in body["input"] if i.get("type") == "function_call_output"}


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
def test_a_two_turn_task_reads_a_file_through_run_code_and_answers(
        stream: bool, fake: FakeProviders, workspace: Workspace) -> None:
    (workspace.root / "inventory.txt").write_text("apples: 42\npears: 7\n")
    fake.script(ENDPOINT,
                responses_response("I will read it with a script.",
                                   [Call("run_code", {"script": READ_SCRIPT}, id="call_rc")], usage=(100, 20)),
                responses_response("There are 42 apples and 7 pears.", usage=(180, 12)))
    with Nexus.from_config(config(workspace, stream=stream)) as nx:
        result, events = run(nx, "How many apples are there?")

    assert result.stop_reason == "final_answer" and result.error is None
    assert result.text == "There are 42 apples and 7 pears."
    assert (result.turns, result.usage.input_tokens, result.usage.output_tokens) == (2, 280, 32)
    if stream:
        assert "".join(e.text for e in events if isinstance(e, TextDelta)) == \
            "I will read it with a script.There are 42 apples and 7 pears."
    first, second = fake.requests_for(ENDPOINT)
    assert [r.stream for r in (first, second)] == [stream, stream]
    assert first.headers.get("authorization") == f"Bearer {API_KEY}"
    body = first.body
    assert body["store"] is False and body["max_output_tokens"] == 4096
    assert body["input"] == [{"role": "user", "content": "How many apples are there?"}]
    assert "run_code" in body["instructions"]
    tools = {t["name"]: t for t in body["tools"]}
    assert tools["run_code"]["type"] == "function" and "def run(ctx)" in tools["run_code"]["description"]
    # the model's turn goes back as it was (its call without an item id), then the output
    assert second.body["input"][1] == {"role": "assistant", "content": "I will read it with a script."}
    call_item = second.body["input"][2]
    assert call_item["type"] == "function_call" and call_item["call_id"] == "call_rc" and "id" not in call_item
    printed, returned = outputs(second.body)["call_rc"].split("--- result ---\n")
    assert printed == "read 20 characters\n" and '"apples: 42' in returned


def test_calls_of_one_turn_are_answered_by_call_id_and_a_veto_is_recovered_from(
        fake: FakeProviders, workspace: Workspace) -> None:
    fake.script(ENDPOINT,
                responses_response(None, [Call("shell", {"command": "rm -rf build"}, id="call_rm"),
                                          Call("shell", {"command": "echo kept"}, id="call_echo")]),
                responses_response("I kept the files."))
    with Nexus.from_config(config(workspace, store=True)) as nx:
        nx.register(NoDeletes())
        result, _ = run(nx, "clean up")
    assert result.text == "I kept the files." and result.turns == 2
    first, second = (r.body for r in fake.requests_for(ENDPOINT))
    assert first["store"] is True
    sent = outputs(second)
    assert sent["call_rm"].startswith("vetoed: deleting is not allowed")
    assert "kept" in sent["call_echo"]
    kinds = [i.get("type", i.get("role")) for i in second["input"]]
    assert kinds == ["user", "function_call", "function_call", "function_call_output", "function_call_output"]


def test_arguments_the_model_garbled_go_back_as_written_with_the_error(fake: FakeProviders,
                                                                       workspace: Workspace) -> None:
    garbled = responses_response(None, [Call("read", {"path": "x"}, id="call_bad")])
    garbled["output"][0]["arguments"] = '{"path": "x"'  # cut short
    fake.script(ENDPOINT, garbled, responses_response("Sorry."))
    with Nexus.from_config(config(workspace, stream=False)) as nx:
        result, _ = run(nx, "read x")
    assert result.text == "Sorry."
    second = fake.requests_for(ENDPOINT)[1].body
    assert second["input"][1]["arguments"] == '{"path": "x"'
    assert "arguments" in outputs(second)["call_bad"] and "JSON" in outputs(second)["call_bad"]


def test_a_reply_cut_short_says_why(fake: FakeProviders, workspace: Workspace) -> None:
    cut = responses_response("Half an answ", usage=(10, 5))
    cut.update(status="incomplete", incomplete_details={"reason": "max_output_tokens"})
    fake.script(ENDPOINT, cut, cut)
    request = ModelRequest(provider="openai", model="gpt-5", messages=(Message.user("hi"),), max_output_tokens=5)
    with Nexus.from_config(config(workspace)) as nx:
        whole = nx.complete(request, ModelCall(stream=False))
        streamed = nx.complete(request, ModelCall(stream=True))
    for response in (whole, streamed):
        assert response.text == "Half an answ" and response.stop_reason == "max_output_tokens"
    assert fake.requests_for(ENDPOINT)[0].body["max_output_tokens"] == 5


def test_an_error_names_what_to_fix_without_the_key(fake: FakeProviders, workspace: Workspace) -> None:
    fake.script(ENDPOINT, Raw(401, {"error": {"message": f"Incorrect API key provided: {API_KEY}.",
                                              "type": "invalid_request_error", "code": "invalid_api_key"}}))
    with Nexus.from_config(config(workspace)) as nx:
        with pytest.raises(ModelError) as error:
            nx.complete(ModelRequest(provider="openai", model="gpt-5", messages=(Message.user("hi"),)))
    text = str(error.value)
    assert text.startswith("OpenAI request failed: HTTP 401: Incorrect API key provided: [API key]")
    assert "check the key in $OPENAI_API_KEY" in text and API_KEY not in text


def test_the_api_setting_is_checked(workspace: Workspace) -> None:
    data = workspace.config(nexus__provider__openai={"api": "completions"})
    with pytest.raises(ConfigError, match=r"plugins\.nexus\.provider\.openai\.api"):
        Nexus.from_config(data)
