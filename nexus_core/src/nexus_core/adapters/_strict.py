"""OpenAI's strict mode (Structured Outputs for function calling): a schema the model's output
is guaranteed to match, if the schema keeps strict mode's rules
(https://platform.openai.com/docs/guides/structured-outputs#supported-schemas):

- every object has `additionalProperties: false` and lists every property in `required`, so an
  optional property becomes required but nullable (`null` standing for "left out");
- only some keywords are allowed: `pattern` and some `format`s for strings, `minimum` /
  `maximum` / `exclusiveMinimum` / `exclusiveMaximum` / `multipleOf` for numbers, `minItems` /
  `maxItems` for arrays, and `enum`, `anyOf`, `$ref` / `$defs`; the others (`minLength`,
  `default`, `uniqueItems`, ...) move into the description, where the model still reads them;
- the root is an object, and every value has a type.

What cannot be said under these rules (a map such as `dict[str, int]`, a value of any type, a
tuple's item types) is reported by `StrictSchemaError`, which names each tool and where.

The model then sends `null` for an optional argument it leaves out; `drop_optional_nulls`
turns that back into a missing key, so the tool's own schema (which may not allow `null`)
validates the call. `parse_tool_calls(..., tools=...)` does it for you.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from ._jsonschema import SILENT, accepts_null, add_note, definitions, merge_all_of, resolve_ref, show


class StrictSchemaError(ValueError):
    """Tool schemas that strict mode cannot express. `problems` lists (tool, path, reason),
    the path a JSON pointer into the tool's input schema; `tools` the tools' names."""

    def __init__(self, problems: list[tuple[str, str, str]]) -> None:
        self.problems = problems
        self.tools = list(dict.fromkeys(tool for tool, _, _ in problems))
        lines = [f"  {tool!r} at {path or '/'}: {reason}" if tool else f"  {path or '/'}: {reason}"
                 for tool, path, reason in problems]
        names = ", ".join(repr(t) for t in self.tools if t)
        head = (f"cannot make {len(self.tools)} tool(s) strict ({names})" if names
                else "cannot make this schema strict")
        super().__init__(f"{head} under OpenAI's strict-mode rules:\n" + "\n".join(lines))


_STRICT_KEYS = frozenset({
    "type", "properties", "required", "additionalProperties", "items", "anyOf", "enum", "$ref",
    "description", "title", "pattern", "format", "minimum", "maximum", "exclusiveMinimum",
    "exclusiveMaximum", "multipleOf", "minItems", "maxItems",
})
_STRICT_FORMATS = frozenset({"date-time", "time", "date", "duration", "email", "hostname", "ipv4", "ipv6", "uuid"})
# handled by the rewrite itself
_HANDLED = frozenset({"allOf", "oneOf", "const", "nullable", "prefixItems", "patternProperties", "$defs", "definitions"})


def strict_schema(schema: Mapping[str, Any], tool: str = "") -> dict[str, Any]:
    """`schema` rewritten to keep OpenAI's strict-mode rules (see the module docstring), or
    `StrictSchemaError` naming every place where it cannot be. The input is not changed."""
    converter = _Strict(dict(schema), tool)
    out = converter.root()
    if converter.problems:
        raise StrictSchemaError(converter.problems)
    return out


class _Strict:
    def __init__(self, root: dict[str, Any], tool: str) -> None:
        self.root_schema = root
        self.defs = definitions(root)
        self.tool = tool
        self.problems: list[tuple[str, str, str]] = []

    def problem(self, path: str, reason: str) -> dict[str, Any]:
        self.problems.append((self.tool, path, reason))
        return {}

    def root(self) -> dict[str, Any]:
        root = self.root_schema
        kind = root.get("type", "object" if "properties" in root or not root else None)
        if kind != "object":
            self.problem("", f"the root must be an object, not {show(kind)}")
            return {}
        props = root.get("properties")
        extra = root.get("additionalProperties", False)
        if not props and extra is False and "patternProperties" not in root:
            # no parameters: the one object strict mode allows without properties
            base = {k: v for k, v in root.items() if k not in ("properties", "required", "additionalProperties")}
            out = self.convert({**base, "type": "object"}, "", empty_ok=True)
        else:
            out = self.convert({**root, "type": "object"}, "")
        for key in ("$defs", "definitions"):
            if isinstance(root.get(key), Mapping):
                out[key] = {name: self.convert(sub, f"/{key}/{name}") for name, sub in root[key].items()}
        return out

    def convert(self, node: Any, path: str, empty_ok: bool = False, seen: frozenset[str] = frozenset()) -> dict[str, Any]:
        if not isinstance(node, Mapping):
            return self.problem(path, "a value of any type (`true`)" if node is True else "`false` (no value)")
        node = dict(node)
        if "$ref" in node:
            ref = str(node["$ref"])
            target = resolve_ref(ref, self.defs)
            if target is None:
                return self.problem(path, f"$ref {ref!r} does not point into $defs")
            siblings = {k: v for k, v in node.items() if k != "$ref"}
            if not siblings:
                return {"$ref": ref}
            if ref in seen:  # recursive: keep the reference; its description stays beside it
                wrapped: dict[str, Any] = {"anyOf": [{"$ref": ref}]}
                if "description" in siblings:
                    wrapped["description"] = siblings["description"]
                return wrapped
            # strict mode takes no keywords beside a $ref: inline the definition (as the openai SDK does)
            return self.convert({**target, **siblings}, path, empty_ok, seen | {ref})
        if "allOf" in node:
            node = merge_all_of(node, self.defs)
        if "oneOf" in node and "anyOf" not in node:
            node["anyOf"] = node.pop("oneOf")
        if "const" in node and "enum" not in node:
            node["enum"] = [node.pop("const")]
        if node.pop("nullable", False) is True and isinstance(node.get("type"), str):
            node["type"] = [node["type"], "null"]

        out: dict[str, Any] = {}
        notes: list[str] = []
        for key, value in node.items():
            if key in ("properties", "items", "anyOf", "additionalProperties", "required"):
                continue
            if key == "format" and value not in _STRICT_FORMATS:
                notes.append(f"format: {value}")
            elif key in _STRICT_KEYS:
                out[key] = copy.deepcopy(value)
            elif key not in SILENT and key not in _HANDLED:
                notes.append(f"{key}: {show(value)}")
        kind = node.get("type")
        kinds = kind if isinstance(kind, list) else [kind]

        props = node.get("properties")
        extra = node.get("additionalProperties")
        if "object" in kinds or isinstance(props, Mapping):
            out["type"] = kind if kind is not None else "object"
            props = props if isinstance(props, Mapping) else {}
            if "patternProperties" in node:
                if props:
                    notes.append(f"keys matching: {show(node['patternProperties'])}")
                else:
                    self.problem(path, "an object whose keys are patterns (patternProperties)")
            if extra is True or isinstance(extra, Mapping) or (extra is None and not props and not empty_ok):
                if not props:
                    self.problem(path, "an object without named properties (a map, or any object)")
                elif extra is not None:  # strict mode allows the named keys only: say what else was allowed
                    notes.append("other keys allowed" + (f": {show(extra)}" if isinstance(extra, Mapping) else ""))
            required = set(node.get("required") or [])
            out["properties"] = {}
            for name, sub in props.items():
                sub_path = f"{path}/properties/{name}"
                converted = self.convert(sub, sub_path, seen=seen)
                if name not in required and not accepts_null(sub, self.defs):
                    converted = _nullable(converted)
                out["properties"][name] = converted
            out["required"] = list(props)
            out["additionalProperties"] = False

        if "items" in node or "prefixItems" in node or "array" in kinds:
            items = node.get("items")
            prefix = node.get("prefixItems")
            if isinstance(items, list) or (items is None and isinstance(prefix, list) and prefix):
                positional = items if isinstance(items, list) else prefix
                notes.append("items in this order: " + ", ".join(show(i) for i in positional))
                items = {"anyOf": positional} if len(positional) > 1 else positional[0]
            if items is None:
                self.problem(path, "an array without an item schema")
            else:
                out["items"] = self.convert(items, f"{path}/items", seen=seen)
            if kind is None:
                out["type"] = "array"

        if isinstance(node.get("anyOf"), list):
            out["anyOf"] = [self.convert(option, f"{path}/anyOf/{i}", seen=seen)
                            for i, option in enumerate(node["anyOf"])]
        if isinstance(out.get("enum"), list) and isinstance(out.get("type"), list) and "null" in out["type"] \
                and None not in out["enum"]:
            out["enum"] = [*out["enum"], None]
        if not any(k in out for k in ("type", "anyOf", "enum", "$ref")):
            self.problem(path, "a value of any type (the schema gives no type)")
        if notes:
            add_note(out, "; ".join(notes))
        return out


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema`, also accepting null: how strict mode says "optional"."""
    out = dict(schema)
    kind = out.get("type")
    if isinstance(kind, str) and "anyOf" not in out:
        out["type"] = [kind, "null"]
    elif isinstance(kind, list) and "anyOf" not in out:
        out["type"] = [*kind, "null"] if "null" not in kind else kind
    elif "anyOf" in out and "type" not in out:
        out["anyOf"] = [*out["anyOf"], {"type": "null"}]
        return out
    elif "enum" in out and "type" not in out:
        out["enum"] = [*out["enum"], None] if None not in out["enum"] else out["enum"]
        return out
    else:  # a $ref, or a type beside an anyOf: wrap it
        description = out.pop("description", None)
        wrapped: dict[str, Any] = {"anyOf": [out, {"type": "null"}]}
        if description is not None:
            wrapped["description"] = description
        return wrapped
    if isinstance(out.get("enum"), list) and None not in out["enum"]:
        out["enum"] = [*out["enum"], None]
    return out


