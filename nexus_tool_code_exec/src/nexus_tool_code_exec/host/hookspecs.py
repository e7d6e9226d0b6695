"""run_code's own hooks: this package brings them, not the core (pytest's `pytest_addhooks`
pattern). The entry point `nexus.hookspecs` in pyproject.toml names this module, so every Nexus
adds these specs before it registers any plugin: a plugin may implement them whether or not
run_code is active in its Nexus. docs/hooks.md documents them with the core's hooks.

Each is an observer: an implementation that raises is logged, naming its plugin, and the others
still see the event.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nexus_core import hookspec

if TYPE_CHECKING:
    from .events import CodeExecChunk, CodeExecRequest, CodeExecResult


@hookspec(kind="observer")
def nexus_code_exec_request(request: CodeExecRequest) -> None:
    """Observe a run_code script that passed the static check and is about to run.
    The return value is ignored."""


@hookspec(kind="observer")
def nexus_code_exec_stdout(chunk: CodeExecChunk) -> None:
    """Observe output from a running script: a chunk at each newline, when 512 bytes are
    pending, and a last chunk with `final=True`. Called while the script runs.
    The return value is ignored."""


@hookspec(kind="observer")
def nexus_code_exec_result(result: CodeExecResult) -> None:
    """Observe how a run_code script ended (result or error, output, timing).
    The return value is ignored."""
