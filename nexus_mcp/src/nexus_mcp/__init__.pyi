# The public names of nexus_mcp, written once: type checkers read these imports, and __init__.py
# reads this same file (lazy_loader.attach_stub) to import each name on first use.

from ._http_security import HttpSecurity as HttpSecurity
from ._plugin import McpClientPlugin as McpClientPlugin
from ._serve import NexusMcpServer as NexusMcpServer
from ._settings import PLUGIN_ID as PLUGIN_ID
from ._settings import ServerSettings as ServerSettings
from ._settings import Settings as Settings

__version__: str
