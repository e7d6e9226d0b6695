"""The `plugins.nexus.mcp.client` config section: its JSON Schema, and the checked settings of
each server (`${VAR}` expanded from the environment, one of `command` or `url`)."""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any, Literal

import attrs

from nexus_core import ConfigError

PLUGIN_ID = "nexus.mcp.client"

#: a server's name: it names its log file, and prefixes its tools' names unless `prefix` says otherwise
SERVER_NAME = r"^[A-Za-z0-9_-]{1,64}$"
#: a server's `prefix`: its tools are `<prefix>_<tool>`, or keep their own names when it is ""
PREFIX = r"^[A-Za-z0-9_-]{0,64}$"

_STRINGS = {"type": "object", "additionalProperties": {"type": "string"}}

#: a streamable HTTP server's `oauth` settings (`oauth: true` takes the defaults)
OAUTH_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "scope": {"type": "string", "description": "the scopes to ask for, space-separated (default: what the "
                                                   "server asks for)"},
        "client_id": {"type": "string", "minLength": 1,
                      "description": "a client registered by hand with the authorization server (default: "
                                     "registered at the first login, if the server allows it)"},
        "client_secret": {"type": "string", "description": "its secret, if it has one (${VAR} expanded)"},
        "client_metadata_url": {"type": "string", "pattern": "^https://",
                                "description": "an HTTPS URL of a client metadata document to use as the "
                                               "client id, where the server supports it"},
        "callback_port": {"type": "integer", "minimum": 1, "maximum": 65535,
                          "description": "the loopback port `nexus mcp login` takes the redirect on (default: "
                                         "any free one; give one when the client is registered with a fixed "
                                         "redirect URI http://127.0.0.1:PORT/callback)"},
    },
    "additionalProperties": False,
}

SERVER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "command": {"type": "string", "minLength": 1,
                    "description": "the executable of a stdio server (looked up on PATH)"},
        "args": {"type": "array", "items": {"type": "string"}, "description": "its arguments"},
        "env": {**_STRINGS, "description": "variables set for it, over HOME, LOGNAME, PATH, SHELL, TERM, USER"},
        "cwd": {"type": "string", "description": "its working folder (default: the workspace)"},
        "url": {"type": "string", "pattern": "^https?://",
                "description": "the endpoint of a streamable HTTP server"},
        "headers": {**_STRINGS, "description": "HTTP headers sent with every request"},
        "oauth": {"anyOf": [{"type": "boolean"}, OAUTH_SCHEMA],
                  "description": "log in to this HTTP server with OAuth (`nexus mcp login <server>`): true, or "
                                 "settings"},
        "timeout_seconds": {"type": "number", "exclusiveMinimum": 0, "default": 30,
                            "description": "how long one call may take"},
        "start_timeout_seconds": {"type": "number", "exclusiveMinimum": 0, "default": 60,
                                  "description": "how long starting it (and listing its tools) may take"},
        "start": {"enum": ["lazy", "eager"], "default": "lazy",
                  "description": "lazy: on its first call (its tools listed from the cache of its last "
                                 "start); eager: when the Nexus starts"},
        "prefix": {"type": "string", "pattern": PREFIX,
                   "description": "its tools are <prefix>_<tool> (default: the server's name; \"\": the tools' own "
                                  "names)"},
    },
    "additionalProperties": False,
}

#: `nexus mcp serve --http`'s settings (the command belongs to this package)
SERVE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "token": {"type": "string", "minLength": 1,
                  "description": "the bearer token clients must send (${VAR} expanded); NEXUS_MCP_TOKEN overrides "
                                 "it; default: one made at each start"},
        "token_file": {"type": "string", "minLength": 1,
                       "description": "a file holding the token (relative: to the config file's folder)"},
        "allowed_hosts": {"type": "array", "items": {"type": "string", "minLength": 1},
                          "description": "Host header values accepted besides the bound address's own (name:port, "
                                         "name:* for any port, or a bare name behind a proxy)"},
        "allowed_origins": {"type": "array", "items": {"type": "string", "pattern": "^https?://[^/]+$"},
                            "description": "browser Origins accepted besides the bound address's own"},
    },
    "additionalProperties": False,
}

CONFIG_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "servers": {
            "type": "object",
            "propertyNames": {"pattern": SERVER_NAME},
            "additionalProperties": SERVER_SCHEMA,
            "default": {},
            "description": "MCP servers whose tools become Nexus tools, by name",
        },
        "serve": {**SERVE_SCHEMA, "description": "how `nexus mcp serve --http` admits clients"},
    },
}

_VARIABLE = re.compile(r"\$\$|\$\{([^}]*)\}")
_VARIABLE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@attrs.frozen
class OAuthSettings:
    """A server's `oauth` settings, `${VAR}` expanded (see `_auth`)."""

    scope: str = ""
    client_id: str = ""
    client_secret: str = attrs.field(default="", repr=False)
    client_metadata_url: str = ""
    callback_port: int = 0


@attrs.frozen
class ServerConfig:
    """One server's settings, checked and with `${VAR}` expanded."""

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
    #: a digest of the settings as written (before expansion, so no secret goes into it): the
    #: cached tool list of a server is used only while this matches
    fingerprint: str = ""

    def describe(self) -> str:
        if self.transport == "http":
            return self.url
        return " ".join([self.command, *self.args])


def expand(text: str, where: str, environ: dict[str, str] | os._Environ[str]) -> str:
    """`text` with each `${VAR}` replaced by the variable's value (`$$` is a literal `$`).
    Raises ValueError naming `where` and the variable when one is not set."""

    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        if not _VARIABLE_NAME.match(name):
            raise ValueError(f"{where}: ${{{name}}} is not a variable name (write $$ for a literal $)")
        if name not in environ:
            raise ValueError(f"{where}: environment variable {name} is not set (it is used as ${{{name}}})")
        return environ[name]

    return _VARIABLE.sub(replace, text)


