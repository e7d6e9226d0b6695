"""The generated `tools` module: names, classes, aliases, types, and the stubs the model reads.

The source is compiled here exactly as the child compiles it (`child.runtime.compile_bindings`), and the
classes are converted with the child's own converter, so a round trip here is what a script gets.
test_run_code.py covers the same classes end to end.
"""

from __future__ import annotations

import ast
import sys
import types
import typing
from collections.abc import Iterator
from typing import Any

import attrs
import pytest

from nexus_core import ToolDef
from nexus_tool_code_exec.child import runtime
from nexus_tool_code_exec.host.bindings import class_name, generate, py_identifier


def _noop(arguments: dict[str, Any]) -> str:
    return ""


def tool(name: str, input_schema: dict[str, Any] | None = None, output_schema: dict[str, Any] | None = None,
         description: str = "") -> ToolDef:
    return ToolDef(name=name, handler=_noop, description=description,
                   input_schema=input_schema or {"type": "object", "properties": {}},
                   output_schema=output_schema)


@pytest.fixture
def build(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """`build(*tooldefs)` -> (the compiled tools module, the Bindings)."""
    monkeypatch.setitem(sys.modules, "_nexus_rt", runtime)

    def make(*tools: ToolDef, skip: tuple[str, ...] = ()) -> tuple[types.ModuleType, Any]:
        bindings = generate(tools, skip=skip)
        module = runtime.compile_bindings(bindings.source)
        return module, bindings

    yield make


ODD_NAMES = {
    "type": "object",
    "properties": {
        "first-name": {"type": "string"},
        "class": {"type": "string"},
        "2fa": {"type": "boolean"},
        "from": {"type": "integer"},
        "_id": {"type": "integer"},
        "match": {"type": "string"},
        "a.b": {"type": "string"},
        "a_b": {"type": "string"},
        "__init__": {"type": "string"},
    },
    "required": ["first-name", "class"],
}


# -- names ----------------------------------------------------------------------------------


def test_tool_foo_bar_is_function_foo_bar_taking_FooBarArgs(build: Any) -> None:
    tools, bindings = build(tool("foo_bar", {"type": "object", "properties": {"x": {"type": "integer"}}}))
    assert bindings.functions == {"foo_bar": "foo_bar"}
    assert callable(tools.foo_bar)
    assert attrs.has(tools.FooBarArgs)
    assert tools.FooBarArgs(x=1).x == 1


def test_run_code_is_left_out_of_its_own_bindings(build: Any) -> None:
    tools, bindings = build(tool("run_code"), tool("echo"), skip=("run_code",))
    assert bindings.functions == {"echo": "echo"}
    assert not hasattr(tools, "run_code") and "run_code" not in bindings.stubs


def test_runtime_names_are_always_exported(build: Any) -> None:
    tools, _ = build()
    assert issubclass(tools.ToolVetoed, tools.ToolError) and issubclass(tools.ToolFailed, tools.ToolError)
    assert tools.Result(output="x").output == "x"


@pytest.mark.parametrize(("name", "ident"), [("shell", "shell"), ("foo-bar", "foo_bar"), ("2x", "_2x"),
                                             ("class", "class_"), ("Result", "Result_"), ("a.b", "a_b"),
                                             ("match", "match"), ("case", "case")])
def test_py_identifier(name: str, ident: str) -> None:
    assert py_identifier(name) == ident
    assert ident.isidentifier()


def test_class_names_are_camel_case() -> None:
    assert class_name("foo_bar", "args") == "FooBarArgs"
    assert class_name("apply-patch", "result", "changes", "item") == "ApplyPatchResultChangesItem"
    assert class_name("3d", "args") == "T3dArgs"


def test_clashing_tool_names_get_distinct_functions(build: Any) -> None:
    tools, bindings = build(tool("foo-bar"), tool("foo_bar"))
    assert sorted(bindings.functions.values()) == ["foo-bar", "foo_bar"]
    assert len(set(bindings.functions)) == 2


def test_the_tool_whose_name_it_is_keeps_a_python_name_and_the_other_is_said_to_be_renamed(build: Any) -> None:
    """`foo-bar` sorts first, and used to take `foo_bar` from the tool called that (issue 21);
    now the exact name wins, and the other's stub and the description say where it went."""
    tools, bindings = build(tool("foo-bar"), tool("foo_bar"))
    assert bindings.functions == {"foo_bar": "foo_bar", "foo_bar_2": "foo-bar"}
    note = "tool 'foo-bar' is tools.foo_bar_2 here: its Python name tools.foo_bar is the name of tool 'foo_bar'"
    assert bindings.renamed == {"foo-bar": note}
    assert bindings.stub_of("foo-bar").startswith(f"# {note}\n")
    assert "# 1 tool bound under another name (their Python name is another's; each stub says which): foo-bar" \
        in bindings.stubs
    assert tools.foo_bar_2.__name__ == "foo_bar_2"


def test_where_no_tool_has_the_name_exactly_none_gets_it(build: Any) -> None:
    _, bindings = build(tool("class-"), tool("class"))  # both are `class_` in Python
    assert bindings.functions == {"class__2": "class", "class__3": "class-"}
    assert all("which is none of theirs exactly" in note for note in bindings.renamed.values())


# -- JSON names kept through aliases --------------------------------------------------------


def test_json_names_that_are_not_identifiers_or_are_keywords_round_trip(build: Any) -> None:
    tools, _ = build(tool("odd", ODD_NAMES, ODD_NAMES))
    fields = {f.name: f.metadata.get("json", f.name) for f in attrs.fields(tools.OddArgs)}
    assert fields["first_name"] == "first-name" and fields["class_"] == "class"
    assert fields["_2fa"] == "2fa" and fields["from_"] == "from"
    assert fields["match"] == "match"
    assert all(name.isidentifier() for name in fields)
    assert sorted(fields.values()) == sorted(ODD_NAMES["properties"])

    assert (fields["a_b"], fields["a_b_2"]) == ("a.b", "a_b")  # first come, first named

    args = tools.OddArgs(first_name="Ada", class_="x", _2fa=True, from_=3, match="m", a_b_2="underscore")
    data = runtime.converter.unstructure(args)
    assert data == {"first-name": "Ada", "class": "x", "2fa": True, "from": 3, "match": "m", "a_b": "underscore"}

    wire = {"first-name": "Grace", "class": "y", "_id": 7, "a.b": "dot", "a_b": "underscore", "__init__": "i"}
    back = runtime.converter.structure(wire, tools.OddResult)
    assert (back.first_name, back.class_, back.a_b, back.a_b_2, back._id) == ("Grace", "y", "dot", "underscore", 7)
    assert runtime.converter.unstructure(back) == wire


def test_a_leading_underscore_json_name_is_a_keyword_of_its_own_name(build: Any) -> None:
    """attrs strips a leading underscore from __init__ parameters unless told otherwise; the
    model reads `_id: int | None = None` in the stubs and must be able to pass `_id=`."""
    tools, bindings = build(tool("odd", ODD_NAMES))
    assert "_id: int | None = None" in bindings.stubs
    args = tools.OddArgs(first_name="a", class_="b", _id=5)
    assert runtime.converter.unstructure(args)["_id"] == 5


def test_the_stub_names_each_renamed_field_with_its_json_name(build: Any) -> None:
    _, bindings = build(tool("odd", ODD_NAMES))
    assert "first_name: JSON name 'first-name'\n" in bindings.stubs
    assert "\n    class_: JSON name 'class'\n" in bindings.stubs


@pytest.mark.parametrize("field", ["str", "int", "float", "bool", "list", "dict", "attrs", "Any", "Literal"])
def test_fields_named_like_the_types_in_annotations_do_not_break_the_class(build: Any, field: str) -> None:
    """A field with a default binds its name in the class body; a later annotation that uses the
    same name (`str | None`) would then see None, and the whole tools module would fail."""
    schema = {"type": "object", "properties": {
        "a": {"type": "string"}, field: {"type": "string"}, "z": {"type": "integer"},
        "zz": {"type": "array", "items": {"type": "number"}}, "zzz": {"type": "object"},
        "zzzz": {"type": "boolean"}, "e": {"enum": ["x"]}}}
    tools, _ = build(tool("t", schema, schema))
    json_names = {f.metadata.get("json", f.name) for f in attrs.fields(tools.TArgs)}
    assert field in json_names
    wire = {field: "v", "z": 1, "zz": [1.5], "zzz": {"k": 1}, "zzzz": True, "e": "x"}
    assert runtime.converter.unstructure(runtime.converter.structure(wire, tools.TResult)) == wire


def test_a_tool_named_like_a_builtin_type_does_not_break_later_tools(build: Any) -> None:
    """`def list(...)` in the module must not shadow `list[...]` for tools generated after it."""
    tools, _ = build(
        tool("list", {"type": "object", "properties": {"path": {"type": "string"}}}),
        tool("search", {"type": "object", "properties": {"q": {"type": "string"}}},
             {"type": "array", "items": {"type": "string"}}),
        tool("str", output_schema={"type": "string"}),
        tool("zcount", output_schema={"type": "object", "properties": {"n": {"type": "integer"},
                                                                        "tags": {"type": "array", "items": {"type": "string"}}}}),
    )
    assert callable(tools.list) and callable(tools.search) and callable(tools.str)
    hints = typing.get_type_hints(tools.search)
    assert hints["return"] == list[str]
    assert runtime.converter.structure({"n": 1, "tags": ["a"]}, tools.ZcountResult).tags == ["a"]


def test_a_tool_named_like_a_generated_class_does_not_shadow_it(build: Any) -> None:
    tools, _ = build(tool("EchoArgs"), tool("echo", {"type": "object", "properties": {"t": {"type": "string"}}}))
    assert attrs.has(tools.EchoArgs) and tools.EchoArgs(t="x").t == "x"


# -- types ----------------------------------------------------------------------------------


def test_optional_fields_default_to_none_and_are_left_out_of_the_call(build: Any) -> None:
    schema = {"type": "object", "properties": {"path": {"type": "string"}, "limit": {"type": "integer"},
                                               "offset": {"type": "integer", "default": 1}},
              "required": ["path"]}
    tools, bindings = build(tool("read", schema))
    args = tools.ReadArgs(path="a.txt")
    assert args.limit is None and args.offset is None
    assert runtime.converter.unstructure(args) == {"path": "a.txt"}
    assert runtime.converter.unstructure(tools.ReadArgs(path="a", limit=5)) == {"path": "a", "limit": 5}
    with pytest.raises(TypeError):
        tools.ReadArgs(limit=5)  # path is required
    # the tool's default, shown where the model reads the signature (the binding sends None as
    # nothing, and the tool applies it)
    assert "def read(*, path: str, limit: int | None = None, offset: int = 1) -> Result:" in bindings.stubs


def test_a_required_nullable_field_is_sent_even_when_none(build: Any) -> None:
    schema = {"type": "object", "properties": {"moved_to": {"type": ["string", "null"]}}, "required": ["moved_to"]}
    tools, _ = build(tool("mv", schema))
    assert runtime.converter.unstructure(tools.MvArgs(moved_to=None)) == {"moved_to": None}


def test_enums_are_literals(build: Any) -> None:
    schema = {"type": "object", "properties": {"mode": {"enum": ["fast", "slow"]}, "level": {"enum": [1, 2, 3]},
                                               "kind": {"const": "x"}}}
    tools, bindings = build(tool("e", schema))
    hints = typing.get_type_hints(tools.EArgs)
    assert hints["mode"] == typing.Literal["fast", "slow"] | None
    assert hints["level"] == typing.Literal[1, 2, 3] | None
    assert hints["kind"] == typing.Literal["x"] | None
    assert "mode: Literal['fast', 'slow'] | None = None" in bindings.stubs


def test_arrays_are_lists(build: Any) -> None:
    schema = {"type": "object", "properties": {"paths": {"type": "array", "items": {"type": "string"}},
                                               "grid": {"type": "array", "items": {"type": "array", "items": {"type": "number"}}},
                                               "any": {"type": "array"}},
              "required": ["paths", "grid", "any"]}
    tools, _ = build(tool("a", schema))
    hints = typing.get_type_hints(tools.AArgs)
    assert hints == {"paths": list[str], "grid": list[list[float]], "any": list[Any]}


def test_scalar_types_and_nullable_unions(build: Any) -> None:
    schema = {"type": "object", "properties": {
        "s": {"type": "string"}, "i": {"type": "integer"}, "n": {"type": "number"}, "b": {"type": "boolean"},
        "maybe": {"type": ["integer", "null"]}, "either": {"anyOf": [{"type": "string"}, {"type": "null"}]},
        "map": {"type": "object", "additionalProperties": {"type": "integer"}}, "free": {"type": "object"},
        "untyped": {}},
        "required": ["s", "i", "n", "b", "maybe", "either", "map", "free", "untyped"]}
    tools, _ = build(tool("s", schema))
    assert typing.get_type_hints(tools.SArgs) == {
        "s": str, "i": int, "n": float, "b": bool, "maybe": int | None, "either": str | None,
        "map": dict[str, int], "free": dict[str, Any], "untyped": Any}


def test_nested_objects_are_nested_classes(build: Any) -> None:
    schema = {"type": "object", "properties": {
        "owner": {"type": "object", "properties": {"name": {"type": "string"},
                                                   "address": {"type": "object", "properties": {"city": {"type": "string"}}}},
                  "required": ["name"]},
        "items": {"type": "array", "items": {"type": "object", "properties": {"sku": {"type": "string"}}}}},
        "required": ["owner", "items"]}
    tools, bindings = build(tool("order", schema, schema))
    assert attrs.has(tools.OrderArgsOwner) and attrs.has(tools.OrderArgsOwnerAddress)
    assert attrs.has(tools.OrderArgsItemsItem)
    assert typing.get_type_hints(tools.OrderArgs)["items"] == list[tools.OrderArgsItemsItem]
    args = tools.OrderArgs(owner=tools.OrderArgsOwner(name="a", address=tools.OrderArgsOwnerAddress(city="b")),
                           items=[tools.OrderArgsItemsItem(sku="s1"), tools.OrderArgsItemsItem()])
    wire = {"owner": {"name": "a", "address": {"city": "b"}}, "items": [{"sku": "s1"}, {}]}
    assert runtime.converter.unstructure(args) == wire
    result = runtime.converter.structure(wire, tools.OrderResult)
    assert result.owner.address.city == "b" and result.items[0].sku == "s1"
    # nested classes are defined before the class that uses them
    assert bindings.source.index("class OrderArgsOwnerAddress(") < bindings.source.index("class OrderArgsOwner(")


def test_tool_without_output_schema_returns_Result(build: Any) -> None:
    tools, bindings = build(tool("plain"))
    assert typing.get_type_hints(tools.plain)["return"] is tools.Result
    assert "def plain() -> Result:" in bindings.stubs


def test_tool_with_output_schema_returns_its_Result_class(build: Any) -> None:
    tools, _ = build(tool("glob", output_schema={"type": "object", "properties": {"paths": {"type": "array", "items": {"type": "string"}}}}))
    assert typing.get_type_hints(tools.glob)["return"] is tools.GlobResult


# -- the source and the stubs ---------------------------------------------------------------


def real_tools() -> list[ToolDef]:
    from nexus_core import Nexus

    with Nexus.from_config({"plugins": {"active": ["nexus.tool.file", "nexus.tool.shell"]}, "skills": []}) as nx:
        return nx.tools()


def test_the_generated_source_of_the_real_tools_compiles(build: Any) -> None:
    tools, bindings = build(*real_tools())
    ast.parse(bindings.source)
    assert {"read", "write", "edit", "glob", "grep", "list", "shell", "bash", "apply_patch"} <= set(bindings.functions)
    assert attrs.has(tools.ShellResult) and attrs.has(tools.ReadArgs)


def test_stubs_are_compact_and_parse(build: Any) -> None:
    long = "First paragraph of the description.\n\n" + "Second paragraph, which the stubs leave out. " * 20
    field_doc = "A field description that goes on and on. " * 10
    schema = {"type": "object", "properties": {"x": {"type": "string", "description": field_doc}}}
    _, bindings = build(*real_tools(), tool("documented", schema, description=long))
    _, without = build(*real_tools())
    ast.parse(bindings.stubs)
    stubs = bindings.stubs
    assert "_call" not in stubs and "import" not in stubs
    assert "First paragraph of the description." in stubs and "Second paragraph" not in stubs
    # a tool with ~1.4 kB of descriptions costs the model its first paragraph and its arguments'
    # descriptions, in full (not cut mid-word), and nothing more
    assert " ".join(field_doc.split()) in " ".join(line.split("#", 1)[-1].strip() for line in stubs.splitlines())
    assert len(stubs) - len(without.stubs) < len(field_doc) + 300
    assert len(bindings.source) - len(without.source) > len(long)
    tree = ast.parse(stubs)
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            body = [n for n in node.body if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)
                                                 and isinstance(n.value.value, str))]
            # a docstring alone, or `...` where there is none
            assert body == [] or (len(body) == 1 and isinstance(body[0].value, ast.Constant)  # type: ignore[attr-defined]
                                  and body[0].value.value is Ellipsis)  # type: ignore[attr-defined]
    assert max(len(line) for line in stubs.splitlines()) <= 400


