"""The agent loop with the real OpenAI and Anthropic SDK clients against the fake provider server on
loopback (streamed, as `nexus chat` uses them, and not): a two-turn task through run_code, several
calls of one turn at once, a veto the model recovers from, approvals, the turn limit and the token
budget, request gates and response observers, and the transcript."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
from fakes.providers import Call, FakeProviders, Raw, anthropic_message, chat_completion
from nexus_core.llm import ModelRequest, ModelResponse

from nexus_agent import AgentEvent, AgentResult, TextDelta, ToolCallFinished, read_transcript
from nexus_core import Ask, Nexus, Question, ToolCall, ToolDef, Veto, hookimpl, native_tool

from .conftest import ANTHROPIC_KEY, API_KEY, READ_SCRIPT, Workspace, alive

PROVIDERS = ["openai", "anthropic"]
MODEL = {"openai": "openai:gpt-4.1", "anthropic": "anthropic:claude-sonnet-4-5"}
ENDPOINT = {"openai": "openai.chat", "anthropic": "anthropic.messages"}


def reply(provider: str, text: str | None = None, calls: list[Call] | None = None,
          usage: tuple[int, int] = (82, 17)) -> dict[str, Any]:
    build = chat_completion if provider == "openai" else anthropic_message
    return build(text, calls or [], usage=usage)


def tool_results_sent(provider: str, body: dict[str, Any]) -> dict[str, str]:
    """call id -> the tool result text the client sent back, from a request body."""
    out: dict[str, str] = {}
    for message in body["messages"]:
        if provider == "openai" and message["role"] == "tool":
            out[message["tool_call_id"]] = message["content"]
        if provider == "anthropic" and message["role"] == "user" and isinstance(message["content"], list):
            for block in message["content"]:
                if block.get("type") == "tool_result":
                    content = block["content"]
                    out[block["tool_use_id"]] = content if isinstance(content, str) else \
                        "".join(b.get("text", "") for b in content)
    return out


def run(nx: Nexus, prompt: str, provider: str, **kwargs: Any) -> tuple[AgentResult, list[AgentEvent]]:
    events: list[AgentEvent] = []
    agent = nx.plugin("nexus.agent")
    result = agent.run(prompt, model=MODEL[provider], on_event=events.append, **kwargs)
    return result, events


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
def test_a_two_turn_task_reads_a_file_through_run_code_and_answers(
        provider: str, stream: bool, fake: FakeProviders, workspace: Workspace) -> None:
    (workspace.root / "inventory.txt").write_text("apples: 42\npears: 7\n")
    skill = workspace.root / "skills" / "stocktake"
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text("---\nname: stocktake\ndescription: Count what is in the inventory files.\n---\n"
                                    "Read inventory.txt and add the numbers.\n")
    fake.script(ENDPOINT[provider],
                reply(provider, "I will read it with a script.", [Call("run_code", {"script": READ_SCRIPT})]),
                reply(provider, "There are 42 apples and 7 pears."))
    with Nexus.from_config(workspace.config(agent={"stream": stream})) as nx:
        result, events = run(nx, "How many apples are there?", provider)

    assert result.stop_reason == "final_answer" and result.error is None
    assert result.text == "There are 42 apples and 7 pears."
    assert result.turns == 2 and result.usage.total_tokens > 0
    streamed = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert streamed == "I will read it with a script.There are 42 apples and 7 pears."

    first, second = (r.body for r in fake.requests_for(ENDPOINT[provider]))
    assert all(r.stream is stream for r in fake.requests_for(ENDPOINT[provider]))
    # the model saw run_code like any tool, and the skills prompt in the system prompt
    tools = {t["function"]["name"] if provider == "openai" else t["name"]: t for t in first["tools"]}
    run_code = tools["run_code"]["function"]["description"] if provider == "openai" else tools["run_code"]["description"]
    assert "def run(ctx)" in run_code and "def read(" in run_code and "class ReadResult" in run_code
    system = first["messages"][0]["content"] if provider == "openai" else \
        "".join(block["text"] for block in first["system"])  # blocks: the last marked for the prompt cache
    assert "stocktake" in system and "Count what is in the inventory files." in system
    # the second request carries the script's result back
    [sent] = tool_results_sent(provider, second).values()
    # what the script printed, as it is, then run's return value as JSON (issue 14.8)
    printed, returned = sent.split("--- result ---\n")
    assert printed == "read 20 characters\n" and json.loads(returned) == {"inventory": "apples: 42\npears: 7\n"}

    records = read_transcript(result.transcript or "")
    assert [r["type"] for r in records] == ["session", "message", "request", "response", "call", "tool_result",
                                            "request", "response", "stop"]
    assert records[4]["call"]["name"] == "run_code"  # its start: a resumed turn never repeats a call that started
    assert records[5]["call"]["name"] == "run_code" and "apples: 42" in records[5]["result"]["output"]
    assert records[-1]["reason"] == "final_answer" and records[-1]["usage"]["total_tokens"] == result.usage.total_tokens
    assert records[3]["usage"]["input_tokens"] > 0


@pytest.mark.parametrize("provider", PROVIDERS)
def test_the_calls_of_one_turn_run_at_once(provider: str, fake: FakeProviders, workspace: Workspace) -> None:
    """Each call waits at a barrier for the other: only calls run at the same time get through."""
    barrier = threading.Barrier(3, timeout=20)

    def meet(arguments: dict[str, Any]) -> str:
        barrier.wait()
        return f"{arguments['who']} met the others"

    tool = native_tool("meet", "Meet the others.", {"type": "object", "properties": {"who": {"type": "string"}}},
                       run=meet)
    calls = [Call("meet", {"who": name}) for name in ("ann", "bob", "cy")]
    fake.script(ENDPOINT[provider], reply(provider, None, calls), reply(provider, "Everyone met."))
    with Nexus.from_config(workspace.config(), tools=[tool]) as nx:
        result, events = run(nx, "meet", provider)
    assert result.stop_reason == "final_answer"
    finished = [e.result for e in events if isinstance(e, ToolCallFinished)]
    assert sorted(r.output for r in finished) == ["ann met the others", "bob met the others", "cy met the others"]
    # the results go back in the order of the calls, whatever order they finished in
    sent = tool_results_sent(provider, fake.last(ENDPOINT[provider]).body)
    assert list(sent.values()) == ["ann met the others", "bob met the others", "cy met the others"]


class NoShell:
    @hookimpl
    def nexus_before_tool_invoke(self, call: ToolCall, tool: ToolDef) -> Veto | None:
        return Veto("no shell in this session; use the file tools") if tool.name == "shell" else None  # bash too


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_vetoed_call_reaches_the_model_which_recovers(provider: str, fake: FakeProviders,
                                                        workspace: Workspace) -> None:
    (workspace.root / "notes.txt").write_text("meeting at noon\n")
    fake.script(ENDPOINT[provider],
                reply(provider, None, [Call("shell", {"command": "cat notes.txt"})]),
                reply(provider, "The shell is off; reading the file instead.", [Call("read", {"path": "notes.txt"})]),
                reply(provider, "The meeting is at noon."))
    with Nexus.from_config(workspace.config(), plugins=[NoShell()]) as nx:
        result, _ = run(nx, "When is the meeting?", provider)
    assert result.stop_reason == "final_answer" and result.text == "The meeting is at noon." and result.turns == 3
    second, third = (r.body for r in fake.requests_for(ENDPOINT[provider])[1:])
    assert list(tool_results_sent(provider, second).values()) == \
        ["vetoed: no shell in this session; use the file tools"]
    assert "meeting at noon" in list(tool_results_sent(provider, third).values())[-1]
    records = read_transcript(result.transcript or "")
    vetoed = [r for r in records if r["type"] == "tool_result" and r["result"].get("error_kind") == "vetoed"]
    assert [r["result"]["metadata"]["vetoed_by"] for r in vetoed] == ["NoShell"]


class AskBeforeWriting:
    @hookimpl
    def nexus_before_tool_invoke(self, call: ToolCall, tool: ToolDef) -> Ask | None:
        return Ask(f"Write {call.arguments.get('path')}?") if tool.name == "write" else None


@pytest.mark.parametrize("provider", PROVIDERS)
def test_an_ask_approved_and_one_denied(provider: str, fake: FakeProviders, workspace: Workspace) -> None:
    asked: list[Question] = []
    lock = threading.Lock()

    def person(question: Question) -> bool | Veto:
        with lock:
            asked.append(question)
        return True if question.call.arguments["path"] == "a.txt" else Veto("keep b.txt as it is")

    calls = [Call("write", {"path": "a.txt", "content": "A\n"}), Call("write", {"path": "b.txt", "content": "B\n"})]
    fake.script(ENDPOINT[provider], reply(provider, None, calls), reply(provider, "Wrote a.txt; b.txt was refused."))
    with Nexus.from_config(workspace.config(), plugins=[AskBeforeWriting()]) as nx:
        result, _ = run(nx, "write both", provider, approver=person)
    assert result.stop_reason == "final_answer"
    assert (workspace.root / "a.txt").read_text() == "A\n" and not (workspace.root / "b.txt").exists()
    assert sorted(q.text for q in asked) == ["Write a.txt?", "Write b.txt?"]
    sent = list(tool_results_sent(provider, fake.last(ENDPOINT[provider]).body).values())
    assert not sent[0].startswith("vetoed") and sent[1] == "vetoed: denied by the user: keep b.txt as it is"
    records = read_transcript(result.transcript or "")
    answers = sorted((r["approved"], r.get("text", "")) for r in records if r["type"] == "answer")
    assert answers == [(False, "keep b.txt as it is"), (True, "")]
    assert sorted(r["text"] for r in records if r["type"] == "ask") == ["Write a.txt?", "Write b.txt?"]


def test_with_no_approver_an_ask_is_refused_and_the_model_told(fake: FakeProviders, workspace: Workspace) -> None:
    fake.script("openai.chat", reply("openai", None, [Call("write", {"path": "a.txt", "content": "A"})]),
                reply("openai", "I could not write it."))
    with Nexus.from_config(workspace.config(), plugins=[AskBeforeWriting()]) as nx:
        result, _ = run(nx, "write", "openai")
    assert result.stop_reason == "final_answer" and not (workspace.root / "a.txt").exists()
    [sent] = tool_results_sent("openai", fake.last("openai.chat").body).values()
    assert "asks 'Write a.txt?'" in sent and "no one can answer here" in sent


def test_the_question_tool_is_answered_by_the_sessions_approver(fake: FakeProviders, workspace: Workspace) -> None:
    question = Call("question", {"question": "Which format?", "options": ["csv", "json"]})
    fake.script("openai.chat", reply("openai", None, [question]), reply("openai", "JSON it is."))
    with Nexus.from_config(workspace.config()) as nx:
        result, _ = run(nx, "export", "openai", approver=lambda q: "json" if q.kind == "question" else False)
    assert result.text == "JSON it is."
    assert list(tool_results_sent("openai", fake.last("openai.chat").body).values()) == ["json"]


@pytest.mark.parametrize("provider", PROVIDERS)
def test_the_turn_limit(provider: str, fake: FakeProviders, workspace: Workspace) -> None:
    (workspace.root / "a.txt").write_text("a\n")
    fake.script(ENDPOINT[provider], *[reply(provider, f"Looking again ({n}).", [Call("glob", {"pattern": "*.txt"})])
                                      for n in range(3)])
    with Nexus.from_config(workspace.config(agent={"max_turns": 2})) as nx:
        result, events = run(nx, "keep looking", provider)
    assert result.stop_reason == "max_turns" and result.turns == 2
    assert result.text == "Looking again (1)."
    assert len(fake.requests_for(ENDPOINT[provider])) == 2 and fake.pending() == 1
    finished = [e.result for e in events if isinstance(e, ToolCallFinished)]
    assert finished[0].output == "a.txt"
    assert finished[1].error == "not run: the turn limit (2 model requests) is reached"
    records = read_transcript(result.transcript or "")
    assert records[-1]["type"] == "stop" and records[-1]["reason"] == "max_turns" and records[-1]["turns"] == 2


def test_the_token_budget(fake: FakeProviders, workspace: Workspace) -> None:
    fake.script("openai.chat", *[reply("openai", None, [Call("list", {})], usage=(90, 10)) for _ in range(3)])
    with Nexus.from_config(workspace.config(agent={"max_tokens": 150})) as nx:
        result, _ = run(nx, "list forever", "openai")
    assert result.stop_reason == "max_tokens" and result.turns == 2 and result.usage.total_tokens == 200
    assert read_transcript(result.transcript or "")[-1]["reason"] == "max_tokens"


def test_a_session_goes_on_after_a_limit_with_a_well_formed_history(fake: FakeProviders,
                                                                    workspace: Workspace) -> None:
    """Calls that were not run still get a result, so the next task's request is valid for the
    API (every tool call answered)."""
    fake.script("openai.chat", reply("openai", None, [Call("list", {})]), reply("openai", "Hello again."))
    with Nexus.from_config(workspace.config(agent={"max_turns": 1})) as nx:
        with nx.plugin("nexus.agent").session() as session:
            assert session.send("list").stop_reason == "max_turns"
            assert session.send("hi").text == "Hello again."
    roles = [m["role"] for m in fake.last("openai.chat").body["messages"]]
    assert roles == ["system", "user", "assistant", "tool", "user"]


class Meter:
    def __init__(self) -> None:
        self.tokens = 0
        self.requests: list[ModelRequest] = []

    @hookimpl
    def nexus_model_response(self, request: ModelRequest, response: ModelResponse) -> None:
        self.tokens += response.usage.total_tokens
        self.requests.append(request)


class NoSecrets:
    @hookimpl
    def nexus_before_model_request(self, request: ModelRequest) -> Veto | None:
        if any("password" in m.text for m in request.messages):
            return Veto("this conversation mentions a password")
        return None


@pytest.mark.parametrize("provider", PROVIDERS)
def test_request_gates_and_response_observers_see_every_request(provider: str, fake: FakeProviders,
                                                               workspace: Workspace) -> None:
    meter = Meter()
    fake.script(ENDPOINT[provider], reply(provider, None, [Call("list", {})], usage=(50, 5)),
                reply(provider, "Done.", usage=(60, 6)))
    with Nexus.from_config(workspace.config(), plugins=[meter, NoSecrets()]) as nx:
        result, _ = run(nx, "list the files", provider)
        assert meter.tokens == result.usage.total_tokens == 121
        assert [r.metadata["turn"] for r in meter.requests] == [1, 2]
        assert {r.metadata["session"] for r in meter.requests} == {result.session_id}
        vetoed, _ = run(nx, "my password is hunter2", provider)
    assert vetoed.stop_reason == "vetoed" and vetoed.turns == 1
    assert vetoed.error == "model request vetoed (gate 'NoSecrets'): this conversation mentions a password"
    assert len(fake.requests_for(ENDPOINT[provider])) == 2  # the vetoed request never left
    assert read_transcript(vetoed.transcript or "")[-1]["error"] == vetoed.error


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_provider_error_stops_the_task_with_a_clear_message(provider: str, fake: FakeProviders,
                                                             workspace: Workspace) -> None:
    body = {"type": "error", "error": {"type": "authentication_error", "message": "invalid x-api-key"}} \
        if provider == "anthropic" else {"error": {"message": "Incorrect API key provided.", "type": "invalid_request_error"}}
    fake.script(ENDPOINT[provider], Raw(401, body))
    with Nexus.from_config(workspace.config()) as nx:
        result, _ = run(nx, "hi", provider)
    assert result.stop_reason == "error"
    name = "OpenAI" if provider == "openai" else "Anthropic"
    variable = "OPENAI_API_KEY" if provider == "openai" else "ANTHROPIC_API_KEY"
    assert result.error == f"{name} request failed: HTTP 401: {body['error']['message']} (check the key in ${variable})"


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_missing_key_names_the_variable(provider: str, fake: FakeProviders, workspace: Workspace,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MY_KEY", raising=False)
    section = f"nexus__provider__{provider}"
    config = workspace.config(**{section: {"base_url": fake.url + ("/v1" if provider == "openai" else ""),
                                           "api_key_env": "MY_KEY"}})
    with Nexus.from_config(config) as nx:
        result, _ = run(nx, "hi", provider)
    assert result.stop_reason == "error"
    assert "the environment variable MY_KEY is not set" in (result.error or "")
    assert fake.requests == []


def test_arguments_the_model_garbled_are_refused_and_shown_to_it(fake: FakeProviders, workspace: Workspace) -> None:
    broken = chat_completion(None, [Call("read", {"path": "x"})])
    broken["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] = '{"path": "x'
    fake.script("openai.chat", broken, reply("openai", "Sorry."))
    with Nexus.from_config(workspace.config()) as nx:
        result, _ = run(nx, "read x", "openai")
    assert result.stop_reason == "final_answer"
    [sent] = tool_results_sent("openai", fake.last("openai.chat").body).values()
    assert sent.startswith("invalid arguments for read:") and "not valid JSON" in sent
    # the model's own (broken) call goes back as it was written
    assistant = fake.last("openai.chat").body["messages"][2]
    assert assistant["tool_calls"][0]["function"]["arguments"] == '{"path": "x'


def test_the_transcript_is_written_as_the_task_goes(fake: FakeProviders, workspace: Workspace) -> None:
    """A tool running in the middle of the task already finds the request and the response that
    asked for it in the file: a crash then leaves what happened."""
    seen: list[list[str]] = []

    def peek(arguments: dict[str, Any]) -> str:
        [path] = (workspace.sessions / "plugins" / "nexus.agent").glob("*.jsonl")
        seen.append([r["type"] for r in read_transcript(path)])
        return "peeked"

    tool = native_tool("peek", "Peek.", {"type": "object"}, run=peek)
    fake.script("openai.chat", reply("openai", None, [Call("peek", {})]), reply("openai", "ok"))
    with Nexus.from_config(workspace.config(), tools=[tool]) as nx:
        run(nx, "peek", "openai")
    assert seen == [["session", "message", "request", "response", "call"]]  # and that the call started
    [path] = (workspace.sessions / "plugins" / "nexus.agent").glob("*.jsonl")
    assert oct(path.stat().st_mode & 0o777) == "0o600"


def test_interrupting_a_streamed_turn_closes_the_stream_and_the_session_goes_on(
        workspace: Workspace) -> None:
    from .stalling import Answer, Stall, StallingServer

    with StallingServer(Stall("Let me think"), Answer("Here I am.")) as server:
        config = workspace.config(nexus__provider__anthropic={"base_url": server.url, "max_retries": 0})
        with Nexus.from_config(config) as nx:
            events: list[AgentEvent] = []
            streaming = threading.Event()

            def seen(event: AgentEvent) -> None:
                events.append(event)
                if isinstance(event, TextDelta):
                    streaming.set()

            with nx.plugin("nexus.agent").session(model=MODEL["anthropic"], on_event=seen) as session:
                box: dict[str, AgentResult] = {}
                worker = threading.Thread(target=lambda: box.update(r=session.send("think hard")))
                worker.start()
                assert server.stalled.wait(30) and streaming.wait(30)
                session.cancel()
                worker.join(30)
                assert box["r"].stop_reason == "interrupted" and box["r"].error is None
                assert server.disconnected.wait(30)  # the client closed the stream, not just left it
                assert session.send("are you there?").text == "Here I am."
    assert "".join(e.text for e in events if isinstance(e, TextDelta)).startswith("Let me think")
    records = read_transcript(session.transcript_path or "")
    assert [r["reason"] for r in records if r["type"] == "stop"] == ["interrupted", "final_answer"]
    [partial] = [r for r in records if r["type"] == "partial_response"]
    assert partial["turn"] == 1 and partial["text"].startswith("Let me think")


def test_the_api_key_is_in_no_file_the_session_wrote(fake: FakeProviders, workspace: Workspace,
                                                     capsys: pytest.CaptureFixture[str],
                                                     caplog: pytest.LogCaptureFixture) -> None:
    """The model tries to get at the key every way the tools allow; nothing a session leaves
    (transcript, run_code's persisted scripts and logs, files the tools wrote) holds it."""
    steal = ("import tools\n\ndef run(ctx):\n"
             "    out = tools.shell(command='env; printenv OPENAI_API_KEY ANTHROPIC_API_KEY').stdout\n"
             "    tools.write(path='loot.txt', content=out)\n"
             "    return out\n")
    fake.script("openai.chat",
                reply("openai", None, [Call("shell", {"command": "env > env.txt; echo $OPENAI_API_KEY"}),
                                       Call("run_code", {"script": steal})]),
                Raw(401, {"error": {"message": "Incorrect API key provided.", "type": "invalid_request_error"}}))
    fake.script("anthropic.messages", Raw(500, {"type": "error", "error": {"type": "api_error", "message": "boom"}}))
    with Nexus.from_config(workspace.config()) as nx:
        first, _ = run(nx, "find the API key", "openai")
        second, _ = run(nx, "hi", "anthropic")
    assert first.stop_reason == "error" and second.stop_reason == "error"
    written = workspace.files_written()
    assert any(p.suffix == ".jsonl" for p in written) and (workspace.root / "loot.txt").exists()
    assert any(p.name == "script.py" for p in written)  # run_code persisted its call
    for path in written:
        data = path.read_bytes()
        assert API_KEY.encode() not in data and ANTHROPIC_KEY.encode() not in data, path
    out = capsys.readouterr()
    logs = "\n".join(r.getMessage() for r in caplog.records)
    for text in (out.out, out.err, logs, first.error or "", second.error or ""):
        assert API_KEY not in text and ANTHROPIC_KEY not in text
    # the key did reach the provider, in its header, and only there
    auth = fake.requests_for("openai.chat")[0].headers["authorization"]
    assert auth == f"Bearer {API_KEY}"
    headers = fake.requests_for("anthropic.messages")[0].headers
    assert ANTHROPIC_KEY in (headers.get("x-api-key"), headers.get("authorization", "").removeprefix("Bearer "))


def test_no_model_is_a_clear_error(workspace: Workspace) -> None:
    config = workspace.config()
    del config["model"]
    with Nexus.from_config(config) as nx, pytest.raises(ValueError, match="no model: set `model: provider:model`"):
        nx.plugin("nexus.agent").session()


def test_a_session_runs_one_task_at_a_time(workspace: Workspace) -> None:
    from .stalling import Stall, StallingServer

    with StallingServer(Stall()) as server:
        config = workspace.config(nexus__provider__openai={"base_url": server.url + "/v1", "max_retries": 0})
        with Nexus.from_config(config) as nx, nx.plugin("nexus.agent").session() as session:
            worker = threading.Thread(target=session.send, args=("one",))
            worker.start()
            assert server.stalled.wait(30)
            with pytest.raises(RuntimeError, match="a task is already running"):
                session.send("two")
            session.cancel()
            worker.join(30)


def test_the_loop_is_a_plugin_that_can_be_left_out(workspace: Workspace) -> None:
    config = workspace.config()
    config["plugins"]["blocked"] = ["nexus.agent"]
    del config["plugins"]["nexus.agent"]
    with Nexus.from_config(config) as nx:
        assert nx.plugin("nexus.agent") is None
        assert set(nx.providers()) == {"openai", "anthropic", "gemini"}


def test_workspace_path_fixture_is_outside_sessions(workspace: Workspace) -> None:
    assert not Path(workspace.sessions).is_relative_to(workspace.root)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_the_model_is_offered_the_tools_it_calls_directly(provider: str, fake: FakeProviders,
                                                         workspace: Workspace) -> None:
    """A tool of exposure "code" is met only inside run_code; allowed_callers from the config
    reach Claude's declarations, as nx.schemas() sends them."""
    fake.script(ENDPOINT[provider], reply(provider, "Nothing to do."))
    config = workspace.config()
    config["tools"] = {"grep": {"exposure": "code"}, "read": {"allowed_callers": ["direct", "code_execution_20250825"]}}
    with Nexus.from_config(config) as nx:
        run(nx, "hi", provider)
        direct = {name for t in nx.model_tools() for name in t.names}  # `bash`, the shell's alias, too
    body = fake.last(ENDPOINT[provider]).body
    offered = {t["function"]["name"] if provider == "openai" else t["name"]: t for t in body["tools"]}
    assert set(offered) == direct and "grep" not in offered and "run_code" in offered
    assert "def grep(" in (offered["run_code"]["function"]["description"] if provider == "openai"
                           else offered["run_code"]["description"])
    if provider == "anthropic":
        assert offered["read"]["allowed_callers"] == ["direct", "code_execution_20250825"]


def test_cancel_stops_the_running_shell_call_and_says_what_became_of_it(fake: FakeProviders,
                                                                       workspace: Workspace) -> None:
    """session.cancel() cancels the turn's tool calls (their CancelToken): the real shell kills
    the command, send() returns once it has, `stopped` holds its result, and on_event never
    sees that result (the front end says it once). The model is given it with the next task."""
    pid_file = workspace.root / "sleep.pid"
    fake.script("openai.chat", chat_completion(None, [Call("shell", {"command": "sleep 600 & echo $! > sleep.pid; wait"})]),
                chat_completion("Fine."))
    events: list[AgentEvent] = []
    with Nexus.from_config(workspace.config()) as nx, \
            nx.plugin("nexus.agent").session(on_event=events.append) as session:
        box: dict[str, AgentResult] = {}
        worker = threading.Thread(target=lambda: box.setdefault("r", session.send("wait")))
        worker.start()
        for _ in range(1200):  # up to 60 s for the command to start
            if pid_file.exists() and pid_file.read_text().strip():
                break
            worker.join(0.05)
        pid = int(pid_file.read_text())
        session.cancel()
        worker.join(60)
        result = box["r"]
        assert result.stop_reason == "interrupted"
        [stopped] = result.stopped
        assert stopped.call.name == "shell" and stopped.ended
        assert stopped.result.error_kind == "cancelled"
        assert stopped.result.error.startswith("stopped: the call was cancelled (interrupted by the user): killed ")
        assert not alive(pid)
        assert not [e for e in events if isinstance(e, ToolCallFinished)]
        assert session.send("go on").text == "Fine."
    sent = tool_results_sent("openai", fake.last("openai.chat").body)
    assert "stopped: the call was cancelled (interrupted by the user): killed " in next(iter(sent.values()))
