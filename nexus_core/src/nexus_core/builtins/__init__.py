"""Core built-in plugins, each an entry point of nexus-rt-core."""
