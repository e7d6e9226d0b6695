"""The MCP client the conformance suite drives (`conformance client --command ...`): a Nexus whose
`nexus.mcp.client` plugin has the suite's test server as its one server, `s`.

The suite passes the server's URL as the last argument, the scenario in MCP_CONFORMANCE_SCENARIO
and, for some, settings in MCP_CONFORMANCE_CONTEXT (a pre-registered client's id and secret).
For an `auth/` scenario the client logs in first, as `nexus mcp login s` does (the suite's
authorization server approves at once; a headless stand-in for the browser follows its redirect to
the login's loopback listener), then a Nexus calls the server's first tool with the kept tokens.
Elicitations are answered by an approver that answers `-` at every question (the defaults).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from typing import Any

import anyio
import httpx2

from nexus_core import Answer, Nexus, Question


def browser(url: str) -> None:
    """Visit the authorization URL, and follow its redirect to the login's listener."""
    with httpx2.Client(follow_redirects=True, timeout=30) as http:
        http.get(url)


def enter(question: Question) -> Answer:
    print(f"asked: {question.text}", file=sys.stderr)
    return Answer(True, "-")


def main() -> int:
    url = sys.argv[-1]
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
    context: dict[str, Any] = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    home = tempfile.mkdtemp(prefix="nexus-conformance-")
    os.environ.setdefault("NEXUS_MCP_AUTH_DIR", os.path.join(home, "oauth"))
    workspace = os.path.join(home, "workspace")
    os.mkdir(workspace)
    server: dict[str, Any] = {"url": url, "start": "eager", "timeout_seconds": 25}
    if scenario.startswith("auth/"):
        oauth = {k: context[k] for k in ("client_id", "client_secret") if context.get(k)}
        # a client metadata document's URL as the client id, where the server supports it (CIMD)
        server["oauth"] = {"client_metadata_url": "https://conformance-test.local/client-metadata.json", **oauth}
    config = {"workspace": workspace, "session_dir": os.path.join(home, "session"), "skills": [],
              "plugins": {"active": ["nexus.mcp.client"], "nexus.mcp.client": {"servers": {"s": server}}}}
    if scenario.startswith("auth/"):
        log_in(config)
    wanted = {"tools_call": ("s_add_numbers", {"a": 5, "b": 3}),
              "sse-retry": ("s_test_reconnection", {}),
              "elicitation-sep1034-client-defaults": ("s_test_client_elicitation_defaults", {})}
    for attempt in range(2):
        with Nexus(config, approver=enter) as nx:
            names = sorted(t.name for t in nx.tools() if t.name.startswith("s_"))
            print(f"tools: {names}", file=sys.stderr)
            name, arguments = wanted.get(scenario, (names[0] if names else "", {}))
            if not name or not (scenario in wanted or scenario.startswith("auth/")):
                return 0
            result = nx.invoke(name, arguments)
            print(f"{name}: {result.error or result.output}", file=sys.stderr)
        if result.error and "needs a login" in result.error and attempt == 0:
            log_in(config)  # what its message says to do (the server asked for more scopes), then again
            continue
        return 1 if result.error and scenario in wanted else 0
    return 1


def log_in(config: dict[str, Any]) -> None:
    """`nexus mcp login s`, with the headless browser."""
    from nexus_mcp._auth import login
    from nexus_mcp._settings import parse_servers

    with Nexus({**config, "plugins": {"active": []}}) as bare:
        parsed = parse_servers(config["plugins"]["nexus.mcp.client"], bare)[0]
    tools = anyio.run(lambda: login(parsed, browser, timeout=25))
    print(f"logged in; tools: {tools}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
