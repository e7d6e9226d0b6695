"""Results: `success` / `failure`, and how whatever a handler returns becomes a ToolResult —
checked through the real invocation path, where a raise becomes an error result."""

from __future__ import annotations

import dataclasses
import datetime
import json
from typing import Any

import attrs
import pytest

from nexus_core import (
    ToolCall,
    ToolResult,
    execute,
    failure,
    native_tool,
    normalize_result,
    success,
    toolkit,
)

CALL = ToolCall(name="t", id="c-1")


def run(value: Any) -> ToolResult:
    """What a tool returning `value` gives its caller, through the invocation path."""
    return execute(toolkit([native_tool("t", run=lambda args: value)]), "t", {})


@attrs.define
class Point:
    x: int
    y: int


@dataclasses.dataclass
class Size:
    w: int
    h: int


def test_a_string_is_the_output() -> None:
    result = run("hello")
    assert (result.output, result.error, result.output_structured, result.is_error) == ("hello", None, None, False)


def test_none_is_empty_output() -> None:
    result = run(None)
    assert result.output == "" and not result.is_error


def test_a_dict_becomes_json_text_and_the_structured_value() -> None:
    result = run({"a": 1, "b": [True, None], "c": "é"})
    assert json.loads(result.output) == {"a": 1, "b": [True, None], "c": "é"}
    assert "é" in result.output  # readable, not \\u-escaped
    assert result.output_structured == {"a": 1, "b": [True, None], "c": "é"}


def test_a_list_and_a_tuple_become_json() -> None:
    assert run([1, "two"]).output == '[1, "two"]'
    assert run([1, "two"]).output_structured == [1, "two"]
    assert run((1, 2)).output_structured == [1, 2]


def test_an_attrs_instance_becomes_json() -> None:
    result = run(Point(1, 2))
    assert result.output == '{"x": 1, "y": 2}'
    assert result.output_structured == {"x": 1, "y": 2}


def test_a_dataclass_instance_becomes_json_too() -> None:
    assert run(Size(3, 4)).output_structured == {"w": 3, "h": 4}


def test_nested_models_and_odd_values_become_plain_json_data() -> None:
    when = datetime.date(2024, 5, 1)
    result = run({"points": [Point(1, 2)], "when": when, 7: "int key"})
    # output_structured is exactly what a client reading `output` gets: JSON data only
    assert result.output_structured == {"points": [{"x": 1, "y": 2}], "when": "2024-05-01", "7": "int key"}
    assert json.loads(result.output) == result.output_structured


def test_anything_else_is_strd() -> None:
    assert run(42).output == "42"
    assert run(3.5).output == "3.5"
    assert run(True).output == "True"
    assert run({1, 2}).output == "{1, 2}"
    assert run(42).output_structured is None


def test_bytes_are_decoded_as_utf8() -> None:
    assert run("ünï".encode()).output == "ünï"
    assert run(b"\xff").output == "\ufffd"


def test_a_tool_result_passes_through_addressed_to_the_call() -> None:
    mine = ToolResult(id="", name="", output="done", output_file="/tmp/out.txt", metadata={"k": "v"},
                      output_structured={"n": 1})
    result = execute(toolkit([native_tool("t", run=lambda args: mine)]), "t", {})
    assert result.output == "done" and result.output_file == "/tmp/out.txt"
    assert result.metadata == {"k": "v"} and result.output_structured == {"n": 1}
    assert result.name == "t" and result.id.startswith("call_")


def test_a_tool_result_with_an_error_but_no_kind_is_a_failure() -> None:
    result = normalize_result(ToolResult(id="x", name="x", output="no", error="no"), CALL)
    assert (result.id, result.name, result.error_kind) == ("c-1", "t", "failure")
    assert result.is_error


def test_a_tool_result_with_a_kind_but_no_error_is_not_an_error() -> None:
    result = normalize_result(ToolResult(id="x", name="x", output="ok", error_kind="failure"), CALL)
    assert result.error_kind is None and not result.is_error


def test_success_normalises_its_output() -> None:
    assert success("ok").output == "ok" and not success("ok").is_error
    assert success().output == ""
    structured = success({"n": 1})
    assert structured.output == '{"n": 1}' and structured.output_structured == {"n": 1}


def test_failure_is_an_error_whose_output_is_the_message() -> None:
    result = failure("amount must be positive")
    assert result.is_error
    assert result.output == result.error == "amount must be positive"
    assert result.error_kind == "failure"
    structured = failure({"code": 402, "reason": "declined"})
    assert structured.is_error and structured.output_structured == {"code": 402, "reason": "declined"}
    assert json.loads(structured.error) == {"code": 402, "reason": "declined"}


def test_failure_and_success_values_through_the_invocation_path() -> None:
    refused = run(failure("amount must be positive"))
    assert refused.is_error and refused.error == "amount must be positive" and refused.error_kind == "failure"
    assert run(success("charged 5")).output == "charged 5"


@pytest.mark.parametrize("exc", [RuntimeError("kaboom"), ValueError("kaboom"), KeyError("kaboom")])
def test_a_raise_is_an_error_result_with_the_message_never_propagated(exc: Exception) -> None:
    def boom(args: dict[str, Any]) -> str:
        raise exc

    result = execute(toolkit([native_tool("boom", run=boom)]), "boom", {})
    assert result.is_error and result.error_kind == "exception"
    assert "kaboom" in result.error and "kaboom" in result.output


def test_an_unserialisable_result_does_not_escape_either() -> None:
    class Weird:
        def __str__(self) -> str:
            raise RuntimeError("cannot print me")

    result = run(Weird())
    assert result.is_error and "cannot print me" in result.error
