"""What a plugin author uses besides the core's names: the one plugin shape (`Plugin`, an attrs
settings class with `setting(...)` fields, `SettingError`; docs/writing-a-tool-plugin.md), the
entry-point groups, what `Nexus.failures` and `Nexus.plugins()` hold, the kinds of hooks,
`GateDecision` (what `nexus_gate_decision` observers are told), and `describe_exception`, the one way an exception reads in a message (`TypeName: text`).
"""

from ._markers import HOOK_KINDS, HookKind, hook_kind
from ._plugin import Plugin, SettingError, read_settings, setting, settings_schema
from ._errors import describe_exception
from ._hookcalls import GateDecision
from ._plugins import ENTRY_POINT_GROUP, HOOKSPECS_GROUP, PluginFailure, PluginInfo

__all__ = [
    "ENTRY_POINT_GROUP",
    "HOOKSPECS_GROUP",
    "HOOK_KINDS",
    "GateDecision",
    "HookKind",
    "Plugin",
    "PluginFailure",
    "PluginInfo",
    "SettingError",
    "describe_exception",
    "hook_kind",
    "read_settings",
    "setting",
    "settings_schema",
]
