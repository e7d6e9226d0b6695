"""`nexus mcp serve`: this distribution (its config and installed plugins) as an MCP server.
Added to `nexus` through `nexus_register_commands`."""

from __future__ import annotations

import re

import click
from nexus_core.cli import EXIT_OK, CliState, UsageError

_HOST_PORT = re.compile(r"^(?:\[(?P<v6>[^\]]+)\]|(?P<host>[^:\[\]]+)):(?P<port>\d{1,5})$")


def parse_host_port(value: str) -> tuple[str, int]:
    """`HOST:PORT` (`[::1]:8000` for IPv6) as (host, port); UsageError naming the option."""
    match = _HOST_PORT.match(value.strip())
    if match is None:
        raise UsageError(f"--http {value!r}: expected HOST:PORT, e.g. 127.0.0.1:8000 (or [::1]:8000)")
    port = int(match.group("port"))
    if port > 65535:
        raise UsageError(f"--http {value!r}: port {port} is not a port number (0-65535)")
    return match.group("v6") or match.group("host"), port


@click.group("mcp", epilog="""\b
Examples:
  nexus mcp serve                  this Nexus's tools to an MCP client over stdio
  nexus mcp serve --help           the HTTP and stateless options

\b
MCP servers' tools as Nexus tools: the nexus.mcp.client plugin's config (docs/mcp.md).""")
def mcp_group() -> None:
    """MCP (Model Context Protocol): serve this Nexus's tools to MCP clients."""


@mcp_group.command("serve", epilog="""\b
Examples:
  nexus mcp serve                                  stdio (what Claude Desktop, Claude Code and Cursor run)
  nexus --config agent.yaml mcp serve --http 127.0.0.1:8000
  nexus mcp serve --http 0.0.0.0:8000 --stateless  one of several replicas behind a load balancer""")
@click.option("--http", "http", metavar="HOST:PORT",
              help="Serve streamable HTTP at http://HOST:PORT/mcp instead of stdio (port 0: any free one).")
@click.option("--stateless", is_flag=True,
              help="With --http: keep no session between requests, so any replica can answer any request.")
@click.pass_context
def serve_command(ctx: click.Context, http: str | None, stateless: bool) -> int:
    """Serve every tool of this Nexus (run_code included) over MCP, each call through its gates.

    stdio by default: nothing but the protocol is written to stdout (a plugin's stray output goes
    to stderr). Runs until the client closes stdin, or until stopped: SIGTERM exits 0, Ctrl-C 130.
    """
    import anyio

    from ._serve import NexusMcpServer, Terminated, claim_stdio, stop_on_sigterm

    if stateless and http is None:
        raise UsageError("--stateless goes with --http: a stdio server has one client and keeps its session")
    state = ctx.ensure_object(CliState)
    if http is not None:
        host, port = parse_host_port(http)
        nx = state.open(ctx)
        server = NexusMcpServer(nx)

        def ready(url: str) -> None:
            click.echo(f"nexus: serving {len(nx.tools())} tools over MCP at {url}"
                       f"{' (stateless)' if stateless else ''}", err=True)

        try:
            with stop_on_sigterm():
                anyio.run(lambda: server.serve_http(host, port, stateless=stateless, on_ready=ready))
        except Terminated:
            pass
        finally:
            server.close()
        return EXIT_OK
    # stdio: take the real stdin and stdout before any plugin loads (and might print)
    with claim_stdio() as (wire_in, wire_out):
        nx = state.open(ctx)
        server = NexusMcpServer(nx)
        try:
            with stop_on_sigterm():
                anyio.run(server.serve_stdio, wire_in, wire_out)
        except Terminated:
            pass
        finally:
            server.close()
            nx.close()  # while stdout is still stderr: a plugin's goodbye print must not reach the client
    return EXIT_OK
