"""What keeps `nexus mcp serve --http` to the clients it is meant for.

Every tool of the Nexus is one request away, `shell` among them, so:

- **a bearer token on every request.** Generated for the run (`secrets.token_urlsafe`), or given
  by `NEXUS_MCP_TOKEN` or the config; compared in constant time; a request without it, or with
  another, is a 401 with `WWW-Authenticate: Bearer ...` that runs nothing. A token in the URL's
  query (`?access_token=`, which ends up in logs and browser history) is refused with a 400.
- **Host and Origin checked against the address actually bound** (DNS rebinding: a web page
  whose name an attacker points at 127.0.0.1 reaches the server with `Host: attacker.example`):
  the bound address and the names this machine gives it (the name given to `--http`,
  `localhost`, the hosts file), each with the bound port, plus what the config adds.
- **loopback unless told otherwise**: binding an address other machines reach (`0.0.0.0`,
  `[::]`, a LAN address) needs `--allow-remote`, and still needs the token.

Built on the MCP SDK's own pieces rather than by hand: its bearer middleware
(`BearerAuthBackend` and `RequireAuthMiddleware`, which `Server.streamable_http_app(auth=...,
token_verifier=...)` wires) with `StaticTokenVerifier` as the `TokenVerifier`, and its
DNS-rebinding check (`TransportSecuritySettings`), whose allow-lists are made here from the
socket, where the SDK's own default covers only the host strings `127.0.0.1`, `localhost` and
`::1`, with any port. An OAuth resource server (a verifier of issued tokens, and protected
resource metadata naming an authorization server) fits the same `HttpSecurity`.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import re
import secrets
import socket
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl

import attrs

if TYPE_CHECKING:
    from mcp.server.auth.provider import AccessToken, TokenVerifier
    from mcp.server.auth.settings import AuthSettings
    from mcp.server.transport_security import TransportSecuritySettings

#: the environment variable that gives the token
TOKEN_ENV = "NEXUS_MCP_TOKEN"
#: the shortest token accepted from a person (a generated one has 43 characters)
MIN_TOKEN_LENGTH = 32
#: RFC 6750's b64token: what may follow `Bearer ` in a header
TOKEN_CHARACTERS = re.compile(r"^[A-Za-z0-9\-._~+/]+=*$")
#: query parameters that would carry a token in the URL (RFC 6750 names `access_token`)
QUERY_TOKEN_NAMES = frozenset({"access_token", "token", "bearer", "auth", "authorization"})
#: the client id a request authenticated with the static token carries
CLIENT_ID = "nexus-mcp-serve"
HOSTS_FILE = Path("/etc/hosts")


class BindRefused(ValueError):
    """The address asked for cannot be served on as asked (not loopback, or not an address)."""


# -- the token ------------------------------------------------------------------------------


@attrs.frozen(repr=False)
class Token:
    """The bearer token of a run, and where it came from (for messages: never the value)."""

    value: str
    source: str  #: "generated" or where it was given, e.g. "the environment variable NEXUS_MCP_TOKEN"

    @property
    def generated(self) -> bool:
        return self.source == "generated"

    def __repr__(self) -> str:
        return f"Token(source={self.source!r})"


def generate_token() -> Token:
    return Token(secrets.token_urlsafe(32), "generated")


def checked_token(value: str, source: str) -> Token:
    """A token given by a person, or ValueError naming `source` and what is wrong with it."""
    value = value.strip()
    if len(value) < MIN_TOKEN_LENGTH:
        raise ValueError(f"{source}: the token has {len(value)} characters; give one of at least "
                         f"{MIN_TOKEN_LENGTH} (python -c 'import secrets; print(secrets.token_urlsafe(32))' makes one)")
    if not TOKEN_CHARACTERS.match(value):
        raise ValueError(f"{source}: the token may hold only A-Z a-z 0-9 - . _ ~ + / (and = at the end), as an "
                         "HTTP bearer token does")
    return Token(value, source)


def resolve_token(given: str | None, given_source: str, environ: Any) -> Token:
    """The run's token: `NEXUS_MCP_TOKEN` if set, else the one `given` by the config, else a new
    one. ValueError names the source of a token that will not do."""
    from_env = environ.get(TOKEN_ENV)
    if from_env:
        return checked_token(from_env, f"the environment variable {TOKEN_ENV}")
    if given is not None:
        return checked_token(given, given_source)
    return generate_token()


class StaticTokenVerifier:
    """The SDK's `TokenVerifier` for one shared token: a match (compared in constant time, as
    digests, so not even the length leaks) is a client with no scopes; anything else is None,
    which the SDK's middleware answers with 401."""

    def __init__(self, token: Token) -> None:
        self._digest = hashlib.sha256(token.value.encode()).digest()

    async def verify_token(self, token: str) -> AccessToken | None:
        from mcp.server.auth.provider import AccessToken

        given = hashlib.sha256(token.encode("utf-8", "surrogateescape")).digest()
        if hmac.compare_digest(given, self._digest):
            return AccessToken(token=token, client_id=CLIENT_ID, scopes=[])
        return None


