"""The `plugins.nexus.mcp.client` section: its attrs settings classes (the config schema is
derived from them), and what the plugin and `nexus mcp serve` make of them at start: each
server's `ServerConfig`, `${VAR}` expanded from the environment, and the serve token.

    Settings                 the section
      servers: {name: ServerSettings}       a server as written (oauth: OAuthSettings)
      serve: ServeSettings                  how `nexus mcp serve --http` admits clients

A check one setting makes against another (one of `command` or `url`; an `Authorization`
header beside `oauth`) is the settings class's; what needs the environment or a file (a
`${VAR}` that is not set, a `token_file` that cannot be read) is checked when the Nexus
starts (`resolve_servers`, `resolve_serve`). Each is a `SettingError` naming the key, e.g.
`plugins.nexus.mcp.client.servers.docs.headers.Authorization`, reported with the file and
line like a misspelt key (exit 2).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import attrs
from nexus_core.plugins import SettingError, read_settings, setting, settings_schema

from nexus_core import ConfigError

PLUGIN_ID = "nexus.mcp.client"

#: a server's name: it names its log file, and prefixes its tools' names unless `prefix` says otherwise
SERVER_NAME = r"^[A-Za-z0-9_-]{1,64}$"
#: a server's `prefix`: its tools are `<prefix>_<tool>`, or keep their own names when it is ""
PREFIX = r"^[A-Za-z0-9_-]{0,64}$"

_VARIABLE = re.compile(r"\$\$|\$\{([^}]*)\}")
_VARIABLE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

#: the settings only a stdio server has, and those only a streamable HTTP server has
_STDIO_ONLY = ("command", "args", "env", "cwd")
_HTTP_ONLY = ("url", "headers", "oauth")


@attrs.frozen
class OAuthSettings:
    """A server's `oauth` settings (`oauth: true` takes these defaults); see `_auth`."""

    scope: str = setting("", description="the scopes to ask for, space-separated (default: what the server asks "
                                         "for)")
    client_id: str | None = setting(None, minLength=1,
                                    description="a client registered by hand with the authorization server "
                                                "(default: registered at the first login, if the server allows it)")
    client_secret: str = attrs.field(default="", repr=False,
                                     metadata={"description": "its secret, if it has one (${VAR} expanded)"})
    client_metadata_url: str | None = setting(None, pattern="^https://",
                                              description="an HTTPS URL of a client metadata document to use as the "
                                                          "client id, where the server supports it")
    callback_port: int | None = setting(None, minimum=1, maximum=65535,
                                        description="the loopback port `nexus mcp login` takes the redirect on "
                                                    "(default: any free one; give one when the client is "
                                                    "registered with a fixed redirect URI "
                                                    "http://127.0.0.1:PORT/callback)")


@attrs.frozen
class ServerSettings:
    """One server as written: a stdio server (`command`, `args`, `env`, `cwd`) or a streamable
    HTTP one (`url`, `headers`, `oauth`). A setting not given is None, so that one of the other
    kind is refused even when it is empty."""

    command: str | None = setting(None, minLength=1, description="the executable of a stdio server (looked up on "
                                                                 "PATH)")
    args: tuple[str, ...] | None = setting(None, description="its arguments")
    env: dict[str, str] | None = setting(None, description="variables set for it, over HOME, LOGNAME, PATH, SHELL, "
                                                           "TERM, USER")
    cwd: str | None = setting(None, description="its working folder (default: the workspace)")
    url: str | None = setting(None, pattern="^https?://", description="the endpoint of a streamable HTTP server")
    headers: dict[str, str] | None = setting(None, description="HTTP headers sent with every request")
    oauth: bool | OAuthSettings = setting(False, description="log in to this HTTP server with OAuth (`nexus mcp "
                                                             "login <server>`): true, or settings")
    timeout_seconds: float = setting(30, exclusiveMinimum=0, description="how long one call may take")
    start_timeout_seconds: float = setting(60, exclusiveMinimum=0,
                                           description="how long starting it (and listing its tools) may take")
    start: Literal["lazy", "eager"] = setting("lazy", description="lazy: on its first call (its tools listed from the "
                                                                  "cache of its last start); eager: when the Nexus "
                                                                  "starts")
    prefix: str | None = setting(None, pattern=PREFIX, description="its tools are <prefix>_<tool> (default: the "
                                                                   "server's name; \"\": the tools' own names)")

    def __attrs_post_init__(self) -> None:
        stdio, http = self.command is not None, self.url is not None
        if stdio == http:
            raise SettingError((), "give either `command` (a stdio server) or `url` (a streamable HTTP server)"
                                   f"{', not both' if stdio else ''}")
        for key in _HTTP_ONLY if stdio else _STDIO_ONLY:
            if getattr(self, key) not in (None, False):
                raise SettingError(key, f"not a setting of a {'stdio' if stdio else 'streamable HTTP'} server")
        if self.oauth is not False and "authorization" in {k.lower() for k in self.headers or {}}:
            raise SettingError("headers", "an Authorization header and `oauth` both say how to log in: give one")

    @property
    def transport(self) -> Literal["stdio", "http"]:
        return "stdio" if self.command is not None else "http"

    def fingerprint(self) -> str:
        """A digest of how the server is reached, as written (before `${VAR}` expansion, so no
        secret goes into it): the cached tool list of a server is used only while it matches."""
        written = {key: getattr(self, key) for key in ("command", "args", "env", "cwd", "url", "headers")}
        return hashlib.sha256(json.dumps(written, sort_keys=True).encode()).hexdigest()[:16]


