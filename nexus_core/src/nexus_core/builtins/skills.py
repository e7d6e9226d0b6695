"""Core built-in plugin `nexus.skills` (filled in by its issue)."""
