"""What a plugin author and a host use besides the core's names: the entry-point groups, what
`Nexus.failures` and `Nexus.plugins()` hold, the kinds of hooks, and `describe_exception`, the
one way an exception reads in a message (`TypeName: text`).
"""

from ._markers import HOOK_KINDS, HookKind, hook_kind
from ._plugins import ENTRY_POINT_GROUP, HOOKSPECS_GROUP, PluginFailure, PluginInfo, describe_exception

__all__ = [
    "ENTRY_POINT_GROUP",
    "HOOKSPECS_GROUP",
    "HOOK_KINDS",
    "HookKind",
    "PluginFailure",
    "PluginInfo",
    "describe_exception",
    "hook_kind",
]
