"""The `nexus.tool.code_exec` plugin: the `run_code` tool (and, past `max_listed_tools`, its
companion `run_code_api`).

The model writes one Python script with `def run(ctx)`; it calls many tools through typed
bindings (`tools`), fans out with `parallel`, and runs in a child process whose every tool call
comes back to the host and goes through the same gates as a direct call. See docs/run-code.md.

run_code's own hooks (`host/hookspecs.py`) and their payloads (`host/events.py`: `CodeExecRequest`,
`CodeExecChunk`, `CodeExecResult`) belong to this package, not the core.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nexus_core import Nexus

    from .host.events import CodeExecChunk, CodeExecRequest, CodeExecResult
    from .host.engine import CodeExec
    from .host.plugin import CodeExecPlugin
    from .host.replay import ReplayError, ReplayReport, replay

PLUGIN_ID = "nexus.tool.code_exec"

#: pure-compute stdlib modules a script may import by default: nothing that reaches the OS
#: pure computation, as models reach for it: in-memory text and bytes (`io.StringIO` with csv),
#: parsing (`ast`, `shlex`, `struct`), path strings (`posixpath`). The list keeps scripts to what
#: run_code is for; it is not the boundary (a module's own imports are reachable from it, as
#: `typing.sys` is): the OS sandbox is, so `io.open` and `io.FileIO` are open() inside it, held to
#: the scratch folder and what the sandbox lets a child read (docs/run-code.md, "Imports").
DEFAULT_ALLOWED_PACKAGES = [
    "abc", "array", "ast", "base64", "binascii", "bisect", "calendar", "cmath", "collections", "colorsys",
    "contextlib", "copy", "csv", "dataclasses", "datetime", "decimal", "difflib", "enum", "fnmatch", "fractions",
    "functools", "graphlib", "hashlib", "heapq", "html", "io", "ipaddress", "itertools", "json", "keyword", "math",
    "numbers", "operator", "posixpath", "pprint", "random", "re", "shlex", "statistics", "string", "struct",
    "textwrap", "time", "typing", "unicodedata", "uuid", "zlib",
]


def config_schema() -> dict[str, Any]:
    from .sandbox import LAYERS

    return {
        "type": "object",
        "properties": {
            "timeout_seconds": {"type": "number", "exclusiveMinimum": 0, "default": 30,
                                "description": "wall-clock limit of one script"},
            "max_output_bytes": {"type": "integer", "minimum": 0, "default": 65536,
                                 "description": "cap on stdout and stderr together"},
            "max_workers": {"type": "integer", "minimum": 1, "default": os.cpu_count() or 1,
                            "description": "parallel callbacks and concurrent inner calls"},
            "max_tool_calls": {"type": "integer", "minimum": 0, "default": 1000,
                               "description": "inner tool calls one script may make"},
            "max_result_bytes": {"type": "integer", "minimum": 1, "default": 1048576,
                                 "description": "cap on the JSON of run's return value"},
            "max_text_bytes": {"type": "integer", "minimum": 256, "default": 65536,
                               "description": "cap on the text a model reads in run_code's output (printed "
                                              "text and result together, ~16k tokens); longer text keeps its "
                                              "head and tail; output_structured keeps all"},
            "max_listed_tools": {"type": "integer", "minimum": 0, "default": 30,
                                 "description": "above this many tools run_code's description lists their groups, "
                                                "and run_code_api gives the functions of the tools asked for"},
            "max_listed_bytes": {"type": "integer", "minimum": 0, "default": 65536,
                                 "description": "above this many bytes of stubs run_code's description lists the "
                                                "tools' groups too, however few the tools"},
            "max_child_messages": {"type": "integer", "minimum": 1, "default": 250000,
                                   "description": "messages of any kind a script's process may send the host in one "
                                                  "run; past them the run is stopped (host limit exceeded)"},
            "max_child_bytes": {"type": "integer", "minimum": 1, "default": 268435456,
                                "description": "bytes a script's process may send the host in one run (its calls' "
                                               "arguments, its output); past them the run is stopped"},
            "persist_scripts": {"type": "boolean", "default": True},
            "reject_threads": {"type": "boolean", "default": True},
            "allowed_packages": {"type": "array", "items": {"type": "string"},
                                 "default": list(DEFAULT_ALLOWED_PACKAGES)},
            "memory_mb": {"type": "integer", "minimum": 64, "default": 512,
                          "description": "address-space limit of the script's process"},
            "cpu_seconds": {"type": ["integer", "null"], "minimum": 1, "default": None,
                            "description": "CPU-time limit (default: timeout_seconds)"},
            "require": {"type": "array", "items": {"enum": list(LAYERS)}, "default": [],
                        "description": "sandbox layers without which run_code refuses to run"},
            "journal": {"type": "boolean", "default": True,
                        "description": "journal each inner call's result as it completes (journal.jsonl in the "
                                       "run's session folder while it runs), so that a suspended run, or one whose "
                                       "host stopped, resumes without running a completed call again"},
            "suspend_after_seconds": {"type": ["number", "null"], "exclusiveMinimum": 0, "default": 60,
                                      "description": "a run whose inner call waits this long for a person is "
                                                     "suspended: its process ends, and a fresh one resumes it from "
                                                     "the journal once the call is answered (null: never)"},
            "launcher": {"enum": ["auto", "zygote", "spawn"], "default": "auto",
                         "description": "fork children from a warm zygote, or spawn fresh interpreters"},
        },
    }


def engine_for(nexus: Nexus) -> CodeExec | None:
    """The run_code engine of a Nexus (for `nexus run`, `nexus doctor` and tests), or None when
    `nexus.tool.code_exec` is not active in it."""
    from .host.plugin import CodeExecPlugin

    plugin = nexus.plugin(PLUGIN_ID)
    return plugin.engine if isinstance(plugin, CodeExecPlugin) else None


def __getattr__(name: str) -> Any:
    # the host's side, imported when asked for: the zygote and the children import parts of
    # this package and must not pay for nexus_core (and pluggy, jsonschema) in their memory
    if name == "CodeExec":
        from .host.engine import CodeExec

        return CodeExec
    if name == "CodeExecPlugin":
        from .host.plugin import CodeExecPlugin

        return CodeExecPlugin
    if name in ("replay", "ReplayReport", "ReplayError"):
        from .host import replay

        return getattr(replay, name)
    if name in ("CodeExecRequest", "CodeExecChunk", "CodeExecResult"):
        from .host import events

        return getattr(events, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = ["DEFAULT_ALLOWED_PACKAGES", "PLUGIN_ID", "CodeExec", "CodeExecChunk", "CodeExecPlugin", "CodeExecRequest",
           "CodeExecResult", "ReplayError", "ReplayReport", "engine_for", "replay"]
