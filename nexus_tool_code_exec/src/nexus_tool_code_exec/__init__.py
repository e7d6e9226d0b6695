"""The `nexus.tool.code_exec` plugin (its tools arrive with their issue)."""

from nexus_core import hookimpl

PLUGIN_ID = "nexus.tool.code_exec"


@hookimpl
def nexus_register_tools(register, nexus):  # type: ignore[no-untyped-def]
    """No tools yet."""
