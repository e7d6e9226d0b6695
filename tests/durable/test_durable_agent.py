"""An agent turn's approval is durable too (issue 24, item 1 for the agent loop): the agent's
calls go through `Nexus.invoke`, so a gate's `Ask` in a turn with no one at a console waits as a
pending approval, answered from another process (`nexus approvals answer`), and the turn goes on
with the call's result. The real OpenAI SDK client against the fake provider server."""

from __future__ import annotations

import json
import os
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest
from durable_helpers import NEXUS_CLI, WAIT, wait_for
from durable_host import AskAboutSome, append
from fakes.providers import Call, FakeProviders, chat_completion

from nexus_core import Nexus


def test_an_agent_turn_waits_for_an_answer_from_another_process(
        fake_providers: FakeProviders, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-nexus-test-" + os.urandom(8).hex())
    out = tmp_path / "out.txt"
    fake_providers.script("openai.chat",
                          chat_completion(None, [Call("append", {"path": str(out), "text": "ask-agent"})]),
                          chat_completion("Appended it."))
    database = tmp_path / "durable.sqlite"
    config = {"workspace": str(tmp_path), "session_dir": str(tmp_path / "session"), "skills": [],
              "model": "openai:gpt-4.1",
              "plugins": {"active": ["nexus.agent", "nexus.provider.openai", "nexus.durable"],
                          "nexus.provider.openai": {"base_url": fake_providers.url + "/v1", "max_retries": 0},
                          "nexus.durable": {"database": str(database)}}}
    with Nexus(config, plugins=[AskAboutSome()], tools=[append]) as nx:
        results: list[Any] = []
        turn = threading.Thread(target=lambda: results.append(nx.plugin("nexus.agent").run("append it")))
        turn.start()

        def listed() -> list[dict[str, Any]]:
            proc = subprocess.run([str(NEXUS_CLI), "approvals", "--database", str(database), "--json"],
                                  capture_output=True, text=True, timeout=WAIT, check=True)
            found: list[dict[str, Any]] = json.loads(proc.stdout)
            return found

        [pending] = wait_for("the turn's approval", listed)
        assert pending["call"]["arguments"]["text"] == "ask-agent" and results == []
        subprocess.run([str(NEXUS_CLI), "approvals", "--database", str(database), "answer", pending["id"], "allow"],
                       capture_output=True, text=True, timeout=WAIT, check=True)
        turn.join(timeout=WAIT)
        assert not turn.is_alive()
    [result] = results
    assert result.stop_reason == "final_answer" and result.text == "Appended it."
    assert out.read_text() == "ask-agent\n"
    sent = [m for m in fake_providers.last("openai.chat").body["messages"] if m["role"] == "tool"]
    assert [m["content"] for m in sent] == ["1"]
