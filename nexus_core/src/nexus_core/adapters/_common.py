"""What every adapter shares: the format names, reading SDK objects as plain data, and the
errors for input that is not what a provider sends."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Literal

Format = Literal["openai", "openai-responses", "anthropic", "gemini", "mcp"]
FORMATS: tuple[str, ...] = ("openai", "openai-responses", "anthropic", "gemini", "mcp")

#: how each format is named in messages
PROVIDER = {"openai": "OpenAI", "openai-responses": "OpenAI Responses", "anthropic": "Anthropic",
            "gemini": "Gemini", "mcp": "MCP"}


def check_format(format: str) -> None:
    if format not in FORMATS:
        raise ValueError(f"unknown format {format!r}: expected one of {', '.join(FORMATS)}")


def plain(value: Any) -> Any:
    """`value` as plain JSON data: an SDK's response object (a pydantic model: the openai,
    anthropic, google-genai and mcp packages all use pydantic) becomes the dict its API sends,
    recursively, inside dicts and lists too. Found by duck typing: no SDK is imported.

    Models are dumped `by_alias` in JSON mode, so the keys are the wire's (`async`, Gemini's
    camelCase, MCP's `_meta`) and bytes are base64 text, as on the wire.
    """
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, Mapping):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    dump = getattr(value, "model_dump", None)
    if callable(dump) and not isinstance(value, type):
        try:
            return dump(mode="json", by_alias=True, exclude_none=True)
        except TypeError:  # a model_dump that takes other arguments: not pydantic v2
            pass
    for name in ("to_dict", "dict"):  # pydantic v1 and SDK helpers
        method = getattr(value, name, None)
        if callable(method) and not isinstance(value, type):
            try:
                data = method()
            except TypeError:
                continue
            if isinstance(data, Mapping):
                return plain(data)
    return value


def describe(value: Any) -> str:
    """A short description of what was passed, for an error message."""
    if isinstance(value, Mapping):
        keys = list(value)
        shown = ", ".join(repr(k) for k in keys[:8]) + (", ..." if len(keys) > 8 else "")
        kind = f" of type {value['type']!r}" if isinstance(value.get("type"), str) else ""
        return f"a JSON object{kind} with keys {shown}" if keys else "an empty JSON object"
    if isinstance(value, list):
        kinds = sorted({type(v).__name__ if not isinstance(v, Mapping) else "object" for v in value})
        return f"a list of {len(value)} ({', '.join(kinds)})" if value else "an empty list"
    if isinstance(value, str):
        text = value if len(value) <= 40 else value[:37] + "..."
        return f"a string {text!r}"
    return f"{type(value).__module__}.{type(value).__qualname__}" if value is not None else "None"


def unrecognised(format: str, got: Any, accepts: str) -> ValueError:
    return ValueError(f"{PROVIDER[format]}: cannot find tool calls in {describe(got)}; expected {accepts}")


_KIND_NAMES: dict[type, str] = {str: "a string", Mapping: "a JSON object", dict: "a JSON object", list: "a list"}


def need(data: Any, field: str, where: str, kind: type = str, label: str | None = None) -> Any:
    """`data[field]`, or a ValueError naming `where` and the field (`label`, for a nested one)
    when it is missing or of the wrong type. ValueError even for a wrong type: to the caller
    it is malformed provider JSON, one kind of error for one kind of mistake."""
    label = label or field
    if not isinstance(data, Mapping):
        raise ValueError(f"{where}: expected a JSON object, got {type(data).__name__}")  # noqa: TRY004
    if field not in data or data[field] is None:
        raise ValueError(f"{where}: missing field {label!r}")
    value = data[field]
    if not isinstance(value, kind):
        expected = _KIND_NAMES.get(kind, kind.__name__)
        raise ValueError(f"{where}: field {label!r} must be {expected}, got {type(value).__name__}")  # noqa: TRY004
    return value


def arguments(value: Any, field: str, where: str, json_text: bool = False) -> dict[str, Any]:
    """Arguments as a dict: an object, or (with `json_text`, OpenAI's way) JSON text of one."""
    if value is None:
        return {}
    if isinstance(value, str) and json_text:
        if not value.strip():
            return {}  # some OpenAI-compatible servers send "" for a call without arguments
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{where}: field {field!r} is not valid JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(value, dict):
        raise ValueError(f"{where}: field {field!r} must be a JSON object, got {type(value).__name__}")  # noqa: TRY004
    return value


def get(data: Mapping[str, Any], *names: str) -> Any:
    """The first of `names` present (not None) in `data`: one field in camelCase or snake_case."""
    for name in names:
        value = data.get(name)
        if value is not None:
            return value
    return None
