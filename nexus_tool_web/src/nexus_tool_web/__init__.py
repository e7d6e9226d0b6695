"""The `nexus.tool.web` plugin: the `webfetch` tool, which fetches a web page over http or https and
returns it as Markdown, plain text or HTML, safely by default.

    plugins:
      nexus.tool.web:
        timeout_seconds: 30          # default for the `timeout` argument; covers the whole fetch
        max_timeout_seconds: 120     # the most a call may ask for
        max_bytes: 1048576           # default for `max_bytes`: body bytes read, after decompression
        max_bytes_limit: 10485760    # the most a call may ask for
        max_redirects: 5
        allow_hosts: []              # e.g. [localhost, 10.0.0.0/8, "*.intranet.example"]
        deny_hosts: []               # e.g. ["*.example.com"]; wins over allow_hosts
        allow_ports: [80, 443]       # null: any port

Only public internet addresses are fetched unless `allow_hosts` says otherwise; every redirect is
checked like the first URL, and each connection goes to an address that was checked. See
docs/tool-web.md.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from nexus_core import hookimpl

from ._settings import CONFIG_SCHEMA, Settings

if TYPE_CHECKING:
    from nexus_core import Nexus

    from ._net import Resolver, system_resolver
    from ._tool import webfetch_tool

PLUGIN_ID = "nexus.tool.web"

__all__ = ["PLUGIN_ID", "Resolver", "Settings", "system_resolver", "webfetch_tool"]

#: httpx, httpcore and the HTML libraries load when the tool is made, not when `nexus --help`
#: imports every plugin's top module
_LAZY = {"Resolver": "._net", "system_resolver": "._net", "webfetch_tool": "._tool"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@hookimpl
def nexus_config_schema() -> dict[str, Any]:
    return CONFIG_SCHEMA


@hookimpl
def nexus_register_tools(register: Callable[..., Any], nexus: Nexus) -> None:
    from ._tool import webfetch_tool

    register(webfetch_tool(Settings.from_config(nexus.plugin_config(PLUGIN_ID))))
