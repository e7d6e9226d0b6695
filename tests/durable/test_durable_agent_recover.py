"""Issue 24, item 3's last gap: a turn whose host is killed while one of its calls waits for
approval is continued by the next long-lived host (`Nexus.recover()`, as `nexus mcp serve` and an
embedder with `recover: auto` call it) once the approval is answered from another process, with
no one asking it to: the final answer is in the session's transcript, the tool ran once, the
model was asked for the rest of the turn once, and of two long-lived hosts started after the kill
only one goes on with the turn. Real processes (SIGKILL), the real OpenAI SDK against the
loopback fake provider."""

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

from nexus_agent import read_transcript


def _host(config: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, str(HERE / "agent_host.py"), str(config), *args],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _approvals(database: Path, *args: str) -> Any:
    proc = subprocess.run([str(NEXUS_CLI), "approvals", "--database", str(database), *args],
                          capture_output=True, text=True, timeout=WAIT, check=False)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout) if "--json" in args else proc.stdout


def _config(tmp_path: Path, fake_providers: FakeProviders, database: Path) -> Path:
    config = tmp_path / "config.json"
    config.write_text(json.dumps({
        "workspace": str(tmp_path), "session_dir": str(tmp_path / "session"), "skills": [],
        "model": "openai:gpt-4.1",
        "plugins": {"active": ["nexus.agent", "nexus.provider.openai", "nexus.durable"],
                    "nexus.provider.openai": {"base_url": fake_providers.url + "/v1", "max_retries": 0},
                    "nexus.durable": {"database": str(database)}}}))
    return config


def _killed_while_waiting(tmp_path: Path, config: Path, database: Path) -> tuple[str, dict[str, Any]]:
    """Host A runs a turn whose second call waits for approval, and is killed then."""
    first = _host(config, "run")
    try:
        assert first.stdout is not None
        session = json.loads(first.stdout.readline())["session"]
        [pending] = wait_for("the turn's approval", lambda: _approvals(database, "--json"))
    finally:
        kill9(first)
        first.communicate()
    return session, pending


def _records(tmp_path: Path, session: str) -> list[dict[str, Any]]:
    return read_transcript(tmp_path / "session" / "plugins" / "nexus.agent" / f"{session}.jsonl")


def _stopped(tmp_path: Path, session: str) -> dict[str, Any] | None:
    return next((r for r in _records(tmp_path, session) if r["type"] == "stop"), None)


def _ready(host: subprocess.Popen[str]) -> None:
    assert host.stdout is not None
    line = host.stdout.readline()
    assert json.loads(line) == {"recovering": True}, line


def _end(host: subprocess.Popen[str]) -> str:
    _, stderr = host.communicate("", timeout=WAIT)  # stdin closed: the host closes its Nexus
    assert host.returncode == 0, stderr
    return stderr


def test_a_long_lived_host_goes_on_with_a_killed_turn_once_its_approval_is_answered(
        fake_providers: FakeProviders, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-nexus-test-" + os.urandom(8).hex())
    out = tmp_path / "out.txt"
    fake_providers.script(
        "openai.chat",
        chat_completion(None, [Call("append", {"path": str(out), "text": "first"})]),
        chat_completion(None, [Call("append", {"path": str(out), "text": "ask-agent"})]),
        chat_completion("Appended both."))
    database = tmp_path / "durable.sqlite"
    config = _config(tmp_path, fake_providers, database)
    session, pending = _killed_while_waiting(tmp_path, config, database)
    assert pending["call"]["arguments"]["text"] == "ask-agent" and out.read_text() == "first\n"

    # two long-lived hosts take over what the killed one left: one of them goes on with the turn
    hosts = [_host(config, "recover"), _host(config, "recover")]
    try:
        for host in hosts:
            _ready(host)
        assert _stopped(tmp_path, session) is None  # nothing goes on before the answer
        _approvals(database, "answer", pending["id"], "allow")
        stop = wait_for("the turn to end in a long-lived host", lambda: _stopped(tmp_path, session))
    finally:
        errors = [_end(host) for host in hosts]
    assert stop["reason"] == "final_answer", stop
    records = _records(tmp_path, session)
    assert [r["text"] for r in records if r["type"] == "response"][-1] == "Appended both."
    assert [r["type"] for r in records].count("resumed") == 1, records  # one host went on with it
    assert out.read_text() == "first\nask-agent\n"  # each call once
    sent = fake_providers.requests_for("openai.chat")
    assert len(sent) == 3  # the rest of the turn asked for once
    assert [m["content"] for m in sent[-1].body["messages"] if m["role"] == "tool"] == ["1", "2"]
    assert _approvals(database, "--json") == []
    assert all("Traceback" not in e for e in errors), errors


def test_a_long_lived_host_closed_before_the_answer_leaves_the_turn_to_the_next_one(
        fake_providers: FakeProviders, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-nexus-test-" + os.urandom(8).hex())
    out = tmp_path / "out.txt"
    fake_providers.script(
        "openai.chat",
        chat_completion(None, [Call("append", {"path": str(out), "text": "ask-agent"})]),
        chat_completion("Appended."))
    database = tmp_path / "durable.sqlite"
    config = _config(tmp_path, fake_providers, database)
    session, pending = _killed_while_waiting(tmp_path, config, database)
    second = _host(config, "recover")
    _ready(second)
    _end(second)  # closed while the approval waits: nothing of the turn ran, nothing was written
    assert not [r for r in _records(tmp_path, session) if r["type"] == "resumed"]
    assert [p["id"] for p in _approvals(database, "--json")] == [pending["id"]]
    third = _host(config, "recover")
    try:
        _ready(third)
        _approvals(database, "answer", pending["id"], "allow")
        stop = wait_for("the turn to end in the next host", lambda: _stopped(tmp_path, session))
    finally:
        _end(third)
    assert stop["reason"] == "final_answer" and out.read_text() == "ask-agent\n"
    assert len(fake_providers.requests_for("openai.chat")) == 2
