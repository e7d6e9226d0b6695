"""The `gemini` provider (nexus.provider.gemini) with the real google-genai client against the fake
provider server on loopback: the agent's two-turn task through run_code (streamed and whole),
several calls in one turn with their thought signatures and ids sent back as Gemini checks them,
a vetoed call the model recovers from, errors that name what to fix without the key, an
interrupted stream, and `nexus ask` as a subprocess."""

from __future__ import annotations

import json
import os
import threading
from typing import Any

import pytest
from fakes.providers import Call, FakeProviders, Raw, gemini_response
from nexus_core.llm import Message, ModelCall, ModelError, ModelRequest

from nexus_agent import AgentEvent, AgentResult, TextDelta, read_transcript
from nexus_core import Nexus, native_tool

from .conftest import READ_SCRIPT, NoDeletes, RunNexus, Workspace, subprocess_env

GEMINI_KEY = "gemini-nexus-test-" + os.urandom(12).hex()
MODEL = "gemini:gemini-2.5-flash"
ENDPOINT = "gemini.generate"


@pytest.fixture(autouse=True)
def _gemini_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GEMINI_API_KEY", GEMINI_KEY)
    for name in ("GOOGLE_API_KEY", "GOOGLE_GEMINI_BASE_URL", "GOOGLE_GENAI_USE_VERTEXAI"):
        monkeypatch.delenv(name, raising=False)


def config(workspace: Workspace, base_url: str | None = None, **agent: Any) -> dict[str, Any]:
    return workspace.config(model=MODEL, agent=agent, nexus__provider__gemini={
        "base_url": base_url or workspace.base_url, "max_retries": 0})


def run(nx: Nexus, prompt: str) -> tuple[AgentResult, list[AgentEvent]]:
    events: list[AgentEvent] = []
    return nx.plugin("nexus.agent").run(prompt, on_event=events.append), events


