"""Issue 24, item 3 for the agent loop: a turn whose host is killed while one of its calls waits
for approval is continued by `AgentPlugin.resume(session id)` in another process, once the
approval is answered from a third one: no model request that had its response is made again, no
call that completed runs again, and the approved call runs once. Real processes (the host is
killed with SIGKILL), the real OpenAI SDK against the loopback fake provider."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from durable_helpers import HERE, NEXUS_CLI, WAIT, kill9, wait_for
from fakes.providers import Call, FakeProviders, chat_completion


def _host(config: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, str(HERE / "agent_host.py"), str(config), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, **(env or {})})


def _config(tmp_path: Path, fake_providers: FakeProviders, database: Path) -> Path:
    config = tmp_path / "config.json"
    config.write_text(json.dumps({
        "workspace": str(tmp_path), "session_dir": str(tmp_path / "session"), "skills": [],
        "model": "openai:gpt-4.1",
        "plugins": {"active": ["nexus.agent", "nexus.provider.openai", "nexus.durable"],
                    "nexus.provider.openai": {"base_url": fake_providers.url + "/v1", "max_retries": 0},
                    "nexus.durable": {"database": str(database)}}}))
    return config


def _approvals(database: Path, *args: str) -> Any:
    proc = subprocess.run([str(NEXUS_CLI), "approvals", "--database", str(database), *args],
                          capture_output=True, text=True, timeout=WAIT, check=False)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout) if "--json" in args else proc.stdout


def test_a_turn_killed_while_its_approval_waits_is_resumed_without_repeating_a_step(
        fake_providers: FakeProviders, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-nexus-test-" + os.urandom(8).hex())
    out = tmp_path / "out.txt"
    fake_providers.script(
        "openai.chat",
        chat_completion(None, [Call("append", {"path": str(out), "text": "first"})]),
        chat_completion(None, [Call("append", {"path": str(out), "text": "ask-agent"})]),
        chat_completion("Appended both."))
    database = tmp_path / "durable.sqlite"
    config = tmp_path / "config.json"
    config.write_text(json.dumps({
        "workspace": str(tmp_path), "session_dir": str(tmp_path / "session"), "skills": [],
        "model": "openai:gpt-4.1",
        "plugins": {"active": ["nexus.agent", "nexus.provider.openai", "nexus.durable"],
                    "nexus.provider.openai": {"base_url": fake_providers.url + "/v1", "max_retries": 0},
                    "nexus.durable": {"database": str(database)}}}))
    first = _host(config, "run")
    try:
        assert first.stdout is not None
        session = json.loads(first.stdout.readline())["session"]
        [pending] = wait_for("the turn's approval", lambda: _approvals(database, "--json"))
    finally:
        kill9(first)
        first.communicate()
    assert pending["call"]["arguments"]["text"] == "ask-agent"
    assert out.read_text() == "first\n" and len(fake_providers.requests_for("openai.chat")) == 2
    _approvals(database, "answer", pending["id"], "allow")

    second = _host(config, "resume", session)
    stdout, stderr = second.communicate(timeout=WAIT)
    assert second.returncode == 0, stderr
    result = json.loads(stdout.strip().splitlines()[-1])
    assert result == {"text": "Appended both.", "stop_reason": "final_answer", "turns": 3, "error": None}
    assert out.read_text() == "first\nask-agent\n"  # each call once
    sent = fake_providers.requests_for("openai.chat")
    assert len(sent) == 3  # the two requests made before the kill were not made again
    tool_messages = [m["content"] for m in sent[-1].body["messages"] if m["role"] == "tool"]
    assert tool_messages == ["1", "2"]
    assert _approvals(database, "--json") == []  # asked once, answered once
    from nexus_durable import Approvals

    with Approvals(f"sqlite:///{database}") as approvals:
        outcome = approvals.outcome(pending["id"])
    # the approval's workflow did not run the call itself: the resumed turn did
    assert outcome is not None and outcome["answer"]["approved"] is True and "result" not in outcome


def test_nexus_ask_resume_goes_on_with_a_turn_cut_in_its_model_request(
        fake_providers: FakeProviders, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`nexus ask --resume ID`: a transcript whose task was cut while its model request ran (a
    host killed then: the request has no response) goes on with that request; a session whose
    task ended is bad usage."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-nexus-test-" + os.urandom(8).hex())
    fake_providers.script("openai.chat", chat_completion("Forty-two."))
    config = tmp_path / "config.json"
    config.write_text(json.dumps({
        "workspace": str(tmp_path), "session_dir": str(tmp_path / "session"), "skills": [],
        "model": "openai:gpt-4.1",
        "plugins": {"active": ["nexus.agent", "nexus.provider.openai"],
                    "nexus.provider.openai": {"base_url": fake_providers.url + "/v1", "max_retries": 0}}}))
    folder = tmp_path / "session" / "plugins" / "nexus.agent"
    folder.mkdir(parents=True)
    session = "20261202T000000Z-0123abcd"
    records = [{"type": "session", "seq": 1, "id": session, "provider": "openai", "model": "gpt-4.1"},
               {"type": "message", "seq": 2, "role": "user", "text": "What is six times seven?"},
               {"type": "request", "seq": 3, "turn": 1, "id": "r1"}]
    (folder / f"{session}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))

    def ask(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(NEXUS_CLI), "--config", str(config), "--trust-config", "ask", *args],
                              capture_output=True, text=True, timeout=WAIT, check=False)

    proc = ask("--resume", session, "--json")
    assert proc.returncode == 0, proc.stderr
    done = json.loads(proc.stdout)
    assert (done["session"], done["answer"], done["stop_reason"], done["turns"]) == (
        session, "Forty-two.", "final_answer", 2)
    [sent] = fake_providers.requests_for("openai.chat")
    assert [m["content"] for m in sent.body["messages"] if m["role"] == "user"] == ["What is six times seven?"]
    again = ask("--resume", session)  # its task ended now
    assert again.returncode == 2 and "its last task ended; nothing to resume" in again.stderr, again.stderr
    assert ask("--resume", session, "more").returncode == 2  # a PROMPT with --resume is bad usage


def test_a_call_running_when_the_turn_host_is_killed_is_reported_possibly_done_not_repeated(
        fake_providers: FakeProviders, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-nexus-test-" + os.urandom(8).hex())
    out = tmp_path / "out.txt"
    fake_providers.script("openai.chat", chat_completion(None, [Call("append", {"path": str(out), "text": "once"})]),
                          chat_completion("It may have been appended."))
    config = _config(tmp_path, fake_providers, tmp_path / "durable.sqlite")
    hold = tmp_path / "holding"
    first = _host(config, "run", env={"NEXUS_TEST_HOLD": str(hold)})  # the handler waits after its effect
    try:
        assert first.stdout is not None
        session = json.loads(first.stdout.readline())["session"]
        key = wait_for("the call to be running", lambda: hold.exists() and hold.read_text())
    finally:
        kill9(first)
        first.communicate()
    assert out.read_text() == "once\n"
    second = _host(config, "resume", session)
    stdout, stderr = second.communicate(timeout=WAIT)
    assert second.returncode == 0, stderr
    assert json.loads(stdout.strip().splitlines()[-1])["text"] == "It may have been appended."
    assert out.read_text() == "once\n"  # not repeated
    sent = fake_providers.requests_for("openai.chat")
    assert len(sent) == 2
    [told] = [m["content"] for m in sent[-1].body["messages"] if m["role"] == "tool"]
    assert told.startswith("possibly done: append was running when this task's host stopped"), told
    assert key == _call_id(sent[-1].body) and repr(key) in told  # the idempotency key the tool was given


def _call_id(body: dict) -> str:  # type: ignore[type-arg]
    [call] = [c for m in body["messages"] if m["role"] == "assistant" for c in m.get("tool_calls") or ()]
    return str(call["id"])


def test_a_turn_whose_run_code_run_was_interrupted_resumes_the_run_from_its_journal(
        fake_providers: FakeProviders, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-nexus-test-" + os.urandom(8).hex())
    out = tmp_path / "out.txt"
    script = ("import tools\n\ndef run(ctx):\n"
              f"    tools.append(path={str(out)!r}, text='one')\n"
              f"    return tools.append(path={str(out)!r}, text='ask-two').output\n")
    fake_providers.script("openai.chat", chat_completion(None, [Call("run_code", {"script": script})]),
                          chat_completion("Ran it."))
    database = tmp_path / "durable.sqlite"
    config = _config(tmp_path, fake_providers, database)
    data = json.loads(config.read_text())
    data["plugins"]["active"].append("nexus.tool.code_exec")
    config.write_text(json.dumps(data))
    first = _host(config, "run")
    try:
        assert first.stdout is not None
        session = json.loads(first.stdout.readline())["session"]
        [pending] = wait_for("the inner call's approval", lambda: _approvals(database, "--json"))
    finally:
        kill9(first)
        first.communicate()
    assert pending["call"]["arguments"]["text"] == "ask-two" and out.read_text() == "one\n"
    _approvals(database, "answer", pending["id"], "allow")
    second = _host(config, "resume", session)
    stdout, stderr = second.communicate(timeout=WAIT)
    assert second.returncode == 0, stderr
    assert json.loads(stdout.strip().splitlines()[-1])["text"] == "Ran it."
    assert out.read_text() == "one\nask-two\n"  # the completed inner call not run again
    sent = fake_providers.requests_for("openai.chat")
    assert len(sent) == 2
    [told] = [m["content"] for m in sent[-1].body["messages"] if m["role"] == "tool"]
    assert "2" in told, told  # the run's result: the approved call's line count
    assert _approvals(database, "--json") == []
    from nexus_agent import read_transcript

    records = read_transcript(tmp_path / "session" / "plugins" / "nexus.agent" / f"{session}.jsonl")
    [result] = [r["result"] for r in records if r["type"] == "tool_result"]
    assert result["metadata"] == {"resumed": True, "journal_calls": 1, "suspensions": 0}  # from its journal
