"""Checks that a dict is what a provider SDK's own types take.

The openai and anthropic SDKs type their request parameters as TypedDicts, which nothing checks
at runtime: `sdk_type_errors(value, ChatCompletionFunctionToolParam)` walks the value against
the TypedDict (and the TypedDicts, unions, literals and lists inside it), so a missing required
key, a key the type does not have, or a value of the wrong type is found. The google-genai and
mcp SDKs use pydantic models: `model_errors(value, Model)` validates and also refuses keys the
model would silently drop.
"""

from __future__ import annotations

import collections.abc
import types
import typing
from typing import Any, Literal

import pydantic
import typing_extensions

_LISTS = (list, tuple, collections.abc.Iterable, collections.abc.Sequence, collections.abc.Collection)
_MAPS = (dict, collections.abc.Mapping, collections.abc.MutableMapping)
_WRAPPERS = ("Required", "NotRequired", "ReadOnly", "Annotated")


def _unwrap(tp: Any) -> Any:
    while True:
        origin = typing.get_origin(tp)
        name = getattr(origin, "_name", None) or getattr(origin, "__name__", None) or ""
        if origin is typing.Annotated or name in _WRAPPERS or origin in (
                typing_extensions.Required, typing_extensions.NotRequired):
            tp = typing.get_args(tp)[0]
            continue
        return tp


def sdk_type_errors(value: Any, tp: Any, path: str = "$") -> list[str]:
    errors: list[str] = []
    _check(value, tp, path, errors)
    return errors


def assert_sdk_type(value: Any, tp: Any) -> None:
    errors = sdk_type_errors(value, tp)
    assert not errors, f"not a valid {getattr(tp, '__name__', tp)}:\n  " + "\n  ".join(errors)


def _check(value: Any, tp: Any, path: str, errors: list[str]) -> None:
    tp = _unwrap(tp)
    if tp in (Any, object) or isinstance(tp, (typing.TypeVar, typing.ForwardRef, str)):
        return
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        best: list[str] | None = None
        for arm in args:
            found: list[str] = []
            _check(value, arm, path, found)
            if not found:
                return
            if best is None or len(found) < len(best):
                best = found
        errors.extend(best or [f"{path}: matches no type of {tp}"])
        return
    if origin is Literal:
        if not any(value == a and type(value) is type(a) for a in args):
            errors.append(f"{path}: {value!r} is not one of {args}")
        return
    if typing_extensions.is_typeddict(tp):
        if not isinstance(value, collections.abc.Mapping):
            errors.append(f"{path}: expected a dict ({tp.__name__}), got {type(value).__name__}")
            return
        hints = typing.get_type_hints(tp, include_extras=True)
        missing = sorted(set(tp.__required_keys__) - set(value))
        unknown = sorted(set(value) - set(hints))
        errors.extend(f"{path}: missing required key {k!r} ({tp.__name__})" for k in missing)
        errors.extend(f"{path}: key {k!r} is not in {tp.__name__}" for k in unknown)
        for key, item in value.items():
            if key in hints:
                _check(item, hints[key], f"{path}.{key}", errors)
        return
    if origin in _LISTS or "Sequence" in getattr(origin, "__name__", ""):
        if not isinstance(value, (list, tuple)):
            errors.append(f"{path}: expected a list, got {type(value).__name__}")
            return
        if args:
            for i, item in enumerate(value):
                _check(item, args[0], f"{path}[{i}]", errors)
        return
    if origin in _MAPS:
        if not isinstance(value, collections.abc.Mapping):
            errors.append(f"{path}: expected a dict, got {type(value).__name__}")
            return
        if len(args) == 2:
            for key, item in value.items():
                _check(item, args[1], f"{path}.{key}", errors)
        return
    if isinstance(tp, type):
        if issubclass(tp, pydantic.BaseModel):
            errors.extend(model_errors(value, tp, path))
        elif tp is float:
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                errors.append(f"{path}: expected a number, got {value!r}")
        elif tp is int and isinstance(value, bool):
            errors.append(f"{path}: expected an integer, got {value!r}")
        elif not isinstance(value, tp):
            errors.append(f"{path}: expected {tp.__name__}, got {type(value).__name__} {value!r:.60}")


def model_errors(value: Any, model: type[pydantic.BaseModel], path: str = "$") -> list[str]:
    """What `model` (a pydantic model) finds wrong with `value`, unknown keys included (a model
    that ignores extra keys would drop them silently: a round trip shows them)."""
    try:
        parsed = model.model_validate(value)
    except pydantic.ValidationError as exc:
        return [f"{path}.{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()]
    if model.model_config.get("extra") == "forbid":
        return []
    back = parsed.model_dump(mode="json", by_alias=True, exclude_unset=True)
    return [f"{path}: {model.__name__} does not keep {k!r}" for k in _dropped(value, back)]


def _dropped(given: Any, kept: Any, prefix: str = "") -> list[str]:
    if isinstance(given, collections.abc.Mapping) and isinstance(kept, collections.abc.Mapping):
        out = []
        for key, item in given.items():
            if key not in kept:
                out.append(prefix + str(key))
            else:
                out.extend(_dropped(item, kept[key], f"{prefix}{key}."))
        return out
    if isinstance(given, list) and isinstance(kept, list):
        return [d for i, (g, k) in enumerate(zip(given, kept, strict=False)) for d in _dropped(g, k, f"{prefix}{i}.")]
    return []


def assert_model(value: Any, model: type[pydantic.BaseModel]) -> None:
    errors = model_errors(value, model)
    assert not errors, f"not a valid {model.__name__}:\n  " + "\n  ".join(errors)
