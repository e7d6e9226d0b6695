"""Fixtures for the agent's tests: the fake provider server (tests/fakes: OpenAI and Anthropic wire
formats on loopback, driven by the real SDK clients), a workspace with a config pointing the
providers at it, a secret API key in the environment, and `nexus` as a real subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from fakes.providers import FakeProviders

from nexus_core import ToolCall, ToolDef, Veto, hookimpl
from nexus_core._trust import record_trust

#: an API key no test output may ever contain
API_KEY = "sk-nexus-test-" + os.urandom(12).hex()
ANTHROPIC_KEY = "sk-ant-nexus-test-" + os.urandom(12).hex()
GATE_ENV = "NEXUS_TEST_ASK_TOOLS"


@pytest.fixture
def fake(fake_providers: FakeProviders) -> FakeProviders:
    """The shared fake provider server (tests/conftest.py's `fake_providers`), by a short name."""
    return fake_providers


@pytest.fixture(autouse=True)
def _keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", API_KEY)
    monkeypatch.setenv("ANTHROPIC_API_KEY", ANTHROPIC_KEY)
    for name in ("NEXUS_DISABLE_PLUGIN_AUTOLOAD", "NEXUS_BLOCK_PLUGINS", "NEXUS_TRACE_HOOKS", "NEXUS_CONFIG",
                 "OPENAI_BASE_URL", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(name, raising=False)


class Workspace:
    """A workspace folder, its session dir beside it (outside it, as the default is), and a
    config (`nexus.yaml` in the workspace) whose providers talk to the fake server."""

    def __init__(self, root: Path, base_url: str) -> None:
        self.root = root / "work"
        self.root.mkdir()
        self.sessions = root / "sessions"
        self.base_url = base_url
        self.config_path = self.root / "nexus.yaml"

    def config(self, model: str = "openai:gpt-4.1", agent: Mapping[str, Any] | None = None,
               active: list[str] | None = None, **plugins: Any) -> dict[str, Any]:
        sections: dict[str, Any] = {
            "nexus.provider.openai": {"base_url": self.base_url + "/v1", "max_retries": 0},
            "nexus.provider.anthropic": {"base_url": self.base_url, "max_retries": 0},
            "nexus.agent": dict(agent or {}),
        }
        sections.update({k.replace("__", "."): v for k, v in plugins.items()})
        if active is not None:
            sections["active"] = active
        data = {"workspace": str(self.root), "session_dir": str(self.sessions), "model": model,
                "skills": [str(self.root / "skills")], "plugins": sections}
        text = yaml.safe_dump(data)
        self.config_path.write_text(text, encoding="utf-8")
        # the person trusts the config they wrote (`nexus trust`): the command line runs in the
        # workspace, where an untrusted nexus.yaml would not load (the record is the test run's,
        # below its XDG_CONFIG_HOME, which the `nexus` subprocesses inherit)
        record_trust(self.config_path, text.encode("utf-8"))
        return data

    def files_written(self) -> list[Path]:
        """Every file under the workspace and the session dir (what a session may have written)."""
        return sorted(p for top in (self.root, self.sessions) if top.exists() for p in top.rglob("*") if p.is_file())


@pytest.fixture
def workspace(tmp_path: Path, fake: FakeProviders) -> Workspace:
    return Workspace(tmp_path, fake.url)


#: a plugin, installed for the subprocess tests through a dist-info folder on PYTHONPATH (what
#: pip would leave), whose gate asks about the tools named in $NEXUS_TEST_ASK_TOOLS
ASK_GATE = textwrap.dedent(f"""
    import os
    from nexus_core import Ask, hookimpl

    @hookimpl
    def nexus_before_tool_invoke(call, tool):
        if tool.name in os.environ.get({GATE_ENV!r}, "").split(","):
            return Ask(f"May the agent run {{tool.name}} {{call.arguments}}?")
        return None
""")


@pytest.fixture
def gate_site(tmp_path: Path) -> Path:
    site = tmp_path / "site"
    (site / "nexus_test_ask_gate-0.1.dist-info").mkdir(parents=True)
    (site / "nexus_test_ask_gate.py").write_text(ASK_GATE, encoding="utf-8")
    info = site / "nexus_test_ask_gate-0.1.dist-info"
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: nexus-test-ask-gate\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[nexus.plugins]\ntest.ask_gate = nexus_test_ask_gate\n")
    return site


#: a run_code script that reads inventory.txt, prints its length and returns it
READ_SCRIPT = """\
import tools

def run(ctx):
    text = tools.read(path="inventory.txt").content
    print("read", len(text), "characters")
    return {"inventory": text}
"""


class NoDeletes:
    """A gate that vetoes shell commands that delete (`rm `)."""

    @hookimpl
    def nexus_before_tool_invoke(self, call: ToolCall, tool: ToolDef) -> Veto | None:
        return Veto("deleting is not allowed") if "rm " in call.arguments.get("command", "") else None


RunNexus = Callable[..., "subprocess.CompletedProcess[str]"]


def subprocess_env(site: Path | None = None, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NEXUS_", "PYTHON"))}
    if site is not None:
        env["PYTHONPATH"] = str(site)
    env.update(extra)
    return env


@pytest.fixture
def run_nexus(workspace: Workspace) -> RunNexus:
    """`run_nexus(*args, input=None, env=None)`: `nexus` as a real subprocess, in the workspace."""

    def run(*args: str, input: str | None = None, env: Mapping[str, str] | None = None,
            timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "nexus_core.cli", *args], capture_output=True, text=True,
                              cwd=workspace.root, input=input, env=dict(env or subprocess_env()),
                              timeout=timeout, check=False)

    return run
