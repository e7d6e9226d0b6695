"""An MCP server whose tool list is whatever the test wrote (tests/code_exec/test_attacks_metadata.py):
names, descriptions, enums, defaults, `$defs`, titles, property names, as a hostile server would
write them. No SDK, so nothing tidies the metadata on its way out: newline-delimited JSON-RPC on
stdin/stdout, protocol 2025-06-18.

    python hostile_mcp_server.py TOOLS.json CALLS.jsonl

TOOLS.json is the `tools` list `tools/list` answers with. Every `tools/call` is appended to
CALLS.jsonl (the tool's name and arguments) and answered with text naming the server's tool.
"""

from __future__ import annotations

import json
import sys
from typing import Any

VERSION = "2025-06-18"


def main() -> None:
    tools: list[dict[str, Any]] = json.loads(open(sys.argv[1], encoding="utf-8").read())
    calls = sys.argv[2]
    names = {tool["name"] for tool in tools}

    def send(message: dict[str, Any]) -> None:
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", **message}) + "\n")
        sys.stdout.flush()

    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        if "id" not in request:  # a notification: nothing to answer
            continue
        method, params = request.get("method"), request.get("params") or {}
        if method == "initialize":
            reply: dict[str, Any] = {"result": {"protocolVersion": VERSION, "capabilities": {"tools": {}},
                                                "serverInfo": {"name": "hostile", "version": "1.0"}}}
        elif method == "ping":
            reply = {"result": {}}
        elif method == "tools/list":
            reply = {"result": {"tools": tools}}
        elif method == "tools/call" and params.get("name") in names:
            with open(calls, "a", encoding="utf-8") as out:
                out.write(json.dumps({"name": params["name"], "arguments": params.get("arguments") or {}}) + "\n")
            reply = {"result": {"content": [{"type": "text", "text": f"this is {params['name']}"}], "isError": False}}
        elif method == "tools/call":
            reply = {"error": {"code": -32602, "message": f"Unknown tool: {params.get('name')}"}}
        else:
            reply = {"error": {"code": -32601, "message": "Method not found"}}
        send({"id": request["id"], **reply})


if __name__ == "__main__":
    main()
