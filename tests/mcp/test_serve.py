"""`nexus mcp serve`: a Nexus distribution as an MCP server, run as users run it (the `nexus`
command, with a config file and installed plugins) and used by the MCP SDK's own client over
stdio and streamable HTTP, by raw JSON-RPC lines, and by the MCP Inspector's command line."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
import yaml
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp_helpers import BIN, FakePlugins, HttpServe, alive, child_pids, run_nexus, time_server

from nexus_core import Nexus

PRINTER = '''
import os
import subprocess
import sys

from nexus_core import Veto, hookimpl, native_tool, tool

print("printer: imported")  # a stray print at import, before the server starts


@tool
def shout(text: str) -> dict:
    """Shout the text back."""
    print("printer: shouting", text)  # and while a call runs
    sys.stdout.flush()
    os.write(1, b"printer: a raw write to fd 1\\n")
    subprocess.run(["echo", "printer: a child writing to its stdout"], check=True)
    return {"loud": text.upper()}


def grow(arguments, ctx):
    name = arguments["name"]
    ctx.nexus.add_tool(native_tool(name, f"The tool {name}.", {"type": "object"}, run=lambda a: f"this is {name}"))
    return f"added {name}"


def shrink(arguments, ctx):
    ctx.nexus.remove_tool(arguments["name"])
    return f"removed {arguments['name']}"


NAME = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}


@hookimpl
def nexus_configure(config):
    print("printer: configured")


@hookimpl
def nexus_register_tools(register):
    register(shout)
    register(native_tool("grow", "Add a tool.", NAME, run=grow, ctx=True))
    register(native_tool("shrink", "Remove a tool.", NAME, run=shrink, ctx=True))


@hookimpl
def nexus_before_tool_invoke(call, tool):
    if call.name == "shout" and "forbidden" in str(call.arguments.get("text", "")):
        return Veto("no forbidden words")
    if call.parent_call_id is None and call.metadata.get("via") != "mcp":  # a run_code script's calls have a parent
        return Veto("this test expects every call to come over MCP")
    return None


@hookimpl
def nexus_shutdown():
    print("printer: goodbye")
'''

SKILL = """---
name: haiku
description: Write a haiku about the task.
---
Count the syllables: five, seven, five.
"""


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Path, dict[str, str]]]:
    """A config file and the environment for a `nexus` whose plugins are the printer above,
    run_code, the skill tool, and the MCP client with the time server."""
    fakes = FakePlugins(tmp_path / "site")
    fakes.add("test.printer", "nexus_test_printer", PRINTER)
    skills = tmp_path / "skills" / "haiku"
    skills.mkdir(parents=True)
    (skills / "SKILL.md").write_text(SKILL)
    config = tmp_path / "nexus.yaml"
    config.write_text(yaml.safe_dump({
        "workspace": str(tmp_path),
        "session_dir": str(tmp_path / "session"),
        "skills": [str(tmp_path / "skills")],
        "plugins": {
            "active": ["test.printer", "nexus.tool.code_exec", "nexus.skills", "nexus.mcp.client"],
            "nexus.mcp.client": {"servers": {"time": time_server()}},
        },
    }))
    yield config, fakes.env()


def stdio_params(config: Path, env: dict[str, str]) -> StdioServerParameters:
    return StdioServerParameters(command=str(BIN / "nexus"), args=["--trust-config", "--config", str(config), "mcp", "serve"],
                                 env={"PYTHONPATH": env["PYTHONPATH"]}, cwd=config.parent)


@asynccontextmanager
async def stdio_session(config: Path, env: dict[str, str], errlog: Path, **client: Any) -> AsyncIterator[Client]:
    with open(errlog, "w") as err:
        async with Client(stdio_client(stdio_params(config, env), errlog=err), cache=None, **client) as session:
            yield session


def run(coro_fn: Any, *args: Any) -> Any:
    return anyio.run(coro_fn, *args)


def test_the_sdk_client_over_stdio(served: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    config, env = served
    errlog = tmp_path / "server-stderr.txt"

    async def session() -> None:
        async with stdio_session(config, env, errlog) as client:
            assert client.protocol_version == "2026-07-28"
            tools = {t.name: t for t in (await client.list_tools()).tools}
            assert {"shout", "grow", "run_code", "skill", "time_get_current_time"} <= set(tools)
            run_code = tools["run_code"]
            assert run_code.input_schema["required"] == ["script"]
            assert run_code.output_schema is not None and run_code.output_schema["type"] == "object"
            assert tools["shout"].output_schema is None  # `-> dict`: no declared shape
            assert tools["time_get_current_time"].annotations is not None
            assert tools["time_get_current_time"].annotations.read_only_hint is True

            shout = await client.call_tool("shout", {"text": "hi"})
            assert not shout.is_error and shout.structured_content == {"loud": "HI"}
            assert [c.text for c in shout.content if isinstance(c, types.TextContent)] == ['{"loud": "HI"}']

            vetoed = await client.call_tool("shout", {"text": "forbidden"})
            assert vetoed.is_error
            assert vetoed.content[0].text == "vetoed: no forbidden words"  # type: ignore[union-attr]

            invalid = await client.call_tool("shout", {"text": 3})
            assert invalid.is_error and "text" in invalid.content[0].text  # type: ignore[union-attr]

            with pytest.raises(MCPError, match="unknown tool: 'nope'"):
                await client.call_tool("nope", {})

            # a tool of an MCP server this Nexus uses, served on again
            now = await client.call_tool("time_get_current_time", {"timezone": "Asia/Tokyo"})
            assert now.structured_content is not None and now.structured_content["timezone"] == "Asia/Tokyo"

            script = ("import tools, parallel\n\ndef run(ctx):\n"
                      "    loud = parallel.map(['a', 'b', 'c'], lambda t: tools.shout(text=t))\n"
                      "    return [r.output for r in loud]\n")
            ran = await client.call_tool("run_code", {"script": script})
            assert not ran.is_error, ran.content
            assert ran.structured_content is not None
            assert [json.loads(x) for x in ran.structured_content["result"]] == [
                {"loud": "A"}, {"loud": "B"}, {"loud": "C"}]

    run(session)
    stderr = errlog.read_text()
    for line in ("printer: imported", "printer: configured", "printer: shouting hi", "printer: a raw write to fd 1",
                 "printer: a child writing to its stdout", "printer: goodbye"):
        assert line in stderr, stderr


def test_nothing_but_protocol_on_stdout(served: tuple[Path, dict[str, str]]) -> None:
    config, env = served
    messages = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize",
         "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "shout", "arguments": {"text": "x"}}},
        {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "shout", "arguments": {"text": "y"}}},
    ]
    process = subprocess.Popen([str(BIN / "nexus"), "--trust-config", "--config", str(config), "mcp", "serve"], env=env,
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stdin is not None and process.stdout is not None
    replies = []
    for message in messages:
        process.stdin.write(json.dumps(message) + "\n")
        process.stdin.flush()
        if "id" in message:
            replies.append(json.loads(process.stdout.readline()))  # every line is JSON-RPC
    process.stdin.close()  # the client leaves: the server ends
    assert process.wait(timeout=60) == 0
    rest, stderr = process.stdout.read(), process.stderr.read()  # type: ignore[union-attr]
    assert rest == ""  # and nothing after the last answer
    assert [r["id"] for r in replies] == [1, 2, 3]
    assert replies[0]["result"]["capabilities"]["tools"] == {"listChanged": True}
    assert replies[1]["result"]["structuredContent"] == {"loud": "X"}
    assert stderr.count("printer: shouting") == 2 and "printer: goodbye" in stderr


def test_sigterm_stops_the_server_and_the_mcp_servers_it_started(served: tuple[Path, dict[str, str]]) -> None:
    config, env = served
    process = subprocess.Popen([str(BIN / "nexus"), "--trust-config", "--config", str(config), "mcp", "serve"], env=env,
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stdin is not None and process.stdout is not None
    for message in (
        {"jsonrpc": "2.0", "id": 1, "method": "initialize",
         "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
         "params": {"name": "time_get_current_time", "arguments": {"timezone": "UTC"}}},
    ):
        process.stdin.write(json.dumps(message) + "\n")
        process.stdin.flush()
    replies = [json.loads(process.stdout.readline()) for _ in range(2)]
    assert replies[1]["result"]["structuredContent"]["timezone"] == "UTC"
    [time_server_pid] = child_pids("mcp-server-time", parent=process.pid)
    process.terminate()
    assert process.wait(timeout=60) == 0
    assert not alive(time_server_pid)  # stopped with the Nexus, not left behind
    assert "printer: goodbye" in process.stderr.read()  # type: ignore[union-attr]


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_tools_list_changed_reaches_the_client(mode: str, served: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    config, env = served

    async def session() -> None:
        notified = anyio.Event()

        async def handler(message: Any) -> None:
            if isinstance(message, types.ToolListChangedNotification):
                notified.set()

        async with stdio_session(config, env, tmp_path / "stderr.txt", mode=mode, message_handler=handler) as client:
            before = {t.name for t in (await client.list_tools()).tools}
            assert "extra" not in before
            if mode == "auto":  # 2026-07-28: the client asks for change events on a listen stream
                assert client.protocol_version == "2026-07-28"
                async with client.listen(tools_list_changed=True) as subscription:
                    await client.call_tool("grow", {"name": "extra"})
                    with anyio.fail_after(30):
                        async for _event in subscription:
                            break
            else:  # 2025: the server sends notifications/tools/list_changed on the session
                assert client.protocol_version == "2025-11-25"
                await client.call_tool("grow", {"name": "extra"})
                with anyio.fail_after(30):
                    await notified.wait()
            tools = {t.name for t in (await client.list_tools()).tools}
            assert tools == before | {"extra"}
            assert (await client.call_tool("extra", {})).content[0].text == "this is extra"  # type: ignore[union-attr]
            if mode == "legacy":  # a removal too (nexus_tool_unregister)
                while notified.is_set():  # let the notifications of the growth pass
                    notified = anyio.Event()
                    await anyio.sleep(0.2)
                await client.call_tool("shrink", {"name": "extra"})
                with anyio.fail_after(30):
                    await notified.wait()
                assert "extra" not in {t.name for t in (await client.list_tools()).tools}

    run(session)


def test_skills_are_prompts(served: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    config, env = served

    async def session() -> None:
        async with stdio_session(config, env, tmp_path / "stderr.txt") as client:
            prompts = (await client.list_prompts()).prompts
            assert [(p.name, p.description) for p in prompts] == [("haiku", "Write a haiku about the task.")]
            prompt = await client.get_prompt("haiku")
            text = prompt.messages[0].content.text  # type: ignore[union-attr]
            assert "# Skill: haiku" in text and "five, seven, five" in text
            with pytest.raises(MCPError, match="unknown skill 'sonnet'"):
                await client.get_prompt("sonnet")
            assert "haiku" in (client.instructions or "")

    run(session)


def http_transport(server: HttpServe) -> Any:
    """The SDK's streamable HTTP transport to `server`, with its token."""
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    return streamable_http_client(server.url, http_client=httpx2.AsyncClient(headers=server.headers))