# -- the address ----------------------------------------------------------------------------


def _ip(address: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    return ipaddress.ip_address(address.split("%", 1)[0])  # an IPv6 zone (fe80::1%eth0) aside


def is_loopback(address: str) -> bool:
    ip = _ip(address)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped.is_loopback
    return ip.is_loopback


def bind_address(host: str) -> tuple[socket.AddressFamily, str]:
    """The address `host` (an IP address or a name) is served on: itself, or the first IPv4
    address the name resolves to (else the first IPv6 one), as uvicorn would bind it."""
    try:
        ip = _ip(host)
        return (socket.AF_INET6 if ip.version == 6 else socket.AF_INET), host
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise BindRefused(f"{host!r} is not an address, and does not resolve to one: {exc.strerror or exc}") from None
    for family in (socket.AF_INET, socket.AF_INET6):
        for info in infos:
            if info[0] == family:
                return family, str(info[4][0])
    raise BindRefused(f"{host!r} resolves to no IPv4 or IPv6 address")


def listen(host: str, port: int, allow_remote: bool) -> socket.socket:
    """A listening socket on `host:port`. Refuses (BindRefused) an address other machines can
    reach, unless `allow_remote`; OSError when the address cannot be bound."""
    family, address = bind_address(host)
    if not allow_remote and not is_loopback(address):
        what = "every address of this machine" if _ip(address).is_unspecified else "an address other machines reach"
        raise BindRefused(f"{host} is {what}, not loopback: every machine that reaches it could call this Nexus's "
                          "tools, with only the token in the way. Give --allow-remote to serve there all the same "
                          "(the token is still required), or serve on 127.0.0.1")
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6 and _ip(address).is_unspecified:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)  # [::] takes IPv4 too, as it says
        sock.bind((address, port))
        sock.listen(2048)
    except BaseException:
        sock.close()
        raise
    return sock  # not inheritable (PEP 446): no tool's child process holds the port


