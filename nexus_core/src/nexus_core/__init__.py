"""Nexus: a plugin framework for LLM tool use, on pluggy and entry points.

This module is the public surface; everything else in the package is private and may move.
Names are imported on first use (PEP 562), so `from nexus_core import hookimpl` in a plugin, or
the `nexus` command line starting up, does not pay for JSON Schema, YAML and cattrs.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .hookspecs import hookimpl, hookspec

__version__ = "0.1.0"

#: public name -> the private module that defines it
_LAZY: dict[str, str] = {
    "CancelToken": "._cancel",
    "ConfigError": "._config",
    "AudioContent": "._content",
    "Content": "._content",
    "ImageContent": "._content",
    "ResourceContent": "._content",
    "TextContent": "._content",
    "WireError": "._converter",
    "converter": "._converter",
    "from_json": "._converter",
    "to_json": "._converter",
    "Message": "._llm",
    "ModelCall": "._llm",
    "ModelError": "._llm",
    "ModelProvider": "._llm",
    "ModelRequest": "._llm",
    "ModelResponse": "._llm",
    "SDKProvider": "._llm",
    "Usage": "._llm",
    "split_model": "._llm",
    "Answer": "._models",
    "Ask": "._models",
    "CallContext": "._models",
    "Question": "._models",
    "Rewrite": "._models",
    "SkillContent": "._models",
    "ToolCall": "._models",
    "ToolDef": "._models",
    "ToolResult": "._models",
    "Veto": "._models",
    "execute": "._toolkit",
    "native_tool": "._tool",
    "sanitize": "._tool",
    "tool": "._tool",
    "toolkit": "._toolkit",
    "Nexus": "._nexus",
    "ToolRegistrationError": "._registry",
    "failure": "._results",
    "normalize_result": "._results",
    "success": "._results",
    "format_tool_call": ".adapters",
    "format_tool_result": ".adapters",
    "parse_tool_call": ".adapters",
    "parse_tool_calls": ".adapters",
    "SkillProblem": ".skills",
    "UnknownSkillError": ".skills",
    "activate_skill": ".skills",
    "active_skills": ".skills",
    "deactivate_skill": ".skills",
    "list_skills": ".skills",
    "skill_problems": ".skills",
    "skill_set": ".skills",
    "skills_prompt": ".skills",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'nexus_core' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value  # the next access is a plain global
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


if TYPE_CHECKING:  # what type checkers and IDEs see: the same names, imported eagerly
    from ._cancel import CancelToken
    from ._config import ConfigError
    from ._content import AudioContent, Content, ImageContent, ResourceContent, TextContent
    from ._converter import WireError, converter, from_json, to_json
    from ._llm import (
        Message,
        ModelCall,
        ModelError,
        ModelProvider,
        ModelRequest,
        ModelResponse,
        SDKProvider,
        Usage,
        split_model,
    )
    from ._models import (
        Answer,
        Ask,
        CallContext,
        Question,
        Rewrite,
        SkillContent,
        ToolCall,
        ToolDef,
        ToolResult,
        Veto,
    )
    from ._nexus import Nexus
    from ._registry import ToolRegistrationError
    from ._results import failure, normalize_result, success
    from ._tool import native_tool, sanitize, tool
    from ._toolkit import execute, toolkit
    from .adapters import format_tool_call, format_tool_result, parse_tool_call, parse_tool_calls
    from .skills import (
        SkillProblem,
        UnknownSkillError,
        activate_skill,
        active_skills,
        deactivate_skill,
        list_skills,
        skill_problems,
        skill_set,
        skills_prompt,
    )

__all__ = [
    "Answer",
    "Ask",
    "AudioContent",
    "CallContext",
    "CancelToken",
    "ConfigError",
    "Content",
    "ImageContent",
    "Message",
    "ModelCall",
    "ModelError",
    "ModelProvider",
    "ModelRequest",
    "ModelResponse",
    "Nexus",
    "Question",
    "ResourceContent",
    "Rewrite",
    "SDKProvider",
    "SkillContent",
    "SkillProblem",
    "TextContent",
    "ToolCall",
    "ToolDef",
    "ToolRegistrationError",
    "ToolResult",
    "UnknownSkillError",
    "Usage",
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
    "native_tool",
    "normalize_result",
    "parse_tool_call",
    "parse_tool_calls",
    "sanitize",
    "skill_problems",
    "skill_set",
    "skills_prompt",
    "split_model",
    "success",
    "to_json",
    "tool",
    "toolkit",
]
