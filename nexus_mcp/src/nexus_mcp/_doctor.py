"""What `nexus doctor` says of the protections this package puts around MCP (docs/security.md):
one line each, whether or not any server is configured."""

from __future__ import annotations

from nexus_core.supervisor import why_unavailable

from ._auth import AUTH_DIR_ENV, auth_dir
from ._http_security import MIN_TOKEN_LENGTH, TOKEN_ENV


def protections() -> list[str]:
    why = why_unavailable()
    tree = ("stdio servers' processes: each server runs under a subreaper (nexus-mcp-reap), so its whole process "
            "tree ends with it, children that left its process group included"
            if why is None else
            f"stdio servers' processes: only each server's process group is stopped with it (no subreaper: {why}); "
            "a child that calls setsid() can outlive it")
    return [
        tree,
        ("tool names: a name two MCP servers' tools would share (in Nexus, or in run_code) goes to neither; "
         "a name given never moves to another server's tool"),
        (f"MCP OAuth tokens: one 0600 file per server in {auth_dir()} (a 0700 folder; {AUTH_DIR_ENV} moves it), "
         "refused inside the workspace, in no log; a run never opens a browser: a server needing a login says "
         "`nexus mcp login <server>`"),
        ("MCP elicitation: a server's questions go to the call's approver (nexus chat's prompt), escaped; with "
         "none, declined saying why; schemas outside the spec refused; at most 20 fields and 20 requests a call"),
        (f"mcp serve --http: a bearer token on every request (made at each start, or {TOKEN_ENV} or "
         f"serve.token/serve.token_file, {MIN_TOKEN_LENGTH}+ characters; none in the URL); Host and Origin checked "
         "against the address bound; a non-loopback address needs --allow-remote"),
    ]
