"""The client plugin with MCP servers nobody here wrote, installed from PyPI: mcp-server-time
(output schemas, nested models under $defs) and mcp-server-git (text results). Used through
`Nexus.invoke`, the `nexus` command line, and a run_code script."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from mcp_helpers import alive, child_pids, git_server, log_folder, run_nexus, time_server, wait_for

from nexus_core import Nexus, Veto, hookimpl

TIMEZONES = ["UTC", "Europe/Paris", "Asia/Tokyo", "America/New_York", "Australia/Sydney", "Africa/Cairo",
             "America/Sao_Paulo", "Asia/Kolkata"]


def test_time_tools_register_with_their_schemas_and_annotations(make_nexus: Callable[..., Nexus]) -> None:
    nx = make_nexus({"time": time_server()})
    current = nx.tool("time_get_current_time")
    convert = nx.tool("time_convert_time")
    assert current is not None and convert is not None and current.plugin == "nexus.mcp.client"
    assert current.input_schema["required"] == ["timezone"]
    # the MCP hints, and the server the tool came from (run_code lists tools by it: issue 14.7)
    assert current.annotations == {"readOnlyHint": True, "destructiveHint": False, "idempotentHint": True,
                                   "openWorldHint": False, "mcp_server": "time"}
    assert current.output_schema is not None and current.output_schema["required"] == [
        "timezone", "datetime", "day_of_week", "is_dst"]
    # the server's convert_time result refers to `#/$defs/TimeResult` twice: inlined for every consumer
    schema = convert.output_schema
    assert schema is not None and "$defs" not in schema and "$ref" not in json.dumps(schema)
    assert schema["properties"]["target"]["properties"]["day_of_week"] == {"title": "Day Of Week", "type": "string"}
    assert "$ref" not in json.dumps(nx.schemas("gemini"))


def test_a_time_call_through_invoke_has_structured_output(make_nexus: Callable[..., Nexus]) -> None:
    nx = make_nexus({"time": time_server()})
    result = nx.invoke("time_get_current_time", {"timezone": "Asia/Tokyo"})
    assert not result.is_error, result.error
    assert result.output_structured["timezone"] == "Asia/Tokyo"
    assert result.output_structured["datetime"].endswith("+09:00")
    assert json.loads(result.output) == result.output_structured  # the server's text is the same JSON
    assert result.metadata["mcp_server"] == "time"

    converted = nx.invoke("time_convert_time", {"source_timezone": "UTC", "time": "12:00",
                                                 "target_timezone": "Asia/Tokyo"})
    assert converted.output_structured["target"]["datetime"].endswith("T21:00:00+09:00")
    assert converted.output_structured["time_difference"] == "+9.0h"


def test_the_servers_own_errors_are_error_results(make_nexus: Callable[..., Nexus]) -> None:
    nx = make_nexus({"time": time_server()})
    bad_zone = nx.invoke("time_get_current_time", {"timezone": "Mars/Olympus_Mons"})
    assert bad_zone.is_error and bad_zone.error_kind == "failure"
    assert "Invalid timezone" in bad_zone.error
    # arguments the schema refuses never reach the server
    missing = nx.invoke("time_get_current_time", {})
    assert missing.error_kind == "invalid_arguments" and "timezone" in missing.error


def test_gates_see_mcp_calls_like_any_other(make_nexus: Callable[..., Nexus]) -> None:
    class NoTokyo:
        def __init__(self) -> None:
            self.seen: list[str] = []

        @hookimpl
        def nexus_before_tool_invoke(self, call, tool):  # type: ignore[no-untyped-def]
            self.seen.append(f"{call.name}:{tool.plugin}")
            if "Tokyo" in json.dumps(call.arguments):
                return Veto("no Tokyo today")
            return None

    gate = NoTokyo()
    nx = make_nexus({"time": time_server()})
    nx.register(gate)
    assert nx.invoke("time_get_current_time", {"timezone": "Asia/Tokyo"}).error == "vetoed: no Tokyo today"
    assert not nx.invoke("time_get_current_time", {"timezone": "UTC"}).is_error
    assert gate.seen == ["time_get_current_time:nexus.mcp.client"] * 2


def test_git_server_text_results(make_nexus: Callable[..., Nexus], tmp_path: Path) -> None:
    if shutil.which("git") is None:
        pytest.fail("git is not installed: mcp-server-git needs it (apt-get install git)")
    repo = tmp_path / "repo"
    repo.mkdir()
    env = {**os.environ, "GIT_AUTHOR_NAME": "T", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "T", "GIT_COMMITTER_EMAIL": "t@example.com"}
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True, env=env)
    (repo / "notes.txt").write_text("first line\n")
    subprocess.run(["git", "-C", str(repo), "add", "notes.txt"], check=True, env=env)
    subprocess.run(["git", "-C", str(repo), "commit", "-q", "-m", "the first commit"], check=True, env=env)
    (repo / "notes.txt").write_text("first line\nsecond line\n")

    nx = make_nexus({"git": git_server(repo)})
    status = nx.tool("git_git_status")
    assert status is not None and status.output_schema is None  # a text-only server
    result = nx.invoke("git_git_status", {"repo_path": str(repo)})
    assert not result.is_error, result.error
    assert "modified:   notes.txt" in result.output and result.output_structured is None
    log = nx.invoke("git_git_log", {"repo_path": str(repo)})
    assert "the first commit" in log.output
    diff = nx.invoke("git_git_diff_unstaged", {"repo_path": str(repo)})
    assert "+second line" in diff.output


def test_run_code_fans_out_over_mcp_tools_with_typed_results(make_nexus: Callable[..., Nexus]) -> None:
    nx = make_nexus({"time": time_server()}, active=["nexus.mcp.client", "nexus.tool.code_exec"])
    description = nx.tool("run_code").description
    assert "def time_get_current_time(" in description and "def time_convert_time(" in description
    script = f"""
