"""The `nexus.tool.code_exec` plugin: the `run_code` tool (and, past `max_listed_tools`, its
companion `run_code_api`).

The model writes one Python script with `def run(ctx)`; it calls many tools through typed
bindings (`tools`), fans out with `parallel`, and runs in a child process whose every tool call
comes back to the host and goes through the same gates as a direct call. See docs/run-code.md.

run_code's own hooks (`host/hookspecs.py`) and their payloads (`host/events.py`: `CodeExecRequest`,
`CodeExecChunk`, `CodeExecResult`) belong to this package, not the core. Its settings are
`CodeExecSettings` (`host/settings.py`: the schema of its config section is derived from it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nexus_core import Nexus

    from .host.events import CodeExecChunk, CodeExecRequest, CodeExecResult
    from .host.engine import CodeExec
    from .host.plugin import CodeExecPlugin
    from .host.replay import ReplayError, ReplayReport, replay
    from .host.settings import CodeExecSettings

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
    if name == "CodeExecSettings":
        from .host.settings import CodeExecSettings

        return CodeExecSettings
    if name in ("replay", "ReplayReport", "ReplayError"):
        from .host import replay

        return getattr(replay, name)
    if name in ("CodeExecRequest", "CodeExecChunk", "CodeExecResult"):
        from .host import events

        return getattr(events, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = ["DEFAULT_ALLOWED_PACKAGES", "PLUGIN_ID", "CodeExec", "CodeExecChunk", "CodeExecPlugin", "CodeExecRequest",
           "CodeExecResult", "CodeExecSettings", "ReplayError", "ReplayReport", "engine_for", "replay"]
