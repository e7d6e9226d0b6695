"""The command line as users expect it: commands from plugins (`nexus_register_commands`), global
options on either side of the command, `--version`, quiet pipes, one tool shown readably, and
clear exit-2 errors for a missing workspace or a config that is not UTF-8. Each through the real
`nexus` command in a subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from nexus_core import __version__

if TYPE_CHECKING:
    from conftest import FakePlugins, RunNexus

TOOLS = """
    from nexus_core import hookimpl, native_tool

    @hookimpl
    def nexus_register_tools(register):
        register(native_tool("echo", "Echo the text.\\nSecond line of the description.",
                             {"type": "object",
                              "properties": {"text": {"type": "string", "description": "What to echo back."},
                                             "times": {"type": "integer", "default": 1}},
                              "required": ["text"]},
                             lambda a: a["text"] * a.get("times", 1)))
"""

COMMANDS = """
    import click
    from nexus_core import hookimpl
    from nexus_core.cli import pass_nexus

    @hookimpl
    def nexus_register_commands(cli):
        @cli.command("hello", epilog="Example: nexus hello bob")
        @click.argument("who")
        @pass_nexus
        def hello(nx, who):
            '''Greet WHO from the configured workspace.'''
            click.echo(f"hello {who} from {nx.config.workspace.name}: {', '.join(t.name for t in nx.tools())}")
            return 0

        @cli.group("deep")
        def deep():
            '''A group of commands.'''

        @deep.command("down")
        @pass_nexus
        def down(nx):
            click.echo(f"down in {nx.config.workspace.name}")
            return 3
"""

CLASS_COMMANDS = """
    import click
    from nexus_core import hookimpl

    class WithCommands:
        def __init__(self, nexus):
            self.nexus = nexus

        @staticmethod
        @hookimpl
        def nexus_register_commands(cli):
            cli.add_command(click.Command("static", callback=lambda: click.echo("static ok"),
                                          help="A command of a plugin class."))
