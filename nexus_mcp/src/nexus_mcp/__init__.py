"""Nexus and MCP, both ways.

- The `nexus.mcp.client` plugin (`McpClientPlugin`, its settings `Settings`): the tools of any
  MCP server (stdio or streamable HTTP) as Nexus tools, `<server>_<tool>`, called through the
  same gates as every other tool and usable from run_code scripts as typed bindings.
- `nexus mcp serve` (`NexusMcpServer`, `HttpSecurity`): any Nexus distribution (its config and
  installed plugins) as an MCP server, over stdio or streamable HTTP, every call through
  `Nexus.invoke`.

The public names are listed in `__init__.pyi`, and each is imported on first use (`lazy_loader`,
as nexus_core does): the command line imports this module at start, and the MCP SDK is imported
only when a Nexus configures a server or a command runs. See docs/mcp.md.
"""

import lazy_loader

__version__ = "0.1.0"

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
