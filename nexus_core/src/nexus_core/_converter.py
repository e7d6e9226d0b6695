"""The one cattrs converter for Nexus's JSON: the wire (CLI output, run_code's pipe, persisted
logs) and the arguments and results of `@tool` functions.

Input that comes from outside (a call read from JSON, possibly sent by an untrusted script) is
structured strictly: unknown keys are refused (`forbid_extra_keys`), and JSON scalars are not
coerced (`"3"` is not an int, `"false"` is not a bool, `"ab"` is not a list of two strings).
Structuring errors become one message naming each failing field path, e.g.
`ToolCall.arguments: expected object, got list [1]`.

Besides the models, it reads and writes the types a tool function's hints may name: enums (by
value), dates, times and datetimes (ISO 8601 text), UUIDs and paths (text), sets (JSON arrays),
tuples, dataclasses, TypedDicts and unions of JSON scalars (passed through once checked).
"""

from __future__ import annotations

import datetime
import json
import pathlib
import typing
import uuid
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, Union

import cattrs
from cattrs.cols import homogenous_tuple_structure_factory, list_structure_factory
from cattrs.errors import ForbiddenExtraKeysError
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override
from cattrs.strategies import configure_union_passthrough

from ._content import CONTENT_TAGS, CONTENT_TYPES, Content
from ._models import ToolCall, ToolDef, ToolResult
from ._schema import json_type_name, short_repr

T = TypeVar("T")

converter = cattrs.Converter(forbid_extra_keys=True, omit_if_default=False)


class _WrongType(TypeError):
    """A JSON value of the wrong type; the message says what was expected and what came."""


def _wrong(expected: str, value: Any) -> _WrongType:
    return _WrongType(f"expected {expected}, got {json_type_name(value)} {short_repr(value)}")


def _structure_str(value: Any, _: type) -> str:
    if not isinstance(value, str):
        raise _wrong("string", value)
    return value


def _structure_int(value: Any, _: type) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise _wrong("integer", value)
    return value


def _structure_float(value: Any, _: type) -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise _wrong("number", value)
    return float(value)


def _structure_bool(value: Any, _: type) -> bool:
    if not isinstance(value, bool):
        raise _wrong("boolean", value)
    return value


converter.register_structure_hook(str, _structure_str)
converter.register_structure_hook(int, _structure_int)
converter.register_structure_hook(float, _structure_float)
converter.register_structure_hook(bool, _structure_bool)


def _is_array_type(tp: Any) -> bool:
    origin = typing.get_origin(tp)
    if origin is list:
        return True
    args = typing.get_args(tp)
    return origin is tuple and len(args) == 2 and args[1] is Ellipsis


def _array_hook(tp: Any, conv: cattrs.Converter) -> Callable[[Any, Any], Any]:
    """cattrs's own list / tuple hook, but only for JSON arrays: a string or a mapping is
    iterable too, and would otherwise become a list of its characters or keys."""
    if typing.get_origin(tp) is list:
        base = list_structure_factory(tp, conv)
    else:
        base = homogenous_tuple_structure_factory(tp, conv)

    def structure_array(value: Any, cls: Any) -> Any:
        if not isinstance(value, (list, tuple)):
            raise _wrong("array", value)
        return base(value, cls)

    return structure_array


converter.register_structure_hook_factory(_is_array_type, _array_hook)


def _literal_hook(tp: Any) -> Callable[[Any, Any], Any]:
    allowed = typing.get_args(tp)

    def structure_literal(value: Any, _: Any) -> Any:
        # `True == 1`, so compare types too: the JSON `1` is not the literal `True`
        if not any(value == a and type(value) is type(a) for a in allowed):
            raise _WrongType(f"expected one of {', '.join(repr(a) for a in allowed)}, got {short_repr(value)}")
        return value

    return structure_literal


def _is_literal(tp: Any) -> bool:
    origin: object = typing.get_origin(tp)
    return origin is typing.Literal


converter.register_structure_hook_factory(_is_literal, _literal_hook)

# `int | str` and the like: JSON already made the value one of them; check it and pass it on
configure_union_passthrough(Union[str, int, float, bool, None], converter)  # noqa: UP007 (a runtime union)

#: types that travel as JSON text, and what the text is expected to be
_TEXT_TYPES: tuple[tuple[type, str], ...] = (
    (datetime.datetime, "date and time (ISO 8601)"), (datetime.date, "date (YYYY-MM-DD)"),
    (datetime.time, "time (HH:MM[:SS])"), (uuid.UUID, "UUID"), (pathlib.PurePath, "path"),
)


def _text_type(tp: Any) -> tuple[type, str] | None:
    if isinstance(tp, type):
        for cls, what in _TEXT_TYPES:  # datetime before date, its base class
            if issubclass(tp, cls):
                return cls, what
    return None


def _text_hook(tp: Any) -> Callable[[Any, Any], Any]:
    base, what = _text_type(tp)  # type: ignore[misc]  # the predicate below found one
    parse: Callable[[str], Any] = tp.fromisoformat if base in (datetime.datetime, datetime.date, datetime.time) else tp

    def structure_text(value: Any, _: Any) -> Any:
        if not isinstance(value, str):
            raise _wrong(what, value)
        try:
            return parse(value)
        except ValueError:
            raise _WrongType(f"expected a {what}, got {short_repr(value)}") from None

    return structure_text


