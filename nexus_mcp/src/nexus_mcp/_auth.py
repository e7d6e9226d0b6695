"""OAuth for remote MCP servers: the authorization code flow with PKCE, through the MCP SDK's
client auth (`mcp.client.auth.OAuthClientProvider`: discovery of the protected resource's and the
authorization server's metadata, dynamic client registration, PKCE, the token exchange, refresh
and scope step-up are the SDK's), with what the SDK leaves to its user:

- **where tokens live**: one file per server, `<name>-<digest of its URL>.json`, in a folder of
  the user's (`$NEXUS_MCP_AUTH_DIR`, else `$XDG_STATE_HOME/nexus/mcp-oauth`, else
  `~/.local/state/nexus/mcp-oauth`), never inside the workspace (a tool or a run_code script could
  read it there). The folder is 0700 and each file 0600, written whole to a temporary file and
  renamed, so a reader sees the old tokens or the new ones. Tokens appear in no log and no message.
- **logging in**: `nexus mcp login SERVER` (`login`) catches the authorization server's redirect
  on a loopback port of its own (RFC 8252), shows the authorization URL and opens it in a browser.
- **a run that needs a login**: a Nexus never opens a browser by itself. A server whose tokens are
  missing, or were revoked and cannot be refreshed, fails with `LoginRequired`, whose message says
  which command to run.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import secrets
import socket
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from mcp.client.auth import OAuthClientProvider
    from mcp.shared.auth import OAuthClientInformationFull, OAuthToken

    from ._settings import OAuthSettings, ServerConfig

#: overrides the folder the tokens are kept in (tests, or a user who wants them elsewhere)
AUTH_DIR_ENV = "NEXUS_MCP_AUTH_DIR"
#: the path the login's loopback listener takes the redirect on
CALLBACK_PATH = "/callback"
#: how long `login` waits for the person to finish in the browser, by default
LOGIN_SECONDS = 300.0
#: the format of a token file; another value is not read
FILE_VERSION = 1


class LoginRequired(Exception):
    """A server needs the person to log in (no tokens, or tokens it refused and that could not be
    refreshed): raised instead of opening a browser in the middle of a run."""

    def __init__(self, server: str, why: str = "") -> None:
        self.server = server
        super().__init__(f"MCP server {server!r} needs a login{f' ({why})' if why else ''}: run "
                         f"`nexus mcp login {server}` (it opens the server's sign-in page in your browser)")


class AuthStoreError(Exception):
    """The token folder cannot be used (inside the workspace, not a folder, not writable)."""


def auth_dir(environ: Any = os.environ) -> Path:
    """The folder the tokens of every server are kept in (see the module's docstring)."""
    given = environ.get(AUTH_DIR_ENV, "")
    if given:
        return Path(given).expanduser().resolve()
    state = environ.get("XDG_STATE_HOME", "")
    base = Path(state) if state and os.path.isabs(state) else Path.home() / ".local" / "state"
    return (base / "nexus" / "mcp-oauth").resolve()


def check_outside(folder: Path, workspace: Path) -> None:
    """Refuse a token folder inside the workspace (or holding it): what the tools may read."""
    workspace = workspace.resolve()
    if folder == workspace or folder.is_relative_to(workspace):
        raise AuthStoreError(f"the OAuth token folder {folder} is inside the workspace {workspace}, where tools can "
                             f"read it: set {AUTH_DIR_ENV} to a folder outside it")


def token_path(folder: Path, server: str, url: str) -> Path:
    """A server's token file: its name (to find it) and a digest of its URL (tokens belong to one
    server's URL: two configs naming different servers `docs` do not share them)."""
    digest = hashlib.sha256(url.encode()).hexdigest()[:16]
    return folder / f"{re.sub(r'[^A-Za-z0-9_-]', '_', server)}-{digest}.json"


class FileTokenStorage:
    """The SDK's `TokenStorage` over one server's token file. A configured `client_id` (a client
    registered by hand) is given as the client information and never written."""

    def __init__(self, path: Path, server: str, url: str, settings: OAuthSettings) -> None:
        self.path = path
        self.server = server
        self.url = url
        self.settings = settings

    # -- the file ---------------------------------------------------------------------------

    def read(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError):
            return {}  # unreadable: as if logged out (the next login writes it afresh)
        if not isinstance(data, dict) or data.get("version") != FILE_VERSION or data.get("url") != self.url:
            return {}
        return data

    def _write(self, data: dict[str, Any]) -> None:
        folder = self.path.parent
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        with contextlib.suppress(OSError):
            os.chmod(folder, 0o700)
        data = {**data, "version": FILE_VERSION, "server": self.server, "url": self.url}
        temporary = self.path.with_name(f".{self.path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as file:
                json.dump(data, file, indent=1)
            os.replace(temporary, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise

    def update(self, **fields: Any) -> None:
        self._write({**self.read(), **fields})

    def forget(self) -> bool:
        """Remove the server's tokens and registration; whether there were any."""
        try:
            self.path.unlink()
        except FileNotFoundError:
            return False
        return True

    def expires_at(self) -> float | None:
        value = self.read().get("expires_at")
        return float(value) if isinstance(value, (int, float)) else None

    def has_tokens(self) -> bool:
        return isinstance(self.read().get("tokens"), dict)

    # -- TokenStorage -----------------------------------------------------------------------

    async def get_tokens(self) -> OAuthToken | None:
        from mcp.shared.auth import OAuthToken
        from pydantic import ValidationError

        tokens = self.read().get("tokens")
        try:
            return OAuthToken.model_validate(tokens) if isinstance(tokens, dict) else None
        except ValidationError:
            return None

    async def set_tokens(self, tokens: OAuthToken) -> None:
        expires = time.time() + tokens.expires_in if tokens.expires_in is not None else None
        self.update(tokens=tokens.model_dump(mode="json", exclude_none=True), expires_at=expires)

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        from mcp.shared.auth import OAuthClientInformationFull
        from pydantic import ValidationError

        if self.settings.client_id:
            return OAuthClientInformationFull(
                client_id=self.settings.client_id, client_secret=self.settings.client_secret or None,
                redirect_uris=None,
                token_endpoint_auth_method="client_secret_basic" if self.settings.client_secret else "none")
        info = self.read().get("client")
        try:
            return OAuthClientInformationFull.model_validate(info) if isinstance(info, dict) else None
        except ValidationError:
            return None

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        if self.settings.client_id:
            return  # the configured client is the config's, not the file's
        self.update(client=client_info.model_dump(mode="json", exclude_none=True))


class LoginStorage(FileTokenStorage):
    """A login's view of the token file: no tokens until the login gets new ones (so the SDK goes
    to the authorization page even while older ones are kept), which are then written as usual.
    The tokens kept before stay until then: a login that fails loses nothing."""

    def __init__(self, path: Path, server: str, url: str, settings: OAuthSettings) -> None:
        super().__init__(path, server, url, settings)
        self.fresh: OAuthToken | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.fresh

    async def set_tokens(self, tokens: OAuthToken) -> None:
        await super().set_tokens(tokens)
        self.fresh = tokens

    def expires_at(self) -> float | None:
        return None if self.fresh is None else super().expires_at()


def storage_for(config: ServerConfig, folder: Path | None = None) -> FileTokenStorage:
    assert config.oauth is not None
    folder = folder if folder is not None else auth_dir()
    return FileTokenStorage(token_path(folder, config.name, config.url), config.name, config.url, config.oauth)


def _stored_redirect(storage: FileTokenStorage) -> str | None:
    """The redirect URI the stored registration was made with (a login reuses its port)."""
    info = storage.read().get("client")
    uris = info.get("redirect_uris") if isinstance(info, dict) else None
    return uris[0] if isinstance(uris, list) and uris and isinstance(uris[0], str) else None


def make_provider(config: ServerConfig, storage: FileTokenStorage, *, redirect_uri: str,
                  redirect_handler: Callable[[str], Awaitable[None]],
                  callback_handler: Callable[[], Awaitable[Any]]) -> OAuthClientProvider:
    """The SDK's OAuth provider for one server, its tokens in `storage`. The expiry of the
    stored access token is known from the start (the SDK keeps it in memory only), so a token
    that expired between two runs is refreshed before it is sent, not refused by the server."""
    from mcp.client.auth import OAuthClientProvider
    from mcp.shared.auth import OAuthClientMetadata
    from pydantic import AnyUrl

    assert config.oauth is not None
    settings = config.oauth

    class Provider(OAuthClientProvider):
        async def _initialize(self) -> None:
            await super()._initialize()
            self.context.token_expiry_time = storage.expires_at()

        async def _perform_authorization(self) -> Any:
            # the scopes a server asked for more of during a run (a step-up, which a run cannot
            # do: see run_provider) are asked for at the next login, with what it asks for now
            wanted = storage.read().get("wanted_scope")
            if isinstance(wanted, str) and wanted:
                from mcp.client.auth.utils import union_scopes

                self.context.client_metadata.scope = union_scopes(self.context.client_metadata.scope, wanted)
            return await super()._perform_authorization()

    metadata = OAuthClientMetadata(
        client_name="Nexus", redirect_uris=[AnyUrl(redirect_uri)],
        grant_types=["authorization_code", "refresh_token"], response_types=["code"],
        token_endpoint_auth_method="none", scope=settings.scope or None)
    return Provider(config.url, metadata, storage, redirect_handler=redirect_handler,
                    callback_handler=callback_handler, client_metadata_url=settings.client_metadata_url or None)


def run_provider(config: ServerConfig, on_login_needed: Callable[[LoginRequired], None] | None = None
                 ) -> OAuthClientProvider:
    """The provider a Nexus's run uses: it sends and refreshes the stored tokens, and raises
    `LoginRequired` where the SDK would send the person to the authorization page (telling
    `on_login_needed` first: the SDK's transport may end the session with another error)."""
    storage = storage_for(config)

    async def needs_login(_url: str) -> None:
        # the scopes the SDK was about to ask for: more than granted when the server asked for
        # more (403 insufficient_scope); kept for the login to ask for them
        scope = provider.context.client_metadata.scope
        if scope:
            storage.update(wanted_scope=scope)
        why = ""
        if provider.context.current_tokens is not None or storage.has_tokens():
            why = "it refused the token kept for it, which could not be refreshed"
            granted = provider.context.current_tokens.scope if provider.context.current_tokens else None
            if scope and granted is not None and set(scope.split()) - set(granted.split()):
                why = f"it asks for more access than was granted: scope {scope!r}"
        needed = LoginRequired(config.name, why)
        if on_login_needed is not None:
            on_login_needed(needed)
        raise needed

    async def no_callback() -> Any:
        raise LoginRequired(config.name)

    provider = make_provider(config, storage,
                             redirect_uri=_stored_redirect(storage) or f"http://127.0.0.1{CALLBACK_PATH}",
                             redirect_handler=needs_login, callback_handler=no_callback)
    return provider


def _first(group: BaseExceptionGroup) -> BaseException:
    """The first exception in a (nested) exception group."""
    exc: BaseException = group
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def login_required(exc: BaseException) -> LoginRequired | None:
    """The `LoginRequired` inside `exc` (the SDK and anyio wrap it), if any."""
    seen: set[int] = set()
    stack = [exc]
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, LoginRequired):
            return current
        if isinstance(current, BaseExceptionGroup):
            stack.extend(current.exceptions)
        for linked in (current.__cause__, current.__context__):
            if linked is not None:
                stack.append(linked)
    return None


# -- logging in -------------------------------------------------------------------------------


def _loopback_socket(port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", port))
        sock.listen(8)
    except OSError:
        sock.close()
        raise
    sock.setblocking(False)
    return sock


def _bind_callback(storage: FileTokenStorage, settings: OAuthSettings) -> socket.socket:
    """The loopback socket the redirect comes back to: the configured `callback_port`, else the
    port the stored registration names (its redirect URI must match), else any free one (and the
    stored registration, made for another port, is dropped so the SDK registers afresh)."""
    if settings.callback_port:
        return _loopback_socket(settings.callback_port)
    stored = _stored_redirect(storage)
    if stored is not None and not settings.client_id:
        where = urlsplit(stored)
        if where.hostname == "127.0.0.1" and where.port and where.path == CALLBACK_PATH:
            with contextlib.suppress(OSError):
                return _loopback_socket(where.port)
        data = storage.read()
        data.pop("client", None)
        storage._write(data)
    return _loopback_socket(0)


async def login(config: ServerConfig, show_url: Callable[[str], None], *, timeout: float = LOGIN_SECONDS,
                folder: Path | None = None) -> list[str]:
    """Log in to `config`'s server: let the SDK run the authorization code flow, as if no token
    were kept (see `LoginStorage`) (the authorization URL goes to `show_url`, which shows it and may open a browser;
    the redirect comes back to a loopback listener of ours), then list the server's tools with the
    new token, proving it works. Returns the tools' names. Raises TimeoutError when the person
    has not finished within `timeout`, and the SDK's OAuth errors as they are."""
    import anyio
    import httpx2
    import uvicorn
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared.auth import AuthorizationCodeResult
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import HTMLResponse
    from starlette.routing import Route

    assert config.oauth is not None
    kept = storage_for(config, folder)
    storage = LoginStorage(kept.path, kept.server, kept.url, config.oauth)
    sock = _bind_callback(storage, config.oauth)
    port = sock.getsockname()[1]
    redirect_uri = f"http://127.0.0.1:{port}{CALLBACK_PATH}"
    arrived: anyio.Event = anyio.Event()
    result: dict[str, str | None] = {}

    async def callback(request: Request) -> HTMLResponse:
        params = request.query_params
        if not arrived.is_set():
            result.update(code=params.get("code"), state=params.get("state"), iss=params.get("iss"),
                          error=params.get("error"), error_description=params.get("error_description"))
            arrived.set()
        if params.get("error"):
            return HTMLResponse("<h1>Nexus: the login was refused</h1><p>See the terminal.</p>", status_code=400)
        return HTMLResponse("<h1>Nexus: logged in</h1><p>You can close this tab.</p>")

    async def redirect_handler(url: str) -> None:
        # in a thread: what shows it may wait (a browser started), and the listener must answer meanwhile
        await anyio.to_thread.run_sync(show_url, url)

    async def callback_handler() -> AuthorizationCodeResult:
        await arrived.wait()
        if result.get("error"):
            from mcp.client.auth import OAuthFlowError

            raise OAuthFlowError(f"the authorization server refused the login: {result['error']}"
                                 + (f" ({result['error_description']})" if result.get("error_description") else ""))
        return AuthorizationCodeResult(code=result.get("code") or "", state=result.get("state"), iss=result.get("iss"))

    provider = make_provider(config, storage, redirect_uri=redirect_uri, redirect_handler=redirect_handler,
                             callback_handler=callback_handler)
    app = Starlette(routes=[Route(CALLBACK_PATH, callback)])
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(server.serve, [sock])
            try:
                with anyio.fail_after(timeout):
                    async with (httpx2.AsyncClient(headers=config.headers, auth=provider,
                                                   timeout=httpx2.Timeout(30.0, read=300.0)) as http,
                                Client(streamable_http_client(config.url, http_client=http), cache=None) as client):
                        tools = await client.list_tools()
            finally:
                server.should_exit = True
    except BaseExceptionGroup as group:  # the task groups' wrapping: the caller gets what went wrong
        raise _first(group) from None
    finally:
        sock.close()
    if storage.fresh is None:
        raise RuntimeError(f"MCP server {config.name!r}: the login ended without a token")
    data = storage.read()
    if data.pop("wanted_scope", None) is not None:
        storage._write(data)
    return [tool.name for tool in tools.tools]
