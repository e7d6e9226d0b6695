"""`nexus mcp serve`: this distribution (its config and installed plugins) as an MCP server.
Added to `nexus` through `nexus_register_commands`."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from nexus_core.cli import EXIT_FAILED, EXIT_OK, CliState, UsageError

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
  nexus mcp login docs             sign in to MCP server `docs` (OAuth), for its tools

\b
MCP servers' tools as Nexus tools: the nexus.mcp.client plugin's config (docs/mcp.md).""")
def mcp_group() -> None:
    """MCP (Model Context Protocol): serve this Nexus's tools to MCP clients; log in to servers."""


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
        nx.recover()  # a server is long-lived: it takes over what killed hosts left (docs/durable.md)
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

    from ._http_security import BindRefused, listen, resolve_token
    from ._serve import NexusMcpServer, Terminated, stop_on_sigterm
    from ._settings import PLUGIN_ID, configured, resolve_serve

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
        settings = configured(nx.config).serve  # the plugin may not be active: its section is read here
        given = resolve_serve(settings, nx.config)
        try:
            token = resolve_token(given.token, given.token_source, os.environ)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    except BaseException:
        sock.close()
        raise
    server = NexusMcpServer(nx)
    nx.recover()  # a server is long-lived: it takes over what killed hosts left (docs/durable.md)
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


def _oauth_server(ctx: click.Context, name: str) -> tuple[Any, Any]:
    """The Nexus of this command and the settings of its server `name`, which must use OAuth."""
    from ._settings import PLUGIN_ID, configured, resolve_servers

    nx = ctx.ensure_object(CliState).open(ctx)
    servers = {s.name: s for s in resolve_servers(configured(nx.config), nx.config)}
    config = servers.get(name)
    if config is None:
        known = ", ".join(sorted(servers)) or "none"
        raise UsageError(f"no MCP server {name!r} in plugins.{PLUGIN_ID}.servers (configured: {known})")
    if config.oauth is None:
        raise UsageError(f"MCP server {name!r} does not log in with OAuth: give it `oauth: true` "
                         f"(plugins.{PLUGIN_ID}.servers.{name}.oauth) to log in to it")
    return nx, config


@mcp_group.command("login", epilog="""\b
Examples:
  nexus mcp login docs              opens the sign-in page of server `docs` in your browser
  nexus mcp login docs --no-browser prints its address, for a browser on another machine
                                    (the page sends you back to 127.0.0.1 on this one)""")
@click.argument("server")
@click.option("--no-browser", is_flag=True, help="Print the sign-in address only; do not open a browser.")
@click.option("--timeout", type=click.FloatRange(min=1), default=300.0, show_default=True, metavar="SECONDS",
              help="How long to wait for the sign-in to finish.")
@click.pass_context
def login_command(ctx: click.Context, server: str, no_browser: bool, timeout: float) -> int:
    """Log in to an MCP server that uses OAuth, and keep its tokens for later runs.

    The server's sign-in page opens in your browser; when you have signed in, it sends the browser
    back to a loopback address this command listens on, and the tokens are kept in a folder of
    yours outside every workspace (see docs/mcp.md, "Servers that need a login").
    """
    import webbrowser

    import anyio

    from ._auth import AuthStoreError, auth_dir, check_outside, login

    nx, config = _oauth_server(ctx, server)
    try:
        check_outside(auth_dir(), Path(nx.config.workspace))
    except AuthStoreError as exc:
        raise UsageError(str(exc)) from None

    def show(url: str) -> None:
        click.echo(f"nexus: sign in to MCP server {server!r} at this address"
                   f"{'' if no_browser else ' (opening it in your browser)'}:", err=True)
        click.echo(url, err=True)
        if not no_browser:
            webbrowser.open(url)

    try:
        tools = anyio.run(lambda: login(config, show, timeout=timeout))
    except TimeoutError:
        click.echo(f"nexus: error: the sign-in did not finish within {timeout:g} s (--timeout); run the command "
                   "again", err=True)
        return EXIT_FAILED
    except Exception as exc:  # noqa: BLE001 (the SDK's OAuth errors, the server's refusal: one line each)
        from ._connection import _describe

        click.echo(f"nexus: error: logging in to MCP server {server!r} failed: {_describe(exc)}", err=True)
        return EXIT_FAILED
    click.echo(f"nexus: logged in to MCP server {server!r} ({len(tools)} tools); its tokens are in {auth_dir()}",
               err=True)
    return EXIT_OK


@mcp_group.command("logout")
@click.argument("server")
@click.pass_context
def logout_command(ctx: click.Context, server: str) -> int:
    """Forget the tokens (and the client registration) kept for an MCP server that uses OAuth."""
    from ._auth import storage_for

    _, config = _oauth_server(ctx, server)
    storage = storage_for(config)
    if storage.forget():
        click.echo(f"nexus: logged out of MCP server {server!r} (removed {storage.path})", err=True)
    else:
        click.echo(f"nexus: MCP server {server!r} had no tokens kept here ({storage.path})", err=True)
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
