"""The one cattrs converter for Nexus's wire JSON (CLI output, run_code's pipe, persisted logs).

Input that comes from outside (a call read from JSON) is structured with `forbid_extra_keys`, and
structuring errors become one message naming each failing field path.
"""

from __future__ import annotations

import json
from typing import Any, TypeVar

import cattrs
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override

from ._models import ToolCall, ToolDef, ToolResult

T = TypeVar("T")

converter = cattrs.Converter(forbid_extra_keys=True, omit_if_default=False)

converter.register_unstructure_hook(
    ToolDef,
    make_dict_unstructure_fn(ToolDef, converter, handler=override(omit=True)),
)

_unstructure_result = make_dict_unstructure_fn(ToolResult, converter)


def _unstructure_tool_result(result: ToolResult) -> dict[str, Any]:
    data = _unstructure_result(result)
    data["is_error"] = result.is_error
    return data


converter.register_unstructure_hook(ToolResult, _unstructure_tool_result)

_structure_result = make_dict_structure_fn(ToolResult, converter, _cattrs_forbid_extra_keys=True)


def _structure_tool_result(data: Any, cls: type) -> ToolResult:
    if isinstance(data, dict) and "is_error" in data:
        data = {k: v for k, v in data.items() if k != "is_error"}
    return _structure_result(data, cls)


converter.register_structure_hook(ToolResult, _structure_tool_result)
converter.register_structure_hook(
    ToolCall, make_dict_structure_fn(ToolCall, converter, _cattrs_forbid_extra_keys=True)
)


class WireError(ValueError):
    """JSON that does not fit the model it was read as; the message names each bad field."""


def unstructure(value: Any) -> Any:
    """A model (or anything holding models) as plain JSON-able data."""
    return converter.unstructure(value)


def structure(data: Any, cls: type[T]) -> T:
    """Plain data as a model; raises `WireError` naming the failing field paths."""
    try:
        return converter.structure(data, cls)
    except cattrs.BaseValidationError as exc:
        raise WireError("; ".join(cattrs.transform_error(exc, path=cls.__name__))) from None
    except (TypeError, ValueError, KeyError) as exc:
        raise WireError(f"{cls.__name__}: {exc}") from None


def to_json(value: Any, **kwargs: Any) -> str:
    return json.dumps(unstructure(value), **kwargs)


def from_json(text: str | bytes, cls: type[T]) -> T:
    return structure(json.loads(text), cls)
