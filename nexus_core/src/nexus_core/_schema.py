"""JSON Schema helpers shared by argument validation and config: compile once, explain errors
with the path of the failing value, and fill in defaults."""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, cast

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # jsonschema itself is imported when the first schema is compiled
    from jsonschema.exceptions import ValidationError
    from jsonschema.protocols import Validator


class SchemaError(Exception):
    """A schema that is not valid JSON Schema: `message` says why, `absolute_path` where (the
    keys from the schema's top). jsonschema's own SchemaError is its `__cause__`."""

    def __init__(self, message: str, absolute_path: Sequence[Any] = ()) -> None:
        super().__init__(message)
        self.message = message
        self.absolute_path = list(absolute_path)

_JSON_TYPE_NAMES = {
    dict: "object",
    list: "array",
    str: "string",
    bool: "boolean",
    int: "integer",
    float: "number",
    type(None): "null",
}


#: Draft 2020-12's metaschema in one piece (made on first use; False where it cannot be made)
_FLAT_META: Any = None


def _flat(node: Any) -> Any:
    if isinstance(node, dict):
        # `$dynamicRef: "#meta"` points back at the metaschema being used: this one
        # (a `$dynamicRef` whose value is a schema is the keyword's own definition, in `properties`)
        return {("$ref" if k == "$dynamicRef" and isinstance(v, str) else k):
                ("#" if k == "$dynamicRef" and isinstance(v, str) else _flat(v))
                for k, v in node.items() if not (k == "$dynamicAnchor" and isinstance(v, str))}
    if isinstance(node, list):
        return [_flat(v) for v in node]
    return node


def _flat_meta() -> Any:
    """A validator of Draft 2020-12's metaschema with its vocabularies merged into one schema and
    its `$dynamicRef`s made plain `$ref`s: the same verdict as the metaschema for a schema that
    does not extend it, five times faster in jsonschema (which resolves every `$dynamicRef`
    through its registry). A registry of 500 tools checks 750 schemas."""
    global _FLAT_META
    if _FLAT_META is None:
        try:
            import jsonschema
            import jsonschema_specifications  # type: ignore[import-untyped]

            registry = jsonschema_specifications.REGISTRY
            base = "https://json-schema.org/draft/2020-12/"
            meta = registry.contents(base + "schema")
            parts = [meta] + [registry.contents(base + r["$ref"].removeprefix(base)) for r in meta["allOf"]]
            flat: dict[str, Any] = {"type": ["object", "boolean"], "properties": {}, "$defs": {}}
            for part in parts:
                part = _flat(part)
                flat["properties"].update(part.get("properties", {}))
                flat["$defs"].update(part.get("$defs", {}))
            cls = jsonschema.Draft202012Validator
            _FLAT_META = cls(flat, format_checker=cls.FORMAT_CHECKER)
        except Exception:  # noqa: BLE001 - a layout of the metaschemas not known here: the slow check
            _FLAT_META = False
    return _FLAT_META


def compile_schema(schema: dict[str, Any]) -> Validator:
    """A validator for `schema` (its `$schema` dialect, else Draft 2020-12), with formats checked
    and its `pattern` and `patternProperties` regexes matched by RE2 (`_regex.py`: a pattern
    cannot make checking a string take more than time linear in it).

    Raises `SchemaError` when the schema itself is invalid, or holds a pattern RE2 cannot run.
    """
    import jsonschema

    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    flat = _flat_meta() if cls is jsonschema.Draft202012Validator else None
    if not (flat and flat.is_valid(schema)):
        # invalid, or not known to be valid: the metaschema itself says why (or that it is fine)
        try:
            cls.check_schema(schema)
        except jsonschema.exceptions.SchemaError as exc:
            raise SchemaError(exc.message, exc.absolute_path) from exc
    _check_patterns(schema)
    return _linear(cls)(schema, format_checker=cls.FORMAT_CHECKER)


# -- patterns, matched by RE2 -------------------------------------------------------------------

#: keywords whose value is a subschema / an object of subschemas / a list of subschemas
_ONE = ("additionalProperties", "additionalItems", "items", "contains", "propertyNames", "not", "if", "then",
         "else", "unevaluatedItems", "unevaluatedProperties")
_MAP = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependencies")
_LIST = ("allOf", "anyOf", "oneOf", "prefixItems", "items")


