# The public names of nexus_tool_web, written once: type checkers read these imports, and
# __init__.py reads this same file (lazy_loader.attach_stub) to import each name on first use.

from ._net import Resolver as Resolver
from ._net import system_resolver as system_resolver
from ._plugin import PLUGIN_ID as PLUGIN_ID
from ._plugin import WebPlugin as WebPlugin
from ._settings import Settings as Settings
from ._tool import webfetch_tool as webfetch_tool
