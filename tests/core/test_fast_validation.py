"""The fast path in front of argument validation: for the common tool schema (an object of
simply typed properties) it accepts only what jsonschema accepts, and everything else still goes
through jsonschema, so error messages are unchanged."""

from __future__ import annotations

import itertools
import random
import zlib
from typing import Any

import jsonschema
import pytest

from nexus_core import Nexus, native_tool
from nexus_core._schema import fast_object_check

SCHEMAS: list[dict[str, Any]] = [
    {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
    {"type": "object", "properties": {"n": {"type": "integer"}, "x": {"type": "number"}},
     "additionalProperties": False},
    {"type": "object", "properties": {"flag": {"type": "boolean", "default": False},
                                      "mode": {"enum": ["a", "b"], "description": "which"}},
     "required": ["mode"], "additionalProperties": False},
    {"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string"}},
                                      "maybe": {"type": ["string", "null"]}}},
    {"type": "object", "properties": {"ids": {"type": "array", "items": {"type": "integer"}}},
     "required": ["ids"], "additionalProperties": False},
]

VALUES: list[Any] = [None, True, False, 0, 1, -3, 2.5, 1.0, "", "a", "b", "text", [], ["x"], [1, 2],
                     [1, "a"], [True], {}, {"k": 1}, 10**20]
KEYS = ["text", "n", "x", "flag", "mode", "tags", "maybe", "ids", "other"]


def _instances(seed: int, count: int) -> list[Any]:
    rng = random.Random(seed)
    out: list[Any] = [None, [], "x", 3]
    for _ in range(count):
        keys = rng.sample(KEYS, rng.randint(0, 4))
        out.append({k: rng.choice(VALUES) for k in keys})
    return out


@pytest.mark.parametrize("schema", SCHEMAS, ids=range(len(SCHEMAS)))
def test_the_fast_path_never_accepts_what_jsonschema_rejects(schema: dict[str, Any]) -> None:
    fast = fast_object_check(schema)
    assert fast is not None, "this schema is meant to be on the fast path"
    full = jsonschema.Draft202012Validator(schema)
    accepted = 0
    for instance in _instances(seed=zlib.crc32(repr(schema).encode()), count=3000):
        if fast(instance):
            accepted += 1
            assert full.is_valid(instance), f"fast path accepted {instance!r}, jsonschema does not"
    assert accepted > 0, "the fast path should accept the valid instances it sees"


@pytest.mark.parametrize("schema", [
    {"type": "object", "properties": {"s": {"type": "string", "minLength": 2}}},
    {"type": "object", "properties": {"o": {"type": "object"}}},
    {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0}}},
    {"type": "object", "patternProperties": {"^x": {"type": "string"}}},
    {"type": "object", "properties": {"a": {"anyOf": [{"type": "string"}, {"type": "integer"}]}}},
    {"type": "object", "properties": {"e": {"enum": [1, 2]}}},
    {"type": "object", "additionalProperties": {"type": "string"}},
    {"properties": {"s": {"type": "string"}}},
])
def test_schemas_the_fast_path_does_not_understand_are_left_to_jsonschema(schema: dict[str, Any]) -> None:
    assert fast_object_check(schema) is None


def test_invalid_arguments_still_get_jsonschemas_messages() -> None:
    tool = native_tool("t", input_schema=SCHEMAS[1], run=lambda a: "ok")
    with Nexus(autoload=False, tools=[tool]) as nx:
        assert nx.invoke("t", {"n": 1, "x": 2.5}).output == "ok"
        assert nx.invoke("t", {"n": 1.0}).output == "ok"  # integral float: jsonschema's call, accepted
        assert nx.invoke("t", {"n": True}).error == "invalid arguments for t: n: expected integer, got True"
        assert nx.invoke("t", {"y": 1}).error == "invalid arguments for t: y: unknown key"


def test_every_combination_of_small_values_agrees_on_a_typed_schema() -> None:
    schema = SCHEMAS[2]
    fast, full = fast_object_check(schema), jsonschema.Draft202012Validator(schema)
    assert fast is not None
    for flag, mode in itertools.product(VALUES, VALUES):
        instance = {"flag": flag, "mode": mode}
        assert fast(instance) == full.is_valid(instance), instance


def test_a_draft_3_schema_with_required_on_a_property_gets_a_clear_error_not_a_crash() -> None:
    """Draft 3 writes `"required": true` on the property itself (later drafts list the names on
    the object): a missing property is an invalid-arguments result, at the property's path."""
    schema = {"$schema": "http://json-schema.org/draft-03/schema#", "type": "object",
              "properties": {"x": {"type": "integer", "required": True}}}
    tool = native_tool("t3", input_schema=schema, run=lambda a: "ok")
    with Nexus(autoload=False, tools=[tool]) as nx:
        missing = nx.invoke("t3", {})
        assert missing.error_kind == "invalid_arguments"
        assert missing.error == "invalid arguments for t3: x: required, but missing"
        assert nx.invoke("t3", {"x": "no"}).error == "invalid arguments for t3: x: expected integer, got 'no'"
        assert nx.invoke("t3", {"x": 1}).output == "ok"


