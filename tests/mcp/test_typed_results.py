"""A tool whose result is not an object (`@tool def count(...) -> int`) over MCP, both ways: `nexus
mcp serve` lists its outputSchema wrapped as `{"result": ...}` (MCP requires an object; FastMCP's
mark, so FastMCP clients unwrap it) and sends `structuredContent` to match; a Nexus using that
server as an MCP client unwraps both, so its run_code binding returns the int again."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import yaml
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp_helpers import BIN, FakePlugins

from nexus_core import Nexus

COUNTER = '''
from typing import TypedDict

from nexus_core import hookimpl, tool


class Span(TypedDict):
    start: int
    end: int


@tool
def count_words(text: str) -> int:
    """Count the words of a text."""
    return len(text.split())


@tool
def words(text: str) -> list[str]:
    """The words of a text."""
    return text.split()


@tool
def first_span(text: str) -> Span:
    """Where the first word is."""
    return {"start": 0, "end": len(text.split()[0])}


@hookimpl
def nexus_register_tools(register):
    register(count_words)
    register(words)
    register(first_span)
'''


def serve_config(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    fakes = FakePlugins(tmp_path / "site")
    fakes.add("test.counter", "nexus_test_counter", COUNTER)
    config = tmp_path / "served.yaml"
    config.write_text(yaml.safe_dump({"workspace": str(tmp_path), "session_dir": str(tmp_path / "served-session"),
                                      "plugins": {"active": ["test.counter"]}}))
    return config, fakes.env()


def test_nexus_mcp_serve_wraps_a_result_that_is_not_an_object(tmp_path: Path) -> None:
    config, env = serve_config(tmp_path)
    seen: dict[str, Any] = {}

    async def session() -> None:
        params = StdioServerParameters(command=str(BIN / "nexus"), args=["--trust-config", "--config", str(config), "mcp", "serve"],
                                       env=env, cwd=str(tmp_path))
        async with Client(stdio_client(params), cache=None) as client:
            seen["tools"] = {t.name: t for t in (await client.list_tools()).tools}
            seen["count"] = await client.call_tool("count_words", {"text": "one two three"})
            seen["words"] = await client.call_tool("words", {"text": "a b"})
            seen["span"] = await client.call_tool("first_span", {"text": "hello world"})

    anyio.run(session)
    tools = seen["tools"]
    assert tools["count_words"].output_schema == {
        "type": "object", "properties": {"result": {"type": "integer"}}, "required": ["result"],
        "x-fastmcp-wrap-result": True}
    assert tools["words"].output_schema["properties"]["result"] == {"type": "array", "items": {"type": "string"}}
    assert tools["first_span"].output_schema["properties"] == {"start": {"type": "integer"}, "end": {"type": "integer"}}
    assert seen["count"].structured_content == {"result": 3} and seen["count"].content[0].text == "3"
    assert seen["words"].structured_content == {"result": ["a", "b"]}
    assert seen["span"].structured_content == {"start": 0, "end": 5}  # an object goes as it is


def test_a_nexus_client_unwraps_it_and_its_binding_returns_the_int(
        tmp_path: Path, make_nexus: Callable[..., Nexus]) -> None:
    config, env = serve_config(tmp_path)
    server = {"command": str(BIN / "nexus"), "args": ["--trust-config", "--config", str(config), "mcp", "serve"],
              "env": {"PYTHONPATH": env["PYTHONPATH"]}}
    nx = make_nexus({"counter": server}, active=["nexus.mcp.client", "nexus.tool.code_exec"])
    count = nx.tool("counter_count_words")
    assert count is not None and count.output_schema == {"type": "integer"}
    assert count.annotations["mcp_server"] == "counter"
    result = nx.invoke("counter_count_words", {"text": "one two"})
    assert result.output_structured == 2 and not result.is_error
    script = ("import tools\n\ndef run(ctx):\n    n = tools.counter_count_words(text='a b c')\n"
              "    w = tools.counter_words(text='x y')\n    return {'n': n * 2, 'w': w}\n")
    assert nx.invoke("run_code", {"script": script}).output_structured == {"result": {"n": 6, "w": ["x", "y"]}}
