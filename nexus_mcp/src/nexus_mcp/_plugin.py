"""The `nexus.mcp.client` plugin: the servers of its `servers` settings as one `McpClient` (their
event loop, sessions and tools), and the `nexus mcp` commands."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nexus_core.plugins import Plugin

from nexus_core import hookimpl

from ._settings import PLUGIN_ID, Settings, resolve_servers

if TYPE_CHECKING:
    from ._client import McpClient, ServerStatus


class McpClientPlugin(Plugin[Settings]):
    """The plugin object of one Nexus (the entry point names this class): the MCP servers in its
    `plugins.nexus.mcp.client.servers` section, their event loop and sessions, and their tools.
    The MCP SDK is imported only when a server is configured."""

    NEXUS_PLUGIN_ID = PLUGIN_ID

    def __init__(self, nexus: Any) -> None:
        super().__init__(nexus)
        self.client: McpClient | None = None

    def configure(self) -> None:
        servers = resolve_servers(self.settings, self.nexus.config)
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