converter.register_structure_hook_factory(lambda tp: _text_type(tp) is not None, _text_hook)
for _moment in (datetime.datetime, datetime.date, datetime.time):
    converter.register_unstructure_hook(_moment, lambda value: value.isoformat())
converter.register_unstructure_hook(uuid.UUID, str)
converter.register_unstructure_hook_func(lambda tp: isinstance(tp, type) and issubclass(tp, pathlib.PurePath), str)
for _collection in (set, frozenset):  # JSON has arrays
    converter.register_unstructure_hook(_collection, lambda value: [converter.unstructure(v) for v in value])


def _structure_mapping_check(value: Any, _: type) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise _wrong("object", value)
    return dict(value)


# A JSON object of anything: the arguments of a call, metadata. Keys are strings in JSON.
converter.register_structure_hook_func(lambda tp: tp == dict[str, Any], _structure_mapping_check)

# A result's content blocks, written as MCP writes them: {"type": "image", ...}, and read back
# strictly (an unknown type or key is an error naming it).
_BLOCKS_BY_TAG = {tag: cls for cls, tag in CONTENT_TAGS.items()}
_structure_block: dict[type, Callable[[Any, Any], Any]] = {
    cls: make_dict_structure_fn(cls, converter, _cattrs_forbid_extra_keys=True) for cls in CONTENT_TYPES}
_unstructure_block: dict[type, Callable[[Any], dict[str, Any]]] = {
    cls: make_dict_unstructure_fn(cls, converter) for cls in CONTENT_TYPES}


def _structure_content(data: Any, _: Any) -> Content:
    if not isinstance(data, Mapping):
        raise _wrong("object", data)
    cls = _BLOCKS_BY_TAG.get(data.get("type"))  # type: ignore[arg-type]
    if cls is None:
        raise _WrongType(f"expected a content block with 'type' one of {', '.join(map(repr, _BLOCKS_BY_TAG))}, "
                         f"got {short_repr(data.get('type'))}")
    block: Content = _structure_block[cls]({k: v for k, v in data.items() if k != "type"}, cls)
    return block


def _unstructure_content(block: Content) -> dict[str, Any]:
    return {"type": CONTENT_TAGS[type(block)], **_unstructure_block[type(block)](block)}


converter.register_structure_hook_func(lambda tp: tp == Content, _structure_content)
for _cls in CONTENT_TYPES:
    converter.register_unstructure_hook(_cls, _unstructure_content)

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
    # `is_error` is derived from `error`; it is written out for readers, and accepted back.
    if isinstance(data, dict) and "is_error" in data:
        data = {k: v for k, v in data.items() if k != "is_error"}
    return _structure_result(data, cls)


converter.register_structure_hook(ToolResult, _structure_tool_result)
converter.register_structure_hook(
    ToolCall, make_dict_structure_fn(ToolCall, converter, _cattrs_forbid_extra_keys=True)
)


class WireError(ValueError):
    """JSON that does not fit the model it was read as; the message names each bad field."""


def _describe(exc: BaseException, tp: type | None) -> str:
    if isinstance(exc, _WrongType):
        return str(exc)
    if isinstance(exc, ForbiddenExtraKeysError):
        return "unknown key " + ", ".join(repr(k) for k in sorted(exc.extra_fields))
    if isinstance(exc, KeyError):
        return "required, but missing"
    if isinstance(exc, AttributeError) and str(exc).endswith("has no attribute 'items'"):
        return "expected object"
    if type(exc) is ValueError:  # a model's own validator (bad base64, say): its message says it
        return str(exc)
    return cattrs.v.format_exception(exc, tp)


def _error_lines(exc: cattrs.BaseValidationError, root: str) -> list[str]:
    lines = []
    for line in cattrs.transform_error(exc, path=root, format_exception=_describe):
        what, _, where = line.rpartition(" @ ")
        lines.append(f"{where}: {what}" if what else line)
    return lines


#: what a structure hook raises for data that does not fit
STRUCTURE_ERRORS: tuple[type[BaseException], ...] = (
    cattrs.BaseValidationError, TypeError, ValueError, KeyError, AttributeError)


def explain_structure_error(exc: BaseException, tp: Any, root: str) -> str:
    """What a structure hook's error `exc` says, as `structure`'s `WireError` words it: each
    failing path from `root`, and what is wrong there."""
    if isinstance(exc, cattrs.BaseValidationError):
        return "; ".join(_error_lines(exc, root))
    return f"{root}: {_describe(exc, tp)}"


def unstructure(value: Any) -> Any:
    """A model (or anything holding models) as plain JSON-able data."""
    return converter.unstructure(value)


def structure(data: Any, cls: type[T]) -> T:
    """Plain data as a model; raises `WireError` naming the failing field paths."""
    try:
        return converter.structure(data, cls)
    except STRUCTURE_ERRORS as exc:
        raise WireError(explain_structure_error(exc, cls, cls.__name__)) from None


def to_json(value: Any, **kwargs: Any) -> str:
    return json.dumps(unstructure(value), **kwargs)


def from_json(text: str | bytes, cls: type[T]) -> T:
    """JSON text as a model; raises `WireError` (invalid JSON included) naming what is wrong."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise WireError(f"{cls.__name__}: invalid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    return structure(data, cls)
