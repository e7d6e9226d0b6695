"""Turning whatever a handler returns into a `ToolResult`, and the `success` / `failure` values.

The rules (the same for every tool, native or from a plugin):
- a string is the output; None is empty output (a tool that only has an effect);
- a `ToolResult` (from `success` / `failure`) passes through, re-addressed to the call;
- a dict that has an `output` key is a result already (toolnexus's result map): `output` is
  normalised by these same rules, a true `isError` (any truthy value, made a real boolean) makes
  it an error result carrying that text, and its other keys are kept in `metadata`. An `@tool`
  function that declares its return type returns data instead: its dicts are JSON, whatever
  their keys;
- a content block (`ImageContent`, ...), or a list or tuple of them, becomes `content`, with
  its text form (`[image: image/png, 2.1 kB]` for an image) in `output`;
- an attrs instance, dataclass instance, dict, list or tuple becomes JSON text in `output` and
  the same value, as plain JSON data, in `output_structured`;
- an int, float or bool is its text; for a tool that declares an output schema it is data too
  (`output_structured`, and JSON text: `true`, not `True`), as an `@tool` function's `-> int` says;
- bytes are decoded as UTF-8; anything else is `str()`-ed.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

import attrs

from ._content import content_text, is_content
from ._models import ErrorKind, ToolCall, ToolResult

#: the call `success` / `failure` build their values for; the invocation path re-addresses them
_NO_CALL = ToolCall(name="", id="")


def _as_json(value: Any) -> tuple[str, Any]:
    """(JSON text, plain JSON value) for attrs instances, dataclasses, dicts and lists.

    The plain value is read back from the text, so `output_structured` holds exactly what a
    client reading `output` would get (string keys, lists for tuples, `str()` of the odd value)
    and can go on the wire (MCP's structuredContent) as it is.
    """
    from ._converter import unstructure

    plain = unstructure(value)
    text = json.dumps(plain, ensure_ascii=False, default=str)
    return text, json.loads(text)


def structured_result(value: Any) -> ToolResult:
    """`value` (an attrs or dataclass instance, a dict, a list) as data: its JSON text in
    `output`, the same as plain JSON data in `output_structured`."""
    text, plain = _as_json(value)
    return ToolResult(id="", name="", output=text, output_structured=plain)


def _from_result_map(value: dict[str, Any], call: ToolCall) -> ToolResult:
    """toolnexus's result map `{"output": ..., "isError": ...}` as a result of `call`."""
    result = normalize_result(value["output"], call)
    extra = {k: v for k, v in value.items() if k not in ("output", "isError")}
    if extra:
        result = attrs.evolve(result, metadata={**result.metadata, **extra})
    if bool(value.get("isError", False)):  # whatever the handler wrote, a real boolean decides
        return attrs.evolve(result, error=result.output, error_kind=result.error_kind or "failure")
    return result


def _is_structured(value: Any) -> bool:
    return (
        isinstance(value, (dict, list, tuple))
        or attrs.has(type(value))
        or (dataclasses.is_dataclass(value) and not isinstance(value, type))
    )


def success(output: Any = "") -> ToolResult:
    """A successful result. `output` is normalised as a handler's return value would be:
    `success({"n": 1})` has JSON text in `output` and the dict in `output_structured`."""
    return attrs.evolve(normalize_result(output, _NO_CALL), error=None, error_kind=None)


def failure(output: Any) -> ToolResult:
    """An expected failure the model should read and act on (`failure("amount must be
    positive")`): an error result whose `error` and `output` both carry the message."""
    result = normalize_result(output, _NO_CALL)
    return attrs.evolve(result, error=result.output, error_kind="failure")


_SCALARS = (int, float, bool)


def normalize_result(value: Any, call: ToolCall, *, typed: bool = False) -> ToolResult:
    """A handler's return value as the result of `call` (see the module docstring for the rules).

    A ToolResult keeps everything but its id and name, which become the call's; one that
    carries an error but no `error_kind` gets "failure". `typed`: the tool declares an output
    schema, so a JSON scalar it returns is data (`output_structured`) as well as text.
    """
    cls = type(value)
    if cls is str:  # the commonest value first: the order below is the rules' order otherwise
        return ToolResult(id=call.id, name=call.name, output=value)
    if cls in _SCALARS:
        if typed and (cls is not float or math.isfinite(value)):  # NaN is no JSON
            text = ("true" if value else "false") if cls is bool else repr(value)  # JSON's text of it
            return ToolResult(id=call.id, name=call.name, output=text, output_structured=value)
        return ToolResult(id=call.id, name=call.name, output=str(value))
    if isinstance(value, ToolResult):
        kind = value.error_kind
        if value.error is not None and kind is None:
            kind = "failure"
        elif value.error is None:
            kind = None  # an error kind without an error would say "error" where there is none
        return attrs.evolve(value, id=call.id, name=call.name, error_kind=kind)
    if value is None:
        return ToolResult(id=call.id, name=call.name, output="")
    if isinstance(value, dict) and "output" in value:
        return _from_result_map(value, call)
    if isinstance(value, str):
        return ToolResult(id=call.id, name=call.name, output=value)
    if is_content(value):
        value = (value,)
    if isinstance(value, (list, tuple)) and value and all(is_content(v) for v in value):
        return ToolResult(id=call.id, name=call.name, output=content_text(value), content=tuple(value))
    if isinstance(value, (bytes, bytearray)):
        return ToolResult(id=call.id, name=call.name, output=bytes(value).decode("utf-8", "replace"))
    if _is_structured(value):
        text, plain = _as_json(value)
        return ToolResult(id=call.id, name=call.name, output=text, output_structured=plain)
    return ToolResult(id=call.id, name=call.name, output=str(value))


def error_result(call: ToolCall, message: str, kind: ErrorKind) -> ToolResult:
    """An error result for `call`: the message in both `error` and `output`."""
    return ToolResult(id=call.id, name=call.name, output=message, error=message, error_kind=kind)
