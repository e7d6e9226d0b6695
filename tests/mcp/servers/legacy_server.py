"""A 2025-era MCP server for nexus_mcp's tests, written without any SDK: newline-delimited
JSON-RPC on stdin/stdout, the `initialize` handshake of protocol 2025-06-18, no `server/discover`
(as servers built on older SDKs, in any language, answer). Its tool list changes like
dynamic_server.py's: `grow {"name": X}` adds X, `shrink {"name": X}` removes it, and each change
sends `notifications/tools/list_changed`.
"""

from __future__ import annotations

import json
import sys
from typing import Any

VERSION = "2025-06-18"
NAME_ARGUMENT = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
tools: dict[str, dict[str, Any]] = {}


def add(name: str) -> None:
    schema = NAME_ARGUMENT if name in ("grow", "shrink") else {"type": "object", "properties": {}}
    tools[name] = {"name": name, "description": f"The tool {name}.", "inputSchema": schema}


def send(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", **message}) + "\n")
    sys.stdout.flush()


def answer(request: dict[str, Any]) -> dict[str, Any] | None:
    method, params = request.get("method"), request.get("params") or {}
    if method == "initialize":
        return {"result": {"protocolVersion": VERSION, "capabilities": {"tools": {"listChanged": True}},
                           "serverInfo": {"name": "legacy", "version": "1.0"}}}
    if method == "ping":
        return {"result": {}}
    if method == "tools/list":
        return {"result": {"tools": list(tools.values())}}
    if method == "tools/call":
        name, arguments = params.get("name"), params.get("arguments") or {}
        if name not in tools:
            return {"error": {"code": -32602, "message": f"Unknown tool: {name}"}}
        if name == "grow":
            add(arguments["name"])
            send({"method": "notifications/tools/list_changed"})
            text = f"added {arguments['name']}"
        elif name == "shrink":
            tools.pop(arguments["name"], None)
            send({"method": "notifications/tools/list_changed"})
            text = f"removed {arguments['name']}"
        else:
            text = f"this is {name}"
        return {"result": {"content": [{"type": "text", "text": text}], "isError": False}}
    return {"error": {"code": -32601, "message": "Method not found"}}


def main() -> None:
    for name in ("grow", "shrink", "hello"):
        add(name)
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        if "id" not in request:  # a notification (initialized, cancelled): nothing to answer
            continue
        reply = answer(request)
        if reply is not None:
            send({"id": request["id"], **reply})


if __name__ == "__main__":
    main()
