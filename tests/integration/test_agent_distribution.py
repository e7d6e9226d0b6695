"""The agent distribution docs/agent.md describes, installed from wheels into a fresh venv as a
user would (`pip install` of the six packages it names, the SDK from the package index), is a
working agent: that venv's `nexus ask`, with the page's agent.yaml as written, answers a task
through run_code against the fake OpenAI server on loopback."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from fakes.providers import Call, FakeProviders, chat_completion

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "agent.md"


def documented_install() -> list[str]:
    """The distributions the page's `pip install` names (its options, `--find-links dist`, left out)."""
    text = DOC.read_text(encoding="utf-8")
    command = re.search(r"\$ pip install ((?:[^\n]*\\\n)*[^\n]*)", text)
    assert command, "docs/agent.md shows no pip install"
    words = command.group(1).replace("\\\n", " ").split()
    return [w for i, w in enumerate(words) if not w.startswith("-") and (i == 0 or words[i - 1] != "--find-links")]


def documented_config() -> str:
    return re.findall(r"^```yaml[ \t]*\n(.*?)^```", DOC.read_text(encoding="utf-8"), re.MULTILINE | re.DOTALL)[0]


@pytest.mark.slow
def test_the_documented_distribution_is_a_working_agent(fresh_venv, tmp_path: Path,
                                                        fake_providers: FakeProviders) -> None:
    packages = documented_install()
    assert {"nexus-rt-core", "nexus-rt-agent", "nexus-rt-provider-openai"} <= set(packages)
    venv = fresh_venv(*packages)
    work = tmp_path / "work"
    work.mkdir()
    (work / "agent.yaml").write_text(documented_config(), encoding="utf-8")
    (work / "notes.txt").write_text("the meeting is at noon\n")
    script = "import tools\n\ndef run(ctx):\n    return tools.read(path='notes.txt').content\n"
    fake_providers.script("openai.chat",
                          chat_completion("Reading it.", [Call("run_code", {"script": script})]),
                          chat_completion("The meeting is at noon."))
    key = "sk-distribution-test-key"
    trusted = venv.run("nexus", "trust", "agent.yaml", cwd=work)  # as the page says: once, before its use
    assert trusted.returncode == 0, trusted.stderr
    proc = venv.run("nexus", "--config", "agent.yaml", "ask", "When is the meeting?", cwd=work,
                    env={"OPENAI_API_KEY": key, "OPENAI_BASE_URL": fake_providers.url + "/v1"}, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "Reading it.\nThe meeting is at noon.\n"
    assert "tool run_code" in proc.stderr and key not in proc.stdout + proc.stderr
    sent = fake_providers.requests_for("openai.chat")[1].body["messages"][-1]["content"]
    assert sent == "the meeting is at noon\n"  # run's return value, a string, as it is (issue 14.8)
