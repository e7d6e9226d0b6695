"""run_code's hook payloads (`nexus_tool_code_exec.host.events`): their JSON through core's one
converter, read strictly, errors naming the field. They are this package's, not the core's."""

from __future__ import annotations

import json
from typing import Any

import pytest
from nexus_core._converter import structure
from nexus_core.wire import WireError, from_json, to_json

from nexus_tool_code_exec import CodeExecChunk, CodeExecRequest, CodeExecResult

SAMPLES: list[Any] = [
    CodeExecRequest(call_id="c3", script="def run(ctx):\n    return 1\n", session_dir="/tmp/s"),
    CodeExecChunk(call_id="c3", data="line\n", stream="stderr", final=True),
    CodeExecResult(call_id="c3", stdout="x", result={"a": [1, 2]}, error=None, stdout_truncated=True,
                   duration_seconds=0.25, tool_calls=4),
]


@pytest.mark.parametrize("value", SAMPLES, ids=lambda v: type(v).__name__)
def test_json_round_trip(value: Any) -> None:
    text = to_json(value)
    assert from_json(text, type(value)) == value
    assert structure(json.loads(text), type(value)) == value


@pytest.mark.parametrize(
    ("data", "cls", "message"),
    [
        ({"call_id": "c", "data": "x", "final": "false"}, CodeExecChunk,
         "CodeExecChunk.final: expected boolean, got string 'false'"),
        ({"call_id": "c", "data": "x", "stream": "err"}, CodeExecChunk,
         "CodeExecChunk.stream: expected one of 'stdout', 'stderr', got 'err'"),
        ({"call_id": "c", "tool_calls": "3"}, CodeExecResult, "CodeExecResult.tool_calls: expected integer, got string"),
        ({"call_id": "c", "tool_calls": True}, CodeExecResult, "CodeExecResult.tool_calls: expected integer, got boolean"),
    ],
)
def test_structure_errors_name_the_field(data: dict[str, Any], cls: type, message: str) -> None:
    with pytest.raises(WireError) as info:
        structure(data, cls)
    assert message in str(info.value)


def test_structure_accepts_an_int_where_a_number_is_expected() -> None:
    assert structure({"call_id": "c", "duration_seconds": 2}, CodeExecResult).duration_seconds == 2.0


def test_the_payloads_belong_to_run_codes_package_not_the_core() -> None:
    import nexus_core

    assert not {"CodeExecChunk", "CodeExecRequest", "CodeExecResult"} & set(nexus_core.__all__)
    assert CodeExecChunk.__module__ == "nexus_tool_code_exec.host.events"