def function_responses(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [part["functionResponse"] for content in body["contents"] for part in content["parts"]
            if "functionResponse" in part]


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
def test_a_two_turn_task_reads_a_file_through_run_code_and_answers(
        stream: bool, fake: FakeProviders, workspace: Workspace) -> None:
    (workspace.root / "inventory.txt").write_text("apples: 42\npears: 7\n")
    fake.script(ENDPOINT,
                gemini_response("I will read it with a script.",
                                [Call("run_code", {"script": READ_SCRIPT}, id="fc-1")], usage=(100, 20)),
                gemini_response("There are 42 apples and 7 pears.", usage=(180, 12)))
    with Nexus.from_config(config(workspace, stream=stream)) as nx:
        result, events = run(nx, "How many apples are there?")

    assert result.stop_reason == "final_answer" and result.error is None
    assert result.text == "There are 42 apples and 7 pears."
    assert (result.turns, result.usage.input_tokens, result.usage.output_tokens) == (2, 280, 32)
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == \
        "I will read it with a script.There are 42 apples and 7 pears."

    first, second = fake.requests_for(ENDPOINT)
    assert [r.stream for r in (first, second)] == [stream, stream]
    assert first.path.endswith("/models/gemini-2.5-flash:" + ("streamGenerateContent" if stream else "generateContent"))
    assert first.headers.get("x-goog-api-key") == GEMINI_KEY
    body = first.body
    assert body["contents"] == [{"role": "user", "parts": [{"text": "How many apples are there?"}]}]
    assert "run_code" in body["systemInstruction"]["parts"][0]["text"]
    declarations = {d["name"]: d for d in body["tools"][0]["functionDeclarations"]}
    assert "def run(ctx)" in declarations["run_code"]["description"]
    assert body["generationConfig"]["maxOutputTokens"] == 4096
    # the model's turn goes back as it was, then the script's result, matched to its call by id
    model_turn = second.body["contents"][1]
    assert model_turn["role"] == "model"
    assert model_turn["parts"][0] == {"text": "I will read it with a script."}
    assert model_turn["parts"][1]["functionCall"]["id"] == "fc-1"
    [response] = function_responses(second.body)
    assert response["id"] == "fc-1" and response["name"] == "run_code"
    output = response["response"]["output"]
    assert output["stdout"] == "read 20 characters\n" and output["result"] == {"inventory": "apples: 42\npears: 7\n"}
    records = read_transcript(result.transcript or "")
    assert [r["type"] for r in records].count("tool_result") == 1


def test_calls_of_one_turn_keep_their_signatures_and_ids(fake: FakeProviders, workspace: Workspace) -> None:
    """Gemini signs its calls and checks the signature when they come back; an older model sends
    calls without ids, and their responses must come back without one too."""
    seen: list[str] = []
    lock = threading.Lock()

    def note(args: dict[str, Any]) -> str:
        with lock:
            seen.append(args["word"])
        return args["word"].upper()

    tool = native_tool("shout", "Shout a word.", {"type": "object", "properties": {"word": {"type": "string"}},
                                                   "required": ["word"]}, run=note)
    fake.script(ENDPOINT,
                gemini_response(None, [Call("shout", {"word": "one"}, thought_signature="c2lnLW9uZQ=="),
                                       Call("shout", {"word": "two"}, gemini_id=False)]),
                gemini_response("ONE and TWO."))
    with Nexus.from_config(config(workspace), tools=[tool]) as nx:
        result, _ = run(nx, "shout one and two")
    assert result.text == "ONE and TWO." and sorted(seen) == ["one", "two"]
    second = fake.requests_for(ENDPOINT)[1].body
    calls = [p for p in second["contents"][1]["parts"] if "functionCall" in p]
    assert calls[0]["thoughtSignature"] == "c2lnLW9uZQ==" and "thoughtSignature" not in calls[1]
    assert "id" in calls[0]["functionCall"] and "id" not in calls[1]["functionCall"]
    one, two = function_responses(second)
    assert one["id"] == calls[0]["functionCall"]["id"] and "id" not in two
    assert (one["response"], two["response"]) == ({"output": "ONE"}, {"output": "TWO"})
    assert second["contents"][2]["role"] == "user"


def test_a_vetoed_call_goes_back_as_an_error_the_model_recovers_from(fake: FakeProviders,
                                                                     workspace: Workspace) -> None:
    fake.script(ENDPOINT,
                gemini_response(None, [Call("shell", {"command": "rm -rf build"})]),
                gemini_response(None, [Call("shell", {"command": "echo kept"})]),
                gemini_response("I left the files and said so."))
    with Nexus.from_config(config(workspace)) as nx:
        nx.register(NoDeletes())
        result, _ = run(nx, "clean up")
    assert result.stop_reason == "final_answer" and result.turns == 3
    bodies = [r.body for r in fake.requests_for(ENDPOINT)]
    [vetoed] = function_responses(bodies[1])
    assert vetoed["response"]["error"].startswith("vetoed: deleting is not allowed")
    assert function_responses(bodies[2])[-1]["response"]["output"]["stdout"] == "kept\n"


def test_errors_name_what_to_fix_and_never_hold_the_key(fake: FakeProviders, workspace: Workspace,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    request = ModelRequest(provider="gemini", model="gemini-2.5-flash", messages=(Message.user("hi"),))
    fake.script(ENDPOINT, Raw(400, {"error": {"code": 400, "status": "INVALID_ARGUMENT",
                                              "message": f"API key not valid: {GEMINI_KEY}. Please pass a valid API key."}}))
    with Nexus.from_config(config(workspace)) as nx:
        with pytest.raises(ModelError) as bad_key:
            nx.complete(request, ModelCall(stream=False))
    text = str(bad_key.value)
    assert text.startswith("Gemini request failed: HTTP 400: API key not valid: [API key]")
    assert "check the key in $GEMINI_API_KEY" in text and GEMINI_KEY not in text

    # nothing listens on the port of a server that is gone
    with FakeProviders() as gone:
        url = gone.url
    with Nexus.from_config(config(workspace, base_url=url)) as nx:
        with pytest.raises(ModelError, match=f"cannot reach {url}: ConnectError"):
            nx.complete(request, ModelCall(stream=True))

    monkeypatch.delenv("GEMINI_API_KEY")
    with Nexus.from_config(config(workspace)) as nx:
        assert "gemini" in nx.providers()  # listing needs no key: it is read at the first request
        with pytest.raises(ModelError, match="no Gemini API key: the environment variable GEMINI_API_KEY is not set "
                                             r"\(it is the one plugins.nexus.provider.gemini.api_key_env names\)"):
            nx.complete(request)


def test_a_blocked_prompt_is_an_error_that_says_so(fake: FakeProviders, workspace: Workspace) -> None:
    fake.script(ENDPOINT, {"promptFeedback": {"blockReason": "SAFETY"}, "modelVersion": "gemini-2.5-flash"})
    with Nexus.from_config(config(workspace)) as nx:
        with pytest.raises(ModelError, match=r"holds no candidates \(the prompt was blocked: SAFETY\)"):
            nx.complete(ModelRequest(provider="gemini", model="gemini-2.5-flash", messages=(Message.user("hi"),)),
                        ModelCall(stream=False))
        with pytest.raises(ModelError, match="the request has no message with content: Gemini needs at least one"):
            nx.complete(ModelRequest(provider="gemini", model="gemini-2.5-flash", messages=()))


def test_interrupting_a_streamed_turn_closes_the_stream_and_the_session_goes_on(workspace: Workspace) -> None:
    from .stalling import Answer, Stall, StallingServer

    with StallingServer(Stall("Let me think"), Answer("Here I am.")) as server:
        with Nexus.from_config(config(workspace, base_url=server.url)) as nx:
            streaming = threading.Event()
            texts: list[str] = []

            def seen(event: AgentEvent) -> None:
                if isinstance(event, TextDelta):
                    texts.append(event.text)
                    streaming.set()

            with nx.plugin("nexus.agent").session(on_event=seen) as session:
                box: dict[str, AgentResult] = {}
                worker = threading.Thread(target=lambda: box.update(r=session.send("think hard")))
                worker.start()
                assert server.stalled.wait(30) and streaming.wait(30)
                session.cancel()
                worker.join(30)
                assert box["r"].stop_reason == "interrupted" and box["r"].error is None
                assert server.disconnected.wait(30)  # the client closed the stream, not just left it
                assert session.send("are you there?").text == "Here I am."
    assert "".join(texts).startswith("Let me think")
    # the second request carries the person's first message, not the cut-off reply
    assert server.bodies[1]["contents"][-1] == {"role": "user", "parts": [{"text": "are you there?"}]}


def test_nexus_ask_answers_with_gemini_and_the_key_is_in_no_file(fake: FakeProviders, workspace: Workspace,
                                                                 run_nexus: RunNexus) -> None:
    (workspace.root / "notes.txt").write_text("the meeting is at noon\n")
    fake.script(ENDPOINT,
                gemini_response(None, [Call("read", {"path": "notes.txt"})]),
                gemini_response("At noon."))
    config(workspace)
    proc = run_nexus("ask", "--json", "When is the meeting?", env=subprocess_env(GEMINI_API_KEY=GEMINI_KEY))
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["answer"] == "At noon." and out["stop_reason"] == "final_answer"
    [response] = function_responses(fake.requests_for(ENDPOINT)[1].body)
    assert "the meeting is at noon" in json.dumps(response["response"])
    written = workspace.files_written()
    assert any(p.suffix == ".jsonl" for p in written)
    assert all(GEMINI_KEY.encode() not in p.read_bytes() for p in written)
    assert GEMINI_KEY not in proc.stdout + proc.stderr
