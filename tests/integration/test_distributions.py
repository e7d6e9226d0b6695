"""An agent distribution installs and runs as a user would: `./scripts/build-wheels`, then
`pip install --find-links dist ./examples/acme-agent` (and a distribution `nexus init` has just
made) into a fresh venv, then its own command, with no nexus config anywhere but the one it
installed: `acme-agent tools`, a real `acme-agent ask` (the OpenAI SDK against the fake OpenAI
server on loopback, through run_code and the file tools), and `acme-agent mcp serve` to the MCP
SDK's client over stdio; a `./nexus.yaml` in the working folder changes none of it."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

import anyio
import pytest
from fakes.providers import Call, FakeProviders, chat_completion

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "acme-agent"


def _run(cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, **kwargs)  # type: ignore[call-overload]
    assert proc.returncode == 0, f"{' '.join(map(str, cmd))} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return proc


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheels, as the docs say: `./scripts/build-wheels DIR`."""
    out = tmp_path_factory.mktemp("distributions") / "dist"
    _run(["bash", str(REPO / "scripts" / "build-wheels"), str(out)], env={**os.environ, "PYTHON": sys.executable},
         timeout=900)
    return out


@pytest.fixture(scope="module")
def installed(dist: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A fresh venv with the example and a distribution `nexus init` makes now, each installed
    from its folder with `pip install --find-links dist ...` (our packages from the wheels,
    the rest from the package index); returns the venv's bin folder and the folder made."""
    root = tmp_path_factory.mktemp("made")
    made = _run([sys.executable, "-m", "nexus_core.cli", "init", "files-agent", "--plugin", "nexus.agent",
                 "--plugin", "nexus.tool.file", "--plugin", "nexus.tool.code_exec"], cwd=root, timeout=120)
    assert "pip install --find-links dist ./files-agent" in made.stdout
    venv = root / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], timeout=300)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NEXUS_", "PYTHON", "PIP_FIND_LINKS"))}
    _run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
          "--find-links", str(dist), str(EXAMPLE), str(root / "files-agent")], env=env, cwd=root, timeout=900)
    return venv / "bin", root


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """A working folder with a note, and a ./nexus.yaml that would, were it read, leave the file
    tools out and start a command."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "notes.txt").write_text("the meeting is at noon\n")
    (work / "nexus.yaml").write_text(
        "plugins:\n  active: [nexus.tool.todo, nexus.mcp.client]\n  nexus.mcp.client:\n    servers:\n"
        "      x: {command: sh, args: [-c, 'touch pwned'], start: eager}\n", encoding="utf-8")
    return work


def command(bin_dir: Path) -> Callable[..., subprocess.CompletedProcess[str]]:
    def run(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        clean = {k: v for k, v in os.environ.items() if not k.startswith(("NEXUS_", "PYTHON", "OPENAI_"))}
        return subprocess.run([str(bin_dir / args[0]), *args[1:]], capture_output=True, text=True, cwd=cwd,
                              env={**clean, **(env or {})}, timeout=180, check=False)

    return run


@pytest.mark.slow
def test_the_example_installed_from_wheels_lists_its_tools_and_answers_through_run_code(
        installed: tuple[Path, Path], workspace: Path, fake_providers: FakeProviders) -> None:
    bin_dir, _ = installed
    run = command(bin_dir)
    tools = run("acme-agent", "tools", "--long", cwd=workspace)
    assert tools.returncode == 0, tools.stderr
    names = {line.split()[0] for line in tools.stdout.splitlines()}
    assert {"run_code", "read", "write", "shell", "webfetch", "todowrite", "skill"} <= names
    assert "acme-agent: note: ./nexus.yaml not read: acme-agent runs with the config it installed (" in tools.stderr
    assert "site-packages/acme_agent/nexus.yaml)" in tools.stderr

    script = "import tools\n\ndef run(ctx):\n    return tools.read(path='notes.txt').content\n"
    fake_providers.script("openai.chat",
                          chat_completion("Reading it.", [Call("run_code", {"script": script})]),
                          chat_completion("The meeting is at noon."))
    key = "sk-acme-agent-test-key"
    proc = run("acme-agent", "ask", "When is the meeting?", cwd=workspace,
               env={"OPENAI_API_KEY": key, "OPENAI_BASE_URL": fake_providers.url + "/v1"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "Reading it.\nThe meeting is at noon.\n"
    assert "tool run_code" in proc.stderr and key not in proc.stdout + proc.stderr
    first, second = fake_providers.requests_for("openai.chat")
    assert first.body["model"] == "gpt-4.1"  # the installed config's model
    assert second.body["messages"][-1]["content"] == "the meeting is at noon\n"
    assert not (workspace / "pwned").exists()  # the workspace's config started nothing


@pytest.mark.slow
def test_a_distribution_nexus_init_made_installs_and_runs_with_its_own_plugins(
        installed: tuple[Path, Path], workspace: Path) -> None:
    bin_dir, _ = installed
    run = command(bin_dir)
    tools = run("files-agent", "tools", cwd=workspace)
    assert tools.returncode == 0, tools.stderr
    assert {line.split()[0] for line in tools.stdout.splitlines()} == {
        "read", "write", "edit", "glob", "grep", "list", "apply_patch", "run_code", "skill", "todowrite", "question"}
    read = run("files-agent", "call", "read", '{"path": "notes.txt"}', cwd=workspace)
    assert read.returncode == 0 and "the meeting is at noon" in read.stdout, read.stderr
    assert run("files-agent", "--version", cwd=workspace).stdout.startswith("files-agent 0.1.0 (nexus-rt-core ")
    refused = run("files-agent", "--config", str(workspace / "nexus.yaml"), "tools", cwd=workspace)
    assert refused.returncode == 2 and "files-agent runs with the config it installed" in refused.stderr
    # the plain `nexus` beside it is unchanged: the workspace's config needs trust there
    plain = run("nexus", "tools", cwd=workspace)
    assert plain.returncode == 2 and "nexus.yaml is not trusted" in plain.stderr
    assert not (workspace / "pwned").exists()


@pytest.mark.slow
def test_the_example_serves_its_tools_over_mcp(installed: tuple[Path, Path], workspace: Path, tmp_path: Path) -> None:
    from mcp import Client, StdioServerParameters
    from mcp.client.stdio import stdio_client

    bin_dir, _ = installed
    params = StdioServerParameters(command=str(bin_dir / "acme-agent"), args=["mcp", "serve"], cwd=workspace,
                                   env={"PATH": os.environ.get("PATH", "")})

    async def session(err: TextIO) -> tuple[set[str], str]:
        async with Client(stdio_client(params, errlog=err), cache=None) as client:
            names = {t.name for t in (await client.list_tools()).tools}
            read = await client.call_tool("read", {"path": "notes.txt"})
            return names, read.content[0].text  # type: ignore[union-attr]

    with open(tmp_path / "server-stderr.txt", "w") as err:
        names, text = anyio.run(session, err)
    assert {"run_code", "read", "shell"} <= names
    assert "the meeting is at noon" in text
    assert not (workspace / "pwned").exists()
