"""The client plugin when servers misbehave: they crash, hang, fail to start or never answer; the
others keep working, and the broken one comes back on the next call. Also: results that are not
plain text, recursive schemas, many threads at once, tool lists that change, and the config."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from mcp_helpers import (
    alive,
    child_pids,
    dynamic_server,
    fixture_server,
    legacy_server,
    log_folder,
    mcp_config,
    time_server,
    wait_for,
)
from nexus_core.adapters import format_tool_result
from nexus_core.content import ImageContent, TextContent

from nexus_core import ConfigError, Nexus, ToolDef, hookimpl

FIXTURE = "fixture_server.py"


def fixture_pid(nx: Nexus, server: str = "fx") -> int:
    result = nx.invoke(f"{server}_pid", {})
    assert not result.is_error, result.error
    return int(result.output)


def test_a_server_that_crashes_mid_call_comes_back_on_the_next_call(make_nexus: Callable[..., Nexus]) -> None:
    nx = make_nexus({"fx": fixture_server(), "time": time_server()})
    before = fixture_pid(nx)
    crashed = nx.invoke("fx_crash", {})
    assert crashed.is_error and crashed.error_kind == "failure"
    assert "MCP server 'fx' went away during 'crash'" in crashed.error
    assert "starts again on the next call" in crashed.error
    assert str(log_folder(nx) / "fx.log") in crashed.error
    wait_for(lambda: not alive(before), what="the crashed server to be gone")
    # the other server never noticed
    assert not nx.invoke("time_get_current_time", {"timezone": "UTC"}).is_error
    after = fixture_pid(nx)
    assert after != before
    assert nx.invoke("fx_echo", {"text": "back"}).output == "back"
    assert "fixture server: crashing on purpose" in (log_folder(nx) / "fx.log").read_text()


def test_a_call_past_the_timeout_stops_the_server_and_the_next_call_restarts_it(
        make_nexus: Callable[..., Nexus]) -> None:
    nx = make_nexus({"fx": fixture_server(timeout_seconds=1), "time": time_server()})
    hung = fixture_pid(nx)
    result = nx.invoke("fx_sleep", {"seconds": 600})
    assert result.is_error and result.error == (
        "MCP server 'fx' did not answer 'sleep' within 1 s (timeout_seconds): it was stopped, and starts "
        "again on the next call")
    wait_for(lambda: not alive(hung), what="the hung server to be stopped")
    assert not nx.invoke("time_get_current_time", {"timezone": "UTC"}).is_error
    assert fixture_pid(nx) != hung
    assert nx.invoke("fx_sleep", {"seconds": 0.01}).output == "slept 0.01"


def test_a_server_that_fails_to_start_is_an_error_naming_it_and_is_tried_again(
        make_nexus: Callable[..., Nexus], tmp_path: Path) -> None:
    refuse = tmp_path / "refuse-to-start"
    settings = fixture_server("--fail-if", str(refuse))
    make_nexus({"fx": settings}).close()  # a first start lists and caches its tools
    refuse.touch()
    nx = make_nexus({"fx": settings, "time": time_server()})
    assert nx.tool("fx_echo") is not None  # listed from the cache: not started yet
    failed = nx.invoke("fx_echo", {"text": "hi"})
    assert failed.is_error and failed.error.startswith("MCP server 'fx' (")
    assert "failed to start" in failed.error and "fx.log" in failed.error
    assert "fixture server: refusing to start" in (log_folder(nx) / "fx.log").read_text()
    assert not nx.invoke("time_get_current_time", {"timezone": "UTC"}).is_error
    refuse.unlink()
    assert nx.invoke("fx_echo", {"text": "hi"}).output == "hi"


def test_a_start_that_hangs_times_out_and_leaves_no_process(make_nexus: Callable[..., Nexus], tmp_path: Path) -> None:
    hang = tmp_path / "hang"
    make_nexus({"fx": fixture_server("--hang-if", str(hang))}).close()  # lists and caches its tools
    hang.touch()
    nx = make_nexus({"fx": fixture_server("--hang-if", str(hang), start_timeout_seconds=1), "time": time_server()})
    result = nx.invoke("fx_echo", {"text": "hi"})
    assert result.is_error and "MCP server 'fx'" in result.error
    assert "did not start within 1 s (start_timeout_seconds)" in result.error
    wait_for(lambda: child_pids(FIXTURE) == [], what="the hung start's process to be stopped")
    assert not nx.invoke("time_get_current_time", {"timezone": "UTC"}).is_error


def test_a_server_missing_at_nexus_start_is_reported_and_the_others_work(
        make_nexus: Callable[..., Nexus], caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="nexus_mcp"):
        nx = make_nexus({"gone": {"command": "/nonexistent/mcp-server"}, "time": time_server()})
    assert any("MCP server 'gone' (/nonexistent/mcp-server) failed to start" in m and "no tools" in m
               for m in caplog.messages), caplog.messages
    assert [t.name for t in nx.tools() if t.name.startswith("gone")] == []
    assert not nx.invoke("time_get_current_time", {"timezone": "UTC"}).is_error
    assert nx.failures == []  # the plugin itself is fine
    lines = nx.plugin("nexus.mcp.client").client.doctor_lines()
    assert any(line.startswith("error: MCP server 'gone'") for line in lines), lines


def test_stderr_goes_to_the_log_file_not_the_console(make_nexus: Callable[..., Nexus],
                                                      capfd: pytest.CaptureFixture[str]) -> None:
    nx = make_nexus({"fx": fixture_server()})
    pid = fixture_pid(nx)
    nx.close()
    out, err = capfd.readouterr()
    assert "fixture server starting" not in out + err
    assert f"fixture server starting, pid {pid}" in (log_folder(nx) / "fx.log").read_text()


def test_calls_from_many_threads_at_once(make_nexus: Callable[..., Nexus]) -> None:
    nx = make_nexus({"fx": fixture_server(), "time": time_server()})
    texts = [f"call {i}" for i in range(64)]

    def call(text: str) -> str:
        if text.endswith("7"):
            return str(nx.invoke("time_get_current_time", {"timezone": "UTC"}).output_structured["timezone"])
        result = nx.invoke("fx_echo", {"text": text})
        assert not result.is_error, result.error
        return result.output

    with ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(call, texts))
    assert answers == [("UTC" if t.endswith("7") else t) for t in texts]
    assert len(child_pids(FIXTURE)) == 1  # one server, one session, many calls


def test_the_first_calls_from_many_threads_start_the_server_once(make_nexus: Callable[..., Nexus]) -> None:
    make_nexus({"fx": fixture_server()}).close()
    nx = make_nexus({"fx": fixture_server()})  # lazy, from the cache: nothing running yet
    barrier = threading.Barrier(8)

    def call(i: int) -> str:
        barrier.wait()
        return nx.invoke("fx_echo", {"text": str(i)}).output

    with ThreadPoolExecutor(8) as pool:
        assert list(pool.map(call, range(8))) == [str(i) for i in range(8)]
    [status] = nx.plugin("nexus.mcp.client").status()
    assert status.starts == 1 and len(child_pids(FIXTURE)) == 1


def test_tool_errors_images_and_nested_results(make_nexus: Callable[..., Nexus]) -> None:
    nx = make_nexus({"fx": fixture_server()})
    failed = nx.invoke("fx_fail", {"message": "the disk is on fire"})
    assert failed.is_error and failed.error_kind == "failure" and "the disk is on fire" in failed.error

    image = nx.invoke("fx_image", {})
    assert not image.is_error
    assert image.output == "a red dot\n[image: image/png, 70 bytes]"  # the PNG is 70 bytes
    text, picture = image.content
    assert text == TextContent("a red dot")
    assert isinstance(picture, ImageContent) and picture.mime_type == "image/png"
    assert picture.data.startswith("iVBORw0KGgo")
    # and on to a provider as its own image content
    anthropic = format_tool_result(image, "anthropic")
    assert [b["type"] for b in anthropic["content"]] == ["text", "image"]

    segment = nx.tool("fx_segment")
    assert segment is not None and "$ref" not in json.dumps(segment.output_schema)
    assert segment.output_schema["properties"]["start"]["required"] == ["x", "y"]
    result = nx.invoke("fx_segment", {"x1": 0, "y1": 0, "x2": 3, "y2": 4})
    assert result.output_structured == {"start": {"x": 0, "y": 0}, "end": {"x": 3, "y": 4}, "length": 5.0}


def test_run_code_with_recursive_and_nested_output_schemas(make_nexus: Callable[..., Nexus]) -> None:
    nx = make_nexus({"fx": fixture_server()}, active=["nexus.mcp.client", "nexus.tool.code_exec"])
    tree = nx.tool("fx_tree")
    assert tree is not None and tree.output_schema is not None
    # a recursive definition cannot be inlined: it stays, with the definition it needs
    assert tree.output_schema["properties"]["children"]["items"] == {"$ref": "#/$defs/Tree"}
    assert set(tree.output_schema["$defs"]) == {"Tree"}
    script = """
