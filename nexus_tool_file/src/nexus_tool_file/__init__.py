"""The `nexus.tool.file` plugin (its tools arrive with their issue)."""

from nexus_core import hookimpl

PLUGIN_ID = "nexus.tool.file"


@hookimpl
def nexus_register_tools(register, nexus):  # type: ignore[no-untyped-def]
    """No tools yet."""