def _subschemas(schema: dict[str, Any], path: list[Any]) -> Iterable[tuple[dict[str, Any], list[Any]]]:
    """`schema` and every subschema below it, each with its path (a schema's keywords only:
    data such as `default`, `enum` or `examples` is never taken for a schema)."""
    todo = [(schema, path)]
    while todo:
        node, where = todo.pop()
        yield node, where
        for key in _ONE:
            if isinstance(node.get(key), dict):
                todo.append((node[key], [*where, key]))
        for key in _MAP:
            if isinstance(node.get(key), dict):
                todo += [(sub, [*where, key, name]) for name, sub in node[key].items() if isinstance(sub, dict)]
        for key in _LIST:
            if isinstance(node.get(key), list):
                todo += [(sub, [*where, key, i]) for i, sub in enumerate(node[key]) if isinstance(sub, dict)]


def _check_patterns(schema: dict[str, Any]) -> None:
    """Every pattern of `schema` compiled by RE2 now, so a tool whose schema holds one RE2 cannot
    run is refused where it registers, with the pattern's path; and no `unevaluatedProperties`
    beside `patternProperties` (jsonschema matches those with `re`, out of this module's reach)."""
    from ._regex import PatternRefused, compile_pattern

    unevaluated = pattern_properties = None
    for node, where in _subschemas(schema, []):
        patterns = [(node["pattern"], [*where, "pattern"])] if isinstance(node.get("pattern"), str) else []
        if isinstance(node.get("patternProperties"), dict):
            pattern_properties = pattern_properties or where
            patterns += [(p, [*where, "patternProperties", p]) for p in node["patternProperties"]]
        if "unevaluatedProperties" in node:
            unevaluated = unevaluated or where
        for pattern, at in patterns:
            try:
                compile_pattern(pattern)
            except PatternRefused as exc:
                raise SchemaError(str(exc), at) from None
    if unevaluated is not None and pattern_properties is not None:
        raise SchemaError("unevaluatedProperties together with patternProperties is not supported: "
                          "patterns are matched by RE2, which jsonschema's unevaluatedProperties does not use; "
                          "use additionalProperties instead", [*unevaluated, "unevaluatedProperties"])


@functools.cache
def _linear(cls: type[Validator]) -> type[Validator]:
    """`cls` with `pattern`, `patternProperties` and `additionalProperties` (which looks at
    patternProperties) matching through RE2."""
    import jsonschema
    from jsonschema.exceptions import ValidationError

    from ._regex import search

    def pattern(validator: Any, patrn: str, instance: Any, schema: Any) -> Iterable[ValidationError]:
        if validator.is_type(instance, "string") and not search(patrn, instance):
            yield ValidationError(f"{short_repr(instance)} does not match {patrn!r}")

    def pattern_properties(validator: Any, value: dict[str, Any], instance: Any,
                           schema: Any) -> Iterable[ValidationError]:
        if not validator.is_type(instance, "object"):
            return
        for patrn, subschema in value.items():
            for key, item in instance.items():
                if search(patrn, key):
                    yield from validator.descend(item, subschema, path=key, schema_path=patrn)

    def additional_properties(validator: Any, value: Any, instance: Any, schema: Any) -> Iterable[ValidationError]:
        if not validator.is_type(instance, "object"):
            return
        extras = unknown_keys(schema, instance)
        if validator.is_type(value, "object"):
            for extra in extras:
                yield from validator.descend(instance[extra], value, path=extra)
        elif not value and extras:
            if "patternProperties" in schema:
                verb = "does" if len(extras) == 1 else "do"
                joined = ", ".join(repr(each) for each in extras)
                patterns = ", ".join(repr(each) for each in sorted(schema["patternProperties"]))
                yield ValidationError(f"{joined} {verb} not match any of the regexes: {patterns}")
            else:
                verb = "was" if len(extras) == 1 else "were"
                joined = ", ".join(repr(each) for each in extras)
                yield ValidationError(f"Additional properties are not allowed ({joined} {verb} unexpected)")

    keywords = {"pattern": pattern, "patternProperties": pattern_properties,
                "additionalProperties": additional_properties}
    return cast("type[Validator]", jsonschema.validators.extend(  # type: ignore[no-untyped-call]
        cls, {k: v for k, v in keywords.items() if k in cls.VALIDATORS}))


