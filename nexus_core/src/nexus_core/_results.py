"""Turning whatever a handler returns into a `ToolResult`, and the `success` / `failure` values."""

from __future__ import annotations

import json
from typing import Any

import attrs

from ._models import ToolCall, ToolResult


def _as_json(value: Any) -> tuple[str, Any]:
    """(JSON text, plain value) for attrs instances, dicts and lists."""
    from ._converter import unstructure

    plain = unstructure(value)
    return json.dumps(plain, ensure_ascii=False, default=str), plain


def success(output: Any = "") -> ToolResult:
    """A successful result. `output` is normalised as a handler's return value would be."""
    return attrs.evolve(normalize_result(output, ToolCall(name="", id="")), error=None, error_kind=None)


def failure(output: Any) -> ToolResult:
    """An expected failure the model should read and act on (e.g. "amount must be positive")."""
    result = normalize_result(output, ToolCall(name="", id=""))
    return attrs.evolve(result, error=result.output, error_kind="failure")


def normalize_result(value: Any, call: ToolCall) -> ToolResult:
    """A handler's return value as the result of `call`.

    A string is the output; None is empty output; a ToolResult passes through (its id and name set
    to the call's); an attrs instance, dict or list becomes JSON text in `output` and the value in
    `output_structured`; bytes are decoded as UTF-8; anything else is `str()`-ed.
    """
    if isinstance(value, ToolResult):
        error = value.error
        kind = value.error_kind
        if error is not None and kind is None:
            kind = "failure"
        return attrs.evolve(value, id=call.id, name=call.name, error_kind=kind)
    if value is None:
        return ToolResult(id=call.id, name=call.name, output="")
    if isinstance(value, str):
        return ToolResult(id=call.id, name=call.name, output=value)
    if isinstance(value, (bytes, bytearray)):
        return ToolResult(id=call.id, name=call.name, output=bytes(value).decode("utf-8", "replace"))
    if isinstance(value, (dict, list, tuple)) or attrs.has(type(value)):
        text, plain = _as_json(value)
        return ToolResult(id=call.id, name=call.name, output=text, output_structured=plain)
    return ToolResult(id=call.id, name=call.name, output=str(value))


def error_result(call: ToolCall, message: str, kind: Any) -> ToolResult:
    """An error result for `call`: the message in both `error` and `output`."""
    return ToolResult(id=call.id, name=call.name, output=message, error=message, error_kind=kind)