def test_each_missing_argument_is_named_once() -> None:
    """jsonschema reports `required` once per missing key, each error naming the whole list: the
    explanation (what models, `nexus call` and MCP clients read) names each missing key once."""
    schema = {"type": "object", "properties": {"from_unit": {"type": "string"}, "to_unit": {"type": "string"},
                                               "value": {"type": "number"}},
              "required": ["from_unit", "to_unit", "value"]}
    tool = native_tool("convert", input_schema=schema, run=lambda a: "ok")
    with Nexus(autoload=False, tools=[tool]) as nx:
        assert nx.invoke("convert", {}).error == ("invalid arguments for convert: from_unit: required, but missing; "
                                                  "to_unit: required, but missing; value: required, but missing")
        assert nx.invoke("convert", {"value": 1}).error == ("invalid arguments for convert: from_unit: required, but "
                                                            "missing; to_unit: required, but missing")


def test_arguments_nested_deeper_than_the_validator_can_walk_are_refused_not_raised() -> None:
    """A recursive schema and arguments nested past the interpreter's recursion limit: jsonschema
    gives up with RecursionError, which must become an invalid-arguments result, not escape."""
    schema = {"type": "object", "properties": {"x": {"$ref": "#/$defs/n"}},
              "$defs": {"n": {"type": "array", "items": {"$ref": "#/$defs/n"}}}}
    deep: list[Any] = []
    here = deep
    for _ in range(5000):
        inner: list[Any] = []
        here.append(inner)
        here = inner
    calls: list[Any] = []
    tool = native_tool("deep", input_schema=schema, run=lambda a: calls.append(a) or "ran")
    with Nexus(autoload=False, tools=[tool]) as nx:
        result = nx.invoke("deep", {"x": deep})
        assert result.error_kind == "invalid_arguments"
        assert result.error == ("invalid arguments for deep: they are nested too deeply to check against "
                                "the tool's input schema")
        assert calls == []  # the handler never saw them
        assert nx.invoke("deep", {"x": [[], [[]]]}).output == "ran"  # shallow ones still go through


# -- checking a tool's schema: the metaschema in one piece --------------------------------------

SCHEMAS_TO_CHECK = [
    {"type": "object", "properties": {"a": {"type": "string", "pattern": "^x"}}, "required": ["a"]},
    {"anyOf": [{"type": "integer"}, {"type": "null"}]}, {"$defs": {"n": {"type": "integer"}}, "$ref": "#/$defs/n"},
    {"prefixItems": [{"type": "string"}], "items": False}, {"dependentRequired": {"a": ["b"]}}, True, {},
    {"type": "strng"}, {"properties": {"x": {"type": 3}}}, {"required": "x"}, {"minimum": "a"}, {"items": 5},
    {"enum": 3}, {"$defs": {"a": {"type": "nope"}}}, {"anyOf": []}, {"properties": {"a": {"pattern": 5}}},
    {"additionalProperties": {"type": ["string", "bogus"]}}, {"pattern": "("}, {"$ref": 5},
    {"dependentRequired": {"a": [1]}}, {"$id": 3}, {"title": 3}, {"$dynamicRef": 3}, {"$anchor": "1x"},
    {"prefixItems": {}}, {"deprecated": "no"}, {"unevaluatedProperties": 3}, {"format": 3},
]


def test_the_flat_metaschema_gives_the_metaschemas_verdict_five_times_faster() -> None:
    """compile_schema checks a Draft 2020-12 schema against the metaschema merged into one piece
    (jsonschema resolves each `$dynamicRef` of the real one through its registry: ~1 ms a tool
    schema, 750 of them for 500 tools); the verdict must be the metaschema's, and an invalid
    schema's error still comes from the metaschema itself."""
    import jsonschema

    from nexus_core import Nexus
    from nexus_core._schema import SchemaError, _flat_meta, compile_schema

    cls = jsonschema.Draft202012Validator
    real = cls(cls.META_SCHEMA, format_checker=cls.FORMAT_CHECKER)
    flat = _flat_meta()
    assert flat
    with Nexus(autoload=True) as nx:
        tool_schemas = [s for t in nx.tools() for s in (t.input_schema, t.output_schema) if s is not None]
    for schema in [*SCHEMAS_TO_CHECK, *tool_schemas]:
        assert flat.is_valid(schema) == real.is_valid(schema), schema
    for schema in SCHEMAS_TO_CHECK:
        if real.is_valid(schema):
            continue
        with pytest.raises(SchemaError) as info:
            compile_schema(schema)  # type: ignore[arg-type]
        with pytest.raises(jsonschema.exceptions.SchemaError) as expected:
            cls.check_schema(schema)
        assert (info.value.message, info.value.absolute_path) == (expected.value.message,
                                                                  list(expected.value.absolute_path))
