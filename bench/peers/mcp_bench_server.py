"""The MCP server bench/bench_mcp.py calls: the same two tools as its native peers, on the SDK's
`MCPServer`, over stdio (default) or streamable HTTP (`--http PORT`).

- noop(x) -> "ok": what a call costs when the tool does nothing;
- sleep50(x) -> x after 50 ms (an async sleep, so calls overlap as they would on a real server
  waiting on I/O).
"""

from __future__ import annotations

import argparse

import anyio
from mcp.server.mcpserver import MCPServer


def build() -> MCPServer:
    server = MCPServer("bench", log_level="WARNING")

    @server.tool(structured_output=False)
    def noop(x: int = 0) -> str:
        """Do nothing."""
        return "ok"

    @server.tool(structured_output=False)
    async def sleep50(x: int = 0) -> str:
        """Wait 50 ms, then answer with x."""
        await anyio.sleep(0.05)
        return str(x)

    return server


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", type=int)
    args = parser.parse_args()
    server = build()
    if args.http is not None:
        anyio.run(lambda: server.run_streamable_http_async(host="127.0.0.1", port=args.http))
    else:
        anyio.run(server.run_stdio_async)


if __name__ == "__main__":
    main()