def json_type_name(value: Any) -> str:
    return _JSON_TYPE_NAMES.get(type(value), type(value).__name__)


def format_path(path: Iterable[Any], prefix: str = "") -> str:
    """`["a", 0, "b"]` as `a[0].b`, after `prefix` when given."""
    out = prefix
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def short_repr(value: Any, limit: int = 60) -> str:
    """`repr(value)`, cut to `limit` characters, for messages."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _keyword_value(error: ValidationError) -> Any:
    """`error.validator_value`, the failing keyword's value from the schema. A validator sets it on
    every error it yields; the stubs also allow jsonschema's `Unset` sentinel, which only a
    ValidationError built by hand carries, so the cast only drops that case."""
    return cast(Any, error.validator_value)


def describe_error(error: ValidationError) -> str:
    """One error in words a person fixes config or arguments with: what was expected, what came."""
    v = error.validator
    inst = error.instance
    value = _keyword_value(error)
    if v == "type":
        expected = value
        if isinstance(expected, list):
            expected = " or ".join(expected)
        return f"expected {expected}, got {short_repr(inst)}"
    if v == "required" and isinstance(value, list):
        missing = [r for r in value if isinstance(inst, dict) and r not in inst]
        return "missing required " + ", ".join(repr(m) for m in missing or value)
    if v == "required":  # draft 3: `"required": true` on the property, the error at its path
        return "required, but missing"
    if v == "additionalProperties":
        schema = error.schema
        extra = unknown_keys(schema, inst) if isinstance(inst, dict) and isinstance(schema, Mapping) else []
        return "unknown key " + ", ".join(repr(k) for k in extra)
    if v == "enum":
        return f"expected one of {', '.join(repr(x) for x in value)}, got {short_repr(inst)}"
    if v == "const":
        return f"expected {value!r}, got {short_repr(inst)}"
    if v in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        word = {"minimum": ">=", "maximum": "<=", "exclusiveMinimum": ">", "exclusiveMaximum": "<"}
        return f"expected a number {word[v]} {value}, got {short_repr(inst)}"
    return error.message


def unknown_keys(schema: Mapping[str, Any], instance: dict[Any, Any]) -> list[Any]:
    """The keys of `instance` that neither `properties` nor `patternProperties` of `schema`
    allow, sorted (keys of any type: YAML allows `1:` as a key). Patterns are matched by RE2."""
    from ._regex import search

    allowed = set(schema.get("properties", {}))
    patterns = list(schema.get("patternProperties", {}))
    return sorted(
        (k for k in instance if k not in allowed and not any(search(p, str(k)) for p in patterns)),
        key=str,
    )


def explain(errors: Iterable[ValidationError], prefix: str = "") -> list[tuple[tuple[str, ...], str]]:
    """Every error as `(key path, "path: what is wrong")`, sorted by path, each once; an unknown
    key or a missing one is reported at the key's own path, one line per key."""
    lines: list[tuple[tuple[str, ...], str]] = []
    for error in errors:
        path: Sequence[Any] = list(error.absolute_path)
        if (error.validator == "additionalProperties" and isinstance(error.instance, dict)
                and isinstance(error.schema, Mapping)):  # always, for an error a validator yields
            for key in unknown_keys(error.schema, error.instance):
                key_path = [*path, str(key)]  # a key, even `1:` in YAML, is not a list index
                lines.append((tuple(map(str, key_path)), f"{format_path(key_path, prefix)}: unknown key"))
            continue
        names = _keyword_value(error)
        if error.validator == "required" and isinstance(error.instance, dict) and isinstance(names, list):
            for key in names:
                if key not in error.instance:
                    key_path = [*path, key]
                    lines.append((tuple(map(str, key_path)),
                                  f"{format_path(key_path, prefix)}: required, but missing"))
            continue
        where = format_path(path, prefix) or (prefix or "(top level)")
        lines.append((tuple(map(str, path)), f"{where}: {describe_error(error)}"))
    # once each: jsonschema reports `required` once per missing key, each naming the whole list
    return sorted(set(lines))


