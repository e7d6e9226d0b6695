"""The `pattern` and `patternProperties` of a tool's input schema cannot freeze the host (issue 11).

A third-party tool's schema holds the regex, a model writes the string. jsonschema matched them
with Python's `re`, which backtracks with the GIL held: `^(a+)+$` against forty `a`s and a `!`
would stop every host thread for days. The core now matches them with RE2, in time linear in the
string, and refuses at registration a schema pattern RE2 cannot run, naming it. Each attack goes
through `Nexus.invoke` while `HostWatch` measures the host.
"""

from __future__ import annotations

from typing import Any

import pytest
from host_watch import HostWatch
from nexus_core._regex import MAX_PATTERN_CHARS
from nexus_core.testing import NexusFactory, assert_error, assert_ok

from nexus_core import Nexus, ToolDef, ToolRegistrationError

EVIL = r"^(a+)+$"
VICTIM = "a" * 40 + "!"  # 2**40 ways to split the a's, for a backtracking engine


def tool(schema: dict[str, Any], name: str = "victim") -> ToolDef:
    return ToolDef(name=name, description="Takes anything its schema allows.", input_schema=schema,
                   handler=lambda arguments: "ran")


def watched(nx: Nexus, arguments: dict[str, Any], name: str = "victim") -> Any:
    with HostWatch() as watch:
        result = nx.invoke(name, arguments)
    watch.assert_host_fine(max_gap=1.0, cpu_seconds=2.0, memory_mib=64)
    return result


def test_a_backtracking_pattern_against_a_model_string(nexus_factory: NexusFactory) -> None:
    nx = nexus_factory(tools=[tool({"type": "object", "properties": {"word": {"type": "string", "pattern": EVIL}}})])
    result = assert_error(watched(nx, {"word": VICTIM}), kind="invalid_arguments")
    assert "does not match" in (result.error or "")
    assert assert_ok(watched(nx, {"word": "a" * 40})).output == "ran"


def test_a_long_string_against_a_backtracking_pattern_costs_linear_time(nexus_factory: NexusFactory) -> None:
    nx = nexus_factory(tools=[tool({"type": "object", "properties": {"word": {"type": "string", "pattern": r"(x+x+)+y"}}})])
    assert_error(watched(nx, {"word": "x" * 200_000}), kind="invalid_arguments")


def test_a_backtracking_pattern_property_against_a_model_key(nexus_factory: NexusFactory) -> None:
    schema = {"type": "object", "patternProperties": {EVIL: {"type": "integer"}}, "additionalProperties": False}
    nx = nexus_factory(tools=[tool(schema)])
    result = assert_error(watched(nx, {VICTIM: 1}), kind="invalid_arguments")
    assert f"{VICTIM}: unknown key" in (result.error or "")  # reported as the unknown key it is
    assert_error(watched(nx, {"a" * 40: "not an integer"}), kind="invalid_arguments")
    assert assert_ok(watched(nx, {"a" * 40: 1})).output == "ran"


def test_additional_properties_with_a_schema_uses_re2_too(nexus_factory: NexusFactory) -> None:
    schema = {"type": "object", "patternProperties": {EVIL: {}}, "additionalProperties": {"type": "string"}}
    nx = nexus_factory(tools=[tool(schema)])
    assert_error(watched(nx, {VICTIM: 1}), kind="invalid_arguments")  # not the pattern's: a string it must be
    assert_ok(watched(nx, {VICTIM: "s"}))


def test_patterns_nested_anywhere_are_matched_by_re2(nexus_factory: NexusFactory) -> None:
    schema = {"type": "object", "properties": {"rows": {"type": "array", "items": {
        "anyOf": [{"type": "integer"}, {"type": "string", "pattern": EVIL}]}}},
        "$defs": {"unused": {"pattern": EVIL}}}
    nx = nexus_factory(tools=[tool(schema)])
    assert_error(watched(nx, {"rows": [1, VICTIM]}), kind="invalid_arguments")
    assert_ok(watched(nx, {"rows": [1, "aaa"]}))


@pytest.mark.parametrize(("pattern", "feature"), [
    (r"^(?=.*\d)\w+$", "lookahead"),
    (r"(?<!x)y", "lookbehind"),
    (r"(a)\1", "a backreference"),
    (r"a++", "a possessive quantifier"),
])
def test_a_pattern_re2_cannot_run_is_refused_at_registration(nexus_factory: NexusFactory, pattern: str,
                                                             feature: str) -> None:
    nx = nexus_factory()
    schema = {"type": "object", "properties": {"p": {"type": "string", "pattern": pattern}}}
    with pytest.raises(ToolRegistrationError) as caught:
        nx.add_tool(tool(schema))
    message = str(caught.value)
    assert message.startswith("tool 'victim' from ") and " has an invalid input_schema at properties/p/pattern: " in message
    assert f"pattern {pattern!r} uses {feature} (" in message and "which RE2 does not have" in message
    assert nx.tool("victim") is None


