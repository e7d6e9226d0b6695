"""The plugin's config section (`plugins.nexus.tool.web`): its JSON Schema and typed form."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from ._policy import SECTION, Policy

DEFAULT_USER_AGENT = "Mozilla/5.0 (compatible; nexus-webfetch/0.1; +https://pypi.org/project/nexus-rt-tool-web/)"


@dataclass(frozen=True)
class Settings:
    """How one Nexus's webfetch behaves. Every field has the default the config schema has; build
    one directly (`Settings(allow_hosts=("127.0.0.1",))`) to make the tool with `webfetch_tool`."""

    #: seconds a call may take when it gives no `timeout`
    timeout_seconds: float = 30
    #: the largest `timeout` a call may ask for
    max_timeout_seconds: float = 120
    #: bytes of body (after decompression) a call reads when it gives no `max_bytes`
    max_bytes: int = 1024 * 1024
    #: the largest `max_bytes` a call may ask for
    max_bytes_limit: int = 10 * 1024 * 1024
    #: redirects followed before the call is refused
    max_redirects: int = 5
    #: hosts, addresses and networks that may be fetched although private, loopback, ...
    allow_hosts: tuple[str, ...] = ()
    #: hosts, addresses and networks never fetched (this wins over allow_hosts)
    deny_hosts: tuple[str, ...] = ()
    #: ports a URL may name; None: any
    allow_ports: tuple[int, ...] | None = (80, 443)
    #: when set, the only hosts (names, *.domains, addresses, networks) any URL or redirect may name
    only_hosts: tuple[str, ...] | None = None
    user_agent: str = DEFAULT_USER_AGENT

    def __post_init__(self) -> None:
        if self.timeout_seconds > self.max_timeout_seconds:
            raise ValueError(f"{SECTION}.timeout_seconds ({self.timeout_seconds:g}) is more than "
                             f"max_timeout_seconds ({self.max_timeout_seconds:g})")
        if self.max_bytes > self.max_bytes_limit:
            raise ValueError(f"{SECTION}.max_bytes ({self.max_bytes}) is more than max_bytes_limit "
                             f"({self.max_bytes_limit})")

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> Settings:
        """From a config section (validated by the core, defaults applied; missing keys take the
        defaults here too)."""
        values = {f.name: config[f.name] for f in fields(cls) if f.name in config}
        for key in ("allow_hosts", "deny_hosts", "allow_ports", "only_hosts"):
            if values.get(key) is not None:
                values[key] = tuple(values[key])
        return cls(**values)

    def policy(self) -> Policy:
        """The address and host rules; raises ValueError naming a bad list entry."""
        return Policy.build(self.allow_hosts, self.deny_hosts, self.allow_ports, self.only_hosts)


_DEFAULTS = Settings()

CONFIG_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "timeout_seconds": {"type": "number", "exclusiveMinimum": 0, "default": _DEFAULTS.timeout_seconds,
                            "description": "timeout of a call that gives none, covering the whole fetch"},
        "max_timeout_seconds": {"type": "number", "exclusiveMinimum": 0, "default": _DEFAULTS.max_timeout_seconds,
                                "description": "the largest timeout a call may ask for"},
        "max_bytes": {"type": "integer", "minimum": 1, "default": _DEFAULTS.max_bytes,
                      "description": "body bytes (after decompression) read when a call gives no max_bytes"},
        "max_bytes_limit": {"type": "integer", "minimum": 1, "default": _DEFAULTS.max_bytes_limit,
                            "description": "the largest max_bytes a call may ask for"},
        "max_redirects": {"type": "integer", "minimum": 0, "maximum": 50, "default": _DEFAULTS.max_redirects,
                          "description": "redirects followed, each one checked like the first URL"},
        "allow_hosts": {"type": "array", "items": {"type": "string"}, "default": [],
                        "description": "host names, *.domains, IP addresses or networks fetched although "
                                       "private, loopback, link-local, ..."},
        "deny_hosts": {"type": "array", "items": {"type": "string"}, "default": [],
                       "description": "host names, *.domains, IP addresses or networks never fetched "
                                      "(wins over allow_hosts)"},
        "allow_ports": {"type": ["array", "null"], "items": {"type": "integer", "minimum": 1, "maximum": 65535},
                        "default": list(_DEFAULTS.allow_ports or ()),
                        "description": "ports a URL may name (null: any)"},
        "only_hosts": {"type": ["array", "null"], "items": {"type": "string"}, "default": None,
                       "description": "when set, the only host names, *.domains, addresses or networks any URL "
                                      "or redirect may name (null: any host)"},
        "user_agent": {"type": "string", "minLength": 1, "default": _DEFAULTS.user_agent,
                       "description": "the User-Agent header sent"},
    },
}
