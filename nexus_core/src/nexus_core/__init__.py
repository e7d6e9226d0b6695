"""Nexus: a plugin framework for LLM tool use, on pluggy and entry points.

This module is the public surface; everything else in the package is private and may move.
The names are listed once, in `__init__.pyi`: type checkers and IDEs read its imports, and this
module reads the same file (`lazy_loader.attach_stub`, Scientific Python's SPEC 1) to import
each name on first use (PEP 562), so `from nexus_core import hookimpl` in a plugin, or the
`nexus` command line starting up, does not pay for JSON Schema, YAML and cattrs.

Names that moved to a namespace in 0.2 still resolve here for a while, with a
DeprecationWarning that names their new home (`_MOVED`); type checkers see only the new homes.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

import lazy_loader

__version__ = "0.1.0"

_getattr, _dir, __all__ = lazy_loader.attach_stub(__name__, __file__)

#: a name that left the top level -> the namespace that has it now
_MOVED: dict[str, str] = {
    **dict.fromkeys(("AudioContent", "Content", "ImageContent", "ResourceContent", "TextContent"),
                    "nexus_core.content"),
    **dict.fromkeys(("WireError", "converter", "from_json", "to_json"), "nexus_core.wire"),
    **dict.fromkeys(("Message", "ModelCall", "ModelError", "ModelProvider", "ModelRequest", "ModelResponse",
                     "SDKProvider", "Usage", "split_model"), "nexus_core.llm"),
    **dict.fromkeys(("format_tool_call", "format_tool_result", "parse_tool_call", "parse_tool_calls"),
                    "nexus_core.adapters"),
    **dict.fromkeys(("SkillProblem", "UnknownSkillError", "activate_skill", "active_skills", "deactivate_skill",
                     "list_skills", "skill_problems", "skill_set", "skills_prompt"), "nexus_core.skills"),
}


def __getattr__(name: str) -> Any:
    home = _MOVED.get(name)
    if home is None:
        return _getattr(name)
    warnings.warn(f"nexus_core.{name} moved to {home}.{name}; import it from there "
                  "(the old name goes away in a later release)", DeprecationWarning, stacklevel=2)
    return getattr(importlib.import_module(home), name)


def __dir__() -> list[str]:
    return sorted({*_dir(), "__version__"})
