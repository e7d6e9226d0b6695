"""Core built-in plugins, each an entry point of nexus-core."""
