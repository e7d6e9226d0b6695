"""docs/agent.md as written: its config is a working agent (against the fake provider server,
reached through the SDKs' own base-URL variables), its Python example runs, and its other YAML
examples are valid configs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from fakes.providers import Call, FakeProviders, anthropic_message, chat_completion

from nexus_core import Nexus

from .conftest import RunNexus, Workspace, subprocess_env

DOC = Path(__file__).resolve().parents[2] / "docs" / "agent.md"
BLOCK = re.compile(r"^```(yaml|python)[ \t]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)


def blocks(kind: str) -> list[str]:
    return [body for lang, body in BLOCK.findall(DOC.read_text(encoding="utf-8")) if lang == kind]


@pytest.fixture
def doc_workspace(workspace: Workspace, fake: FakeProviders, monkeypatch: pytest.MonkeyPatch) -> Workspace:
    """The workspace with the page's agent.yaml as it is, the SDKs pointed at the fake through
    their own environment variables (the config leaves base_url at its default)."""
    (workspace.root / "agent.yaml").write_text(blocks("yaml")[0], encoding="utf-8")
    monkeypatch.setenv("OPENAI_BASE_URL", fake.url + "/v1")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.url)
    monkeypatch.chdir(workspace.root)
    return workspace


def test_the_pages_distribution_config_answers_with_nexus_ask(doc_workspace: Workspace, fake: FakeProviders,
                                                               run_nexus: RunNexus) -> None:
    (doc_workspace.root / "a.py").write_text("print('a')\n")
    script = "import tools\n\ndef run(ctx):\n    return len(tools.glob(pattern='*.py').paths)\n"
    fake.script("openai.chat", chat_completion("I'll count them with one script.", [Call("run_code", {"script": script})]),
                chat_completion("There is 1 Python file."))
    env = subprocess_env(OPENAI_BASE_URL=fake.url + "/v1", ANTHROPIC_BASE_URL=fake.url)
    refused = run_nexus("--config", "agent.yaml", "ask", "How many Python files are there?", env=env)
    assert refused.returncode == 2 and "nexus trust agent.yaml" in refused.stderr  # as the page says: trust it first
    trusted = run_nexus("trust", "agent.yaml", env=env)
    assert trusted.returncode == 0, trusted.stderr
    proc = run_nexus("--config", "agent.yaml", "ask", "How many Python files are there?", env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "I'll count them with one script.\nThere is 1 Python file.\n"
    first = fake.requests_for("openai.chat")[0].body
    assert first["model"] == "gpt-4.1" and first["max_completion_tokens"] == 4096
    assert first["messages"][0]["content"].startswith("You are a careful assistant for this repository.")
    assert fake.requests_for("openai.chat")[1].body["messages"][-1]["content"] == "1"


def test_the_pages_python_example_runs(doc_workspace: Workspace, fake: FakeProviders,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    fake.script("openai.chat", chat_completion("It says: pip install nexus-rt-core."))
    fake.script("anthropic.messages", anthropic_message("Two TODOs."), anthropic_message("Both in app.py."))
    [example] = [b for b in blocks("python") if "agent.run(" in b]
    exec(compile(example, str(DOC), "exec"), {"__name__": "docs_example"})  # noqa: S102
    out = capsys.readouterr().out
    assert "It says: pip install nexus-rt-core.\nfinal_answer\n" in out
    assert "TaskStopped" in out  # on_event=print saw the events
    assert fake.pending() == 0


@pytest.mark.parametrize("index", range(1, len(blocks("yaml"))))
def test_the_pages_other_configs_are_valid(index: int, doc_workspace: Workspace) -> None:
    data = yaml.safe_load(blocks("yaml")[index])
    data.setdefault("workspace", str(doc_workspace.root))
    with Nexus.from_config(data) as nx:
        assert nx.failures == []


def test_the_page_is_linked_from_the_index() -> None:
    assert "(agent.md)" in (DOC.parent / "index.md").read_text()
