"""The `nexus.tool.code_exec` plugin: the `run_code` tool.

The model writes one Python script with `def run(ctx)`; it calls many tools through typed
bindings (`tools`), fans out with `parallel`, and runs in a child process whose every tool call
comes back to the host and goes through the same gates as a direct call. See docs/run-code.md.
"""

from __future__ import annotations

import os
from typing import Any

from nexus_core import Nexus, hookimpl

from .host.engine import CodeExec
from .sandbox import LAYERS

PLUGIN_ID = "nexus.tool.code_exec"

#: pure-compute stdlib modules a script may import by default: nothing that reaches the OS
DEFAULT_ALLOWED_PACKAGES = [
    "base64", "bisect", "calendar", "cmath", "collections", "copy", "csv", "dataclasses", "datetime",
    "decimal", "difflib", "enum", "fnmatch", "fractions", "functools", "hashlib", "heapq", "html",
    "itertools", "json", "math", "numbers", "operator", "pprint", "random", "re", "statistics",
    "string", "textwrap", "time", "typing", "unicodedata", "zlib",
]



def config_schema() -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "timeout_seconds": {"type": "integer", "minimum": 1, "default": 30,
                                "description": "wall-clock limit of one script"},
            "max_output_bytes": {"type": "integer", "minimum": 0, "default": 65536,
                                 "description": "cap on stdout and stderr together"},
            "max_workers": {"type": "integer", "minimum": 1, "default": os.cpu_count() or 1,
                            "description": "parallel callbacks and concurrent inner calls"},
            "max_tool_calls": {"type": "integer", "minimum": 0, "default": 1000,
                               "description": "inner tool calls one script may make"},
            "max_result_bytes": {"type": "integer", "minimum": 1, "default": 1048576,
                                 "description": "cap on the JSON of run's return value"},
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
            "launcher": {"enum": ["auto", "zygote", "spawn"], "default": "auto",
                         "description": "fork children from a warm zygote, or spawn fresh interpreters"},
        },
    }


@hookimpl
def nexus_config_schema() -> dict[str, Any]:
    return config_schema()


@hookimpl
def nexus_register_tools(register: Any, nexus: Nexus) -> None:
    engine = CodeExec(nexus, nexus.plugin_config(PLUGIN_ID), plugin_id=PLUGIN_ID)
    nexus.plugin_state(PLUGIN_ID)["engine"] = engine
    register(engine.tooldef())
    # the engine's own hookimpls (new tools, skills) are per Nexus, so it registers as a plugin
    nexus.register(engine, name=f"{PLUGIN_ID}.engine")


@hookimpl
def nexus_shutdown(nexus: Nexus) -> None:
    engine = nexus.plugin_state(PLUGIN_ID).get("engine")
    if engine is not None:
        engine.close()


@hookimpl
def nexus_doctor(nexus: Nexus) -> list[str] | None:
    engine = engine_for(nexus)
    return engine.doctor_lines() if engine is not None else None


def engine_for(nexus: Nexus) -> CodeExec | None:
    """The run_code engine of a Nexus (for `nexus run`, `nexus doctor` and tests)."""
    return nexus.plugin_state(PLUGIN_ID).get("engine")


__all__ = ["DEFAULT_ALLOWED_PACKAGES", "PLUGIN_ID", "CodeExec", "engine_for"]
