"""An example Nexus gate: refuse tool calls whose arguments hold values that the config denies.

    plugins:
      nexus.example.gate:
        deny:
          convert: {to_unit: [mi, yd]}   # tool -> argument -> refused values

The entry point names the class, so every Nexus makes its own `DenyGate` and configures it from
its own config: two Nexus in one process keep two policies.
"""

from typing import Any

from nexus_core import Veto, hookimpl

PLUGIN_ID = "nexus.example.gate"


class DenyGate:
    NEXUS_PLUGIN_ID = PLUGIN_ID  # its config section, also when a test or a host passes it in

    def __init__(self) -> None:
        self.deny: dict[str, dict[str, list[Any]]] = {}

    @hookimpl
    def nexus_config_schema(self) -> dict[str, Any]:
        refused_values = {"type": "object", "additionalProperties": {"type": "array"}}
        return {"type": "object", "properties": {
            "deny": {"type": "object", "additionalProperties": refused_values, "default": {}},
        }}

    @hookimpl
    def nexus_configure(self, config: dict[str, Any]) -> None:
        self.deny = config["deny"]

    @hookimpl
    def nexus_before_tool_invoke(self, call, tool):  # type: ignore[no-untyped-def]
        for argument, refused in self.deny.get(tool.name, {}).items():
            if argument in call.arguments and call.arguments[argument] in refused:
                return Veto(f"{argument}={call.arguments[argument]!r} is denied for {tool.name} by {PLUGIN_ID}")
        return None
