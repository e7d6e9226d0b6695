"""Nexus: a plugin framework for LLM tool use, on pluggy and entry points.

This module is the public surface; everything else in the package is private and may move.
"""

from ._config import ConfigError, NexusConfig, load_config
from ._converter import WireError, converter, from_json, structure, to_json, unstructure
from ._models import (
    CallContext,
    CodeExecChunk,
    CodeExecRequest,
    CodeExecResult,
    Rewrite,
    SkillContent,
    ToolCall,
    ToolDef,
    ToolResult,
    Veto,
    new_call_id,
)
from ._native import execute, native_tool, sanitize, tool, toolkit
from ._nexus import Nexus
from ._plugins import ENTRY_POINT_GROUP, PluginFailure, PluginInfo
from ._registry import ToolRegistrationError
from ._results import failure, normalize_result, success
from .hookspecs import hookimpl, hookspec

__version__ = "0.1.0"

__all__ = [
    "ENTRY_POINT_GROUP",
    "CallContext",
    "CodeExecChunk",
    "CodeExecRequest",
    "CodeExecResult",
    "ConfigError",
    "Nexus",
    "NexusConfig",
    "PluginFailure",
    "PluginInfo",
    "Rewrite",
    "SkillContent",
    "ToolCall",
    "ToolDef",
    "ToolRegistrationError",
    "ToolResult",
    "Veto",
    "WireError",
    "converter",
    "execute",
    "failure",
    "from_json",
    "hookimpl",
    "hookspec",
    "load_config",
    "native_tool",
    "new_call_id",
    "normalize_result",
    "sanitize",
    "structure",
    "success",
    "to_json",
    "tool",
    "toolkit",
    "unstructure",
]