@pytest.mark.parametrize("stateless", [False, True])
def test_the_sdk_client_over_http(stateless: bool, served: tuple[Path, dict[str, str]]) -> None:
    config, env = served
    server = HttpServe(config, env, *(["--stateless"] if stateless else []))
    try:
        async def session(url: str) -> None:
            for attempt in range(2):  # stateless: a second client, no session shared
                async with Client(http_transport(server), cache=None) as client:
                    tools = {t.name for t in (await client.list_tools()).tools}
                    assert {"shout", "run_code", "time_get_current_time"} <= tools
                    shout = await client.call_tool("shout", {"text": f"http {attempt}"})
                    assert shout.structured_content == {"loud": f"HTTP {attempt}"}
                    vetoed = await client.call_tool("shout", {"text": "forbidden"})
                    assert vetoed.is_error and "no forbidden words" in vetoed.content[0].text  # type: ignore[union-attr]

        run(session, server.url)

        async def legacy(url: str) -> None:
            async with Client(http_transport(server), cache=None, mode="legacy") as client:
                assert (await client.call_tool("shout", {"text": "old"})).structured_content == {"loud": "OLD"}

        run(legacy, server.url)
    finally:
        stdout, stderr = server.stop()
    assert server.process.returncode == 0, stderr
    assert "printer: goodbye" in stdout  # SIGTERM closed the Nexus (and the MCP servers it started)