@attrs.frozen
class ServeSettings:
    """`plugins.nexus.mcp.client.serve`: how `nexus mcp serve --http` admits clients."""

    token: str | None = attrs.field(default=None, repr=False, metadata={
        "schema": {"minLength": 1},
        "description": "the bearer token clients must send (${VAR} expanded); NEXUS_MCP_TOKEN overrides it; "
                       "default: one made at each start"})
    token_file: str | None = setting(None, minLength=1,
                                     description="a file holding the token (relative: to the config file's folder)")
    allowed_hosts: tuple[str, ...] = setting((), items={"type": "string", "minLength": 1},
                                             description="Host header values accepted besides the bound address's own "
                                                         "(name:port, name:* for any port, or a bare name behind a "
                                                         "proxy)")
    allowed_origins: tuple[str, ...] = setting((), items={"type": "string", "pattern": "^https?://[^/]+$"},
                                               description="browser Origins accepted besides the bound address's own")

    def __attrs_post_init__(self) -> None:
        if self.token is not None and self.token_file is not None:
            raise SettingError("token_file", "give `token` or `token_file`, not both")


@attrs.frozen
class Settings:
    """The `plugins.nexus.mcp.client` section; its JSON Schema is derived from this class."""

    servers: dict[str, ServerSettings] = setting(factory=dict, propertyNames={"pattern": SERVER_NAME},
                                                 description="MCP servers whose tools become Nexus tools, by name")
    serve: ServeSettings = setting(factory=ServeSettings, description="how `nexus mcp serve --http` admits clients")


#: the schema of one server's settings (docs/mcp.md's table lists its keys)
SERVER_SCHEMA: dict[str, Any] = settings_schema(ServerSettings)


# -- what the settings are at start -------------------------------------------------------------


@attrs.frozen
class ServerConfig:
    """One server's settings, checked and with `${VAR}` expanded: what a connection uses."""

    name: str
    transport: Literal["stdio", "http"]
    command: str = ""
    args: tuple[str, ...] = ()
    env: dict[str, str] = attrs.field(factory=dict)
    cwd: Path | None = None
    url: str = ""
    headers: dict[str, str] = attrs.field(factory=dict)
    #: set when the server is logged in to with OAuth (`_auth`)
    oauth: OAuthSettings | None = None
    timeout_seconds: float = 30.0
    start_timeout_seconds: float = 60.0
    start: Literal["lazy", "eager"] = "lazy"
    #: what its tools' names start with (`<prefix>_<tool>`; "" for none): its name unless the config says
    prefix: str = attrs.field(default=attrs.Factory(lambda self: self.name, takes_self=True))
    #: `ServerSettings.fingerprint`
    fingerprint: str = ""

    def describe(self) -> str:
        if self.transport == "http":
            return self.url
        return " ".join([self.command, *self.args])


class _Unexpandable(ValueError):
    """A `${VAR}` that cannot be expanded; the message says which and why, without the key."""


def _expand(text: str, environ: Mapping[str, str]) -> str:
    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        if not _VARIABLE_NAME.match(name):
            raise _Unexpandable(f"${{{name}}} is not a variable name (write $$ for a literal $)")
        if name not in environ:
            raise _Unexpandable(f"environment variable {name} is not set (it is used as ${{{name}}})")
        return environ[name]

    return _VARIABLE.sub(replace, text)


def expand(text: str, where: str, environ: Mapping[str, str]) -> str:
    """`text` with each `${VAR}` replaced by the variable's value (`$$` is a literal `$`).
    Raises ValueError naming `where` and the variable when one is not set."""
    try:
        return _expand(text, environ)
    except _Unexpandable as exc:
        raise ValueError(f"{where}: {exc}") from None


def problems_of(errors: list[SettingError], config: Any) -> ConfigError:
    """SettingErrors of this plugin's section as one ConfigError, each problem with the file
    and line of its key (as Nexus reports a plugin's SettingError)."""
    found = []
    for error in errors:
        path, text = error.problem_in(PLUGIN_ID)
        found.append(config.problem(path, text))
    return ConfigError(found, config.source)


