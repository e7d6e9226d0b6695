"""The payloads of run_code's own hooks (`hookspecs.py`): a script about to run, its output as it
comes, how it ended. Plain attrs classes, frozen like every payload Nexus hands to plugins, so
one observer cannot change what the next one sees; nothing here imports nexus_core."""

from __future__ import annotations

from typing import Any, Literal

import attrs


@attrs.frozen
class CodeExecRequest:
    """Payload of `nexus_code_exec_request`: a run_code script about to run."""

    call_id: str
    script: str
    session_dir: str | None = None


@attrs.frozen
class CodeExecChunk:
    """Payload of `nexus_code_exec_stdout`: output the script wrote while running."""

    call_id: str
    data: str
    stream: Literal["stdout", "stderr"] = "stdout"
    final: bool = False


@attrs.frozen
class CodeExecResult:
    """Payload of `nexus_code_exec_result`: how a run_code script ended."""

    call_id: str
    stdout: str = ""
    result: Any = None
    error: str | None = None
    stdout_truncated: bool = False
    duration_seconds: float = 0.0
    tool_calls: int = 0