def test_usage_errors(tmp_path: Path) -> None:
    stateless = run_nexus("mcp", "serve", "--stateless", cwd=tmp_path)
    assert stateless.returncode == 2 and "--stateless goes with --http" in stateless.stderr
    bad = run_nexus("mcp", "serve", "--http", "localhost", cwd=tmp_path)
    assert bad.returncode == 2 and "--http 'localhost': expected HOST:PORT" in bad.stderr
    remote = run_nexus("mcp", "serve", "--allow-remote", cwd=tmp_path)
    assert remote.returncode == 2 and "--allow-remote goes with --http" in remote.stderr
    help_text = run_nexus("mcp", "serve", "--help", cwd=tmp_path)
    assert help_text.returncode == 0 and "--stateless" in help_text.stdout and "--allow-remote" in help_text.stdout


#: the first version whose command line sends HTTP headers (--header, which the token needs) and
#: runs (0.17.0 does not start: its package lacks cli/package.json)
INSPECTOR = "@modelcontextprotocol/inspector@0.17.1"


def inspector(*args: str, env: dict[str, str], cwd: Path, fails: bool = False) -> Any:
    """The Inspector CLI's JSON answer; with `fails`, its output, once it has failed."""
    npx = shutil.which("npx")
    if npx is None:
        pytest.skip("npx is not installed (Node.js 20 brings it): the MCP Inspector CLI cannot run")
    proc = subprocess.run([npx, "-y", INSPECTOR, "--cli", *args], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=600, check=False)
    if fails:
        assert proc.returncode != 0, proc.stdout
        return proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr}"
    return json.loads(proc.stdout)


