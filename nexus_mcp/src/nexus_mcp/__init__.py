"""Nexus and MCP, both ways.

- The `nexus.mcp.client` plugin: the tools of any MCP server (stdio or streamable HTTP) as
  Nexus tools, `<server>_<tool>`, called through the same gates as every other tool and usable
  from run_code scripts as typed bindings.
- `nexus mcp serve`: any Nexus distribution (its config and installed plugins) as an MCP server,
  over stdio or streamable HTTP, every call through `Nexus.invoke`.

See docs/mcp.md. This module stays cheap to import (the command line imports it at start): the
MCP SDK is imported when a Nexus configures the plugin or a command runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nexus_core import hookimpl

if TYPE_CHECKING:
    from nexus_core import Nexus

    from ._client import McpClient, ServerStatus
    from ._http_security import HttpSecurity
    from ._serve import NexusMcpServer

__version__ = "0.1.0"

PLUGIN_ID = "nexus.mcp.client"


class McpClientPlugin:
    """The plugin object of one Nexus (the entry point names this class): the MCP servers in its
    `plugins.nexus.mcp.client.servers` section, their event loop and sessions, and their tools."""

    NEXUS_PLUGIN_ID = PLUGIN_ID

    def __init__(self, nexus: Nexus) -> None:
        self.nexus = nexus
        self.client: McpClient | None = None

    @hookimpl
    def nexus_config_schema(self) -> dict[str, Any]:
        from ._config import CONFIG_SCHEMA

        return CONFIG_SCHEMA

    @hookimpl
    def nexus_configure(self, config: dict[str, Any]) -> None:
        from ._config import parse_servers

        servers = parse_servers(config, self.nexus)
        if servers:
            from ._client import McpClient

            self.client = McpClient(self.nexus, servers)

    @hookimpl
    def nexus_register_tools(self, register: Any) -> None:
        if self.client is not None:
            self.client.register_tools(register)

    @hookimpl
    def nexus_shutdown(self) -> None:
        if self.client is not None:
            self.client.close()

    @hookimpl
    def nexus_doctor(self) -> list[str] | None:
        from ._doctor import protections

        return [*protections(), *(self.client.doctor_lines() if self.client is not None else [])]

    def status(self) -> list[ServerStatus]:
        """Each configured server: running or not, its tools, its last error."""
        return self.client.status() if self.client is not None else []

    @staticmethod
    @hookimpl
    def nexus_register_commands(cli: Any) -> None:
        from ._cli import mcp_group

        cli.add_command(mcp_group)


def __getattr__(name: str) -> Any:
    if name == "NexusMcpServer":  # imports the MCP SDK: only when asked for
        from ._serve import NexusMcpServer

        return NexusMcpServer
    if name == "HttpSecurity":
        from ._http_security import HttpSecurity

        return HttpSecurity
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["PLUGIN_ID", "HttpSecurity", "McpClientPlugin", "NexusMcpServer", "__version__"]
