"""The settings of `nexus.tool.code_exec` (runs in the host): the `plugins.nexus.tool.code_exec`
section as an attrs class, from which its JSON Schema is derived (nexus_core.plugins, the one
plugin shape). Here, under host/, and not in the package's `__init__`: the zygote and every child
import that `__init__`, and must not pay for nexus_core.

Three settings are not plain constants: `max_workers` defaults to this machine's CPU count (a
factory, so the schema shows the figure of the machine that reads it), `require` names sandbox
layers (`sandbox.LAYERS`: the schema lists them, and a class built by hand checks them too),
and `cpu_seconds` defaults to the wall-clock limit and a second (`cpu_limit`, worked out here once).
"""

from __future__ import annotations

import os
import re
from typing import Literal

import attrs
from nexus_core.plugins import SettingError, setting

from .. import DEFAULT_ALLOWED_PACKAGES
from ..sandbox.policy import LAYERS


#: messages and bytes a script's process may send the host in one run, by default
DEFAULT_MAX_CHILD_MESSAGES = 250_000
DEFAULT_MAX_CHILD_BYTES = 256 * 1024 * 1024


#: a Ray cluster's address: host:port or ray://host:port
_RAY_ADDRESS = re.compile(r"(ray://)?[A-Za-z0-9_.\-]+:[0-9]{1,5}")


def _cpu_count() -> int:
    return os.cpu_count() or 1


@attrs.frozen
class CodeExecSettings:
    """The `plugins.nexus.tool.code_exec` section; its JSON Schema is derived from this class."""

    timeout_seconds: float = setting(30, exclusiveMinimum=0, description="wall-clock limit of one script")
    max_output_bytes: int = setting(65536, minimum=0, description="cap on stdout and stderr together")
    max_workers: int = setting(factory=_cpu_count, minimum=1,
                               description="parallel callbacks and concurrent inner calls (default: the CPU count)")
    max_tool_calls: int = setting(1000, minimum=0, description="inner tool calls one script may make")
    max_result_bytes: int = setting(1048576, minimum=1, description="cap on the JSON of run's return value")
    max_text_bytes: int = setting(65536, minimum=256,
                                  description="cap on the text a model reads in run_code's output (printed text and "
                                              "result together, ~16k tokens); longer text keeps its head and tail; "
                                              "output_structured keeps all")
    max_listed_tools: int = setting(30, minimum=0,
                                    description="above this many tools run_code's description lists their groups, "
                                                "and run_code_api gives the functions of the tools asked for")
    max_listed_bytes: int = setting(65536, minimum=0,
                                    description="above this many bytes of stubs run_code's description lists the "
                                                "tools' groups too, however few the tools")
    max_child_messages: int = setting(DEFAULT_MAX_CHILD_MESSAGES, minimum=1,
                                      description="messages of any kind a script's process may send the host in one "
                                                  "run; past them the run is stopped (host limit exceeded)")
    max_child_bytes: int = setting(DEFAULT_MAX_CHILD_BYTES, minimum=1,
                                   description="bytes a script's process may send the host in one run (its calls' "
                                               "arguments, its output); past them the run is stopped")
    persist_scripts: bool = setting(True, description="keep each script, its output and calls.jsonl in the session "
                                                      "folder")
    reject_threads: bool = setting(True, description="refuse scripts that import threading or start threads")
    allowed_packages: tuple[str, ...] = setting(tuple(DEFAULT_ALLOWED_PACKAGES),
                                                description="modules a script may import")
    memory_mb: int = setting(512, minimum=64, description="address-space limit of the script's process")
    cpu_seconds: int | None = setting(None, minimum=1, description="CPU-time limit (default: timeout_seconds)")
    require: tuple[str, ...] = setting((), items={"enum": list(LAYERS)},
                                       description="sandbox layers without which run_code refuses to run")
    launcher: Literal["auto", "zygote", "spawn", "ray"] = setting(
        "auto", description="fork children from a warm zygote, or spawn fresh interpreters, or run them in the "
                            "pools of a Ray cluster's nodes (ray: needs the nexus-rt-ray package; see address)")
    address: str = setting("auto", description="launcher: ray: the cluster to join: auto (the running one), "
                                                   "host:port or ray://host:port")
    pool: Literal["process", "machine", "nexus"] = setting(
        "process", description="whose warm zygote forks the children: one shared by every Nexus of the process "
                               "(each run's bindings and limits go with its start), the pool server of this machine "
                               "and user (started on first use), or one of this Nexus alone")
    pool_idle_seconds: float = setting(300, exclusiveMinimum=0,
                                       description="pool: machine: a pool server this Nexus starts stops once no "
                                                   "process has used it for this long")
    journal: bool = setting(True, description="journal each inner call's result as it completes (journal.jsonl in "
                                              "the run's session folder while it runs), so that a suspended run, or one "
                                              "whose host stopped, resumes without running a completed call again")
    suspend_after_seconds: float | None = setting(60, exclusiveMinimum=0,
                                                  description="a run whose inner call waits this long for a person is "
                                                              "suspended: its process ends, and a fresh one resumes it "
                                                              "from the journal once the call is answered (null: never)")

    def __attrs_post_init__(self) -> None:
        if self.address != "auto" and not _RAY_ADDRESS.fullmatch(self.address):
            raise SettingError(("address",), f"{self.address!r} is not auto, host:port or ray://host:port")
        # the schema lists the layers; a class built by hand (tests, embedding code) is checked too
        for i, name in enumerate(self.require):
            if name not in LAYERS:
                raise SettingError(("require", i), f"{name!r} is not a sandbox layer (one of {', '.join(LAYERS)})")

    @property
    def cpu_limit(self) -> int:
        """The child's RLIMIT_CPU in seconds: `cpu_seconds`, by default one second past the wall
        clock, so that a busy loop meets the timeout (and its clear "timed out after Ns") first."""
        return self.cpu_seconds if self.cpu_seconds is not None else int(self.timeout_seconds) + 1