import tools, parallel

def run(ctx):
    zones = {TIMEZONES!r}
    results = parallel.map(zones, lambda zone: tools.time_get_current_time(timezone=zone))
    typed = all(isinstance(r, tools.TimeGetCurrentTimeResult) for r in results)
    converted = tools.time_convert_time(source_timezone="UTC", time="12:00", target_timezone="Asia/Tokyo")
    return {{
        "zones": [r.timezone for r in results],
        "typed": typed,
        "days": sorted({{r.day_of_week for r in results}}),
        "nested": isinstance(converted.target, tools.TimeConvertTimeResultTarget),
        "target": converted.target.datetime,
        "dst": [r.is_dst for r in results][:1],
    }}
"""
    result = nx.invoke("run_code", {"script": script})
    assert not result.is_error, result.error
    value = result.output_structured["result"]
    assert value["zones"] == TIMEZONES and value["typed"] is True
    assert value["nested"] is True and value["target"].endswith("T21:00:00+09:00")
    assert isinstance(value["dst"][0], bool)


def test_the_cli_calls_an_mcp_tool(tmp_path: Path) -> None:
    config = tmp_path / "nexus.yaml"
    config.write_text(yaml.safe_dump({
        "workspace": ".", "session_dir": str(tmp_path / "session"),
        "plugins": {"active": ["nexus.mcp.client"], "nexus.mcp.client": {"servers": {"time": time_server()}}},
    }))
    listed = run_nexus("--config", str(config), "tools", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert "time_get_current_time" in listed.stdout and "nexus.mcp.client" in listed.stdout
    called = run_nexus("--config", str(config), "call", "time_get_current_time", '{"timezone": "Europe/Paris"}',
                       cwd=tmp_path)
    assert called.returncode == 0, called.stderr
    assert json.loads(called.stdout)["timezone"] == "Europe/Paris"
    failed = run_nexus("--config", str(config), "call", "time_get_current_time", '{"timezone": "Nowhere/X"}',
                       cwd=tmp_path)
    assert failed.returncode == 1 and "Invalid timezone" in failed.stderr
    assert "fixture" not in failed.stdout
    doctor = run_nexus("--config", str(config), "doctor", cwd=tmp_path)
    assert "server time: stdio" in doctor.stdout and "2 tools" in doctor.stdout, doctor.stdout


def test_a_killed_server_comes_back_on_the_next_call(make_nexus: Callable[..., Nexus]) -> None:
    nx = make_nexus({"time": time_server()})
    assert not nx.invoke("time_get_current_time", {"timezone": "UTC"}).is_error
    [pid] = wait_for(lambda: child_pids("mcp-server-time"), what="the time server's process")
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not alive(pid), what="the killed server to be gone")
    results = [nx.invoke("time_get_current_time", {"timezone": "UTC"}) for _ in range(2)]
    # the kill is noticed before the next call (its pipe closed) or by it, with an error naming the
    # server; either way the call after that reaches a new process
    first, second = results
    assert not first.is_error or ("'time'" in first.error and "starts again" in first.error), first.error
    assert not second.is_error, second.error
    [new_pid] = child_pids("mcp-server-time")
    assert new_pid != pid


def test_closing_the_nexus_stops_every_server(make_nexus: Callable[..., Nexus]) -> None:
    nx = make_nexus({"time": time_server(), "time2": {**time_server(), "start": "eager"}})
    nx.invoke("time_get_current_time", {"timezone": "UTC"})
    pids = wait_for(lambda: len(child_pids("mcp-server-time")) == 2 and child_pids("mcp-server-time"),
                    what="both time servers")
    nx.close()
    assert [pid for pid in pids if alive(pid)] == []  # no orphans: gone when close returns
    assert nx.invoke("time_get_current_time", {"timezone": "UTC"}).error_kind == "cancelled"


def test_lazy_servers_start_on_their_first_call(make_nexus: Callable[..., Nexus]) -> None:
    first = make_nexus({"time": time_server()})
    # no tool list cached yet: the server started with the Nexus, to list its tools
    assert [s.running for s in first.plugin("nexus.mcp.client").status()] == [True]
    assert (log_folder(first) / "time.tools.json").is_file()
    first.close()
    assert child_pids("mcp-server-time") == []

    second = make_nexus({"time": time_server()})
    [status] = second.plugin("nexus.mcp.client").status()
    assert status.tools == ("time_convert_time", "time_get_current_time") and status.tools_from_cache
    assert not status.running and status.starts == 0 and child_pids("mcp-server-time") == []
    assert not second.invoke("time_get_current_time", {"timezone": "UTC"}).is_error
    [status] = second.plugin("nexus.mcp.client").status()
    assert status.running and status.starts == 1 and not status.tools_from_cache
    assert len(child_pids("mcp-server-time")) == 1


def test_an_eager_server_starts_with_the_nexus_even_with_a_cache(make_nexus: Callable[..., Nexus]) -> None:
    make_nexus({"time": time_server()}).close()
    nx = make_nexus({"time": {**time_server(), "start": "eager"}})
    [status] = nx.plugin("nexus.mcp.client").status()
    assert status.running and status.starts == 1 and not status.tools_from_cache


def test_a_changed_command_line_does_not_use_the_old_cache(make_nexus: Callable[..., Nexus]) -> None:
    make_nexus({"time": time_server()}).close()
    changed = {"command": time_server()["command"], "args": ["--local-timezone", "Asia/Tokyo"]}
    nx = make_nexus({"time": changed})
    [status] = nx.plugin("nexus.mcp.client").status()
    assert status.running and not status.tools_from_cache  # started to list its tools afresh
    assert "Use 'Asia/Tokyo' as local timezone" in nx.tool("time_get_current_time").description + json.dumps(
        nx.tool("time_get_current_time").input_schema)