def test_the_mcp_inspector_cli(served: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    config, env = served
    # the Inspector reads --config itself, so the Nexus config goes by NEXUS_CONFIG
    command = ["-e", f"NEXUS_CONFIG={config}", "-e", f"PYTHONPATH={env['PYTHONPATH']}", str(BIN / "nexus"),
               "--trust-config", "mcp", "serve"]
    listed = inspector(*command, "--method", "tools/list", env=env, cwd=tmp_path)
    by_name = {t["name"]: t for t in listed["tools"]}
    assert {"shout", "run_code", "time_get_current_time"} <= set(by_name)
    assert by_name["run_code"]["outputSchema"]["type"] == "object"
    called = inspector(*command, "--method", "tools/call", "--tool-name", "shout", "--tool-arg", "text=inspected",
                       env=env, cwd=tmp_path)
    assert called["structuredContent"] == {"loud": "INSPECTED"} and called["isError"] is False
    vetoed = inspector(*command, "--method", "tools/call", "--tool-name", "shout", "--tool-arg", "text=forbidden",
                       env=env, cwd=tmp_path)
    assert vetoed["isError"] is True and vetoed["content"][0]["text"] == "vetoed: no forbidden words"


def test_the_mcp_inspector_cli_over_http(served: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    config, env = served
    server = HttpServe(config, env)
    try:
        header = ["--header", f"Authorization: Bearer {server.token}"]
        listed = inspector(server.url, "--transport", "http", *header, "--method", "tools/list", env=env, cwd=tmp_path)
        assert "shout" in {t["name"] for t in listed["tools"]}
        called = inspector(server.url, "--transport", "http", *header, "--method", "tools/call", "--tool-name",
                           "time_get_current_time", "--tool-arg", "timezone=UTC", env=env, cwd=tmp_path)
        assert called["structuredContent"]["timezone"] == "UTC"
        # without the header the Inspector gets nowhere
        refused = inspector(server.url, "--transport", "http", "--method", "tools/list", env=env, cwd=tmp_path,
                            fails=True)
        assert "invalid_token" in refused and "Authentication required" in refused
    finally:
        server.stop()


def test_serving_in_process_follows_the_registry(tmp_path: Path) -> None:
    """The server object, for a host that mounts it in its own app: it lists what the registry
    holds right now, and stops watching the Nexus when closed."""
    from nexus_core import tool
    from nexus_mcp import NexusMcpServer

    @tool
    def ping() -> str:
        """Answer pong."""
        return "pong"

    with Nexus({"workspace": str(tmp_path), "session_dir": str(tmp_path / "s"), "plugins": {"active": []}},
               tools=[ping]) as nx:
        server = NexusMcpServer(nx)

        async def check() -> None:
            async with Client(server.server, cache=None) as client:
                assert [t.name for t in (await client.list_tools()).tools] == ["ping"]
                nx.remove_tool("ping")
                assert (await client.list_tools()).tools == []

        run(check)
        watchers = [p.name for p in nx.plugins() if p.name.startswith("nexus.mcp.serve")]
        assert len(watchers) == 1
        server.close()
        assert not [p.name for p in nx.plugins() if p.name.startswith("nexus.mcp.serve")]


def test_stdio_leaves_the_process_streams_as_they_were(tmp_path: Path) -> None:
    """`claim_stdio` in a child process: fd 1 is stderr while it holds the streams, the real
    stdout again after."""
    code = (
        "import os, sys\n"
        "from nexus_mcp._serve import claim_stdio\n"
        "with claim_stdio() as (wire_in, wire_out):\n"
        "    print('stray')\n"
        "    sys.stdout.flush()\n"
        "    wire_out.write(b'protocol\\n')\n"
        "print('after')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "protocol\nafter\n" and proc.stderr == "stray\n"
