"""Python type hints as JSON Schema: what `@tool` tells a model about a parameter or a return
value, and what a plugin's attrs settings class says its config section accepts.

`schema_for_type` describes str, int, float, bool, None, the containers, Optional and unions,
Literal, Enum, attrs classes, dataclasses, TypedDicts, `Annotated[T, "description"]`, dates,
UUIDs and paths; a type JSON cannot carry is a TypeError. The value side (JSON back into these
types, and these types as JSON) is the cattrs converter's (`_converter`): one engine for both.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import datetime
import enum
import inspect
import json
import pathlib
import types
import typing
import uuid
import weakref
from collections.abc import Iterable, Mapping
from typing import Annotated, Any, Literal, Union

import attrs

_PRIMITIVES: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}
_NONE = type(None)
_SEQUENCES = (list, tuple, set, frozenset, collections.abc.Sequence, collections.abc.MutableSequence,
              collections.abc.Set, collections.abc.MutableSet, collections.abc.Iterable,
              collections.abc.Collection)
MAPPINGS = (dict, collections.abc.Mapping, collections.abc.MutableMapping)
# types that travel as JSON strings, with the JSON Schema format that says so (None: no format);
# datetime comes before date, its base class
_STRING_TYPES: tuple[tuple[type, str | None], ...] = (
    (datetime.datetime, "date-time"), (datetime.date, "date"), (datetime.time, "time"),
    (uuid.UUID, "uuid"), (pathlib.PurePath, None),
)


def _string_type(tp: Any) -> tuple[type, str | None] | None:
    if isinstance(tp, type):
        for cls, fmt in _STRING_TYPES:
            if issubclass(tp, cls):
                return cls, fmt
    return None


def strip_annotated(tp: Any) -> tuple[Any, str | None]:
    """`Annotated[T, "text", ...]` as (T, "text"); anything else as (tp, None)."""
    if typing.get_origin(tp) is Annotated:
        inner, *extras = typing.get_args(tp)
        text = next((e for e in extras if isinstance(e, str)), None)
        return inner, text
    return tp, None


def split_optional(tp: Any) -> tuple[bool, Any]:
    """(True, T) for `T | None` / `Optional[T]`; (False, tp) otherwise."""
    if typing.get_origin(tp) in (Union, types.UnionType):
        args = typing.get_args(tp)
        rest = [a for a in args if a is not _NONE]
        if len(rest) < len(args):
            return True, (rest[0] if len(rest) == 1 else Union[tuple(rest)])  # noqa: UP007
    return False, tp


def _json_kind(values: Iterable[Any]) -> str | None:
    """The one JSON type of all `values` (for an enum's `type`), or None when they are mixed."""
    kinds = {_PRIMITIVES.get(type(v)) for v in values}
    if kinds == {"integer", "number"}:
        return "number"
    return kinds.pop() if len(kinds) == 1 and None not in kinds else None


def nullable(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` that also admits null."""
    if admits_null(schema):
        return schema
    if "enum" in schema:
        out = {**schema, "enum": [*schema["enum"], None]} if None not in schema["enum"] else dict(schema)
        if isinstance(out.get("type"), str):
            out["type"] = [out["type"], "null"]
        return out
    if isinstance(schema.get("type"), str) and set(schema) <= {"type", "items", "additionalProperties",
                                                               "description", "default"}:
        return {**schema, "type": [schema["type"], "null"]}
    return {"anyOf": [schema, {"type": "null"}]}


def admits_null(schema: dict[str, Any]) -> bool:
    kind = schema.get("type")
    if not {"type", "enum", "const", "anyOf", "oneOf", "allOf"} & set(schema):
        return True  # no constraint on the value's type: null is fine
    if kind == "null" or (isinstance(kind, list) and "null" in kind):
        return True
    if None in schema.get("enum", ()):
        return True
    return any(admits_null(s) for s in schema.get("anyOf", ()) if isinstance(s, dict))


def schema_for_type(tp: Any, _seen: tuple[type, ...] = (), localns: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The JSON Schema of a Python type hint: str, int, float, bool, None, list/tuple/set[...],
    dict[str, ...], Optional / unions, Literal, Enum, attrs classes, Annotated[T, "description"]
    and Any. Raises TypeError for a type it cannot describe. `localns` resolves string hints of
    attrs classes defined inside a function."""
    tp, text = strip_annotated(tp)
    schema = _schema_for(tp, _seen, localns)
    if text:
        schema = {**schema, "description": text}
    return schema


def _schema_for(tp: Any, seen: tuple[type, ...], localns: Mapping[str, Any] | None) -> dict[str, Any]:
    if tp is Any or tp is inspect.Parameter.empty or tp is object:
        return {}
    if tp is None or tp is _NONE:
        return {"type": "null"}
    optional, inner = split_optional(tp)
    if optional:
        return nullable(schema_for_type(inner, seen, localns))
    if tp in _PRIMITIVES:
        return {"type": _PRIMITIVES[tp]}
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is Literal:
        values = list(args)
        schema: dict[str, Any] = {"enum": values}
        kind = _json_kind(values)
        if kind:
            schema["type"] = kind
        return schema
    if origin in (Union, types.UnionType):
        return {"anyOf": [schema_for_type(a, seen, localns) for a in args]}
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        values = [m.value for m in tp]
        schema = {"enum": values}
        kind = _json_kind(values)
        if kind:
            schema["type"] = kind
        return schema
    if tp in (bytes, bytearray):
        raise TypeError(f"cannot describe type {tp!r} as JSON Schema (JSON has no bytes; use str)")
    if tp is str or (isinstance(tp, type) and issubclass(tp, str)):
        return {"type": "string"}
    as_string = _string_type(tp)
    if as_string is not None:
        return {"type": "string", "format": as_string[1]} if as_string[1] else {"type": "string"}
    if tp in MAPPINGS or origin in MAPPINGS:
        schema = {"type": "object"}
        if len(args) == 2:
            if args[0] is not str and strip_annotated(args[0])[0] is not str:
                raise TypeError(f"cannot describe {tp!r} as JSON Schema: JSON object keys are strings")
            if args[1] is not Any:
                schema["additionalProperties"] = schema_for_type(args[1], seen, localns)
        return schema
    if origin is tuple or tp is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return {"type": "array", "items": schema_for_type(args[0], seen, localns)}
        if args and args != ((),):
            items = [schema_for_type(a, seen, localns) for a in args]
            return {"type": "array", "prefixItems": items, "minItems": len(items), "maxItems": len(items)}
        return {"type": "array"}
    if tp in _SEQUENCES or origin in _SEQUENCES:
        # a set is a plain array: it absorbs duplicates, so refusing them would only cost a retry
        schema = {"type": "array"}
        if args:
            schema["items"] = schema_for_type(args[0], seen, localns)
        return schema
    if isinstance(tp, type) and (attrs.has(tp) or dataclasses.is_dataclass(tp) or typing.is_typeddict(tp)):
        if tp in seen:
            raise TypeError(f"cannot describe {tp.__qualname__} as JSON Schema: it contains itself")
        if attrs.has(tp):
            return _attrs_schema(tp, (*seen, tp), localns)
        if dataclasses.is_dataclass(tp):
            return _dataclass_schema(tp, (*seen, tp), localns)
        return _typeddict_schema(tp, (*seen, tp), localns)
    raise TypeError(f"cannot describe type {tp!r} as JSON Schema")


_ATTRS_HINTS: weakref.WeakKeyDictionary[type, dict[str, Any]] = weakref.WeakKeyDictionary()


def _attrs_hints(cls: type, localns: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The resolved field hints of an attrs class (with the defining scope's names when the class
    is local), cached: a class nested in several tools' hints is resolved once."""
    hints = _ATTRS_HINTS.get(cls)
    if hints is None:
        names = {**(localns or {}), cls.__name__: cls}  # a class may name itself
        try:
            hints = typing.get_type_hints(cls, localns=names, include_extras=True)
        except NameError as exc:
            raise TypeError(f"cannot resolve the type hints of {cls.__qualname__}: {exc}") from None
        _ATTRS_HINTS[cls] = hints
    return hints


def _attrs_schema(cls: type, seen: tuple[type, ...], localns: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """An object schema from an attrs class: one property per init field (by its alias), required
    unless it has a default; a field's `metadata={"description": ...}` becomes its description."""
    hints = _attrs_hints(cls, localns)
    props: dict[str, Any] = {}
    required: list[str] = []
    for field in attrs.fields(cls):
        if not field.init:
            continue
        key = field.alias or field.name
        sub = schema_for_type(hints.get(field.name, field.type or Any), seen, localns)
        note = field.metadata.get("description")
        if isinstance(note, str):
            sub = {**sub, "description": note}
        keywords = field.metadata.get("schema")  # what the type cannot say (`setting(minimum=1)`)
        if isinstance(keywords, dict):
            sub = {**sub, **keywords}
        if field.default is attrs.NOTHING:
            required.append(key)
        elif not isinstance(field.default, attrs.Factory):  # type: ignore[arg-type]
            ok, value = json_value(field.default)
            if ok:
                sub = {**sub, "default": value}
        elif field.metadata.get("default_from_factory") and not field.default.takes_self:
            # a settings field's `setting(factory=...)`: its value is the default a user sees
            ok, value = json_value(field.default.factory())
            if ok:
                sub = {**sub, "default": value}
        props[key] = sub
    schema: dict[str, Any] = {"type": "object", "properties": props}
    if required:
        schema["required"] = required
    # the class's __init__ rejects unknown keys anyway; saying so lets validation name them
    schema["additionalProperties"] = False
    return schema


def _class_hints(cls: type, localns: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The resolved field hints of a dataclass or TypedDict (with the defining scope's names)."""
    names = {**(localns or {}), cls.__name__: cls}
    try:
        return typing.get_type_hints(cls, localns=names, include_extras=True)
    except NameError as exc:
        raise TypeError(f"cannot resolve the type hints of {cls.__qualname__}: {exc}") from None


def _dataclass_schema(cls: type, seen: tuple[type, ...], localns: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """An object schema from a dataclass: one property per init field, required unless it has
    a default; `metadata={"description": ...}` becomes its description."""
    hints = _class_hints(cls, localns)
    props: dict[str, Any] = {}
    required: list[str] = []
    for field in dataclasses.fields(cls):
        if not field.init:
            continue
        sub = schema_for_type(hints.get(field.name, Any), seen, localns)
        note = field.metadata.get("description")
        if isinstance(note, str):
            sub = {**sub, "description": note}
        if field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            required.append(field.name)
        elif field.default is not dataclasses.MISSING:
            ok, value = json_value(field.default)
            if ok:
                sub = {**sub, "default": value}
        props[field.name] = sub
    schema: dict[str, Any] = {"type": "object", "properties": props}
    if required:
        schema["required"] = required
    schema["additionalProperties"] = False
    return schema


def _strip_required(hint: Any) -> Any:
    """`Required[T]` / `NotRequired[T]` (a TypedDict's markers) as T."""
    while typing.get_origin(hint) in (typing.Required, typing.NotRequired):
        hint = typing.get_args(hint)[0]
    return hint


def _typeddict_schema(cls: type, seen: tuple[type, ...], localns: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """An object schema from a TypedDict: its keys, required as `total` / `Required` say."""
    raw = _class_hints(cls, localns)
    hints = {key: _strip_required(hint) for key, hint in raw.items()}
    props = {key: schema_for_type(hint, seen, localns) for key, hint in hints.items()}
    schema: dict[str, Any] = {"type": "object", "properties": props}
    # the markers, read from the resolved hints too: under `from __future__ import annotations`
    # the class's own __required_keys__ cannot see a NotRequired written as text
    total = getattr(cls, "__required_keys__", frozenset(hints))
    required = [key for key, hint in raw.items()
                if typing.get_origin(hint) is typing.Required
                or (typing.get_origin(hint) is not typing.NotRequired and key in total)]
    if required:
        schema["required"] = required
    schema["additionalProperties"] = False
    return schema


def json_value(value: Any) -> tuple[bool, Any]:
    """(True, value as JSON data) when `value` can be written as JSON (through the converter:
    enums by value, dates as ISO text, sets as arrays, attrs and dataclass instances as objects),
    else (False, None)."""
    from ._converter import unstructure  # not at import: describing a tool needs no cattrs

    try:
        return True, json.loads(json.dumps(unstructure(value), allow_nan=False))
    except (TypeError, ValueError):
        return False, None


def resolve_attrs_types(hint: Any, localns: Mapping[str, Any], seen: set[type] | None = None) -> None:
    """Resolve the string annotations of the attrs classes `hint` reaches (attrs' own
    `resolve_types`), with the names of the scope that described the tool, so that the
    converter can build them even when they were defined inside a function (or in code run by
    `exec`, whose classes have no module to look names up in)."""
    seen = set() if seen is None else seen
    hint, _ = strip_annotated(hint)
    if isinstance(hint, type) and attrs.has(hint):
        if hint in seen:
            return
        seen.add(hint)
        attrs.resolve_types(hint, localns={**localns, hint.__name__: hint})
        for field in attrs.fields(hint):
            resolve_attrs_types(field.type, localns, seen)
    for arg in typing.get_args(hint):
        resolve_attrs_types(arg, localns, seen)
