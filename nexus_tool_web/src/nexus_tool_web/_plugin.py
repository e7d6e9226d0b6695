"""The plugin object of `nexus.tool.web`: one Nexus's settings, and the `webfetch` tool made
from them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from nexus_core.plugins import Plugin

from nexus_core import hookimpl

from ._settings import Settings

PLUGIN_ID = "nexus.tool.web"


class WebPlugin(Plugin[Settings]):
    """The plugin object of one Nexus (the entry point names this class)."""

    NEXUS_PLUGIN_ID = PLUGIN_ID

    @hookimpl
    def nexus_register_tools(self, register: Callable[..., Any]) -> None:
        from ._tool import webfetch_tool  # here: httpx loads with the tool

        register(webfetch_tool(self.settings))
