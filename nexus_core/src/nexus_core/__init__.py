"""Nexus: a plugin framework for LLM tool use, on pluggy and entry points.

This module is the public surface; everything else in the package is private and may move.
"""

from ._config import ConfigError, NexusConfig, load_config
from ._content import AudioContent, Content, ImageContent, ResourceContent, TextContent
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
from .adapters import format_tool_call, format_tool_result, parse_tool_call, parse_tool_calls
from .hookspecs import hookimpl, hookspec
from .skills import (
    SkillError,
    SkillProblem,
    SkillSet,
    UnknownSkillError,
    activate_skill,
    active_skills,
    deactivate_skill,
    list_skills,
    skill_problems,
    skill_set,
    skills_prompt,
)

__version__ = "0.1.0"

__all__ = [
    "ENTRY_POINT_GROUP",
    "AudioContent",
    "CallContext",
    "CodeExecChunk",
    "CodeExecRequest",
    "CodeExecResult",
    "ConfigError",
    "Content",
    "ImageContent",
    "Nexus",
    "NexusConfig",
    "PluginFailure",
    "PluginInfo",
    "ResourceContent",
    "Rewrite",
    "SkillContent",
    "SkillError",
    "SkillProblem",
    "SkillSet",
    "TextContent",
    "ToolCall",
    "ToolDef",
    "ToolRegistrationError",
    "ToolResult",
    "UnknownSkillError",
    "Veto",
    "WireError",
    "activate_skill",
    "active_skills",
    "converter",
    "deactivate_skill",
    "execute",
    "failure",
    "format_tool_call",
    "format_tool_result",
    "from_json",
    "hookimpl",
    "hookspec",
    "list_skills",
    "load_config",
    "native_tool",
    "new_call_id",
    "normalize_result",
    "parse_tool_call",
    "parse_tool_calls",
    "sanitize",
    "skill_problems",
    "skill_set",
    "skills_prompt",
    "structure",
    "success",
    "to_json",
    "tool",
    "toolkit",
    "unstructure",
]
