"""An example Nexus gate: refuse tool calls whose arguments hold values that the config denies.

    plugins:
      nexus.example.gate:
        deny:
          convert: {to_unit: [mi, yd]}   # tool -> argument -> refused values

The one plugin shape: the entry point names the class, so every Nexus makes its own `DenyGate`
and configures it from its own config (two Nexus in one process keep two policies); its settings
are an attrs class, from which the schema of its config section is derived.
"""

from typing import Any

import attrs

from nexus_core import Veto, hookimpl
from nexus_core.plugins import Plugin, setting

PLUGIN_ID = "nexus.example.gate"


@attrs.frozen
class GateSettings:
    deny: dict[str, dict[str, list[Any]]] = setting(
        factory=dict, description="tool -> argument -> the values refused for it")


class DenyGate(Plugin[GateSettings]):
    NEXUS_PLUGIN_ID = PLUGIN_ID  # its config section, also when a test or a host passes it in

    @hookimpl
    def nexus_before_tool_invoke(self, call, tool):  # type: ignore[no-untyped-def]
        for argument, refused in self.settings.deny.get(tool.name, {}).items():
            if argument in call.arguments and call.arguments[argument] in refused:
                return Veto(f"{argument}={call.arguments[argument]!r} is denied for {tool.name} by {PLUGIN_ID}")
        return None
