"""`nexus init NAME` makes an agent distribution, and its command runs with the config it
installed, whatever the working folder or the environment holds (docs/distributions.md).

The generated package is "installed" here without pip: its `src/` and a dist-info folder with
its entry points on PYTHONPATH, which importlib.metadata finds as it finds a pip install (the
slow test in tests/integration/test_distributions.py installs it for real, from wheels)."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from nexus_core._config import load_config

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "acme-agent"


def nexus(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("NEXUS_")}
    return subprocess.run([sys.executable, "-m", "nexus_core.cli", *args], capture_output=True, text=True,
                          cwd=cwd, env={**base, **(env or {})}, timeout=120, check=False)


def fake_install(folder: Path, site: Path) -> dict[str, str]:
    """Make the package in `folder` importable and its entry points found, as pip would; returns
    the environment that sees it."""
    project = tomllib.loads((folder / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    info = site / f"{project['name'].replace('-', '_')}-{project['version']}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n",
                                   encoding="utf-8")
    groups = "".join(f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in eps.items())
                     for group, eps in project["entry-points"].items())
    (info / "entry_points.txt").write_text(groups, encoding="utf-8")
    return {"PYTHONPATH": os.pathsep.join([str(site), str(folder / "src")])}


def run_installed(package: str, *args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The distribution's console script (`python -m` runs the same `main`)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("NEXUS_")}
    return subprocess.run([sys.executable, "-m", package, *args], capture_output=True, text=True, cwd=cwd,
                          env={**base, **env}, timeout=120, check=False)


# -- what nexus init writes -------------------------------------------------------------------------


def test_init_writes_a_package_that_depends_on_its_plugins_and_ships_its_config(tmp_path: Path) -> None:
    proc = nexus("init", "acme-agent", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    folder = tmp_path / "acme-agent"
    assert sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()) == [
        "README.md", "pyproject.toml", "src/acme_agent/__init__.py", "src/acme_agent/__main__.py",
        "src/acme_agent/nexus.yaml", "src/acme_agent/py.typed"]
    pyproject = tomllib.loads((folder / "pyproject.toml").read_text(encoding="utf-8"))
    project = pyproject["project"]
    assert pyproject["build-system"]["build-backend"] == "hatchling.build"
    assert project["name"] == "acme-agent"
    assert project["scripts"] == {"acme-agent": "acme_agent.__main__:main"}
    assert project["entry-points"] == {"nexus.distributions": {"acme-agent": "acme_agent"}}
    deps = {d.split(">=")[0] for d in project["dependencies"]}
    assert project["dependencies"][0].startswith("nexus-rt-core>=")
    assert deps == {"nexus-rt-core", "nexus-rt-agent", "nexus-rt-provider-openai", "nexus-rt-tool-shell",
                    "nexus-rt-tool-file", "nexus-rt-tool-code-exec", "nexus-rt-tool-web", "nexus-rt-mcp"}
    cfg = load_config(folder / "src" / "acme_agent" / "nexus.yaml")
    assert cfg.model == "openai:gpt-4.1"
    assert cfg.active is not None and set(cfg.active) == {
        "nexus.skills", "nexus.tool.todo", "nexus.tool.question", "nexus.agent", "nexus.provider.openai",
        "nexus.tool.shell", "nexus.tool.file", "nexus.tool.code_exec", "nexus.tool.web", "nexus.mcp.client"}
    readme = (folder / "README.md").read_text(encoding="utf-8")
    assert "pip install --find-links dist ./acme-agent" in readme and "acme-agent chat" in readme
    assert "pip install --find-links dist ./acme-agent" in proc.stdout


def test_plugins_and_model_choose_the_dependencies(tmp_path: Path) -> None:
    proc = nexus("init", "sub/claude-files", "--plugin", "nexus.agent", "--plugin", "nexus.tool.file",
                 "--model", "anthropic:claude-sonnet-4-5", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    folder = tmp_path / "sub" / "claude-files"
    project = tomllib.loads((folder / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert {d.split(">=")[0] for d in project["dependencies"]} == {
        "nexus-rt-core", "nexus-rt-agent", "nexus-rt-tool-file", "nexus-rt-provider-anthropic"}
    cfg = load_config(folder / "src" / "claude_files" / "nexus.yaml")
    assert cfg.model == "anthropic:claude-sonnet-4-5"
    assert cfg.active == ["nexus.skills", "nexus.tool.todo", "nexus.tool.question", "nexus.agent",
                          "nexus.tool.file", "nexus.provider.anthropic"]
    assert "pip install --find-links dist ./sub/claude-files" in (folder / "README.md").read_text(encoding="utf-8")


def test_a_config_file_is_shipped_byte_for_byte_and_its_plugins_are_the_dependencies(tmp_path: Path) -> None:
    text = ("# my agent\nmodel: openai:gpt-4.1-mini\nplugins:\n  active: [nexus.agent, nexus.tool.shell]\n"
            "  nexus.tool.shell:\n    timeout_seconds: 5   # short\n")
    (tmp_path / "agent.yaml").write_text(text, encoding="utf-8")
    proc = nexus("init", "shell-agent", "--config", "agent.yaml", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    folder = tmp_path / "shell-agent"
    assert (folder / "src" / "shell_agent" / "nexus.yaml").read_text(encoding="utf-8") == text
    project = tomllib.loads((folder / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert {d.split(">=")[0] for d in project["dependencies"]} == {
        "nexus-rt-core", "nexus-rt-agent", "nexus-rt-tool-shell", "nexus-rt-provider-openai"}


@pytest.mark.parametrize(("name", "says"), [
    ("bad name", "is not a valid distribution name"),
    ("_agent", "is not a valid distribution name"),
    ("agent-", "is not a valid distribution name"),
    ("1st-agent", "is not a Python identifier"),
    ("class", "is not a Python identifier"),
    ("json", "in the standard library"),
    ("nexus", "one of Nexus"),
    ("nexus-core", "one of Nexus"),
    ("click", "is the name of a distribution installed here (click "),
    ("yaml", "would install the module 'yaml', and one of that name is importable here already"),
])
def test_a_name_that_cannot_be_a_distribution_is_refused_and_nothing_is_written(tmp_path: Path, name: str,
                                                                               says: str) -> None:
    proc = nexus("init", name, cwd=tmp_path)
    assert proc.returncode == 2
    assert says in proc.stderr and repr(name) in proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_an_existing_folder_is_refused_and_left_as_it_was(tmp_path: Path) -> None:
    (tmp_path / "acme-agent").mkdir()
    (tmp_path / "acme-agent" / "mine.txt").write_text("keep me\n")
    proc = nexus("init", "acme-agent", cwd=tmp_path)
    assert proc.returncode == 2
    assert "acme-agent exists already" in proc.stderr
    assert [p.name for p in (tmp_path / "acme-agent").iterdir()] == ["mine.txt"]
    (tmp_path / "link").symlink_to(tmp_path / "nowhere")  # a dangling symlink is a name taken too
    assert nexus("init", "link", cwd=tmp_path).returncode == 2


@pytest.mark.parametrize(("args", "says"), [
    (["--plugin", "nexus.tool.shel"], "no installed plugin is called 'nexus.tool.shel' (did you mean 'nexus.tool.shell'?)"),
    (["--model", "gpt-4.1"], "--model gpt-4.1: model 'gpt-4.1' is not provider:model"),
    (["--model", "acme:big"], "no installed plugin gives the provider 'acme'"),
    (["--config", "agent.yaml", "--model", "openai:gpt-4.1"], "--model goes without --config"),
    (["--config", "agent.yaml", "--plugin", "nexus.tool.file"], "the config chooses the plugins"),
    (["--config", "broken.yaml"], "broken.yaml:2: workspaces: unknown key"),
    (["--config", "missing.yaml"], "missing.yaml: cannot read config"),
])
def test_bad_options_exit_2_saying_what_is_wrong(tmp_path: Path, args: list[str], says: str) -> None:
    (tmp_path / "agent.yaml").write_text("plugins:\n  active: [nexus.agent]\n", encoding="utf-8")
    (tmp_path / "broken.yaml").write_text("model: openai:gpt-4.1\nworkspaces: .\n", encoding="utf-8")
    proc = nexus("init", "acme-agent", *args, cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout
    assert says in proc.stderr
    assert not (tmp_path / "acme-agent").exists()


def test_the_example_is_what_nexus_init_makes(tmp_path: Path) -> None:
    """examples/acme-agent is `nexus init examples/acme-agent` from the repository's root, as
    committed: regenerated, every file is the same."""
    (tmp_path / "examples").mkdir()
    proc = nexus("init", "examples/acme-agent", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    made = tmp_path / "examples" / "acme-agent"
    files = sorted(p.relative_to(made).as_posix() for p in made.rglob("*") if p.is_file())
    committed = sorted(p.relative_to(EXAMPLE).as_posix() for p in EXAMPLE.rglob("*")
                       if p.is_file() and "__pycache__" not in p.parts and ".egg-info" not in p.as_posix())
    assert files == committed
    for name in files:
        assert (made / name).read_text(encoding="utf-8") == (EXAMPLE / name).read_text(encoding="utf-8"), name


# -- the installed distribution's command -------------------------------------------------------------


@pytest.fixture
def installed(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """`nexus init file-agent --plugin nexus.tool.file`, installed; returns its working folder
    and the environment that sees it."""
    proc = nexus("init", "file-agent", "--plugin", "nexus.tool.file", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    env = fake_install(tmp_path / "file-agent", tmp_path / "site")
    work = tmp_path / "work"
    work.mkdir()
    return work, env


def tool_names(stdout: str) -> set[str]:
    return {line.split()[0] for line in stdout.splitlines() if line.strip()}


def test_the_command_runs_with_the_installed_config_and_the_working_folder_as_workspace(
        installed: tuple[Path, dict[str, str]]) -> None:
    work, env = installed
    (work / "notes.txt").write_text("the meeting is at noon\n")
    proc = run_installed("file_agent", "tools", cwd=work, env=env)
    assert proc.returncode == 0, proc.stderr
    assert tool_names(proc.stdout) == {"read", "write", "edit", "glob", "grep", "list", "apply_patch", "skill",
                                       "todowrite", "question"}
    assert proc.stderr == ""  # nothing in the folder to say anything about
    read = run_installed("file_agent", "call", "read", '{"path": "notes.txt"}', cwd=work, env=env)
    assert read.returncode == 0, read.stderr
    assert "the meeting is at noon" in read.stdout
    version = run_installed("file_agent", "--version", cwd=work, env=env)
    assert version.stdout.startswith("file-agent 0.1.0 (nexus-rt-core ")
    usage = run_installed("file_agent", "--help", cwd=work, env=env)
    assert usage.stdout.startswith("Usage: file-agent ")


def test_a_workspace_nexus_yaml_is_not_read_and_the_command_says_so(installed: tuple[Path, dict[str, str]]) -> None:
    """A config in the working folder, where the agent's tools write, must not change what the
    distribution runs: not its plugins, and not a command it would start."""
    work, env = installed
    (work / "nexus.yaml").write_text(
        "plugins:\n  active: [nexus.tool.todo, nexus.mcp.client]\n  nexus.mcp.client:\n    servers:\n"
        "      x: {command: sh, args: [-c, 'touch pwned'], start: eager}\n", encoding="utf-8")
    proc = run_installed("file_agent", "tools", cwd=work, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "read" in tool_names(proc.stdout) and "todowrite" in tool_names(proc.stdout)
    assert "file-agent: note: ./nexus.yaml not read: file-agent runs with the config it installed (" in proc.stderr
    assert not (work / "pwned").exists()


def test_nexus_config_in_the_environment_is_not_read_and_the_command_says_so(
        installed: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    work, env = installed
    (tmp_path / "other.yaml").write_text("plugins:\n  active: [nexus.tool.todo]\n", encoding="utf-8")
    proc = run_installed("file_agent", "tools", cwd=work, env={**env, "NEXUS_CONFIG": str(tmp_path / "other.yaml")})
    assert proc.returncode == 0, proc.stderr
    assert "read" in tool_names(proc.stdout)
    assert f"$NEXUS_CONFIG ({tmp_path / 'other.yaml'}) not read" in proc.stderr


def test_config_on_the_command_line_is_refused(installed: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    work, env = installed
    (tmp_path / "other.yaml").write_text("plugins:\n  active: [nexus.tool.todo]\n", encoding="utf-8")
    for args in (["--config", str(tmp_path / "other.yaml"), "tools"], ["tools", "--config", str(tmp_path / "other.yaml")]):
        proc = run_installed("file_agent", *args, cwd=work, env=env)
        assert proc.returncode == 2
        assert "file-agent runs with the config it installed" in proc.stderr and proc.stdout == ""


def test_trust_and_doctor_say_the_config_is_trusted_because_installed(installed: tuple[Path, dict[str, str]]) -> None:
    work, env = installed
    trust = run_installed("file_agent", "trust", cwd=work, env=env)
    assert trust.returncode == 2
    assert "file-agent's config needs no trust: it is installed with it" in trust.stderr
    doctor = run_installed("file_agent", "doctor", cwd=work, env=env)
    assert "installed with file-agent 0.1.0, trusted because it is installed" in doctor.stdout


def test_a_missing_distribution_is_a_clear_error(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-c", "from nexus_core.cli import run_distribution; run_distribution('gone-agent')"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=120, check=False)
    assert proc.returncode == 2
    assert "no installed distribution 'gone-agent' (entry point group nexus.distributions)" in proc.stderr


def test_a_distribution_whose_package_is_gone_is_a_clear_error(tmp_path: Path) -> None:
    info = tmp_path / "site" / "gone_agent-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: gone-agent\nVersion: 0.1\n", encoding="utf-8")
    (info / "entry_points.txt").write_text("[nexus.distributions]\ngone-agent = gone_agent\n", encoding="utf-8")
    proc = subprocess.run([sys.executable, "-c", "from nexus_core.cli import run_distribution; run_distribution('gone-agent')"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=120, check=False,
                          env={**os.environ, "PYTHONPATH": str(tmp_path / "site")})
    assert proc.returncode == 2
    assert "gone-agent: the package 'gone_agent' of the distribution 'gone-agent' cannot be imported: " in proc.stderr
    assert "Traceback" not in proc.stderr
