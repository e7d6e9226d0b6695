"""The models and their JSON: round trips through the one converter, strict reading of input,
and error messages that name the failing field."""

from __future__ import annotations

import importlib
import inspect
import json
import sys
import typing
from typing import Any

import attrs
import pluggy
import pytest
from nexus_core._converter import structure, unstructure
from nexus_core._markers import hook_kind
from nexus_core._plugins import new_plugin_manager
from nexus_core.wire import WireError, from_json, to_json

import nexus_core
from nexus_core import Rewrite, SkillContent, ToolCall, ToolDef, ToolResult, Veto

SAMPLES: list[Any] = [
    ToolCall(name="shell", arguments={"command": "ls", "env": {"A": "1"}}, id="c1", parent_call_id="c0",
             metadata={"user": "u1"}),
    ToolResult(id="c1", name="shell", output="hi\n", output_structured={"lines": ["hi"]}, metadata={"ms": 3}),
    ToolResult(id="c2", name="shell", output="vetoed: no", error="vetoed: no", error_kind="vetoed"),
    Veto("rm is not allowed"),
    Rewrite({"command": "ls -l"}, reason="long listing"),
    SkillContent(name="pdf", description="Read PDFs", body="# PDF", path="/s/pdf/SKILL.md",
                 resources=("a.py", "b.md"), metadata={"license": "MIT"}),
]


@pytest.mark.parametrize("value", SAMPLES, ids=lambda v: type(v).__name__)
def test_json_round_trip(value: Any) -> None:
    text = to_json(value)
    assert from_json(text, type(value)) == value
    assert structure(json.loads(text), type(value)) == value


def test_tool_result_json_carries_is_error_and_reads_it_back() -> None:
    ok, bad = SAMPLES[1], SAMPLES[2]
    assert json.loads(to_json(ok))["is_error"] is False
    assert json.loads(to_json(bad))["is_error"] is True
    assert bad.is_error and bad.vetoed and not ok.is_error


def test_tool_result_is_error_follows_error_not_output() -> None:
    assert ToolResult(id="1", name="t", output="", error="").is_error  # an empty message is still an error
    assert not ToolResult(id="1", name="t", output="error: looks bad but is output").is_error


def test_tooldef_json_leaves_the_handler_out() -> None:
    tool = ToolDef(name="echo", handler=lambda a: a, description="Echo", input_schema={"type": "object"})
    data = unstructure(tool)
    assert "handler" not in data
    assert data["name"] == "echo" and data["input_schema"] == {"type": "object"}


def test_models_that_cross_a_boundary_are_frozen() -> None:
    call = ToolCall(name="t")
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        call.name = "other"  # type: ignore[misc]
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        SAMPLES[1].output = "changed"


def test_call_ids_are_fresh_and_well_formed() -> None:
    ids = {ToolCall(name="t").id for _ in range(200)}
    assert len(ids) == 200
    assert all(i.startswith("call_") and len(i) == 5 + 24 for i in ids)


@pytest.mark.parametrize(
    ("data", "cls", "message"),
    [
        ({"name": "t", "argumets": {}}, ToolCall, "ToolCall: unknown key 'argumets'"),
        ({"id": "1", "name": "t", "is_error": False, "outptu": ""}, ToolResult, "ToolResult: unknown key 'outptu'"),
        ({"reason": "x", "why": "y"}, Veto, "Veto: unknown key 'why'"),
        ({"arguments": {}}, ToolCall, "ToolCall.name: required, but missing"),
        ({"name": 3}, ToolCall, "ToolCall.name: expected string, got integer 3"),
        ({"name": "t", "arguments": [1]}, ToolCall, "ToolCall.arguments: expected object, got array [1]"),
        ({"name": "t", "id": 5}, ToolCall, "ToolCall.id: expected string, got integer 5"),
        ({"id": "1", "name": "t", "error_kind": "oops"}, ToolResult,
         "ToolResult.error_kind: expected one of 'unknown_tool', 'vetoed'"),
        ({"name": "s", "resources": "ab"}, SkillContent, "SkillContent.resources: expected array, got string 'ab'"),
        ({"name": "s", "resources": ["a", 2]}, SkillContent, "SkillContent.resources[1]: expected string, got integer 2"),
    ],
)
def test_structure_errors_name_the_field(data: dict[str, Any], cls: type, message: str) -> None:
    with pytest.raises(WireError) as info:
        structure(data, cls)
    assert message in str(info.value)