"""


@pytest.fixture
def project(tmp_path: Path, fake_plugins: FakePlugins) -> Path:
    fake_plugins.add("fake.tools", TOOLS)
    fake_plugins.add("fake.commands", COMMANDS)
    fake_plugins.add("fake.class", CLASS_COMMANDS, attr="WithCommands")
    for name in ("ws", "other"):
        (tmp_path / name).mkdir()
    (tmp_path / "nexus.yaml").write_text(
        "workspace: ws\nplugins:\n  active: [fake.tools, fake.commands, fake.class]\n", encoding="utf-8")
    return tmp_path


@pytest.fixture
def nexus(run_nexus: RunNexus, fake_plugins: FakePlugins, project: Path) -> RunNexus:
    def run(*args: str, input: str | None = None, **env: str) -> subprocess.CompletedProcess[str]:
        return run_nexus(*args, env=fake_plugins.env(**env), cwd=project, input=input)

    return run


def test_a_plugin_adds_commands_that_get_the_configured_nexus(nexus: RunNexus) -> None:
    proc = nexus("hello", "bob")
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "hello bob from ws: echo\n", "")
    listing = nexus("--help").stdout
    assert "hello" in listing and "Greet WHO" in listing and "static" in listing and "deep" in listing


def test_global_options_work_after_the_command_too_for_plugins_commands_and_their_subcommands(
        nexus: RunNexus, project: Path) -> None:
    assert nexus("hello", "bob", "--workspace", "other").stdout == "hello bob from other: echo\n"
    assert nexus("--workspace", "other", "hello", "bob").stdout == "hello bob from other: echo\n"
    down = nexus("deep", "down", "--workspace", "other")
    assert (down.returncode, down.stdout) == (3, "down in other\n")
    (project / "alt.yaml").write_text("workspace: other\nplugins:\n  active: [fake.tools]\n", encoding="utf-8")
    assert nexus("tools", "--config", "alt.yaml").stdout.split()[0] == "echo"
    assert nexus("tools", "--config", "alt.yaml", "--workspace", "ws").returncode == 0


def test_a_plugin_class_adds_commands_through_a_staticmethod(nexus: RunNexus) -> None:
    proc = nexus("static")
    assert (proc.returncode, proc.stdout) == (0, "static ok\n")


def test_a_plugin_that_fails_to_add_commands_is_reported_and_the_rest_work(
        run_nexus: RunNexus, fake_plugins: FakePlugins, project: Path) -> None:
    fake_plugins.add("fake.raising", """
        from nexus_core import hookimpl
        @hookimpl
        def nexus_register_commands(cli):
            @cli.command("half")
            def half():
                pass
            raise RuntimeError("commands broke")
    """)
    fake_plugins.add("fake.method", """
        from nexus_core import hookimpl
        class Method:
            @hookimpl
            def nexus_register_commands(self, cli):
                pass
    """, attr="Method")
    proc = run_nexus("hello", "ann", env=fake_plugins.env(), cwd=project)
    assert proc.returncode == 0 and proc.stdout == "hello ann from ws: echo\n"
    assert "plugin 'fake.raising' raised in nexus_register_commands: RuntimeError: commands broke" in proc.stderr
    assert "Method.nexus_register_commands is called before any Nexus" in proc.stderr
    assert "staticmethod" in proc.stderr
    half = run_nexus("half", env=fake_plugins.env(), cwd=project)
    assert half.returncode == 2 and "no command 'half'" in half.stderr


def test_what_a_plugin_prints_while_it_loads_goes_to_stderr(
        run_nexus: RunNexus, fake_plugins: FakePlugins, project: Path) -> None:
    # stdout is the command's: JSON for `--json`, the protocol for `nexus mcp serve`
    fake_plugins.add("fake.chatty", """
        print("chatty: imported")
        from nexus_core import hookimpl
        @hookimpl
        def nexus_register_commands(cli):
            print("chatty: adding commands")
    """)
    proc = run_nexus("call", "echo", '{"text": "hi"}', "--json", env=fake_plugins.env(), cwd=project)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["output"] == "hi"
    assert "chatty: imported\nchatty: adding commands\n" in proc.stderr


def test_version(nexus: RunNexus) -> None:
    proc = nexus("--version")
    assert (proc.returncode, proc.stdout) == (0, f"nexus (nexus-rt-core) {__version__}\n")


def test_a_mistyped_command_says_did_you_mean(nexus: RunNexus) -> None:
    proc = nexus("tool")
    assert proc.returncode == 2
    assert "no command 'tool' (did you mean 'tools'?); `nexus --help` lists the commands" in proc.stderr


def test_tools_name_shows_one_tool_readably(nexus: RunNexus) -> None:
    proc = nexus("tools", "echo")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert out.startswith("echo  (fake.tools)\n\nEcho the text.\nSecond line of the description.\n")
    assert "  text (string, required)\n      What to echo back.\n" in out
    assert "  times (integer, default 1)\n" in out
    unknown = nexus("tools", "ecoh")
    assert unknown.returncode == 2
    assert unknown.stderr == "nexus: no tool 'ecoh' (did you mean 'echo'?); `nexus tools` lists the tools\n"


def test_a_workspace_that_does_not_exist_is_a_usage_error(nexus: RunNexus, project: Path) -> None:
    proc = nexus("tools", "--workspace", "nowhere")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == f"nexus: --workspace nowhere: {project / 'nowhere'} does not exist\n"
    (project / "bad.yaml").write_text("workspace: missing\n", encoding="utf-8")
    config = nexus("--config", "bad.yaml", "tools")
    assert config.returncode == 2
    assert config.stderr == f"nexus: config error: bad.yaml:1: workspace: {project / 'missing'} does not exist\n"


def test_a_config_that_is_not_utf8_is_a_config_error_naming_the_line(nexus: RunNexus, project: Path) -> None:
    (project / "latin1.yaml").write_bytes("workspace: ws\n# caf\xe9\n".encode("latin-1"))
    proc = nexus("--config", "latin1.yaml", "tools")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("nexus: config error: latin1.yaml:2: the config is not UTF-8 text (byte 0xe9")


@pytest.mark.parametrize("args", [
    ["tools"], ["tools", "--json"], ["tools", "echo"], ["plugins", "-v"], ["schemas"], ["skills"], ["doctor"],
    ["call", "echo", '{"text": "x", "times": 100000}'], ["--help"], ["hello", "bob"],
])
def test_output_cut_short_by_a_closed_pipe_ends_quietly(args: list[str], fake_plugins: FakePlugins,
                                                        project: Path) -> None:
    """`nexus ... | head -1`: the reader goes away; no BrokenPipeError traceback, status 1 (as
    click and Python's own docs have it: the output was not all written)."""
    proc = subprocess.Popen([sys.executable, "-m", "nexus_core.cli", "--trust-config", *args], cwd=project,
                            env=fake_plugins.env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # before the command has written anything: every write meets EPIPE
    stderr = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 1, stderr
    assert "Traceback" not in stderr and "BrokenPipe" not in stderr and "Exception ignored" not in stderr, stderr


def test_every_command_help_shows_an_example_and_the_top_help_says_where_the_docs_are(nexus: RunNexus) -> None:
    top = nexus("--help").stdout
    assert "Examples:" in top and "docs/index.md" in top
    for command in ("tools", "call", "plugins", "schemas", "skills", "doctor"):
        text = nexus(command, "--help").stdout
        assert "Example" in text and f"nexus {command}" in text, (command, text)


def test_schemas_strict_for_openai_and_a_clear_refusal_for_other_formats(nexus: RunNexus) -> None:
    import json

    proc = nexus("schemas", "--format", "openai-responses", "--strict")
    assert proc.returncode == 0, proc.stderr
    (echo,) = [t for t in json.loads(proc.stdout) if t["name"] == "echo"]
    assert echo["strict"] is True and echo["parameters"]["additionalProperties"] is False
    assert sorted(echo["parameters"]["required"]) == ["text", "times"]  # optional ones become nullable
    other = nexus("schemas", "--format", "gemini", "--strict")
    assert other.returncode == 2 and "no 'strict' option" in other.stderr


@pytest.mark.parametrize("command", [["run"], ["mcp"], ["mcp", "serve"], ["chat"], ["ask"]])
def test_the_installed_packages_commands_show_examples_too(command: list[str], run_nexus: RunNexus) -> None:
    proc = run_nexus(*command, "--help")
    assert proc.returncode == 0, proc.stderr
    assert "Example" in proc.stdout and f"nexus {' '.join(command)}" in proc.stdout, proc.stdout
