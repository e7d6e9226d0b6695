"""JSON Schema helpers the schema rewriters share (Gemini's subset, OpenAI's strict mode):
local `$ref`s, `allOf` merging, and notes in descriptions for what a dialect cannot say."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

#: keywords that say nothing to the model (identifiers, comments): dropped without a note
SILENT = frozenset({"$schema", "$id", "$comment", "$anchor", "$defs", "definitions"})


def definitions(root: Mapping[str, Any]) -> dict[str, Any]:
    defs = root.get("definitions")
    defs2 = root.get("$defs")
    return {**(defs if isinstance(defs, Mapping) else {}), **(defs2 if isinstance(defs2, Mapping) else {})}


def ref_name(ref: str) -> str | None:
    for prefix in ("#/$defs/", "#/definitions/"):
        if ref.startswith(prefix):
            return ref[len(prefix):]
    return None


def resolve_ref(ref: str, defs: Mapping[str, Any]) -> dict[str, Any] | None:
    name = ref_name(ref)
    if name is not None and isinstance(defs.get(name), Mapping):
        return dict(defs[name])
    return None


def merge_all_of(node: dict[str, Any], defs: Mapping[str, Any]) -> dict[str, Any]:
    """`node` with its `allOf` merged into it: properties and required lists united, other
    keys from the later part (the node's own keys last)."""
    parts = node.pop("allOf")
    merged: dict[str, Any] = {}
    for part in [*(parts if isinstance(parts, list) else []), node]:
        if not isinstance(part, Mapping):
            continue
        part = dict(part)
        if "$ref" in part:
            part = {**(resolve_ref(str(part.pop("$ref")), defs) or {}), **part}
        props = {**merged.get("properties", {}), **part.get("properties", {})}
        required = [*merged.get("required", []), *part.get("required", [])]
        merged.update(part)
        if props:
            merged["properties"] = props
        if required:
            merged["required"] = list(dict.fromkeys(required))
    return merged


def show(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, separators=(", ", ": "), default=str)
    return text if len(text) <= 200 else text[:197] + "..."


def add_note(out: dict[str, Any], note: str) -> None:
    """Keep what a dialect cannot express where the model still reads it: the description."""
    description = out.get("description")
    out["description"] = f"{description} ({note})" if description else note


def accepts_null(schema: Any, defs: Mapping[str, Any], seen: frozenset[str] = frozenset()) -> bool:
    """Whether `null` is a valid value for `schema` (as far as its type-ish keywords say)."""
    if schema is True or (isinstance(schema, Mapping) and not schema):
        return True
    if not isinstance(schema, Mapping):
        return False
    if schema.get("nullable") is True:
        return True
    kind = schema.get("type")
    if kind == "null" or (isinstance(kind, list) and "null" in kind):
        return True
    if "const" in schema:
        return schema["const"] is None
    if isinstance(schema.get("enum"), list):
        return None in schema["enum"]
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list) and any(accepts_null(s, defs, seen) for s in schema[key]):
            return True
    if isinstance(schema.get("allOf"), list) and schema["allOf"]:
        return all(accepts_null(s, defs, seen) for s in schema["allOf"])
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref not in seen:
        target = resolve_ref(ref, defs)
        return target is not None and accepts_null(target, defs, seen | {ref})
    # a schema of constraints alone (`{"minimum": 1}`) lets null through: they apply to other types
    return kind is None and not any(k in schema for k in ("properties", "items", "$ref", "anyOf", "oneOf", "allOf",
                                                          "enum", "const", "not", "additionalProperties"))