def test_structure_reports_every_bad_field_at_once() -> None:
    with pytest.raises(WireError) as info:
        structure({"name": 1, "arguments": "x", "extra": 0}, ToolCall)
    text = str(info.value)
    assert "unknown key 'extra'" in text and "ToolCall.name:" in text and "ToolCall.arguments:" in text


def test_from_json_reports_invalid_json_as_a_wire_error() -> None:
    with pytest.raises(WireError, match=r"ToolCall: invalid JSON: .* line 1 column"):
        from_json("{name: 1}", ToolCall)


def test_converter_is_the_one_public_converter() -> None:
    import nexus_core.wire

    assert nexus_core.wire.converter is nexus_core._converter.converter
    assert nexus_core.wire.converter.forbid_extra_keys


def _hookspecs() -> dict[str, Any]:
    """Every hookspec a Nexus knows: the core's and the installed packages' (run_code's)."""
    pm, failures = new_plugin_manager()
    assert not failures, failures
    return {caller.name: caller.spec for caller in vars(pm.hook).values()
            if isinstance(caller, pluggy.HookCaller) and caller.spec is not None}


SPECS = _hookspecs()
HOOKS = sorted(SPECS)


def _names_for(module: Any) -> dict[str, Any]:
    """The public names a hookspec module's annotations may use: the core's and its package's."""
    names: dict[str, Any] = {}
    for source in ("nexus_core", "nexus_core.llm", "nexus_core.content", "nexus_core.plugins",
                   module.__name__.split(".")[0]):
        public = importlib.import_module(source)
        names.update({n: getattr(public, n) for n in getattr(public, "__all__", ())})  # loaded lazily
    return names


def test_package_hookspecs_are_found() -> None:
    assert {"nexus_before_tool_invoke", "nexus_code_exec_stdout"} <= set(HOOKS)
    assert SPECS["nexus_code_exec_stdout"].namespace.__name__ == "nexus_tool_code_exec.host.hookspecs"


@pytest.mark.parametrize("name", HOOKS)
def test_every_hookspec_is_annotated_and_documented(name: str) -> None:
    spec = SPECS[name].function
    assert name.startswith("nexus_")
    assert spec.__doc__ and len(inspect.cleandoc(spec.__doc__)) > 40, f"{name} needs a docstring"
    sig = inspect.signature(spec)
    assert sig.return_annotation is not inspect.Signature.empty, f"{name} has no return annotation"
    for param in sig.parameters.values():
        assert param.annotation is not inspect.Parameter.empty, f"{name}({param.name}) is not annotated"
    # the annotations name real types (they are strings under `from __future__ import annotations`)
    import click

    namespace = {**_names_for(SPECS[name].namespace), **vars(typing), "click": click}
    typing.get_type_hints(spec, globalns=vars(SPECS[name].namespace), localns=namespace)


def test_hookspecs_say_what_a_return_value_means() -> None:
    for name in HOOKS:
        doc = SPECS[name].function.__doc__ or ""
        assert "return" in doc.lower(), f"{name}: say what its return value means (or that it is ignored)"


@pytest.mark.parametrize("name", HOOKS)
def test_every_hookspec_declares_its_kind(name: str) -> None:
    kind = hook_kind(SPECS[name].function)
    assert kind in ("observer", "gate", "contribution", "lifecycle"), (
        f"{name}: declare its kind where it is specified, @hookspec(kind=...)")