def read_section(section: Mapping[str, Any], config: Any) -> Settings:
    """The section (checked against the schema, or as a test writes it) as `Settings`; a
    SettingError of a server or of `serve` becomes a ConfigError with the key's line."""
    try:
        return read_settings(Settings, dict(section))
    except SettingError as exc:
        raise problems_of([exc], config) from None


def configured(config: Any) -> Settings:
    """The section of `config` (a Nexus's), checked and read, whether or not the plugin is
    active in it (`nexus mcp serve` and `nexus mcp login` read it themselves)."""
    return read_section(config.validate_plugin_section(PLUGIN_ID, settings_schema(Settings)), config)


def resolve_servers(settings: Settings, config: Any, environ: Mapping[str, str] = os.environ) -> list[ServerConfig]:
    """Each server of `settings`, in the order written, `${VAR}` expanded. Raises ConfigError
    listing every variable that is not set (`file:line: plugins.nexus.mcp.client.servers.<name>.<key>: ...`)."""
    workspace = Path(config.workspace)
    errors: list[SettingError] = []
    servers = []
    for name, server in settings.servers.items():

        def expanded(value: str, *key: str | int, name: str = name) -> str:
            try:
                return _expand(value, environ)
            except _Unexpandable as exc:
                errors.append(SettingError(("servers", name, *key), str(exc)))
                return value

        common: dict[str, Any] = {
            "name": name, "timeout_seconds": float(server.timeout_seconds),
            "start_timeout_seconds": float(server.start_timeout_seconds), "start": server.start,
            "prefix": name if server.prefix is None else server.prefix, "fingerprint": server.fingerprint(),
        }
        if server.transport == "stdio":
            assert server.command is not None
            cwd = expanded(server.cwd, "cwd") if server.cwd else None
            servers.append(ServerConfig(
                transport="stdio", command=expanded(server.command, "command"),
                args=tuple(expanded(a, "args", i) for i, a in enumerate(server.args or ())),
                env={k: expanded(v, "env", k) for k, v in (server.env or {}).items()},
                cwd=(workspace / cwd).resolve() if cwd else workspace, **common))
        else:
            assert server.url is not None
            oauth = None
            if server.oauth is not False:
                given = server.oauth if isinstance(server.oauth, OAuthSettings) else OAuthSettings()

                def text(value: str | None, key: str) -> str | None:
                    return expanded(value, "oauth", key) if value else value

                oauth = OAuthSettings(
                    scope=text(given.scope, "scope") or "", client_id=text(given.client_id, "client_id"),
                    client_secret=text(given.client_secret, "client_secret") or "",
                    client_metadata_url=text(given.client_metadata_url, "client_metadata_url"),
                    callback_port=given.callback_port)
            servers.append(ServerConfig(
                transport="http", url=expanded(server.url, "url"),
                headers={k: expanded(v, "headers", k) for k, v in (server.headers or {}).items()},
                oauth=oauth, **common))
    if errors:
        raise problems_of(errors, config)
    return servers


def parse_servers(section: Mapping[str, Any], nexus: Any) -> list[ServerConfig]:
    """The servers of a config section (`read_section`, then `resolve_servers`) of `nexus`'s config."""
    return resolve_servers(read_section(section, nexus.config), nexus.config)


@attrs.frozen
class ServeToken:
    """The serve token the settings give (None: not given), and where it came from, for
    messages (never the token itself)."""

    token: str | None = attrs.field(default=None, repr=False)
    token_source: str = ""


def resolve_serve(settings: ServeSettings, config: Any, environ: Mapping[str, str] = os.environ) -> ServeToken:
    """The token `serve` gives: `token` expanded, or `token_file` read (relative to the config
    file's folder). Raises ConfigError naming the key and line of one that cannot be had."""
    dotted = f"plugins.{PLUGIN_ID}.serve"
    key = "token" if settings.token is not None else "token_file"
    try:
        if settings.token is not None:
            return ServeToken(_expand(settings.token, environ), f"{dotted}.token")
        if settings.token_file is not None:
            base = Path(config.source).parent if config.source else Path.cwd()
            file = base / os.path.expanduser(_expand(settings.token_file, environ))
            try:
                token = file.read_text(encoding="utf-8").strip()
            except OSError as exc:
                raise _Unexpandable(f"cannot read {file}: {exc.strerror or exc}") from None
            return ServeToken(token, f"{dotted}.token_file ({file})")
    except _Unexpandable as exc:
        raise problems_of([SettingError(("serve", key), str(exc))], config) from None
    return ServeToken()
