"""The `nexus` command, run as a real subprocess: what it prints and its exit status
(0 ok, 1 the tool failed, 2 bad usage or bad config)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from conftest import FakePlugins, RunNexus

TOOLS = """
    from nexus_core import hookimpl, native_tool

    ITEMS = {
        "type": "object",
        "properties": {"items": {"type": "array", "items": {
            "type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}}},
        "required": ["items"],
    }

    def fail(arguments):
        raise RuntimeError("disk on fire")

    @hookimpl
    def nexus_register_tools(register):
        register(native_tool("echo", "Echo the text.\\nSecond line.",
                             {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
                             lambda a: a["text"]))
        register(native_tool("items", "Count items.", ITEMS, lambda a: str(len(a["items"]))))
        register(native_tool("fail", "Always fails.", {"type": "object"}, fail))
"""


@pytest.fixture
def project(tmp_path: Path, fake_plugins: FakePlugins) -> Path:
    """A folder with a nexus.yaml that activates one fake plugin giving three tools."""
    fake_plugins.add("fake.tools", TOOLS)
    (tmp_path / "nexus.yaml").write_text("plugins:\n  active: [fake.tools]\n", encoding="utf-8")
    return tmp_path


@pytest.fixture
def nexus(run_nexus: RunNexus, fake_plugins: FakePlugins, project: Path) -> RunNexus:
    """`nexus(...)` in the project folder, seeing the fake plugins."""

    def run(*args: str, input: str | None = None, **env: str) -> subprocess.CompletedProcess[str]:
        return run_nexus(*args, env=fake_plugins.env(**env), cwd=project, input=input)

    return run


def test_tools_lists_each_tool_with_its_plugin(nexus: RunNexus) -> None:
    proc = nexus("tools")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert [line.split()[0] for line in lines] == ["echo", "fail", "items"]
    assert lines[0].split()[1] == "fake.tools" and lines[0].endswith("Echo the text.")
    data = json.loads(nexus("tools", "--json").stdout)
    assert [t["name"] for t in data] == ["echo", "fail", "items"] and "handler" not in data[0]


def test_call_prints_the_output(nexus: RunNexus) -> None:
    proc = nexus("call", "echo", '{"text": "héllo"}')
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "héllo\n", "")


def test_call_reads_arguments_from_stdin_with_a_dash(nexus: RunNexus) -> None:
    proc = nexus("call", "items", "-", input='{"items": [{"name": "a"}, {"name": "b"}]}')
    assert (proc.returncode, proc.stdout) == (0, "2\n")


def test_call_with_invalid_arguments_says_which_and_exits_1(nexus: RunNexus) -> None:
    proc = nexus("call", "items", '{"items": [{"name": "a"}, {"name": "b"}, {"name": 3}]}')
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr == "error: invalid arguments for items: items[2].name: expected string, got 3\n"


def test_call_of_an_unknown_tool_exits_1(nexus: RunNexus) -> None:
    proc = nexus("call", "ehco", "{}")
    assert (proc.returncode, proc.stderr) == (
        1, "error: unknown tool: 'ehco' (did you mean 'echo'?)\nnexus: `nexus tools` lists the tools\n")


def test_call_of_a_failing_tool_exits_1_and_json_shows_the_whole_result(nexus: RunNexus) -> None:
    proc = nexus("call", "fail", "{}", "--json")
    assert proc.returncode == 1
    result = json.loads(proc.stdout)
    assert result["is_error"] is True and result["error_kind"] == "exception"
    assert result["error"] == "RuntimeError: disk on fire" and result["name"] == "fail"


@pytest.mark.parametrize(
    ("args_json", "stdin", "message"),
    [
        ("{text: 1}", None, ("nexus: ARGS_JSON is not valid JSON: Expecting property name enclosed in double quotes"
                             " at line 1 column 2\n")),
        ("[1, 2]", None, "nexus: ARGS_JSON must be a JSON object, got list\n"),
        ("-", "", "nexus: ARGS_JSON is not valid JSON: Expecting value at line 1 column 1\n"),
    ],
)
def test_call_with_arguments_that_are_not_a_json_object_exits_2(nexus: RunNexus, args_json: str,
                                                                  stdin: str | None, message: str) -> None:
    proc = nexus("call", "echo", args_json, input=stdin)
    assert (proc.returncode, proc.stdout, proc.stderr) == (2, "", message)


def test_plugins_reports_a_broken_plugin_and_the_rest_keep_working(nexus: RunNexus, fake_plugins: FakePlugins,
                                                                   project: Path) -> None:
    fake_plugins.add("fake.broken", "raise ImportError('needs libfoo')\n")
    (project / "nexus.yaml").write_text("plugins:\n  active: [fake.tools, fake.broken]\n", encoding="utf-8")
    proc = nexus("plugins")
    assert proc.returncode == 0
    assert proc.stderr == "nexus: warning: plugin 'fake.broken' failed (import): ImportError: needs libfoo\n"
    assert "fake.tools  [active]" in proc.stdout and "tools: echo, fail, items" in proc.stdout
    assert "fake.broken  [failed]" in proc.stdout and "error: import: ImportError: needs libfoo" in proc.stdout
    infos = {p["name"]: p for p in json.loads(nexus("plugins", "--json").stdout)}
    assert infos["fake.broken"]["status"] == "failed" and infos["fake.tools"]["tools"] == ["echo", "fail", "items"]


def test_schemas_prints_the_tools_in_the_asked_format(nexus: RunNexus) -> None:
    proc = nexus("schemas", "--format", "anthropic")
    assert proc.returncode == 0
    assert [t["name"] for t in json.loads(proc.stdout)] == ["echo", "fail", "items"]
    assert nexus("schemas", "--format", "nope").returncode == 2


def test_malformed_yaml_exits_2_with_the_line(nexus: RunNexus, project: Path) -> None:
    (project / "nexus.yaml").write_text("plugins:\n  active: [fake.tools\nworkspace: .\n", encoding="utf-8")
    proc = nexus("tools")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith("nexus: config error: nexus.yaml:")
    assert "invalid YAML" in proc.stderr


def test_a_wrong_key_exits_2_with_its_path_and_line(nexus: RunNexus, project: Path) -> None:
    (project / "other.yaml").write_text(textwrap.dedent("""\
        plugins:
          active: [fake.tools]
          fake.tools:
            verbose: true
        workspace: .
    """), encoding="utf-8")
    proc = nexus("--config", "other.yaml", "tools")
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == ("nexus: config error: other.yaml:4: plugins.fake.tools.verbose: unknown key "
                           "(plugin fake.tools takes no settings)\n")
    (project / "other.yaml").write_text("plugins:\n  active: [fake.tools]\n  fake.tool:\n    x: 1\n", encoding="utf-8")
    proc = nexus("--config", "other.yaml", "tools")
    assert (proc.returncode, proc.stderr) == (
        2, ("nexus: config error: other.yaml:3: plugins.fake.tool: no installed plugin is called 'fake.tool' "
            "(did you mean 'fake.tools'?)\n"))


def test_config_comes_from_the_env_var_when_not_given(nexus: RunNexus, project: Path) -> None:
    (project / "empty.yaml").write_text("plugins:\n  active: []\n", encoding="utf-8")
    proc = nexus("tools", NEXUS_CONFIG="empty.yaml")
    assert (proc.returncode, proc.stdout) == (0, "no tools registered (nexus plugins shows what is installed)\n")
    assert nexus("--config", "missing.yaml", "tools").stderr == (
        "nexus: config error: missing.yaml: cannot read config: No such file or directory\n")


def test_bad_usage_exits_2_and_help_exits_0(nexus: RunNexus) -> None:
    proc = nexus("call")
    assert proc.returncode == 2 and "Missing argument 'TOOL'" in proc.stderr
    help_ = nexus("--help")
    assert help_.returncode == 0 and "call" in help_.stdout and "plugins" in help_.stdout


def test_a_raising_observer_is_reported_on_stderr_and_the_call_still_succeeds(nexus: RunNexus, fake_plugins: FakePlugins,
                                                                              project: Path) -> None:
    fake_plugins.add("fake.badobserver", """
        from nexus_core import hookimpl

        @hookimpl
        def nexus_tool_result(result):
            raise RuntimeError("audit log unwritable")
    """)
    (project / "nexus.yaml").write_text("plugins:\n  active: [fake.tools, fake.badobserver]\n", encoding="utf-8")
    proc = nexus("call", "echo", '{"text": "hi"}', NEXUS_TRACE_HOOKS="1")  # and tracing, on the way
    assert (proc.returncode, proc.stdout) == (0, "hi\n")
    assert "nexus: error: plugin 'fake.badobserver' raised in nexus_tool_result" in proc.stderr
    assert "RuntimeError: audit log unwritable" in proc.stderr
    assert "nexus_before_tool_invoke [hook]" in proc.stderr  # NEXUS_TRACE_HOOKS reaches the CLI too


def test_the_console_script_is_the_same_command(nexus: RunNexus, fake_plugins: FakePlugins, project: Path) -> None:
    script = Path(sys.executable).parent / "nexus"
    if not script.is_file():
        pytest.skip("nexus_core is not installed with its console script here")
    proc = subprocess.run([str(script), "--trust-config", "call", "echo", '{"text": "from the script"}'], capture_output=True,
                          text=True, env=fake_plugins.env(), cwd=project, timeout=60, check=False)
    assert (proc.returncode, proc.stdout) == (0, "from the script\n")
