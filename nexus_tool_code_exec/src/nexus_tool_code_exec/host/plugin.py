"""The plugin object of `nexus.tool.code_exec` (runs in the host): the hookimpls that configure
one Nexus's run_code engine and keep it current. The package's __init__ names it lazily, so that
the zygote and the children, which import parts of this package, never import nexus_core.

It has the one plugin shape (`Plugin[CodeExecSettings]`): the schema of its config section is
derived from `CodeExecSettings` (settings.py), and Nexus gives it `self.settings`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nexus_core.plugins import Plugin

from nexus_core import hookimpl

from .. import PLUGIN_ID
from .settings import CodeExecSettings

if TYPE_CHECKING:
    from nexus_core import Nexus, Question, ToolDef

    from .engine import CodeExec


class CodeExecPlugin(Plugin[CodeExecSettings]):
    """The plugin object of one Nexus (the entry point names this class): its run_code engine,
    configured from that Nexus's `plugins.nexus.tool.code_exec` section (`self.settings`)."""

    NEXUS_PLUGIN_ID = PLUGIN_ID

    def __init__(self, nexus: Nexus) -> None:
        super().__init__(nexus)
        self.engine: CodeExec | None = None

    @hookimpl
    def nexus_register_tools(self, register: Any) -> None:
        from .engine import CodeExec  # here, not at import: `nexus --help` imports this module

        self.engine = CodeExec(self.nexus, self.settings, plugin_id=PLUGIN_ID)
        self.engine.tooldefs(register)

    # run_code's description lists the other tools and the active skills: keep it current
    @hookimpl
    def nexus_tool_register(self, tool: ToolDef) -> None:
        if self.engine is not None:
            self.engine.tools_changed(tool)

    @hookimpl
    def nexus_tool_unregister(self, tool: ToolDef) -> None:
        if self.engine is not None:
            self.engine.tools_changed(tool, gone=True)

    @hookimpl
    def nexus_skill_loaded(self) -> None:
        if self.engine is not None:
            self.engine.skills_changed()

    @hookimpl
    def nexus_skill_deactivate(self) -> None:
        if self.engine is not None:
            self.engine.skills_changed()

    # a script's inner call that waits for a person does not use up the script's time
    @hookimpl
    def nexus_ask_start(self, question: Question) -> None:
        if self.engine is not None:
            self.engine.pause_clock(question.call.parent_call_id, question.call)

    @hookimpl
    def nexus_ask_end(self, question: Question) -> None:
        if self.engine is not None:
            self.engine.resume_clock(question.call.parent_call_id, question.call)

    @hookimpl
    def nexus_shutdown(self) -> None:
        if self.engine is not None:
            self.engine.close()

    @hookimpl
    def nexus_doctor(self) -> list[str] | None:
        return self.engine.doctor_lines() if self.engine is not None else None

    @staticmethod
    @hookimpl
    def nexus_register_commands(cli: Any) -> None:
        from .cli import replay_command, run_command, runs_command

        cli.add_command(run_command)
        cli.add_command(runs_command)
        cli.add_command(replay_command)