def apply_defaults(schema: dict[str, Any], value: Any) -> Any:
    """A copy of `value` with the `default` of every absent object property filled in,
    recursing into nested objects (including ones created from their defaults)."""
    if not isinstance(value, dict) or schema.get("type") not in ("object", None):
        return value
    out = dict(value)
    for key, sub in schema.get("properties", {}).items():
        if not isinstance(sub, dict):
            continue
        if key not in out and "default" in sub:
            out[key] = copy.deepcopy(sub["default"])
        if key in out:
            out[key] = apply_defaults(sub, out[key])
    return out


__all__ = [
    "SchemaError",
    "apply_defaults",
    "compile_schema",
    "describe_error",
    "explain",
    "format_path",
    "json_type_name",
    "short_repr",
    "unknown_keys",
]


# -- a fast path for the common argument schema ------------------------------------------------

#: keywords that only annotate: they never make an instance invalid
_ANNOTATIONS = frozenset({"description", "title", "default", "examples", "$comment", "deprecated",
                          "readOnly", "writeOnly"})
_SIMPLE_TYPES: dict[str, Any] = {
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    # bools are not numbers in JSON Schema; an integral float would be an integer, but the fast
    # path may be stricter than jsonschema (it only ever falls back to it), never laxer
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
}


def _value_check(schema: Any) -> Callable[[Any], bool] | None:
    """A check for a property's schema built only of `type` (simple types, or a list of them),
    `enum` of strings/numbers, arrays of such `items`, and annotations; else None."""
    if not isinstance(schema, dict):
        return None
    keys = set(schema) - _ANNOTATIONS
    if not keys <= {"type", "enum", "items"}:
        return None
    checks: list[Callable[[Any], bool]] = []
    kind = schema.get("type")
    if "items" in schema:
        if kind != "array":
            return None
        item = _value_check(schema["items"])
        if item is None:
            return None
        checks.append(lambda v: isinstance(v, list) and all(item(x) for x in v))
    elif kind is not None:
        kinds = kind if isinstance(kind, list) else [kind]
        if kinds == ["array"]:
            checks.append(lambda v: isinstance(v, list))
        elif kinds and all(k in _SIMPLE_TYPES for k in kinds):
            tests = [_SIMPLE_TYPES[k] for k in kinds]
            checks.append(lambda v: any(t(v) for t in tests))
        else:
            return None
    if "enum" in schema:
        allowed = schema["enum"]
        if not isinstance(allowed, list) or not all(isinstance(x, str) for x in allowed):
            return None
        members = frozenset(allowed)
        checks.append(lambda v: isinstance(v, str) and v in members)
    return lambda v: all(c(v) for c in checks)


def fast_object_check(schema: dict[str, Any]) -> Callable[[Any], bool] | None:
    """For an object schema of simply typed properties (the common tool argument schema), a
    function that says True only for instances jsonschema would also find valid. For any other
    schema, None. Used to skip the full validator for valid arguments; invalid ones still go
    through it, for its messages."""
    keys = set(schema) - _ANNOTATIONS - {"$schema"}
    if (schema.get("type") != "object"
            or not keys <= {"type", "properties", "required", "additionalProperties"}):
        return None
    props = schema.get("properties", {})
    required = schema.get("required", [])
    extra = schema.get("additionalProperties", True)
    if not isinstance(props, dict) or not isinstance(required, list) or not isinstance(extra, bool):
        return None
    checks = {}
    for name, sub in props.items():
        check = _value_check(sub)
        if check is None:
            return None
        checks[name] = check
    needed = tuple(required)

    def valid(instance: Any) -> bool:
        if type(instance) is not dict:
            return False
        for name in needed:
            if name not in instance:
                return False
        for name, value in instance.items():
            check = checks.get(name)
            if check is None:
                if not extra:
                    return False
            elif not check(value):
                return False
        return True

    return valid


class ArgumentValidator:
    """A compiled validator with the fast path in front: `iter_errors` yields nothing at once for
    arguments the fast check accepts, and defers to jsonschema for everything else."""

    def __init__(self, schema: dict[str, Any], validator: Validator) -> None:
        self.schema = schema
        self.validator = validator
        self._fast = fast_object_check(schema)

    def iter_errors(self, instance: Any) -> Iterable[ValidationError]:
        if self._fast is not None and self._fast(instance):
            return ()
        return self.validator.iter_errors(instance)

    def is_valid(self, instance: Any) -> bool:
        return not any(True for _ in self.iter_errors(instance))
