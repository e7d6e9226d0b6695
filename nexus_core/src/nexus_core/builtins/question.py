"""Core built-in plugin `nexus.tool.question` (filled in by its issue)."""
