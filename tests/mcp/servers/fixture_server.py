"""An MCP server for nexus_mcp's tests, on the SDK's `MCPServer`: tools that answer, fail,
crash, hang, return images or nested and recursive results. Runs over stdio, or streamable
HTTP with `--http PORT`.

--fail-if FILE   exit at start (status 3) while FILE exists: a server that fails to start
--hang-if FILE   never finish starting while FILE exists: a start that times out
"""

from __future__ import annotations

import argparse
import base64
import os
import sys
import time
from pathlib import Path

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.utilities.types import Image
from pydantic import BaseModel

# a 1x1 PNG
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


class Point(BaseModel):
    x: int
    y: int


class Segment(BaseModel):
    """A segment: two points (a nested model, listed under $defs) and its length."""

    start: Point
    end: Point
    length: float


class Tree(BaseModel):
    """A tree: its output schema refers to itself."""

    name: str
    children: list[Tree] = []


def build() -> MCPServer:
    server = MCPServer("fixture")

    @server.tool()
    def echo(text: str) -> str:
        """Answer with the text."""
        return text

    @server.tool()
    def pid() -> int:
        """The server's process id."""
        return os.getpid()

    @server.tool()
    def crash() -> str:
        """Exit the server process at once (status 7), mid-call."""
        sys.stderr.write("fixture server: crashing on purpose\n")
        sys.stderr.flush()
        os._exit(7)

    @server.tool()
    async def sleep(seconds: float) -> str:
        """Wait, then answer."""
        await anyio.sleep(seconds)
        return f"slept {seconds}"

    @server.tool()
    def fail(message: str) -> str:
        """Fail with the message, as a tool error (isError)."""
        raise ToolError(message)

    @server.tool(structured_output=False)
    def image() -> list[object]:
        """An image and a caption."""
        return ["a red dot", Image(data=PNG, format="png")]

    @server.tool()
    def segment(x1: int, y1: int, x2: int, y2: int) -> Segment:
        """The segment between two points."""
        return Segment(start=Point(x=x1, y=y1), end=Point(x=x2, y=y2),
                       length=((x2 - x1) ** 2 + (y2 - y1) ** 2) ** 0.5)

    @server.tool()
    def tree(depth: int) -> Tree:
        """A chain of nodes `depth` deep."""
        node = Tree(name=f"n{depth}")
        for level in range(depth - 1, -1, -1):
            node = Tree(name=f"n{level}", children=[node])
        return node

    @server.tool()
    def env(name: str) -> str:
        """An environment variable of the server process."""
        return os.environ.get(name, "<unset>")

    @server.tool()
    def cwd() -> str:
        """The server's working folder."""
        return os.getcwd()

    @server.tool()
    def header(name: str, ctx: Context) -> str:
        """A header of the HTTP request that carried this call."""
        request = ctx.request_context.request
        headers = getattr(request, "headers", None)
        return headers.get(name, "<none>") if headers is not None else "<not http>"

    return server


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--fail-if")
    parser.add_argument("--hang-if")
    parser.add_argument("--http", type=int)
    args = parser.parse_args()
    print(f"fixture server starting, pid {os.getpid()}", file=sys.stderr, flush=True)
    if args.fail_if and Path(args.fail_if).exists():
        print("fixture server: refusing to start", file=sys.stderr, flush=True)
        sys.exit(3)
    while args.hang_if and Path(args.hang_if).exists():
        time.sleep(0.1)
    server = build()
    if args.http is not None:
        anyio.run(lambda: server.run_streamable_http_async(host="127.0.0.1", port=args.http))
    else:
        anyio.run(server.run_stdio_async)


if __name__ == "__main__":
    main()
