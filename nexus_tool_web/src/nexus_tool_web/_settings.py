"""The plugin's settings (`plugins.nexus.tool.web`): an attrs class, from which the config
section's JSON Schema is derived (`nexus_core.plugins.settings_schema`)."""

from __future__ import annotations

import attrs
from nexus_core.plugins import SettingError, setting

from ._policy import Policy

DEFAULT_USER_AGENT = "Mozilla/5.0 (compatible; nexus-webfetch/0.1; +https://pypi.org/project/nexus-rt-tool-web/)"


@attrs.frozen
class Settings:
    """How one Nexus's webfetch behaves: the plugin's config section, or built directly
    (`Settings(allow_hosts=("127.0.0.1",))`) to make the tool with `webfetch_tool`. A setting
    that is wrong (a `timeout_seconds` above `max_timeout_seconds`, an `allow_hosts` entry that
    is not a host) raises `SettingError`, a ValueError naming the key."""

    timeout_seconds: float = setting(30, exclusiveMinimum=0,
                                     description="timeout of a call that gives none, covering the whole fetch")
    max_timeout_seconds: float = setting(120, exclusiveMinimum=0, description="the largest timeout a call may ask for")
    max_bytes: int = setting(1024 * 1024, minimum=1,
                             description="body bytes (after decompression) read when a call gives no max_bytes")
    max_bytes_limit: int = setting(10 * 1024 * 1024, minimum=1, description="the largest max_bytes a call may ask for")
    max_redirects: int = setting(5, minimum=0, maximum=50,
                                 description="redirects followed, each one checked like the first URL")
    allow_hosts: tuple[str, ...] = setting(
        (), description="host names, *.domains, IP addresses or networks fetched although private, loopback, "
                        "link-local, ...")
    deny_hosts: tuple[str, ...] = setting(
        (), description="host names, *.domains, IP addresses or networks never fetched (wins over allow_hosts)")
    allow_ports: tuple[int, ...] | None = setting(
        (80, 443), items={"type": "integer", "minimum": 1, "maximum": 65535},
        description="ports a URL may name (null: any)")
    only_hosts: tuple[str, ...] | None = setting(
        None, description="when set, the only host names, *.domains, addresses or networks any URL or redirect may "
                          "name (null: any host)")
    user_agent: str = setting(DEFAULT_USER_AGENT, minLength=1, description="the User-Agent header sent")

    def __attrs_post_init__(self) -> None:
        if self.timeout_seconds > self.max_timeout_seconds:
            raise SettingError("timeout_seconds", f"{self.timeout_seconds:g} is more than max_timeout_seconds "
                                                  f"({self.max_timeout_seconds:g})")
        if self.max_bytes > self.max_bytes_limit:
            raise SettingError("max_bytes", f"{self.max_bytes} is more than max_bytes_limit ({self.max_bytes_limit})")
        self.policy()  # an entry of the host lists that is not a host, address or network

    def policy(self) -> Policy:
        """The address and host rules; raises SettingError naming a bad list entry."""
        return Policy.build(self.allow_hosts, self.deny_hosts, self.allow_ports, self.only_hosts)