def test_a_pattern_property_re2_cannot_run_is_refused_with_its_path(nexus_factory: NexusFactory) -> None:
    nx = nexus_factory()
    schema = {"type": "object", "properties": {"env": {"type": "object", "patternProperties": {"^(?!X)": {}}}}}
    with pytest.raises(ToolRegistrationError, match=r"at properties/env/patternProperties/\^\(\?!X\): "):
        nx.add_tool(tool(schema))


def test_a_huge_pattern_is_refused(nexus_factory: NexusFactory) -> None:
    nx = nexus_factory()
    schema = {"type": "object", "properties": {"p": {"type": "string", "pattern": "a" * (MAX_PATTERN_CHARS + 1)}}}
    with pytest.raises(ToolRegistrationError, match="more than the 16384 a schema pattern may be"):
        nx.add_tool(tool(schema))


def test_unevaluated_properties_beside_pattern_properties_is_refused(nexus_factory: NexusFactory) -> None:
    nx = nexus_factory()
    schema = {"type": "object", "patternProperties": {"^a": {}}, "unevaluatedProperties": False}
    with pytest.raises(ToolRegistrationError, match="unevaluatedProperties together with patternProperties"):
        nx.add_tool(tool(schema))


def test_patterns_keep_json_schemas_meaning(nexus_factory: NexusFactory) -> None:
    """ECMA-262 as JSON Schema says: matched anywhere (not anchored), \\uXXXX escapes, ASCII \\d."""
    schema = {"type": "object", "properties": {
        "anywhere": {"type": "string", "pattern": "b+"},
        "escaped": {"type": "string", "pattern": "^[\\u0041-\\u005A]+$"},
        "digits": {"type": "string", "pattern": "^\\d+$"},
    }}
    nx = nexus_factory(tools=[tool(schema)])
    assert_ok(nx.invoke("victim", {"anywhere": "abba", "escaped": "ABC", "digits": "123"}))
    assert_error(nx.invoke("victim", {"anywhere": "aaa"}), kind="invalid_arguments")
    assert_error(nx.invoke("victim", {"escaped": "abc"}), kind="invalid_arguments")
    assert_error(nx.invoke("victim", {"digits": "١٢٣"}), kind="invalid_arguments")  # Arabic-Indic digits


def test_data_that_looks_like_a_pattern_is_not_compiled(nexus_factory: NexusFactory) -> None:
    """`default`, `enum` and `examples` hold data, not schemas: a "pattern" key there is data."""
    schema = {"type": "object", "properties": {"cfg": {"type": "object", "default": {"pattern": "(?=x)"},
                                                       "examples": [{"pattern": "(a)\\1"}]}}}
    nx = nexus_factory(tools=[tool(schema)])
    assert_ok(nx.invoke("victim", {"cfg": {"pattern": "(?=x)"}}))


def test_a_lone_surrogate_in_a_pattern_is_refused_at_registration(nexus_factory: NexusFactory) -> None:
    """JSON can carry half a UTF-16 pair ("\\ud800"), which is not text RE2 takes: a tool whose
    schema pattern holds one is refused with the pattern named, not a UnicodeEncodeError."""
    nx = nexus_factory()
    schema = {"type": "object", "properties": {"w": {"type": "string", "pattern": "^a\ud800"}}}
    with pytest.raises(ToolRegistrationError, match="lone surrogate"):
        nx.add_tool(tool(schema))


def test_a_lone_surrogate_in_a_model_string_is_matched_not_a_crash(nexus_factory: NexusFactory) -> None:
    """A model's argument can hold a lone surrogate too: matched as U+FFFD, the call is checked
    like any other (an error result naming the mismatch, or the tool's run), never an exception."""
    nx = nexus_factory(tools=[tool({"type": "object", "properties": {"w": {"type": "string", "pattern": "^[a-z]+$"}}}),
                              tool({"type": "object", "properties": {"w": {"type": "string", "pattern": "^a"}}},
                                   name="loose")])
    result = assert_error(nx.invoke("victim", {"w": "ab\ud800"}), kind="invalid_arguments")
    assert "does not match" in (result.error or "")
    assert_ok(nx.invoke("loose", {"w": "a\udfff"}))