@pytest.mark.parametrize("description", [
    'Say "hi"', 'ends with a backslash \\', 'has """triple quotes""" inside', "line one\nline two\n\"quoted\"",
    "tab\there", "",
])
def test_any_description_gives_source_and_stubs_that_compile(build: Any, description: str) -> None:
    schema = {"type": "object", "description": description,
              "properties": {"x": {"type": "string", "description": description}}}
    tools, bindings = build(tool("d", schema, schema, description=description))
    ast.parse(bindings.stubs)
    if description.strip():
        assert tools.d.__doc__ is not None


def test_no_tools_gives_a_module_and_a_note(build: Any) -> None:
    tools, bindings = build()
    assert "(no tools registered)" in bindings.stubs
    assert bindings.functions == {}


@pytest.mark.parametrize("name", ["x²", "①", "ǅ", "ℌ", "名前", "naïve", "a\u200bb", "self", "ﬁle"])
def test_unicode_and_attrs_reserved_json_names_round_trip(build: Any, name: str) -> None:
    """Python parses `ℌ` as `H` (NFKC) and refuses `²` in a name; attrs' __init__ already has a
    `self`. Each must still give a module that loads and a field that keeps its JSON name."""
    schema = {"type": "object", "properties": {name: {"type": "string"}, "other": {"type": "integer"}}}
    tools, _ = build(tool("t", schema, schema))
    json_names = {f.metadata.get("json", f.name): f.name for f in attrs.fields(tools.TArgs)}
    assert name in json_names and json_names[name].isidentifier()
    wire = {name: "v", "other": 1}
    assert runtime.converter.unstructure(runtime.converter.structure(wire, tools.TResult)) == wire
    assert runtime.converter.unstructure(tools.TArgs(**{json_names[name]: "v"})) == {name: "v"}