import tools, parallel

def run(ctx):
    trees = parallel.map([1, 2, 3], lambda depth: tools.fx_tree(depth=depth))
    deepest = trees[-1]
    child = deepest.children[0]           # a recursive part comes back as plain JSON
    segments = parallel.map(range(32), lambda i: tools.fx_segment(x1=0, y1=0, x2=i, y2=0))
    return {
        "root": deepest.name,
        "typed_root": isinstance(deepest, tools.FxTreeResult),
        "child": child["name"],
        "grandchild": child["children"][0]["name"],
        "lengths": [s.length for s in segments][:4],
        "typed_point": isinstance(segments[0].end, tools.FxSegmentResultEnd),
        "end_x": segments[31].end.x,
    }
"""
    result = nx.invoke("run_code", {"script": script})
    assert not result.is_error, result.error
    assert result.output_structured["result"] == {
        "root": "n0", "typed_root": True, "child": "n1", "grandchild": "n2",
        "lengths": [0.0, 1.0, 2.0, 3.0], "typed_point": True, "end_x": 31,
    }


class Catalogue:
    """Watches the registry, as run_code and `nexus mcp serve` do."""

    def __init__(self) -> None:
        self.added: list[str] = []
        self.removed: list[str] = []

    @hookimpl
    def nexus_tool_register(self, tool: ToolDef) -> None:
        self.added.append(tool.name)

    @hookimpl
    def nexus_tool_unregister(self, tool: ToolDef) -> None:
        self.removed.append(tool.name)


@pytest.mark.parametrize("era", ["2026 (subscriptions/listen)", "2025 (notifications)"])
def test_a_changed_tool_list_updates_the_registry_and_the_bindings(era: str, make_nexus: Callable[..., Nexus]) -> None:
    server = dynamic_server() if era.startswith("2026") else legacy_server()
    nx = make_nexus({"dyn": server}, active=["nexus.mcp.client", "nexus.tool.code_exec"])
    catalogue = Catalogue()
    nx.register(catalogue)
    [status] = nx.plugin("nexus.mcp.client").status()
    assert status.protocol_version == ("2026-07-28" if era.startswith("2026") else "2025-06-18")
    assert nx.invoke("dyn_grow", {"name": "extra"}).output == "added extra"
    wait_for(lambda: nx.tool("dyn_extra") is not None, timeout=15, what="dyn_extra to be registered")
    assert "dyn_extra" in catalogue.added
    assert nx.invoke("dyn_extra", {}).output == "this is extra"
    assert "def dyn_extra(" in nx.tool("run_code").description
    script = "import tools\n\ndef run(ctx):\n    return tools.dyn_extra().output\n"
    assert nx.invoke("run_code", {"script": script}).output_structured["result"] == "this is extra"

    assert nx.invoke("dyn_shrink", {"name": "hello"}).output == "removed hello"
    wait_for(lambda: nx.tool("dyn_hello") is None, timeout=15, what="dyn_hello to be removed")
    assert catalogue.removed == ["dyn_hello"]
    gone = nx.invoke("run_code", {"script": "import tools\n\ndef run(ctx):\n    return tools.dyn_hello().output\n"})
    assert gone.is_error and "dyn_hello" in gone.error
    # the cache follows the server: the next Nexus lists what the server lists now
    cached = json.loads((log_folder(nx) / "dyn.tools.json").read_text())
    assert sorted(t["name"] for t in cached["tools"]) == ["extra", "grow", "shrink"]


def test_colliding_names_are_an_error_naming_both(make_nexus: Callable[..., Nexus],
                                                  caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="nexus_mcp"):
        nx = make_nexus({
            "a": dynamic_server("--tool", "b_c", "--tool", "b.c", "--tool", "x" * 80, "--tool", "x" * 81),
            "a_b": dynamic_server("--tool", "c", "--tool", "d"),
        })
    # every tool that would be `a_b_c`, and both long names cut to the same 64 characters, are
    # left out: none takes a name another would have
    assert sorted(t.name for t in nx.tools()) == ["a_b_d"]
    problems = [m for m in caplog.messages if "tool name collision" in m]
    assert len(problems) == 2, problems
    assert ("MCP server 'a' tool 'b_c' and MCP server 'a' tool 'b.c' and MCP server 'a_b' tool 'c' would all be "
            "the Nexus tool 'a_b_c': none is offered") in problems[0]
    assert "plugins.nexus.mcp.client.servers.a.prefix or plugins.nexus.mcp.client.servers.a_b.prefix" in problems[0]
    assert f"tool '{'x' * 80}' and MCP server 'a' tool '{'x' * 81}' would both be" in problems[1]
    assert "the server's own names clash" in problems[1]
    lines = nx.plugin("nexus.mcp.client").client.doctor_lines()
    assert sum("tool name collision" in line and line.startswith("error:") for line in lines) == 2


def test_a_name_another_plugin_has_is_refused_naming_both(make_nexus: Callable[..., Nexus]) -> None:
    # a server called "run" with a tool "code" makes `run_code`: plugins start in the order of
    # their ids, so the MCP tool came first and run_code's plugin is the one refused
    nx = make_nexus({"run": dynamic_server("--tool", "code", "--tool", "other")},
                    active=["nexus.mcp.client", "nexus.tool.code_exec"])
    [failure] = nx.failures
    assert failure.name == "nexus.tool.code_exec" and failure.error == (
        "ToolRegistrationError: duplicate tool name 'run_code': registered by plugin 'nexus.mcp.client' and "
        "again by plugin 'nexus.tool.code_exec'")
    assert nx.invoke("run_other", {}).output == "this is other"


def test_env_args_and_cwd_reach_the_server_with_variables_expanded(
        make_nexus: Callable[..., Nexus], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("NEXUS_TEST_SECRET", "s3cret")
    monkeypatch.setenv("NEXUS_TEST_HIDDEN", "not passed")
    (tmp_path / "workspace" / "sub").mkdir(parents=True)
    nx = make_nexus({"fx": fixture_server(env={"TOKEN": "Bearer ${NEXUS_TEST_SECRET}", "PRICE": "$$5"},
                                          cwd="sub")})
    assert nx.invoke("fx_env", {"name": "TOKEN"}).output == "Bearer s3cret"
    assert nx.invoke("fx_env", {"name": "PRICE"}).output == "$5"
    assert nx.invoke("fx_env", {"name": "NEXUS_TEST_HIDDEN"}).output == "<unset>"  # not inherited
    assert nx.invoke("fx_cwd", {}).output == str(tmp_path / "workspace" / "sub")


@pytest.mark.parametrize(("server", "message"), [
    ({"command": "x", "env": {"TOKEN": "${NEXUS_TEST_UNSET_VAR}"}},
     ("plugins.nexus.mcp.client.servers.bad.env.TOKEN: environment variable NEXUS_TEST_UNSET_VAR is not set "
      "(it is used as ${NEXUS_TEST_UNSET_VAR})")),
    ({"url": "http://127.0.0.1:1/mcp", "headers": {"Authorization": "Bearer ${NEXUS_TEST_UNSET_VAR}"}},
     "plugins.nexus.mcp.client.servers.bad.headers.Authorization: environment variable NEXUS_TEST_UNSET_VAR"),
    ({"command": "x", "args": ["--key", "${1BAD}"]},
     "plugins.nexus.mcp.client.servers.bad.args[1]: ${1BAD} is not a variable name"),
    ({"command": "x", "url": "http://x/mcp"},
     ("plugins.nexus.mcp.client.servers.bad: give either `command` (a stdio server) or `url` (a streamable HTTP "
      "server), not both")),
    ({"args": []}, "plugins.nexus.mcp.client.servers.bad: give either `command`"),
    ({"url": "http://x/mcp", "env": {}},
     "plugins.nexus.mcp.client.servers.bad.env: not a setting of a streamable HTTP server"),
])
def test_bad_server_settings_are_config_errors_naming_the_key(
        server: dict[str, Any], message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NEXUS_TEST_UNSET_VAR", raising=False)
    with pytest.raises(ConfigError) as info:  # the user's config is wrong: the Nexus does not start
        Nexus(mcp_config(tmp_path, {"bad": server}))
    assert any(message in problem for problem in info.value.problems), info.value.problems


@pytest.mark.parametrize(("servers", "message"), [
    ({"bad name": {"command": "x"}}, "plugins.nexus.mcp.client.servers"),
    ({"ok": {"command": "x", "timeout": 3}}, "plugins.nexus.mcp.client.servers.ok.timeout"),
    ({"ok": {"command": "x", "start": "sometimes"}}, "plugins.nexus.mcp.client.servers.ok.start"),
    ({"ok": {"url": "ftp://x"}}, "plugins.nexus.mcp.client.servers.ok.url"),
    ({"ok": {"command": "x", "prefix": "has space"}}, "plugins.nexus.mcp.client.servers.ok.prefix"),
])
def test_invalid_settings_are_refused_by_the_schema(servers: dict[str, Any], message: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as raised:
        Nexus(mcp_config(tmp_path, servers))
    assert message in str(raised.value)


def test_a_config_error_in_a_file_names_the_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NEXUS_TEST_UNSET_VAR", raising=False)
    config = tmp_path / "nexus.yaml"
    config.write_text(
        "workspace: .\n"
        f"session_dir: {tmp_path / 'session'}\n"
        "plugins:\n"
        "  active: [nexus.mcp.client]\n"
        "  nexus.mcp.client:\n"
        "    servers:\n"
        "      docs:\n"
        "        url: http://127.0.0.1:1/mcp\n"
        "        headers: {Authorization: 'Bearer ${NEXUS_TEST_UNSET_VAR}'}\n"
    )
    with pytest.raises(ConfigError) as info:
        Nexus.from_config(str(config))
    [problem] = info.value.problems
    assert problem.startswith(f"{config}:9: plugins.nexus.mcp.client.servers.docs.headers.Authorization: "
                              "environment variable NEXUS_TEST_UNSET_VAR is not set")
