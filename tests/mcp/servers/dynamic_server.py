"""An MCP server for nexus_mcp's tests whose tool list changes, on the SDK's low-level `Server`.

It starts with the tools named by `--tool` (default: `grow`, `shrink`, `hello`). Calling
`grow {"name": X}` adds a tool X (which answers with its own name); `shrink {"name": X}` removes
one. Either way the server tells its clients with a `ToolsListChanged` event on their 2026-era
`subscriptions/listen` streams (legacy_server.py is the 2025-era counterpart).
"""

from __future__ import annotations

import argparse
from typing import Any

import anyio
import mcp_types as types
from mcp.server import Server
from mcp.server.stdio import stdio_server
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ToolsListChanged
from mcp.shared.exceptions import MCPError

NAME_ARGUMENT = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}


def build(initial: list[str]) -> Server[Any]:
    tools: dict[str, types.Tool] = {}
    bus = InMemorySubscriptionBus()

    def add(name: str) -> None:
        schema = NAME_ARGUMENT if name in ("grow", "shrink") else {"type": "object", "properties": {}}
        tools[name] = types.Tool(name=name, description=f"The tool {name}.", input_schema=schema)

    for name in initial:
        add(name)

    async def changed() -> None:
        await bus.publish(ToolsListChanged())

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=list(tools.values()))

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        if params.name not in tools:
            raise MCPError(types.INVALID_PARAMS, f"Unknown tool: {params.name}")
        arguments = params.arguments or {}
        if params.name == "grow":
            add(arguments["name"])
            await changed()
            text = f"added {arguments['name']}"
        elif params.name == "shrink":
            tools.pop(arguments["name"], None)
            await changed()
            text = f"removed {arguments['name']}"
        else:
            text = f"this is {params.name}"
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)])

    server = Server("dynamic", on_list_tools=list_tools, on_call_tool=call_tool,
                    on_subscriptions_listen=ListenHandler(bus))
    return server


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tool", action="append")
    args = parser.parse_args()
    server = build(args.tool or ["grow", "shrink", "hello"])

    async def serve() -> None:
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())

    anyio.run(serve)


if __name__ == "__main__":
    main()