def test_names_that_normalise_to_the_same_identifier_stay_apart(build: Any) -> None:
    schema = {"type": "object", "properties": {"ℌ": {"type": "string"}, "H": {"type": "integer"}}}
    tools, _ = build(tool("t", schema))
    assert [f.name for f in attrs.fields(tools.TArgs)] == ["H", "H_2"]
    assert runtime.converter.unstructure(tools.TArgs(H="a", H_2=1)) == {"ℌ": "a", "H": 1}


@pytest.mark.parametrize("name", ["x²", "ℌ", "名前"])
def test_unicode_tool_names_give_callable_functions(build: Any, name: str) -> None:
    tools, bindings = build(tool(name))
    [(fname, tname)] = bindings.functions.items()
    assert tname == name and callable(getattr(tools, fname))


# -- the module a child makes: one piece per tool, run when first used ---------------------------


def test_a_childs_tools_module_runs_each_piece_when_first_used(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "_nexus_rt", runtime)
    bindings = generate([tool("first", {"type": "object", "properties": {"x": {"type": "string"}}}),
                         tool("second", output_schema={"type": "object", "properties": {"n": {"type": "integer"}}})])
    module = runtime.bindings_module(runtime.compile_pieces(bindings.payload))
    assert "first" not in vars(module) and "FirstArgs" not in vars(module)  # nothing run yet
    assert module.FirstArgs(x="a").x == "a"  # the class's piece runs, and its function with it
    assert "first" in vars(module) and "second" not in vars(module)
    assert typing.get_type_hints(module.second)["return"] is module.SecondResult
    assert sorted(module.__all__) == sorted([*bindings.names - {"attrs", "Any", "Literal"} - {
        n for n in bindings.names if n.startswith("_")}])
    assert {"first", "second", "FirstArgs", "SecondResult"} <= set(dir(module))
    monkeypatch.setitem(sys.modules, "tools", module)
    namespace: dict[str, Any] = {}
    exec("from tools import *", namespace)  # a star import makes every piece
    assert {"first", "second", "SecondResult", "ToolFailed"} <= set(namespace)


