"""Gemini's two ways to declare a function's parameters, from a tool's JSON Schema.

- `parameters`: Gemini's own `Schema` object, "a select subset of an OpenAPI 3.0 schema object"
  (https://ai.google.dev/api/caching#Schema); any other key is rejected with "Unknown name".
  `gemini_schema` rewrites a JSON Schema into it. What the subset has no field for (a
  `multipleOf`, an integer enum, a `format` Gemini refuses) moves into the description, where the
  model still reads it. What it cannot express at all (a map such as `dict[str, int]`, a value of
  any type, a recursive `$ref`, an array without an item schema) raises `GeminiSchemaError`: an
  empty OBJECT is refused by Gemini ("properties: should be non-empty for OBJECT type"), and an
  untyped node would be a guess.
- `parametersJsonSchema`: plain JSON Schema (the google-genai SDK's `parameters_json_schema`),
  which can say all of that. `gemini_json_schema` keeps the keywords Gemini documents for it and
  moves the others into descriptions too.

`to_provider_schemas(..., "gemini")` uses `parameters` for a tool whose schema fits it, and
`parametersJsonSchema` for one that does not (see `json_schema=` there).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from ._jsonschema import SILENT, add_note, definitions, merge_all_of, resolve_ref, show


class GeminiSchemaError(ValueError):
    """A schema that Gemini's `parameters` subset cannot express; `path` (a JSON pointer into the
    schema) and `reason` say what and where, `tool` names the tool when known."""

    def __init__(self, path: str, reason: str, tool: str | None = None) -> None:
        self.path = path or "/"
        self.reason = reason
        self.tool = tool
        where = f"tool {tool!r}: " if tool else ""
        super().__init__(f"{where}Gemini's schema subset cannot express {self.path}: {reason}")


# The fields of Gemini's Schema object. Anything else is rejected with "Unknown name".
_GEMINI_FIELDS = frozenset({
    "type", "format", "title", "description", "nullable", "enum", "maxItems", "minItems",
    "properties", "required", "minProperties", "maxProperties", "minLength", "maxLength",
    "pattern", "example", "anyOf", "propertyOrdering", "default", "items", "minimum", "maximum",
})
_COPIED = ("title", "description", "pattern", "minLength", "maxLength", "minItems", "maxItems",
           "minProperties", "maxProperties", "minimum", "maximum", "example", "default", "propertyOrdering")
# the formats the Gemini Developer API accepts, per type; others fail the request
_GEMINI_FORMATS = {"string": {"enum", "date-time"}, "number": {"float", "double"}, "integer": {"int32", "int64"}}
# keys the rewrite handles itself: anything else becomes a note
_HANDLED = frozenset({*_COPIED, "type", "format", "nullable", "enum", "const", "properties", "required",
                      "items", "prefixItems", "anyOf", "oneOf", "allOf", "$ref", "examples",
                      "additionalProperties"})


def gemini_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """A JSON Schema as Gemini's `Schema` (the `parameters` of a function declaration).

    Conversions: `type: [x, "null"]`, `anyOf: [.., {type: null}]` and a null in an `enum` become
    `nullable: true`; `oneOf` and `type: [x, y]` become `anyOf`; `allOf` is merged; `const`
    becomes a one-value `enum`; local `$ref`s are inlined from `$defs` / `definitions`.
    Enums of numbers or booleans (Gemini's `enum` takes strings only) keep their type and list
    their values in the description; so do the keywords Gemini has no field for
    (`exclusiveMinimum: 0`, `multipleOf: 2`, `uniqueItems: true`, a `format` it refuses, ...).

    Raises `GeminiSchemaError` for what the subset cannot express at all: an object without
    named properties (a map), a value of any type, a recursive or non-local `$ref`, an array
    without an item schema, a `null`-only value.
    """
    root = dict(schema)
    return _convert(root, definitions(root), frozenset(), "")


def _json_type(values: list[Any]) -> str | None:
    """The one JSON type of some enum values, if they share one."""
    if all(isinstance(v, bool) for v in values):
        return "boolean"
    if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return "integer"
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        return "number"
    if all(isinstance(v, str) for v in values):
        return "string"
    return None


def _convert(node: Any, defs: Mapping[str, Any], seen: frozenset[str], path: str) -> dict[str, Any]:
    if not isinstance(node, Mapping):
        raise GeminiSchemaError(path, "a value of any type (`true`)" if node is True else "`false` (no value)")
    node = dict(node)
    if "$ref" in node:
        ref = str(node.pop("$ref"))
        if ref in seen:
            raise GeminiSchemaError(path, f"a recursive $ref ({ref})")
        target = resolve_ref(ref, defs)
        if target is None:
            raise GeminiSchemaError(path, f"$ref {ref!r} does not point into $defs")
        return _convert({**target, **node}, defs, seen | {ref}, path)
    if "allOf" in node:
        node = merge_all_of(node, defs)
    if "oneOf" in node and "anyOf" not in node:
        node["anyOf"] = node.pop("oneOf")
    if "const" in node and "enum" not in node:
        node["enum"] = [node.pop("const")]

    out: dict[str, Any] = {}
    notes: list[str] = []
    nullable = node.get("nullable") is True
    kind = node.get("type")
    if isinstance(kind, list):
        kinds = [k for k in kind if k != "null"]
        nullable = nullable or len(kinds) < len(kind)
        if len(kinds) == 1:
            kind = kinds[0]
        elif kinds:
            kind = None
            node["anyOf"] = [{"type": k} for k in kinds]
        else:
            kind = "null"
    if kind == "null":
        raise GeminiSchemaError(path, "a value that can only be null")
    if isinstance(kind, str):
        out["type"] = kind

    for key in _COPIED:
        if key in node:
            out[key] = copy.deepcopy(node[key])
    examples = node.get("examples")
    if isinstance(examples, list) and examples:
        if "example" not in out:
            out["example"] = copy.deepcopy(examples[0])
            examples = examples[1:]
        if examples:
            notes.append(f"examples: {show(examples)}")

    if "format" in node:
        fmt = node["format"]
        if fmt in _GEMINI_FORMATS.get(str(kind), set()):
            out["format"] = fmt
        else:
            notes.append(f"format: {fmt}")

    if "enum" in node and isinstance(node["enum"], list):
        values = list(node["enum"])
        if None in values:
            nullable = True
            values = [v for v in values if v is not None]
        if values and all(isinstance(v, str) for v in values):
            out["enum"] = values
            out.setdefault("type", "string")
        elif values:
            notes.append("one of: " + ", ".join(show(v) for v in values))
            common = _json_type(values)
            if common is not None:
                out.setdefault("type", common)
            elif "type" not in out:
                groups = dict.fromkeys(t for t in (_json_type([v]) for v in values) if t is not None)
                out["anyOf"] = [{"type": t} for t in groups]

    if "properties" in node and isinstance(node["properties"], Mapping):
        out["properties"] = {k: _convert(v, defs, seen, f"{path}/properties/{k}")
                             for k, v in node["properties"].items()}
        out.setdefault("type", "object")
    if "required" in node and isinstance(node["required"], list):
        required = [r for r in node["required"] if r in out.get("properties", {})]
        if required:
            out["required"] = required
    extra = node.get("additionalProperties")
    if (out.get("type") == "object" or "additionalProperties" in node or "patternProperties" in node) \
            and "anyOf" not in node:
        if not out.get("properties"):
            raise GeminiSchemaError(path, "an object without named properties (a map, or any object)")
        if extra is True or isinstance(extra, Mapping):
            notes.append("other keys allowed" + (f": {show(extra)}" if isinstance(extra, Mapping) else ""))

    items = node.get("items")
    prefix = node.get("prefixItems")
    if isinstance(items, list) or (items is None and isinstance(prefix, list) and prefix):
        tuple_items = items if isinstance(items, list) else prefix
        notes.append("items in this order: " + ", ".join(show(i) for i in tuple_items))
        items = {"anyOf": tuple_items} if len(tuple_items) > 1 else tuple_items[0] if tuple_items else None
    elif isinstance(prefix, list) and prefix:
        notes.append(f"prefixItems: {show(prefix)}")
    if items is not None:
        out["items"] = _convert(items, defs, seen, f"{path}/items")
        out.setdefault("type", "array")
    elif out.get("type") == "array":
        raise GeminiSchemaError(path, "an array without an item schema")

    if "anyOf" in node and isinstance(node["anyOf"], list):
        options = []
        for i, option in enumerate(node["anyOf"]):
            if isinstance(option, Mapping) and option.get("type") == "null" and len(option) <= 2 \
                    and set(option) <= {"type", "description"}:
                nullable = True
                continue
            options.append(_convert(option, defs, seen, f"{path}/anyOf/{i}"))
        if len(options) == 1:  # `X | None`: X itself, nullable
            for key, value in options[0].items():
                if key == "description" and out.get("description"):
                    continue
                out.setdefault(key, value)
        elif options:
            out["anyOf"] = options

    for key, value in node.items():
        if key not in _HANDLED and key not in SILENT and key != "patternProperties":
            notes.append(f"{key}: {show(value)}")
    if "patternProperties" in node:
        notes.append(f"keys matching: {show(node['patternProperties'])}")
    if notes:
        add_note(out, "; ".join(notes))

    if "type" not in out and "anyOf" not in out:
        raise GeminiSchemaError(path, "a value of any type (the schema gives no type)")
    if nullable:
        out["nullable"] = True
    return {k: v for k, v in out.items() if k in _GEMINI_FIELDS}


# The JSON Schema keywords Gemini documents for `parametersJsonSchema` / `responseJsonSchema`.
_GEMINI_JSON_KEYS = frozenset({
    "$id", "$defs", "$ref", "$anchor", "type", "format", "title", "description", "enum", "items",
    "prefixItems", "minItems", "maxItems", "minimum", "maximum", "anyOf", "oneOf", "properties",
    "additionalProperties", "required", "propertyOrdering",
})


def gemini_json_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """A JSON Schema for Gemini's `parametersJsonSchema`: the keywords Gemini documents for it
    are kept (`$ref` and `$defs` included, so maps and recursion survive), `allOf` is merged,
    `const` becomes a one-value `enum`, and any other keyword moves into the description."""
    root = dict(schema)
    defs = definitions(root)
    out: dict[str, Any] = _json(root, defs)
    if "definitions" in root and "$defs" not in out:  # `#/definitions/...` refs must still resolve
        out["definitions"] = {k: _json(v, defs) for k, v in root["definitions"].items()}
    out.setdefault("type", "object")
    return out


def _json(node: Any, defs: Mapping[str, Any]) -> Any:
    if not isinstance(node, Mapping):
        return node
    node = dict(node)
    if "allOf" in node:
        node = merge_all_of(node, defs)
    if "const" in node and "enum" not in node:
        node["enum"] = [node.pop("const")]
    out: dict[str, Any] = {}
    notes = []
    for key, value in node.items():
        if key in ("properties", "$defs") and isinstance(value, Mapping):
            out[key] = {k: _json(v, defs) for k, v in value.items()}
        elif key in ("items", "additionalProperties") and isinstance(value, Mapping):
            out[key] = _json(value, defs)
        elif key in ("anyOf", "oneOf", "prefixItems") and isinstance(value, list):
            out[key] = [_json(v, defs) for v in value]
        elif key in _GEMINI_JSON_KEYS:
            out[key] = copy.deepcopy(value)
        elif key not in SILENT and not (key == "default" and value is None):  # null: nothing to say
            notes.append(f"{key}: {show(value)}")
    if notes:
        add_note(out, "; ".join(notes))
    return out
