"""The official MCP conformance suite's client scenarios, against Nexus's MCP client
(`conformance_client.py` is the client the suite drives: a Nexus with the suite's server as its
one MCP server). Every scenario the client supports must pass with no failed check and no warning;
the ones it does not support are listed in docs/mcp.md ("Conformance") and here, with why.

A scope step-up (auth/scope-step-up: the server answers a call 403 insufficient_scope) is what a
run cannot do by itself: the call fails saying to log in again, the driver does (as the message
says), and the second login asks for the scopes the server asked for."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from conformance_client_helpers import failed, run_conformance

pytestmark = pytest.mark.conformance

CLIENT = Path(__file__).resolve().parent / "conformance_client.py"

#: the client scenarios of @modelcontextprotocol/conformance 0.1.16 that Nexus's client supports
SUPPORTED = [
    "initialize",
    "tools_call",
    "elicitation-sep1034-client-defaults",
    "sse-retry",
    "auth/metadata-default",
    "auth/metadata-var1",
    "auth/metadata-var2",
    "auth/metadata-var3",
    "auth/basic-cimd",
    "auth/scope-from-www-authenticate",
    "auth/scope-from-scopes-supported",
    "auth/scope-omitted-when-undefined",
    "auth/scope-step-up",
    "auth/scope-retry-limit",
    "auth/token-endpoint-auth-basic",
    "auth/token-endpoint-auth-post",
    "auth/token-endpoint-auth-none",
    "auth/pre-registration",
    "auth/2025-03-26-oauth-endpoint-fallback",
    "auth/resource-mismatch",
    "auth/offline-access-scope",
    "auth/offline-access-not-supported",
]

#: the ones it does not, and why (docs/mcp.md says the same)
UNSUPPORTED = {
    "auth/client-credentials-jwt": "the client credentials grant (an extension): Nexus logs a person in",
    "auth/client-credentials-basic": "the client credentials grant (an extension): Nexus logs a person in",
    "auth/cross-app-access-complete-flow": "enterprise-managed authorization (an extension, SEP-990)",
    "auth/2025-03-26-oauth-metadata-backcompat": (
        "the MCP SDK refuses authorization server metadata whose issuer (http://host/oauth) is not the one it was "
        "looked up for (the server's origin, on the 2025-03-26 path): RFC 8414's issuer check, kept"),
}


@pytest.mark.parametrize("scenario", SUPPORTED)
def test_client_scenario_passes(scenario: str, tmp_path: Path) -> None:
    process, checks = run_conformance(
        ["client", "--command", f"{sys.executable} {CLIENT}", "--scenario", scenario, "--timeout", "60000"],
        tmp_path / "results")
    assert checks, f"the suite wrote no checks for {scenario}:\n{process.stderr[-4000:]}"
    assert failed(checks) == [], f"{scenario}:\n{process.stderr[-6000:]}"
    assert process.returncode == 0, f"{scenario}: exit {process.returncode}\n{process.stderr[-6000:]}"
