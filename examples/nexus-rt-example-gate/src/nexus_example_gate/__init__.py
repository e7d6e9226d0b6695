"""An example Nexus gate: refuse tool calls whose arguments hold values that the config denies.

    plugins:
      nexus.example.gate:
        deny:
          convert: {to_unit: [mi, yd]}   # tool -> argument -> refused values
"""

from typing import Any

from nexus_core import Veto, hookimpl

PLUGIN_ID = "nexus.example.gate"

# Set by nexus_configure. A plugin module is one object per process, so the last Nexus
# configured wins; a host that needs two policies at once registers gate objects instead.
_deny: dict[str, dict[str, list[Any]]] = {}


@hookimpl
def nexus_config_schema() -> dict[str, Any]:
    refused_values = {"type": "object", "additionalProperties": {"type": "array"}}
    return {"type": "object", "properties": {
        "deny": {"type": "object", "additionalProperties": refused_values, "default": {}},
    }}


@hookimpl
def nexus_configure(config: dict[str, Any]) -> None:
    global _deny
    _deny = config["deny"]


@hookimpl
def nexus_before_tool_invoke(call, tool):  # type: ignore[no-untyped-def]
    for argument, refused in _deny.get(tool.name, {}).items():
        if argument in call.arguments and call.arguments[argument] in refused:
            return Veto(f"{argument}={call.arguments[argument]!r} is denied for {tool.name} by {PLUGIN_ID}")
    return None
