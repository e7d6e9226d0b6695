"""Core built-in plugin `nexus.skills`: the `skill` tool, which loads a SKILL.md skill by name.

The skills themselves (discovery, activation, the prompt) live in `nexus_core.skills`; this
plugin only offers them to the model. The tool's description lists the skills found when the
Nexus started, so a host that sends only tool schemas still tells the model what exists.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .._markers import hookimpl
from .._plugin import Plugin

if TYPE_CHECKING:
    from .._models import ToolResult
    from .._nexus import Nexus

NEXUS_PLUGIN_ID = "nexus.skills"

SKILL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"name": {"type": "string", "description": "The name of the skill to load."}},
    "required": ["name"],
    "additionalProperties": False,
}


def _description(nexus: Nexus) -> str:
    from ..skills import skill_set

    skills = skill_set(nexus).all()
    text = ("Load a skill: specialised instructions (and the files that go with them) for a kind "
            "of task. Call it with the skill's name when a task matches a skill's description, "
            "before starting the task; the instructions come back as the result.")
    if not skills:
        return text + "\nNo skills are installed."
    listing = "\n".join(f"- {s.name}: {s.description}" if s.description else f"- {s.name}" for s in skills)
    return f"{text}\nAvailable skills:\n{listing}"


def make_skill_tool(nexus: Nexus) -> Any:
    """The `skill` tool of one Nexus (each Nexus has its own skills)."""
    # imported here, not at import: the `nexus` command line imports every plugin's module first
    from .._models import ToolResult
    from .._results import failure
    from .._tool import native_tool
    from ..skills import SkillError, UnknownSkillError, format_skill, skill_set

    def run(arguments: dict[str, Any]) -> ToolResult:
        name = arguments["name"]
        try:
            skill = skill_set(nexus).activate(name)
        except UnknownSkillError as exc:
            return failure(str(exc.args[0]))
        except SkillError as exc:
            return failure(f"skill {name!r} cannot be loaded: {exc}")
        structured = {"name": skill.name, "description": skill.description, "path": skill.path,
                      "body": skill.body, "resources": list(skill.resources)}
        return ToolResult(id="", name="", output=format_skill(skill), output_structured=structured)

    # direct only: its instructions are for the model; a run_code script could not act on them
    return native_tool("skill", _description(nexus), SKILL_SCHEMA, run=run, exposure="direct")


class SkillsPlugin(Plugin[None]):
    """The plugin object of one Nexus (the entry point names this class); it takes no settings:
    the folders skills come from are the core's `skills:` key."""

    NEXUS_PLUGIN_ID = NEXUS_PLUGIN_ID

    @hookimpl
    def nexus_register_tools(self, register: Callable[..., Any]) -> None:
        register(make_skill_tool(self.nexus))