def parse_servers(section: dict[str, Any], nexus: Any) -> list[ServerConfig]:
    """The servers of a validated config section, in the order written. Raises ConfigError listing
    every problem (`file:line: plugins.nexus.mcp.client.servers.<name>.<key>: what is wrong`)."""
    config = nexus.config
    workspace = Path(config.workspace)
    problems: list[str] = []
    servers = []
    prefix = ("plugins", PLUGIN_ID, "servers")
    for name, raw in (section.get("servers") or {}).items():
        raw = dict(raw or {})
        path = (*prefix, name)
        dotted = f"plugins.{PLUGIN_ID}.servers.{name}"

        def problem(key: tuple[str, ...], text: str, path: tuple[str, ...] = path) -> None:
            problems.append(config.problem((*path, *key), text))

        has_command, has_url = "command" in raw, "url" in raw
        if has_command == has_url:
            problem((), f"{dotted}: give either `command` (a stdio server) or `url` (a streamable HTTP "
                         f"server){', not both' if has_command else ''}")
            continue
        wrong = [k for k in (("url", "headers", "oauth") if has_command else ("command", "args", "env", "cwd")) if k in raw]
        for key in wrong:
            problem((key,), f"{dotted}.{key}: not a setting of a {'stdio' if has_command else 'streamable HTTP'} "
                            "server")
        if wrong:
            continue

        def expanded(key: tuple[str, ...], value: str, dotted: str = dotted) -> str:
            try:
                return expand(value, f"{dotted}.{'.'.join(key)}", os.environ)
            except ValueError as exc:
                problem(key, str(exc))
                return value

        fingerprint = hashlib.sha256(json.dumps(
            {k: raw.get(k) for k in ("command", "args", "env", "cwd", "url", "headers")}, sort_keys=True
        ).encode()).hexdigest()[:16]
        common = {
            "name": name,
            "timeout_seconds": float(raw.get("timeout_seconds", 30)),
            "start_timeout_seconds": float(raw.get("start_timeout_seconds", 60)),
            "start": raw.get("start", "lazy"),
            "prefix": raw.get("prefix", name),
            "fingerprint": fingerprint,
        }
        if has_command:
            cwd = raw.get("cwd")
            servers.append(ServerConfig(
                transport="stdio",
                command=expanded(("command",), raw["command"]),
                args=tuple(expanded(("args", str(i)), a) for i, a in enumerate(raw.get("args") or [])),
                env={k: expanded(("env", k), v) for k, v in (raw.get("env") or {}).items()},
                cwd=(workspace / expanded(("cwd",), cwd)).resolve() if cwd else workspace,
                **common,
            ))
        else:
            oauth = raw.get("oauth")
            settings = None
            if oauth is True or isinstance(oauth, dict):
                given = oauth if isinstance(oauth, dict) else {}
                text = {key: expanded(("oauth", key), given[key]) for key in
                        ("scope", "client_id", "client_secret", "client_metadata_url") if key in given}
                settings = OAuthSettings(**text, callback_port=int(given.get("callback_port", 0)))
                if "authorization" in {k.lower() for k in raw.get("headers") or {}}:
                    problem(("headers",), f"{dotted}.headers: an Authorization header and `oauth` both say how to "
                                          "log in: give one")
            servers.append(ServerConfig(
                transport="http",
                url=expanded(("url",), raw["url"]),
                headers={k: expanded(("headers", k), v) for k, v in (raw.get("headers") or {}).items()},
                oauth=settings,
                **common,
            ))
    if problems:
        raise ConfigError(problems, config.source)
    return servers


@attrs.frozen
class ServeSettings:
    """`plugins.nexus.mcp.client.serve`, checked: the token given there (None: not given), and
    what Host and Origin values it adds to the bound address's own."""

    token: str | None = None
    #: where the token came from, for messages (never the token itself)
    token_source: str = ""
    allowed_hosts: tuple[str, ...] = ()
    allowed_origins: tuple[str, ...] = ()


def parse_serve(section: dict[str, Any], config: Any) -> ServeSettings:
    """The `serve` settings of a validated config section. Raises ConfigError naming the key
    (and line) of a token that cannot be read, or of both `token` and `token_file`."""
    raw = section.get("serve") or {}
    dotted = f"plugins.{PLUGIN_ID}.serve"
    path = ("plugins", PLUGIN_ID, "serve")
    if "token" in raw and "token_file" in raw:
        raise ConfigError([config.problem((*path, "token_file"),
                                          f"{dotted}: give `token` or `token_file`, not both")], config.source)
    token, source = None, ""
    try:
        if "token" in raw:
            token, source = expand(raw["token"], f"{dotted}.token", os.environ), f"{dotted}.token"
        elif "token_file" in raw:
            base = Path(config.source).parent if config.source else Path.cwd()
            file = base / os.path.expanduser(expand(raw["token_file"], f"{dotted}.token_file", os.environ))
            try:
                token = file.read_text(encoding="utf-8").strip()
            except OSError as exc:
                raise ValueError(f"{dotted}.token_file: cannot read {file}: {exc.strerror or exc}") from None
            source = f"{dotted}.token_file ({file})"
    except ValueError as exc:
        key = "token" if "token" in raw else "token_file"
        raise ConfigError([config.problem((*path, key), str(exc))], config.source) from None
    return ServeSettings(token=token, token_source=source, allowed_hosts=tuple(raw.get("allowed_hosts") or ()),
                         allowed_origins=tuple(raw.get("allowed_origins") or ()))
