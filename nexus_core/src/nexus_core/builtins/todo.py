"""Core built-in plugin `nexus.tool.todo` (filled in by its issue)."""