def test_a_piece_that_fails_to_load_fails_its_tool_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "_nexus_rt", runtime)
    payload = generate([tool("good", {"type": "object", "properties": {"x": {"type": "string"}}})]).payload
    bad = {"tool": "bad", "function": "bad", "names": ["BadArgs", "bad"], "source": "raise OSError('no')\n"}
    module = runtime.bindings_module(runtime.compile_pieces({**payload, "pieces": [*payload["pieces"], bad]}))
    with pytest.raises(runtime.ToolFailed, match=r"bad: the bindings of tool 'bad' could not be loaded in the "
                                                 r"sandbox \(OSError: no\)"):
        module.bad()
    with pytest.raises(AttributeError, match="tools.BadArgs is not available: the bindings of tool 'bad'"):
        module.BadArgs  # noqa: B018
    assert module.GoodArgs(x="y").x == "y"


def test_an_alias_is_one_line_unless_its_python_name_is_taken(build: Any) -> None:
    shell = ToolDef(name="shell", handler=_noop, aliases=("bash", "foo-bar"),
                    input_schema={"type": "object", "properties": {"command": {"type": "string"}}})
    tools, bindings = build(shell, tool("foo_bar"))
    assert tools.bash is tools.shell and "foo_bar_2" not in bindings.functions
    assert bindings.functions["bash"] == "shell" and bindings.aliases == {"bash": ("bash", "shell")}
    assert "\nbash = shell" in bindings.stub_of("shell") and bindings.stub_of("bash") == "bash = shell"
    assert bindings.renamed == {"foo-bar": "alias 'foo-bar' of tool 'shell' is not in the bindings: its Python "
                                           "name tools.foo_bar is taken (call tools.shell)"}
    assert bindings.api["bash"].signature == "bash(*, command: str | None = None) -> Result"