def _hosts_file_names(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> list[str]:
    try:
        lines = HOSTS_FILE.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []
    names = []
    for line in lines:
        fields = line.split("#", 1)[0].split()
        if len(fields) < 2:
            continue
        try:
            if _ip(fields[0]) == ip:
                names.extend(fields[1:])
        except ValueError:
            continue
    return names


def _resolves_to(name: str, ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    try:
        return any(_ip(str(info[4][0])) == ip for info in socket.getaddrinfo(name, None, type=socket.SOCK_STREAM))
    except (OSError, ValueError):
        return False


def local_names(address: str, given: str) -> list[str]:
    """The host names a request to `address` may carry: the address itself, the name it was
    given as, and the names this machine gives it (`localhost` when it resolves there, and the
    hosts file's). Never a name only DNS gives: a name an attacker controls can resolve to any
    address, which is what DNS rebinding is. For an unspecified address (`0.0.0.0`, `::`), every
    loopback form and this machine's own names."""
    ip = _ip(address)
    names: list[str] = []
    if ip.is_unspecified:
        for loopback in ("127.0.0.1", "::1") if ip.version == 6 else ("127.0.0.1",):
            names.extend(local_names(loopback, loopback))
        hostname = socket.gethostname()
        names.extend([hostname, socket.getfqdn(hostname)])
        try:
            names.extend(str(info[4][0]) for info in socket.getaddrinfo(hostname, None, type=socket.SOCK_STREAM))
        except OSError:
            pass
        return list(dict.fromkeys(n for n in names if n))
    names.append(str(ip))
    if given != address:
        names.append(given)  # the person chose the name, and it resolved here
    if _resolves_to("localhost", ip):
        names.append("localhost")
    names.extend(_hosts_file_names(ip))
    return list(dict.fromkeys(names))


def _authority(name: str, port: int) -> list[str]:
    """A name (or address) and port as Host headers carry them (also bare on port 80)."""
    shown = f"[{name}]" if ":" in name else name
    return [f"{shown}:{port}", shown] if port == 80 else [f"{shown}:{port}"]


# -- the whole ------------------------------------------------------------------------------


@attrs.frozen
class HttpSecurity:
    """Everything `NexusMcpServer.http_app` needs to guard one listening address."""

    token: Token
    url: str  #: what is served, e.g. http://127.0.0.1:8000/mcp
    allowed_hosts: tuple[str, ...]
    allowed_origins: tuple[str, ...]
    loopback: bool

    @classmethod
    def for_socket(cls, sock: socket.socket, *, given_host: str, token: Token, path: str = "/mcp",
                   allowed_hosts: Iterable[str] = (), allowed_origins: Iterable[str] = ()) -> HttpSecurity:
        """The protections of a server listening on `sock` (bound for `given_host`, the host as
        the person wrote it): the token, and allow-lists made from the bound address and port,
        plus `allowed_hosts` (Host values as sent: `name:port`, `name:*` for any port, or a bare
        `name` behind a proxy on a default port) and `allowed_origins` (`scheme://host[:port]`)."""
        address, port = sock.getsockname()[:2]
        hosts = [a for name in local_names(address, given_host) for a in _authority(name, port)]
        hosts.extend(allowed_hosts)
        origins = [f"http://{h}" for h in hosts]
        origins.extend(allowed_origins)
        shown = f"[{address}]" if ":" in address else address
        return cls(token=token, url=f"http://{shown}:{port}{path}", allowed_hosts=tuple(dict.fromkeys(hosts)),
                   allowed_origins=tuple(dict.fromkeys(origins)), loopback=is_loopback(address))

    def transport_security(self) -> TransportSecuritySettings:
        from mcp.server.transport_security import TransportSecuritySettings

        return TransportSecuritySettings(enable_dns_rebinding_protection=True,
                                         allowed_hosts=list(self.allowed_hosts),
                                         allowed_origins=list(self.allowed_origins))

    def token_verifier(self) -> TokenVerifier:
        return StaticTokenVerifier(self.token)

    def auth_settings(self) -> AuthSettings:
        """The SDK's settings for a resource server whose tokens the verifier checks. A static
        token has no authorization server to point a client at, so no OAuth protected-resource
        metadata is served (`resource_server_url` None); `issuer_url`, which the SDK's model
        requires, is then used for nothing."""
        from mcp.server.auth.settings import AuthSettings

        return AuthSettings(issuer_url=self.url, resource_server_url=None, required_scopes=[])  # type: ignore[arg-type]

    def lines(self) -> list[str]:
        """The protections in force, for the start-up lines and `nexus doctor`."""
        source = "made for this run" if self.token.generated else f"from {self.token.source}"
        return [
            (f"a bearer token ({source}) on every request: without it, or with another, 401 and nothing runs; "
             "one in the URL's query is refused (400)"),
            (f"Host must be {', '.join(self.allowed_hosts)} (else 421); an Origin, when a browser sends one, "
             f"{', '.join(self.allowed_origins)} (else 403)"),
            "bound to loopback only" if self.loopback else "bound to an address other machines reach (--allow-remote)",
        ]


class RefuseTokenInQuery:
    """An ASGI wrapper refusing a request that carries a token in its URL's query (400,
    `invalid_request`, as RFC 6750 answers a token sent a way the server does not take): URLs
    end up in logs, proxies and browser history. Nothing behind it runs for such a request."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            query = scope.get("query_string", b"").decode("latin-1")
            names = {name.lower() for name, _ in parse_qsl(query, keep_blank_values=True)}
            if names & QUERY_TOKEN_NAMES:
                await _refuse(send, 400, "invalid_request",
                              "send the token in the Authorization header (Authorization: Bearer <token>), never in "
                              "the URL")
                return
        await self.app(scope, receive, send)


async def _refuse(send: Any, status: int, error: str, description: str) -> None:
    import json

    body = json.dumps({"error": error, "error_description": description}).encode()
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
        (b"www-authenticate", f'Bearer error="{error}", error_description="{description}"'.encode())]})
    await send({"type": "http.response.body", "body": body})
