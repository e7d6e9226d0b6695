"""Nexus's JSON: the one cattrs converter that reads and writes the models (the CLI's output,
run_code's pipe, persisted logs, MCP's structured results) and the types `@tool` functions take.

Input is read strictly (unknown keys refused, no coercion of JSON scalars) and a mismatch is a
`WireError` naming each failing field path: `ToolCall.arguments: expected object, got array [1]`.
"""

from ._converter import WireError, converter, from_json, structure, to_json, unstructure

__all__ = ["WireError", "converter", "from_json", "structure", "to_json", "unstructure"]