def drop_optional_nulls(arguments: dict[str, Any], schema: Mapping[str, Any]) -> dict[str, Any]:
    """`arguments` without the `null`s strict mode makes a model send for optional properties
    it leaves out: a null is dropped where the property is optional and the tool's own schema
    does not accept null. Nested objects too. Anything else is left as it is."""
    root = dict(schema)
    result = _drop(arguments, root, definitions(root), frozenset())
    return result if isinstance(result, dict) else arguments


def _drop(value: Any, schema: Any, defs: Mapping[str, Any], seen: frozenset[str]) -> Any:
    if not isinstance(schema, Mapping) or not isinstance(value, (dict, list)):
        return value
    schema = dict(schema)
    ref = schema.pop("$ref", None)
    if isinstance(ref, str) and ref not in seen:
        schema = {**(resolve_ref(ref, defs) or {}), **schema}
        seen = seen | {ref}
    if "allOf" in schema:
        schema = merge_all_of(schema, defs)
    if isinstance(value, list):
        items = schema.get("items")
        return [_drop(v, items, defs, seen) for v in value] if isinstance(items, Mapping) else value
    props = schema.get("properties")
    if not isinstance(props, Mapping):
        for key in ("anyOf", "oneOf"):  # `Model | None`: the object option
            for option in schema.get(key) or []:
                if isinstance(option, Mapping) and ("properties" in option or "$ref" in option):
                    return _drop(value, option, defs, seen)
        return value
    required = set(schema.get("required") or [])
    out = {}
    for key, item in value.items():
        sub = props.get(key)
        if item is None and key not in required and sub is not None and not accepts_null(sub, defs):
            continue
        out[key] = _drop(item, sub, defs, seen) if sub is not None else item
    return out
