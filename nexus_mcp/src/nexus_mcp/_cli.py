"""`nexus mcp serve`: this distribution (its config and installed plugins) as an MCP server.
Added to `nexus` through `nexus_register_commands`."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

import click
from nexus_core.cli import EXIT_OK, CliState, UsageError

if TYPE_CHECKING:
    from ._http_security import HttpSecurity

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
  NEXUS_MCP_TOKEN=... nexus mcp serve --http 0.0.0.0:8000 --allow-remote --stateless
                                                   one of several replicas behind a load balancer

\b
Over HTTP every request needs the header `Authorization: Bearer <token>`: the token is made at
each start and printed (or given by NEXUS_MCP_TOKEN, or plugins.nexus.mcp.client.serve.token in
the config), and Host and Origin must name the address served on.""")
@click.option("--http", "http", metavar="HOST:PORT",
              help="Serve streamable HTTP at http://HOST:PORT/mcp instead of stdio (port 0: any free one).")
@click.option("--stateless", is_flag=True,
              help="With --http: keep no session between requests, so any replica can answer any request.")
@click.option("--allow-remote", is_flag=True,
              help="With --http: allow an address other machines reach (0.0.0.0, [::], a LAN address); "
                   "the token is still required.")
@click.pass_context
def serve_command(ctx: click.Context, http: str | None, stateless: bool, allow_remote: bool) -> int:
    """Serve every tool of this Nexus (run_code included) over MCP, each call through its gates.

    stdio by default: nothing but the protocol is written to stdout (a plugin's stray output goes
    to stderr). Runs until the client closes stdin, or until stopped: SIGTERM exits 0, Ctrl-C 130.
    """
    import anyio

    from ._serve import NexusMcpServer, Terminated, claim_stdio, closing_through_sigterm, stop_on_sigterm

    if stateless and http is None:
        raise UsageError("--stateless goes with --http: a stdio server has one client and keeps its session")
    if allow_remote and http is None:
        raise UsageError("--allow-remote goes with --http: a stdio server has no address")
    state = ctx.ensure_object(CliState)
    if http is not None:
        return _serve_http(ctx, state, http, stateless=stateless, allow_remote=allow_remote)
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
            with closing_through_sigterm():
                server.close()
                nx.close()  # while stdout is still stderr: a plugin's goodbye print must not reach the client
    return EXIT_OK


def _serve_http(ctx: click.Context, state: CliState, http: str, *, stateless: bool, allow_remote: bool) -> int:
    import os

    import anyio

    from ._config import CONFIG_SCHEMA, PLUGIN_ID, parse_serve
    from ._http_security import BindRefused, listen, resolve_token
    from ._serve import NexusMcpServer, Terminated, stop_on_sigterm

    host, port = parse_host_port(http)
    # refused before the Nexus opens (and starts what it starts): a wrong address runs nothing
    try:
        sock = listen(host, port, allow_remote)
    except BindRefused as exc:
        raise UsageError(f"--http {http}: {exc}") from None
    except OSError as exc:
        raise UsageError(f"--http {http}: cannot listen there: {exc.strerror or exc}") from None
    try:
        nx = state.open(ctx)
        settings = parse_serve(nx.config.validate_plugin_section(PLUGIN_ID, CONFIG_SCHEMA), nx.config)
        try:
            token = resolve_token(settings.token, settings.token_source, os.environ)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    except BaseException:
        sock.close()
        raise
    server = NexusMcpServer(nx)
    token_file: Path | None = None

    def ready(security: HttpSecurity) -> None:
        nonlocal token_file
        click.echo(f"nexus: serving {len(nx.tools())} tools over MCP at {security.url}"
                   f"{' (stateless)' if stateless else ''}", err=True)
        if token.generated:
            token_file = _write_token(Path(nx.config.session_dir) / "plugins" / PLUGIN_ID, security, token.value)
            kept = f"; it is also in {token_file}, which only you can read" if token_file is not None else ""
            click.echo(f"nexus: every request must carry this header (the token is new at each start{kept}):",
                       err=True)
            click.echo(f"Authorization: Bearer {token.value}", err=True)
        else:
            click.echo(f"nexus: every request must carry the header `Authorization: Bearer <token>`, with the token "
                       f"from {token.source}", err=True)
        for line in security.lines():
            click.echo(f"nexus: protection: {line}", err=True)

    try:
        with stop_on_sigterm():
            anyio.run(lambda: server.serve_http(host, port, token=token, sock=sock, stateless=stateless,
                                                allowed_hosts=settings.allowed_hosts,
                                                allowed_origins=settings.allowed_origins, on_ready=ready))
    except Terminated:
        pass
    finally:
        sock.close()
        server.close()
        if token_file is not None:
            token_file.unlink(missing_ok=True)
    return EXIT_OK


def _write_token(folder: Path, security: HttpSecurity, token: str) -> Path | None:
    """The generated token in a file only its owner can read, for a client config or script
    to take it from (`$(cat ...)`); None when it cannot be written."""
    import os
    import re
    from urllib.parse import urlsplit

    where = urlsplit(security.url)
    path = folder / f"serve-{re.sub(r'[^A-Za-z0-9.]', '_', where.hostname or '')}-{where.port}.token"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            file.write(token + "\n")
        os.replace(temporary, path)
    except OSError as exc:
        click.echo(f"nexus: warning: cannot write the token to {path}: {exc.strerror or exc}", err=True)
        return None
    return path
