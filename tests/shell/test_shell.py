"""The `shell` tool: real commands in real process groups, through the gated invocation path."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from nexus_core import Ask, Nexus, Question, ToolCall, ToolDef, Veto, hookimpl
from nexus_core.testing import NexusFactory, assert_error, assert_ok

NEXUS_CLI = Path(sys.executable).parent / "nexus"


@pytest.fixture
def shell(nexus_factory: NexusFactory) -> Nexus:
    return nexus_factory(plugins=["nexus.tool.shell"])


def process_gone(pid: int) -> bool:
    """True when `pid` no longer runs. A killed process whose parent has gone stays a zombie
    until PID 1 reaps it, and some container inits never do, so a zombie counts as gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def wait_until_gone(pid: int, within: float = 30.0) -> bool:  # generous: only a failure waits it out
    end = time.monotonic() + within
    while time.monotonic() < end:
        if process_gone(pid):
            return True
        time.sleep(0.02)
    return process_gone(pid)


# -- the CLI, as the issue checks it --------------------------------------------------------


def test_cli_call_reports_stdout_stderr_and_exit_code(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEXUS_")}
    proc = subprocess.run(
        [str(NEXUS_CLI), "--workspace", str(workspace), "call", "shell",
         '{"command": "echo hi; echo err >&2; exit 3"}', "--json"],
        check=False, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=30,
    )
    assert proc.returncode == 0, proc.stderr  # a non-zero exit is a result, not a failed call
    result = json.loads(proc.stdout)
    assert result["is_error"] is False
    structured = result["output_structured"]
    assert (structured["stdout"], structured["stderr"], structured["exit_code"]) == ("hi\n", "err\n", 3)
    assert structured["timed_out"] is False
    assert "[exit code 3]" in result["output"]


# -- results --------------------------------------------------------------------------------


def test_success_summary_is_just_the_output(shell: Nexus) -> None:
    result = assert_ok(shell.invoke("shell", {"command": "printf 'a\\nb\\n'"}), "a\nb")
    assert result.output_structured["exit_code"] == 0


def test_nonzero_exit_is_a_result_the_model_reads(shell: Nexus) -> None:
    result = assert_ok(shell.invoke("shell", {"command": "ls no-such-file"}))
    assert result.output_structured["exit_code"] == 2
    assert "no-such-file" in result.output_structured["stderr"]
    assert result.output.startswith("[stderr]\n") and result.output.endswith("[exit code 2]")


def test_no_output_says_so(shell: Nexus) -> None:
    assert_ok(shell.invoke("shell", {"command": "true"}), "[no output]")


def test_killed_by_signal_reports_128_plus_n(shell: Nexus) -> None:
    result = assert_ok(shell.invoke("shell", {"command": "kill -TERM $$"}))
    assert result.output_structured["exit_code"] == 143
    assert "killed by signal SIGTERM" in result.output


def test_stdin_is_empty_so_readers_do_not_hang(shell: Nexus) -> None:
    result = assert_ok(shell.invoke("shell", {"command": "cat; echo done", "timeout": 5}), "done")
    assert result.output_structured["timed_out"] is False  # cat saw end of input, not the timeout


def test_bash_is_the_same_tool_and_aliases_are_configurable(nexus_factory: NexusFactory) -> None:
    nx = nexus_factory(plugins=["nexus.tool.shell"])
    assert [t.name for t in nx.tools()] == ["shell"]  # one tool, one ToolDef
    assert_ok(nx.invoke("bash", {"command": "echo $((6 * 7))"}), "42")
    shell_tool = nx.tool("shell")
    assert shell_tool is not None and nx.tool("bash") is shell_tool and shell_tool.aliases == ("bash",)
    more = nexus_factory(plugins=["nexus.tool.shell"], config={"plugins": {"nexus.tool.shell": {"aliases": ["sh", "zsh"]}}})
    assert more.tool("zsh") is more.tool("shell") and more.tool("bash") is None
    bare = nexus_factory(plugins=["nexus.tool.shell"], config={"plugins": {"nexus.tool.shell": {"aliases": []}}})
    assert [t.name for t in bare.tools()] == ["shell"] and bare.tool("bash") is None
    assert [s["function"]["name"] for s in nx.schemas("openai")] == ["shell", "bash"]


def test_a_bad_alias_is_a_config_error_naming_the_key(nexus_factory: NexusFactory) -> None:
    from nexus_core import ConfigError

    with pytest.raises(ConfigError, match=r"plugins\.nexus\.tool\.shell\.aliases\[0\]: 'rm -rf' does not match"):
        nexus_factory(plugins=["nexus.tool.shell"], config={"plugins": {"nexus.tool.shell": {"aliases": ["rm -rf"]}}})


# -- a gate written for `shell` covers every name (issue 21: aliases slipped past gates) ----


class NoShell:
    @hookimpl
    def nexus_before_tool_invoke(self, call: ToolCall, tool: ToolDef) -> Veto | None:
        return Veto(f"no shell (called as {call.name})") if tool.name == "shell" else None


class AskShell:
    @hookimpl
    def nexus_before_tool_invoke(self, call: ToolCall, tool: ToolDef) -> Ask | None:
        return Ask(f"run {call.arguments.get('command')!r}?") if tool.name == "shell" else None


ALIASES = {"plugins": {"nexus.tool.shell": {"aliases": ["bash", "sh"]}}}


@pytest.mark.parametrize("name", ["shell", "bash", "sh"])
def test_a_gate_for_shell_vetoes_bash_and_a_configured_alias(nexus_factory: NexusFactory, nexus_workspace: Path,
                                                             name: str) -> None:
    nx = nexus_factory(plugins=["nexus.tool.shell", NoShell()], config=ALIASES)
    assert_error(nx.invoke(name, {"command": "touch PWNED"}), f"vetoed: no shell (called as {name})", "vetoed")
    assert not (nexus_workspace / "PWNED").exists()


@pytest.mark.parametrize("name", ["bash", "sh"])
def test_a_gate_for_shell_asks_about_bash_and_a_configured_alias(nexus_factory: NexusFactory, nexus_workspace: Path,
                                                                 name: str) -> None:
    asked: list[Question] = []

    def person(question: Question) -> bool:
        asked.append(question)
        return False

    nx = nexus_factory(plugins=["nexus.tool.shell", AskShell()], config=ALIASES)
    assert_error(nx.invoke(name, {"command": "touch PWNED"}, approver=person), "denied by the user", "vetoed")
    [question] = asked
    assert question.text == "run 'touch PWNED'?" and question.tool is not None and question.tool.name == "shell"
    assert not (nexus_workspace / "PWNED").exists()


CLI_GATE = """
import os
from nexus_core import Ask, Veto, hookimpl

@hookimpl
def nexus_before_tool_invoke(call, tool):
    if tool.name != "shell":
        return None
    if os.environ.get("SHELL_GATE") == "ask":
        return Ask("may the agent run a command?")
    return Veto(f"no shell (called as {call.name})")
"""


@pytest.mark.parametrize("mode", ["veto", "ask"])
@pytest.mark.parametrize("name", ["bash", "sh"])
def test_nexus_call_meets_the_gate_for_shell_under_any_name(tmp_path: Path, mode: str, name: str) -> None:
    site = tmp_path / "site"
    info = site / "shell_gate_test-0.1.dist-info"
    info.mkdir(parents=True)
    (site / "shell_gate_test.py").write_text(CLI_GATE, encoding="utf-8")
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: shell-gate-test\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[nexus.plugins]\ntest.shell_gate = shell_gate_test\n")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    config = tmp_path / "etc" / "nexus.yaml"  # outside the workspace and the working folder: the user's own
    config.parent.mkdir()
    config.write_text(json.dumps({"workspace": str(workspace), "session_dir": str(tmp_path / "sessions"),
                                  "plugins": {"active": ["nexus.tool.shell", "test.shell_gate"],
                                              "nexus.tool.shell": {"aliases": ["bash", "sh"]}}}))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NEXUS_", "PYTHON"))}
    env.update(PYTHONPATH=str(site), SHELL_GATE=mode)
    proc = subprocess.run([sys.executable, "-m", "nexus_core.cli", "--config", str(config), "call", name,
                           '{"command": "touch PWNED"}'], cwd=workspace, env=env, capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 1, proc.stderr
    expected = (f"error: vetoed: no shell (called as {name})" if mode == "veto" else
                "error: vetoed: gate 'test.shell_gate' asks 'may the agent run a command?', and no one can answer here")
    assert proc.stderr.startswith(expected), proc.stderr
    assert not (workspace / "PWNED").exists()


# -- timeouts and process groups ------------------------------------------------------------


def test_timeout_kills_the_whole_group(shell: Nexus) -> None:
    result = assert_ok(shell.invoke("shell", {"command": "sleep 100 & echo $!; sleep 30", "timeout": 5}))
    assert result.output_structured["timed_out"] is True
    assert result.output_structured["exit_code"] is None
    assert "timed out after 5 s" in result.output
    child = int(result.output_structured["stdout"].split()[0])
    assert wait_until_gone(child), f"background child {child} survived the timeout"


def test_background_jobs_end_with_the_command(shell: Nexus) -> None:
    # The child holds stdout open; without the group kill the call would wait for it.
    result = assert_ok(shell.invoke("shell", {"command": "sleep 100 & echo $!", "timeout": 20}))
    assert result.output_structured["timed_out"] is False  # it returned when the shell exited
    assert result.output_structured["exit_code"] == 0
    assert wait_until_gone(int(result.output_structured["stdout"]))


def test_without_pidfd_the_polling_path_behaves_the_same(shell: Nexus, monkeypatch: pytest.MonkeyPatch) -> None:
    # macOS has no os.pidfd_open, nor a subreaper; there the process group is killed and the
    # exit is found by polling. Same promises.
    import nexus_tool_shell._run as run

    monkeypatch.setattr(run, "_why_no_supervisor", lambda: "as on macOS")
    monkeypatch.delattr(os, "pidfd_open", raising=False)
    quick = assert_ok(shell.invoke("shell", {"command": "sleep 100 & echo $!; exit 4", "timeout": 20}))
    assert quick.output_structured["exit_code"] == 4 and quick.output_structured["timed_out"] is False
    assert wait_until_gone(int(quick.output_structured["stdout"]))
    slow = assert_ok(shell.invoke("shell", {"command": "sleep 30", "timeout": 0.5}))
    assert slow.output_structured["timed_out"] is True and slow.output_structured["exit_code"] is None


def test_timeout_default_comes_from_config(nexus_factory: NexusFactory) -> None:
    nx = nexus_factory(plugins=["nexus.tool.shell"],
                       config={"plugins": {"nexus.tool.shell": {"timeout_seconds": 0.3}}})
    result = assert_ok(nx.invoke("shell", {"command": "sleep 10"}))
    assert result.output_structured["timed_out"] is True  # with the 60 s default it would have slept on
    assert "timed out after 0.3 s" in result.output


def test_timeout_above_the_configured_maximum_is_refused(nexus_factory: NexusFactory) -> None:
    nx = nexus_factory(plugins=["nexus.tool.shell"],
                       config={"plugins": {"nexus.tool.shell": {"max_timeout_seconds": 5, "timeout_seconds": 2}}})
    assert_error(nx.invoke("shell", {"command": "true", "timeout": 60}), "timeout", kind="invalid_arguments")


def test_a_default_timeout_above_the_maximum_is_reported_as_a_plugin_failure(nexus_factory: NexusFactory) -> None:
    nx = nexus_factory(plugins=["nexus.tool.shell"],
                       config={"plugins": {"nexus.tool.shell": {"max_timeout_seconds": 5, "timeout_seconds": 9}}},
                       allow_failures=True)
    assert nx.tool("shell") is None
    assert any(f.name == "nexus.tool.shell" and "max_timeout_seconds" in f.error for f in nx.failures)


# -- output cap -----------------------------------------------------------------------------


def test_output_is_capped_and_the_cap_is_reported(nexus_factory: NexusFactory) -> None:
    nx = nexus_factory(plugins=["nexus.tool.shell"],
                       config={"plugins": {"nexus.tool.shell": {"max_output_bytes": 1000}}})
    result = assert_ok(nx.invoke("shell", {"command": "echo START; head -c 200000 /dev/zero | tr '\\0' x; echo; echo END"}))
    out = result.output_structured
    assert out["stdout_truncated"] is True and out["stderr_truncated"] is False
    assert out["stdout"].startswith("START\n") and out["stdout"].endswith("END\n")
    assert "bytes of stdout omitted" in out["stdout"] and "max_output_bytes=1000" in out["stdout"]
    assert len(out["stdout"]) < 1200
    assert "bytes of stdout omitted" in result.output


def test_output_under_the_cap_is_whole(nexus_factory: NexusFactory) -> None:
    nx = nexus_factory(plugins=["nexus.tool.shell"],
                       config={"plugins": {"nexus.tool.shell": {"max_output_bytes": 1000}}})
    result = assert_ok(nx.invoke("shell", {"command": "head -c 1000 /dev/zero | tr '\\0' y"}))
    assert result.output_structured["stdout"] == "y" * 1000
    assert result.output_structured["stdout_truncated"] is False


# -- workdir --------------------------------------------------------------------------------


def test_runs_in_the_workspace_and_in_a_workdir_inside_it(shell: Nexus, nexus_workspace: Path) -> None:
    (nexus_workspace / "sub").mkdir()
    assert_ok(shell.invoke("shell", {"command": "pwd"}), str(nexus_workspace.resolve()))
    assert_ok(shell.invoke("shell", {"command": "pwd", "workdir": "sub"}), str((nexus_workspace / "sub").resolve()))


@pytest.mark.parametrize("workdir", ["..", "/", "sub/../..", "escape"])
def test_workdir_outside_the_workspace_is_refused(shell: Nexus, nexus_workspace: Path, workdir: str) -> None:
    (nexus_workspace / "sub").mkdir()
    (nexus_workspace / "escape").symlink_to(nexus_workspace.parent)
    result = shell.invoke("shell", {"command": "touch was-here", "workdir": workdir})
    assert_error(result, f"workdir {workdir!r} is outside the workspace", kind="failure")
    assert not (nexus_workspace.parent / "was-here").exists()


@pytest.mark.parametrize("workdir", [".nexus/sessions", ".nexus/sessions/plugins", "to_sessions",
                                     "sub/../.nexus/sessions"])
def test_a_session_folder_put_inside_the_workspace_is_refused_as_workdir(
        nexus_factory: NexusFactory, nexus_workspace: Path, workdir: str) -> None:
    """Run records must not be where a command starts (a command can still `cd` there: the shell
    is not a sandbox, docs/tool-shell.md says so; the file tools refuse the folder outright)."""
    sessions = nexus_workspace / ".nexus" / "sessions"
    (sessions / "plugins").mkdir(parents=True)
    (nexus_workspace / "sub").mkdir()
    (nexus_workspace / "to_sessions").symlink_to(sessions)
    nx = nexus_factory(plugins=["nexus.tool.shell"], config={"session_dir": str(sessions)})
    result = nx.invoke("shell", {"command": "touch was-here", "workdir": workdir})
    assert_error(result, f"workdir {workdir!r} is inside the session folder ({sessions}), where run records are "
                         "kept; the shell does not start commands there", kind="failure")
    assert list(sessions.rglob("was-here")) == []
    assert_ok(nx.invoke("shell", {"command": "pwd", "workdir": "sub"}))  # the rest of the workspace is fine


def test_nexus_doctor_warns_of_a_session_folder_inside_the_workspace(
        nexus_factory: NexusFactory, nexus_workspace: Path, tmp_path: Path) -> None:
    import nexus_tool_shell

    inside = nexus_factory(plugins=["nexus.tool.shell"], config={"session_dir": str(nexus_workspace / "s")})
    assert nexus_tool_shell.nexus_doctor(inside)[-1].startswith(
        f"warning: the session folder ({nexus_workspace / 's'}) is inside the workspace")
    outside = nexus_factory(plugins=["nexus.tool.shell"], config={"session_dir": str(tmp_path / "elsewhere")})
    assert [line for line in nexus_tool_shell.nexus_doctor(outside) if line.startswith("warning")] == []


def test_a_session_folder_that_is_the_workspace_refuses_every_command(
        nexus_factory: NexusFactory, nexus_workspace: Path) -> None:
    nx = nexus_factory(plugins=["nexus.tool.shell"], config={"session_dir": str(nexus_workspace)})
    assert_error(nx.invoke("shell", {"command": "true"}), "is inside the session folder", kind="failure")


def test_workdir_must_be_a_folder(shell: Nexus, nexus_workspace: Path) -> None:
    (nexus_workspace / "file.txt").write_text("x")
    assert_error(shell.invoke("shell", {"command": "true", "workdir": "file.txt"}), "is not a folder")
    assert_error(shell.invoke("shell", {"command": "true", "workdir": "missing"}), "is not a folder")


# -- environment ----------------------------------------------------------------------------


def test_host_secrets_stay_out_of_the_environment(shell: Nexus, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NEXUS_TEST_API_KEY", "s3cret")
    monkeypatch.setenv("LC_NEXUS_TEST", "kept")  # LC_* is allowed by default
    env = assert_ok(shell.invoke("shell", {"command": "env"})).output_structured["stdout"]
    assert "s3cret" not in env
    assert "LC_NEXUS_TEST=kept" in env
    assert f"PATH={os.environ['PATH']}" in env.splitlines()


def test_environment_allowlist_and_fixed_values_are_configurable(
    nexus_factory: NexusFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NEXUS_TEST_TOKEN", "passed")
    monkeypatch.setenv("HOME", "/home/nobody")
    config = {"env_allowlist": ["PATH", "NEXUS_TEST_*"], "env": {"PAGER": "cat"}}
    nx = nexus_factory(plugins=["nexus.tool.shell"], config={"plugins": {"nexus.tool.shell": config}})
    result = assert_ok(nx.invoke("shell", {"command": "echo $NEXUS_TEST_TOKEN $PAGER ${HOME:-unset}"}))
    assert result.output == "passed cat unset"


# -- schema and install ---------------------------------------------------------------------


def test_schemas_are_strict(shell: Nexus) -> None:
    tool = shell.tool("shell")
    assert tool is not None and tool.plugin == "nexus.tool.shell"
    assert tool.input_schema["required"] == ["command"]
    assert_error(shell.invoke("shell", {"command": "true", "cwd": "."}), "cwd: unknown key", kind="invalid_arguments")
    assert_error(shell.invoke("shell", {}), "command", kind="invalid_arguments")
    assert tool.output_schema is not None
    assert set(tool.output_schema["required"]) >= {"stdout", "stderr", "exit_code", "timed_out"}


def test_mcp_hints_mark_the_shell_as_destructive(shell: Nexus) -> None:
    for entry in shell.schemas("mcp"):
        assert entry["annotations"] == {"readOnlyHint": False, "destructiveHint": True, "openWorldHint": True}


def test_unknown_config_key_is_a_config_error(nexus_factory: NexusFactory) -> None:
    from nexus_core import ConfigError

    with pytest.raises(ConfigError, match="plugins.nexus.tool.shell.read_only"):
        nexus_factory(plugins=["nexus.tool.shell"], config={"plugins": {"nexus.tool.shell": {"read_only": True}}})


@pytest.mark.slow
def test_installs_alone_beside_nexus_core(fresh_venv: Any, tmp_path: Path) -> None:
    venv = fresh_venv("nexus-rt-core", "nexus-rt-tool-shell")
    tools = venv.run("nexus", "tools", cwd=tmp_path)
    assert tools.returncode == 0, tools.stderr
    listed = {line.split()[0]: line.split()[1] for line in tools.stdout.splitlines()}
    assert {name for name, plugin in listed.items() if plugin == "nexus.tool.shell"} == {"shell"}  # `bash` is its alias
    call = venv.run("nexus", "--workspace", str(tmp_path), "call", "shell", '{"command": "echo hi"}', cwd=tmp_path)
    assert (call.returncode, call.stdout) == (0, "hi\n"), call.stderr


def test_a_missing_workspace_is_explained(nexus_factory: NexusFactory, tmp_path: Path) -> None:
    nx = nexus_factory(plugins=["nexus.tool.shell"], config={"workspace": str(tmp_path / "not-made-yet")})
    assert_error(nx.invoke("shell", {"command": "true"}), "not-made-yet is not a folder", kind="failure")


def test_a_nul_byte_in_the_command_is_a_failure_not_a_crash(shell: Nexus) -> None:
    assert_error(shell.invoke("shell", {"command": "echo a\u0000b"}), "embedded null byte", kind="failure")
