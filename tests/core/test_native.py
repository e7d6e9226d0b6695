"""Native tools: `native_tool`, `@tool` schema inference, the call context, `toolkit` /
`execute`, and `sanitize` — the toolnexus examples in Python form, then the edges."""

from __future__ import annotations

import dataclasses
import datetime
import enum
import functools
from typing import Annotated, Any, Literal, NotRequired, Optional, TypedDict

import attrs
import pytest
from nexus_core._docstrings import parse_docstring
from nexus_core._typeschema import schema_for_type

from nexus_core import (
    CallContext,
    Nexus,
    ToolCall,
    ToolDef,
    ToolRegistrationError,
    ToolResult,
    Veto,
    execute,
    failure,
    hookimpl,
    native_tool,
    sanitize,
    success,
    tool,
    toolkit,
)

UPPER_SCHEMA = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}


def schema_of(fn: Any) -> dict[str, Any]:
    return fn.__nexus_tool__.input_schema


# -- the toolnexus examples -----------------------------------------------------------------


def test_upper_native_tool_returns_ABC_for_abc() -> None:
    upper = native_tool("upper", "Uppercase the text", UPPER_SCHEMA, run=lambda args: str(args["text"]).upper())
    assert isinstance(upper, ToolDef)
    assert (upper.name, upper.description, upper.input_schema) == ("upper", "Uppercase the text", UPPER_SCHEMA)
    tk = toolkit([upper])
    result = execute(tk, "upper", {"text": "abc"})
    assert (result.output, result.is_error) == ("ABC", False)


def test_native_tool_takes_the_positional_form() -> None:
    upper = native_tool("upper", "Uppercase the text", UPPER_SCHEMA, lambda args: args["text"].upper())
    assert execute(toolkit([upper]), "upper", {"text": "abc"}).output == "ABC"


def test_an_unknown_name_is_an_error_result() -> None:
    tk = toolkit([native_tool("upper", run=lambda a: "")])
    result = execute(tk, "nosuch", {})
    assert result.is_error and result.error_kind == "unknown_tool"
    assert "nosuch" in result.error


def test_description_and_schema_default_to_empty_and_object() -> None:
    t = native_tool("noop", run=lambda a: None)
    assert t.description == "" and t.input_schema == {"type": "object"}
    assert native_tool("noop", None, run=lambda a: None).description == ""
    assert execute(toolkit([t]), "noop").output == ""


def test_a_failure_value_and_a_raise_both_arrive_as_error_results_with_their_messages() -> None:
    def charge(args: dict[str, Any]) -> Any:
        if args["amount"] < 0:
            return failure("amount must be positive")
        return success(f"charged {args['amount']}")

    def boom(args: dict[str, Any]) -> Any:
        raise RuntimeError("kaboom")

    tk = toolkit([native_tool("charge_card", "Charge the card", run=charge), native_tool("boom", run=boom)])
    refused = execute(tk, "charge_card", {"amount": -1})
    assert refused.is_error and refused.output == "amount must be positive" and refused.error_kind == "failure"
    assert execute(tk, "charge_card", {"amount": 5}).output == "charged 5"
    raised = execute(tk, "boom", {})  # converted at the boundary, never propagated
    assert raised.is_error and "kaboom" in raised.error and "kaboom" in raised.output
    assert raised.error_kind == "exception"


def test_a_map_with_output_is_a_result_its_iserror_a_real_boolean() -> None:
    """toolnexus's rule: a handler's map that already has `output` is the result, not JSON data;
    any truthy `isError` makes it an error result (a real boolean), and other keys are kept."""
    tk = toolkit([native_tool("m", run=lambda args: dict(args["map"]))])

    def result(value: dict[str, Any]) -> ToolResult:
        return execute(tk, "m", {"map": value})

    failed = result({"output": "no such order", "isError": True})
    assert (failed.is_error, failed.error, failed.output, failed.error_kind) == (
        True, "no such order", "no such order", "failure")
    assert failed.output_structured is None
    assert result({"output": "refused", "isError": "yes"}).is_error is True  # truthy: an error
    ok = result({"output": "done", "isError": 0, "took_ms": 3})
    assert (ok.is_error, ok.output, ok.metadata) == (False, "done", {"took_ms": 3})
    nested = result({"output": {"rows": 2}})  # the output normalised by the same rules
    assert (nested.output, nested.output_structured) == ('{"rows": 2}', {"rows": 2})
    assert result({"rows": 2}).output_structured == {"rows": 2}  # no `output` key: data, as before


def test_a_tool_function_that_declares_its_return_type_returns_data_even_with_an_output_key() -> None:
    @tool
    def report() -> dict[str, Any]:
        return {"output": "text", "isError": True}

    @tool
    def undeclared():  # type: ignore[no-untyped-def]  # no annotation: the handler's rule applies
        return {"output": "text", "isError": True}

    tk = toolkit([report, undeclared])
    data = execute(tk, "report", {})
    assert not data.is_error and data.output_structured == {"output": "text", "isError": True}
    assert execute(tk, "undeclared", {}).error == "text"


def test_a_json_scalar_is_data_for_a_tool_that_declares_an_output_schema() -> None:
    count = native_tool("count", run=lambda args: 3, output_schema={"type": "integer"})
    flag = native_tool("flag", run=lambda args: True, output_schema={"type": "boolean"})
    untyped = native_tool("untyped", run=lambda args: True)
    tk = toolkit([count, flag, untyped])
    assert (execute(tk, "count").output, execute(tk, "count").output_structured) == ("3", 3)
    assert (execute(tk, "flag").output, execute(tk, "flag").output_structured) == ("true", True)
    assert (execute(tk, "untyped").output, execute(tk, "untyped").output_structured) == ("True", None)


def test_a_ctx_tool_reads_the_user_id_it_was_given() -> None:
    whoami = native_tool("whoami", "Who is this conversation for", {"type": "object"}, ctx=True,
                         run=lambda _args, ctx: f"user {ctx.data.get('user_id', '')}")
    tk = toolkit([whoami])
    assert tk.invoke("whoami", {}, context={"user_id": "u-42"}).output == "user u-42"
    assert execute(tk, "whoami", {}, {"user_id": "u-42"}).output == "user u-42"
    assert execute(tk, "whoami", {}, context={"user_id": "u-7"}).output == "user u-7"
    assert execute(tk, "whoami", {}).output == "user "


def test_the_context_carries_call_ids_the_answer_and_the_nexus() -> None:
    seen: list[CallContext] = []
    probe = native_tool("probe", run=lambda _a, ctx: seen.append(ctx), ctx=True)
    tk = toolkit([probe])
    tk.invoke(ToolCall(name="probe", id="c-1", parent_call_id="c-0"), context={"k": 1}, answer="yes")
    (ctx,) = seen
    assert (ctx.call_id, ctx.parent_call_id, ctx.tool_name, ctx.answer) == ("c-1", "c-0", "probe", "yes")
    assert ctx.data == {"k": 1} and ctx.nexus is tk


def test_without_ctx_the_function_gets_arguments_only() -> None:
    tk = toolkit([native_tool("one", run=lambda args: repr(args))])
    assert execute(tk, "one", {"a": 1}, {"user_id": "u"}).output == "{'a': 1}"


def test_native_tool_refuses_a_missing_or_uncallable_run() -> None:
    with pytest.raises(TypeError, match="needs run="):
        native_tool("x")
    with pytest.raises(TypeError, match="must be callable"):
        native_tool("x", run="nope")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="input_schema must be a dict"):
        native_tool("x", input_schema=["a"], run=str)  # type: ignore[arg-type]


# -- toolkit, execute, Nexus(tools=) --------------------------------------------------------


def test_toolkit_is_a_nexus_without_installed_plugins() -> None:
    tk = toolkit([native_tool("a", run=lambda x: "")])
    assert isinstance(tk, Nexus)
    assert [t.name for t in tk.tools()] == ["a"]
    assert [p.name for p in tk.plugins() if p.status == "active"] == []


def test_toolkit_goes_through_the_gates() -> None:
    class NoShouting:
        @hookimpl
        def nexus_before_tool_invoke(self, call: ToolCall, tool: ToolDef) -> Veto | None:
            return Veto("no shouting") if tool.name == "upper" else None

    upper = native_tool("upper", run=lambda a: a["text"].upper())
    with toolkit([upper], plugins=[NoShouting()]) as tk:
        result = execute(tk, "upper", {"text": "abc"})
    assert result.vetoed and "no shouting" in result.error


def test_toolkit_validates_arguments_against_the_schema() -> None:
    upper = native_tool("upper", input_schema=UPPER_SCHEMA, run=lambda a: a["text"].upper())
    result = execute(toolkit([upper]), "upper", {"text": 5})
    assert result.error_kind == "invalid_arguments" and "text" in result.error


def test_duplicate_names_in_a_toolkit_name_both_sources() -> None:
    def first(args: dict[str, Any]) -> str:
        return "1"

    @tool(name="first")
    def second() -> str:
        return "2"

    with pytest.raises(ToolRegistrationError) as info:
        toolkit([native_tool("first", run=first), native_tool("other", run=str), second])
    message = str(info.value)
    assert "duplicate tool name 'first'" in message
    assert "tools[0]" in message and "test_native.test_duplicate_names_in_a_toolkit_name_both_sources.<locals>.first" in message
    assert "tools[2]" in message and "<locals>.second" in message


def test_duplicate_names_through_nexus_tools_are_an_error_too() -> None:
    a = native_tool("same", run=lambda x: "a")
    with pytest.raises(ToolRegistrationError, match="duplicate tool name 'same'"):
        Nexus(tools=[a, native_tool("same", run=lambda x: "b")], autoload=False)


def test_nexus_tools_takes_tooldefs_and_tool_functions() -> None:
    @tool
    def double(n: int) -> int:
        return n * 2

    with Nexus(tools=[double, native_tool("upper", run=lambda a: a["text"].upper())], autoload=False) as nx:
        assert nx.invoke("double", {"n": 21}).output == "42"
        assert nx.invoke("upper", {"text": "x"}).output == "X"


def test_execute_takes_ctx_or_context_not_both() -> None:
    tk = toolkit([])
    with pytest.raises(TypeError, match="not both"):
        execute(tk, "x", {}, {"a": 1}, context={"a": 2})


def test_execute_passes_an_answer_and_a_parent_call_id() -> None:
    seen: list[CallContext] = []
    tk = toolkit([native_tool("q", run=lambda _a, ctx: seen.append(ctx), ctx=True)])
    execute(tk, "q", {}, answer="blue", parent_call_id="p-1")
    assert (seen[0].answer, seen[0].parent_call_id) == ("blue", "p-1")


# -- sanitize -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        ("upper", "upper"),
        ("get-weather_2", "get-weather_2"),
        ("mcp.server/read file", "mcp_server_read_file"),
        ("héllo wörld", "h_llo_w_rld"),
        ("a:b@c", "a_b_c"),
        ("", "_"),
        ("x" * 80, "x" * 64),
        ("日本", "__"),
    ],
)
def test_sanitize_makes_any_string_a_valid_tool_name(raw: str, clean: str) -> None:
    assert sanitize(raw) == clean


def test_a_sanitized_name_is_accepted_by_the_registry_and_a_raw_one_is_not() -> None:
    with pytest.raises(ToolRegistrationError, match="sanitize"):
        toolkit([native_tool("read file", run=str)])
    tk = toolkit([native_tool(sanitize("read file"), run=lambda a: "ok")])
    assert execute(tk, "read_file").output == "ok"


# -- @tool: schema inference ----------------------------------------------------------------


def test_tool_makes_a_plain_function_a_tool_in_one_line() -> None:
    @tool
    def upper(text: str) -> str:
        """Uppercase the text."""
        return text.upper()

    assert upper("abc") == "ABC"  # still a plain function
    t = upper.__nexus_tool__
    assert (t.name, t.description) == ("upper", "Uppercase the text.")
    assert t.input_schema == {"type": "object", "properties": {"text": {"type": "string"}},
                              "required": ["text"], "additionalProperties": False}
    assert execute(toolkit([upper]), "upper", {"text": "abc"}).output == "ABC"


def test_primitive_types_and_defaults() -> None:
    @tool
    def f(s: str, i: int, x: float, b: bool, n: int = 3, label: str = "hi", on: bool = True) -> None: ...

    props = schema_of(f)["properties"]
    assert props["s"] == {"type": "string"}
    assert props["i"] == {"type": "integer"}
    assert props["x"] == {"type": "number"}
    assert props["b"] == {"type": "boolean"}
    assert props["n"] == {"type": "integer", "default": 3}
    assert props["label"] == {"type": "string", "default": "hi"}
    assert props["on"] == {"type": "boolean", "default": True}
    assert schema_of(f)["required"] == ["s", "i", "x", "b"]


def test_containers() -> None:
    @tool
    def f(names: list[str], matrix: list[list[int]], table: dict[str, float], anything: dict,
          items: list, pair: tuple[str, int], many: tuple[int, ...], unique: set[str]) -> None: ...

    props = schema_of(f)["properties"]
    assert props["names"] == {"type": "array", "items": {"type": "string"}}
    assert props["matrix"] == {"type": "array", "items": {"type": "array", "items": {"type": "integer"}}}
    assert props["table"] == {"type": "object", "additionalProperties": {"type": "number"}}
    assert props["anything"] == {"type": "object"}
    assert props["items"] == {"type": "array"}
    assert props["pair"] == {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}],
                             "minItems": 2, "maxItems": 2}
    assert props["many"] == {"type": "array", "items": {"type": "integer"}}
    # a set absorbs duplicates, so the schema does not refuse them
    assert props["unique"] == {"type": "array", "items": {"type": "string"}}


def test_optional_and_unions() -> None:
    @tool
    # both spellings of optional, on purpose
    def f(a: Optional[str], b: int | None = None, c: str | int = "x",  # noqa: UP045
          d: Optional[list[str]] = None, e: Literal["x", "y"] | None = None) -> None: ...  # noqa: UP045

    props = schema_of(f)["properties"]
    assert props["a"] == {"type": ["string", "null"]}
    assert props["b"] == {"type": ["integer", "null"], "default": None}
    assert props["c"] == {"anyOf": [{"type": "string"}, {"type": "integer"}], "default": "x"}
    assert props["d"] == {"type": ["array", "null"], "items": {"type": "string"}, "default": None}
    # null must be in the enum, or validation would refuse the None the hint allows
    assert props["e"] == {"enum": ["x", "y", None], "type": ["string", "null"], "default": None}
    assert schema_of(f)["required"] == ["a"]


def test_a_none_default_admits_null_even_without_optional() -> None:
    @tool
    def f(limit: int = None) -> str:  # type: ignore[assignment]  # noqa: RUF013 (on purpose)
        return repr(limit)

    assert schema_of(f)["properties"]["limit"] == {"type": ["integer", "null"], "default": None}
    assert execute(toolkit([f]), "f", {"limit": None}).output == "None"


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


def test_literal_and_enum() -> None:
    @tool
    def f(mode: Literal["fast", "slow"], level: Literal[1, 2, 3], color: Color = Color.RED) -> None: ...

    props = schema_of(f)["properties"]
    assert props["mode"] == {"enum": ["fast", "slow"], "type": "string"}
    assert props["level"] == {"enum": [1, 2, 3], "type": "integer"}
    assert props["color"] == {"enum": ["red", "blue"], "type": "string", "default": "red"}


@attrs.define
class Address:
    street: str
    city: str = "Zurich"
    tags: list[str] = attrs.Factory(list)
    note: str | None = attrs.field(default=None, metadata={"description": "Anything else."})


@attrs.define
class Order:
    item: str
    address: Address
    count: int = 1


def test_attrs_classes_and_their_defaults() -> None:
    @tool
    def ship(order: Order) -> str:
        return f"{order.count} x {order.item} to {order.address.street}, {order.address.city}"

    order = schema_of(ship)["properties"]["order"]
    assert order["required"] == ["item", "address"]
    assert order["properties"]["count"] == {"type": "integer", "default": 1}
    address = order["properties"]["address"]
    assert address == {
        "type": "object",
        "properties": {
            "street": {"type": "string"},
            "city": {"type": "string", "default": "Zurich"},
            "tags": {"type": "array", "items": {"type": "string"}},  # a factory default is not shown
            "note": {"type": ["string", "null"], "description": "Anything else.", "default": None},
        },
        "required": ["street"],
        "additionalProperties": False,
    }
    result = execute(toolkit([ship]), "ship", {"order": {"item": "tea", "address": {"street": "Main 1"}}})
    assert result.output == "1 x tea to Main 1, Zurich"


def test_annotated_gives_a_parameter_its_description() -> None:
    @tool
    def f(city: Annotated[str, "The city, e.g. Paris"], days: Annotated[int, "How many days"] = 1) -> None:
        """Forecast.

        Args:
            city: ignored, Annotated wins
        """

    props = schema_of(f)["properties"]
    assert props["city"] == {"type": "string", "description": "The city, e.g. Paris"}
    assert props["days"] == {"type": "integer", "description": "How many days", "default": 1}


def test_any_and_unannotated_parameters_accept_anything() -> None:
    @tool
    def f(a, b: Any = None) -> str:  # type: ignore[no-untyped-def]
        return repr((a, b))

    assert schema_of(f)["properties"] == {"a": {}, "b": {"default": None}}
    assert execute(toolkit([f]), "f", {"a": [1, {"x": 2}]}).output == "([1, {'x': 2}], None)"


def test_kwargs_allow_extra_keys_and_args_are_left_out() -> None:
    @tool
    def f(a: int, *rest: int, **extra: Any) -> str:
        return repr((a, rest, extra))

    schema = schema_of(f)
    assert list(schema["properties"]) == ["a"] and schema["additionalProperties"] is True
    assert execute(toolkit([f]), "f", {"a": 1, "z": 2}).output == "(1, (), {'z': 2})"


def test_without_kwargs_an_unknown_argument_is_invalid() -> None:
    @tool
    def f(a: int) -> int:
        return a

    result = execute(toolkit([f]), "f", {"a": 1, "b": 2})
    assert result.error_kind == "invalid_arguments" and "b" in result.error and "unknown" in result.error


def test_a_type_that_has_no_json_schema_is_an_error_naming_the_parameter() -> None:
    class Opaque:
        pass

    with pytest.raises(TypeError, match=r"parameter 'thing'.*Opaque"):
        @tool
        def f(thing: Opaque) -> None: ...

    with pytest.raises(TypeError, match=r"parameter 'data'.*bytes"):
        @tool
        def g(data: bytes) -> None: ...

    with pytest.raises(TypeError, match="object keys are strings"):
        schema_for_type(dict[int, str])


def test_a_recursive_attrs_class_is_refused_clearly() -> None:
    @attrs.define
    class Node:
        value: str
        children: list[Node] = attrs.Factory(list)

    with pytest.raises(TypeError, match="contains itself"):
        schema_for_type(Node)


def test_name_description_and_output_schema_can_be_given() -> None:
    @tool(name="shout", description="Say it loudly.", output_schema={"type": "object"})
    def upper(text: str) -> str:
        """Not this."""
        return text.upper()

    t = upper.__nexus_tool__
    assert (t.name, t.description, t.output_schema) == ("shout", "Say it loudly.", {"type": "object"})


def test_an_attrs_return_annotation_is_the_output_schema() -> None:
    @attrs.define
    class Forecast:
        high: float
        low: float

    @tool
    def forecast(city: str) -> Forecast:
        return Forecast(20.5, 11.0)

    assert forecast.__nexus_tool__.output_schema == {
        "type": "object", "properties": {"high": {"type": "number"}, "low": {"type": "number"}},
        "required": ["high", "low"], "additionalProperties": False}
    result = execute(toolkit([forecast]), "forecast", {"city": "Bern"})
    assert result.output_structured == {"high": 20.5, "low": 11.0}

    @tool
    def plain(city: str) -> str:
        return city

    assert plain.__nexus_tool__.output_schema is None


def test_a_lambda_gets_a_valid_name() -> None:
    described = tool(lambda text: text)
    assert described.__nexus_tool__.name == "_lambda_"


# -- @tool: docstrings ----------------------------------------------------------------------


def test_google_docstring() -> None:
    @tool
    def f(text: str, count: int = 1, *, loud: bool = False) -> str:
        """Repeat the text.

        Longer explanation
        over two lines.

        Args:
            text: The text to repeat,
                wrapped onto a second line.
            count (int): How many times.
            loud: Uppercase it first.

        Returns:
            The repeated text.

        Raises:
            ValueError: never.
        """
        return text

    t = f.__nexus_tool__
    assert t.description == "Repeat the text.\n\nLonger explanation\nover two lines."
    props = t.input_schema["properties"]
    assert props["text"]["description"] == "The text to repeat, wrapped onto a second line."
    assert props["count"]["description"] == "How many times."
    assert props["loud"]["description"] == "Uppercase it first."


def test_numpy_docstring() -> None:
    desc, params = parse_docstring(
        """Summary line.

        Parameters
        ----------
        a : int
            The a,
            continued.
        b : str, optional
            The b.

        Returns
        -------
        int
            Something.
        """
    )
    assert desc == "Summary line."
    assert params == {"a": "The a, continued.", "b": "The b."}


def test_sphinx_docstring() -> None:
    desc, params = parse_docstring(
        """Summary line.

        :param a: The a,
            continued.
        :param str b: The b.
        :type a: int
        :returns: nothing
        """
    )
    assert desc == "Summary line."
    assert params == {"a": "The a, continued.", "b": "The b."}


def test_no_docstring_is_an_empty_description() -> None:
    @tool
    def f(a: int) -> int:
        return a

    assert f.__nexus_tool__.description == ""
    assert parse_docstring(None) == ("", {})


# -- @tool: the call context ----------------------------------------------------------------


def test_a_call_context_annotation_receives_the_context() -> None:
    @tool
    def whoami(greeting: str, context: CallContext) -> str:
        return f"{greeting} {context.data['user_id']}"

    t = whoami.__nexus_tool__
    assert t.takes_context and list(t.input_schema["properties"]) == ["greeting"]
    assert execute(toolkit([whoami]), "whoami", {"greeting": "hi"}, {"user_id": "u-42"}).output == "hi u-42"


def test_an_optional_call_context_annotation_counts_too() -> None:
    @tool
    def f(ctx: CallContext | None = None) -> str:
        return ctx.call_id if ctx else "none"

    assert f.__nexus_tool__.takes_context
    assert f() == "none"


def test_a_parameter_named_ctx_receives_the_context() -> None:
    @tool
    def whoami(ctx) -> str:  # type: ignore[no-untyped-def]
        return f"user {ctx.data.get('user_id')}"

    assert whoami.__nexus_tool__.takes_context
    assert execute(toolkit([whoami]), "whoami", {}, {"user_id": "u-42"}).output == "user u-42"


def test_tool_ctx_true_and_false() -> None:
    @tool(ctx=True)
    def a(text: str, ctx: Any) -> str:  # annotated, but ctx=True says it is the context
        return f"{text} {ctx.call_id}"

    assert a.__nexus_tool__.takes_context
    assert execute(toolkit([a]), "a", {"text": "id"}).output.startswith("id call_")

    @tool(ctx=False)
    def b(ctx: str) -> str:  # an ordinary argument that happens to be called ctx
        return ctx

    assert not b.__nexus_tool__.takes_context
    assert execute(toolkit([b]), "b", {"ctx": "plain"}).output == "plain"

    with pytest.raises(TypeError, match="ctx=True, but no parameter"):
        @tool(ctx=True)
        def c(text: str) -> str:
            return text

    with pytest.raises(TypeError, match="annotated CallContext but ctx=False"):
        @tool(ctx=False)
        def d(context: CallContext) -> str:
            return ""


def test_a_ctx_parameter_with_another_annotation_is_an_argument() -> None:
    @tool
    def f(ctx: str) -> str:
        return ctx

    assert not f.__nexus_tool__.takes_context
    assert schema_of(f)["properties"] == {"ctx": {"type": "string"}}


# -- @tool: arguments arrive as the annotated types -----------------------------------------


def test_arguments_are_rebuilt_as_their_annotated_types() -> None:
    seen: dict[str, Any] = {}

    @tool
    def f(x: float, color: Color, pair: tuple[str, int], unique: set[str], addresses: list[Address],
          by_name: dict[str, Address], maybe: Address | None = None, either: int | str = 0) -> None:
        seen.update(locals())

    result = execute(toolkit([f]), "f", {
        "x": 3, "color": "blue", "pair": ["a", 1], "unique": ["a", "a", "b"],
        "addresses": [{"street": "A"}], "by_name": {"home": {"street": "B", "city": "Bern"}},
        "maybe": {"street": "C"}, "either": "s",
    })
    assert not result.is_error, result.error
    assert seen["x"] == 3.0 and isinstance(seen["x"], float)
    assert seen["color"] is Color.BLUE
    assert seen["pair"] == ("a", 1)
    assert seen["unique"] == {"a", "b"}
    assert seen["addresses"] == [Address(street="A")]
    assert seen["by_name"] == {"home": Address(street="B", city="Bern")}
    assert seen["maybe"] == Address(street="C")
    assert seen["either"] == "s"


def test_what_each_argument_needs_is_found_once_per_tool_not_on_every_call(monkeypatch: pytest.MonkeyPatch) -> None:
    from nexus_core import _converter

    looked_up: list[Any] = []
    real = _converter.converter

    class Counting:  # the converter, counting the hooks asked of it
        def get_structure_hook(self, tp: Any) -> Any:
            looked_up.append(tp)
            return real.get_structure_hook(tp)

        def __getattr__(self, name: str) -> Any:
            return getattr(real, name)

    monkeypatch.setattr(_converter, "converter", Counting())
    seen: list[Any] = []

    @tool
    def f(x: float, color: Color, tags: list[str], n: int = 0) -> None:
        seen.append((x, color, tags, n))

    tk = toolkit([f])
    for i in range(3):
        assert not execute(tk, "f", {"x": i, "color": "red", "tags": ["a"], "n": i}).is_error
    assert looked_up == [float, Color]  # str lists and ints arrive as they are: nothing to convert
    assert seen[2] == (2.0, Color.RED, ["a"], 2) and isinstance(seen[2][0], float)


@attrs.frozen
class Quantity:
    amount: int = attrs.field(validator=attrs.validators.gt(0))


def test_an_argument_that_does_not_convert_is_an_invalid_argument_naming_it() -> None:
    import datetime

    @tool
    def when(day: datetime.date) -> str:
        return day.isoformat()

    @tool
    def order(quantity: Quantity) -> int:
        return quantity.amount

    tk = toolkit([when, order])
    bad = execute(tk, "when", {"day": "May 1st"})  # the schema's format says so first
    assert (bad.error_kind, bad.error) == ("invalid_arguments", "invalid arguments for when: day: 'May 1st' is not a 'date'")
    refused = execute(tk, "order", {"quantity": {"amount": 0}})  # the class's own validator
    assert refused.error_kind == "invalid_arguments" and refused.error is not None
    assert refused.error.startswith("invalid arguments: quantity") and "must be > 0" in refused.error
    assert execute(tk, "order", {"quantity": {"amount": 2}}).output_structured == 2


def test_positional_only_parameters_work() -> None:
    @tool
    def f(a: int, b: int = 10, /, c: int = 100) -> int:
        return a + b + c

    tk = toolkit([f])
    assert execute(tk, "f", {"a": 1}).output == "111"
    assert execute(tk, "f", {"a": 1, "b": 2, "c": 3}).output == "6"


def test_a_bound_method_becomes_a_tool() -> None:
    class Counter:
        def __init__(self) -> None:
            self.n = 0

        def add(self, by: int = 1) -> int:
            """Add to the counter."""
            self.n += by
            return self.n

    counter = Counter()
    described = tool(counter.add)
    assert list(schema_of(described)["properties"]) == ["by"]
    tk = toolkit([described])
    assert execute(tk, "add", {"by": 5}).output == "5"
    assert counter.n == 5


def test_a_partial_becomes_a_tool() -> None:
    def greet(greeting: str, name: str) -> str:
        return f"{greeting}, {name}"

    hello = tool(functools.partial(greet, "hello"), name="hello")
    assert list(schema_of(hello)["properties"]) == ["name"]
    assert execute(toolkit([hello]), "hello", {"name": "Ada"}).output == "hello, Ada"


def test_a_plain_function_registers_without_the_decorator() -> None:
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    tk = toolkit([add])
    assert tk.tool("add").description == "Add two numbers."
    assert execute(tk, "add", {"a": 2, "b": 3}).output == "5"


def test_paths_dates_and_uuids_travel_as_strings() -> None:
    import datetime
    import uuid
    from pathlib import Path

    seen: dict[str, Any] = {}

    @tool
    def f(where: Path, when: datetime.date, at: datetime.datetime, ident: uuid.UUID,
          since: datetime.date = datetime.date(2024, 1, 1)) -> None:
        seen.update(locals())

    props = schema_of(f)["properties"]
    assert props["where"] == {"type": "string"}
    assert props["when"] == {"type": "string", "format": "date"}
    assert props["at"] == {"type": "string", "format": "date-time"}
    assert props["ident"] == {"type": "string", "format": "uuid"}
    assert props["since"] == {"type": "string", "format": "date", "default": "2024-01-01"}
    tk = toolkit([f])
    result = execute(tk, "f", {"where": "a/b.txt", "when": "2024-05-01", "at": "2024-05-01T10:30:00+00:00",
                               "ident": "12345678-1234-5678-1234-567812345678"})
    assert not result.is_error, result.error
    assert seen["where"] == Path("a/b.txt")
    assert seen["when"] == datetime.date(2024, 5, 1)
    assert seen["at"] == datetime.datetime(2024, 5, 1, 10, 30, tzinfo=datetime.UTC)
    assert seen["ident"] == uuid.UUID("12345678-1234-5678-1234-567812345678")
    bad = execute(tk, "f", {"where": "x", "when": "May 1st", "at": "2024-05-01T10:30:00+00:00",
                            "ident": "12345678-1234-5678-1234-567812345678"})
    assert bad.is_error and "when" in bad.error


def test_a_duplicate_of_a_tool_function_names_the_function() -> None:
    @tool
    def twin() -> str:
        return "a"

    with pytest.raises(ToolRegistrationError, match=r"tools\[0\] \(ToolDef with handler .*<locals>\.twin\)"):
        toolkit([twin.__nexus_tool__, twin])


# -- typed results from the return annotation (issue 14.4) ----------------------------------


class Span(TypedDict):
    start: int
    end: NotRequired[int]


@dataclasses.dataclass
class Box:
    width: int
    height: int = 1


class Level(enum.Enum):
    LOW = "low"


def test_the_return_annotation_is_the_output_schema_and_the_result_is_that_data() -> None:
    def described(fn: Any) -> ToolDef:
        return tool(fn).__nexus_tool__

    cases: list[tuple[Any, dict[str, Any], str, Any]] = [
        (lambda: 3, {"type": "integer"}, "3", 3),
        (lambda: 1.5, {"type": "number"}, "1.5", 1.5),
        (lambda: True, {"type": "boolean"}, "true", True),
        (lambda: ["a"], {"type": "array", "items": {"type": "string"}}, '["a"]', ["a"]),
        (lambda: {"b", "a"} and {"a"}, {"type": "array", "items": {"type": "string"}}, '["a"]', ["a"]),
        (lambda: Level.LOW, {"enum": ["low"], "type": "string"}, "low", "low"),
        (lambda: datetime.date(2024, 1, 2), {"type": "string", "format": "date"}, "2024-01-02", "2024-01-02"),
        (lambda: {"start": 0}, {"type": "object", "properties": {"start": {"type": "integer"}, "end": {"type": "integer"}},
                                "required": ["start"], "additionalProperties": False}, '{"start": 0}', {"start": 0}),
        (lambda: Box(2), {"type": "object", "properties": {"width": {"type": "integer"},
                                                             "height": {"type": "integer", "default": 1}},
                          "required": ["width"], "additionalProperties": False}, '{"width": 2, "height": 1}',
         {"width": 2, "height": 1}),
    ]
    annotations = [int, float, bool, list[str], set[str], Level, datetime.date, Span, Box]
    def returning(body: Any) -> Any:
        def fn() -> None:
            return body()  # type: ignore[no-any-return]

        return fn

    for (body, schema, text, data), returns in zip(cases, annotations, strict=True):
        fn = returning(body)
        fn.__annotations__ = {"return": returns}
        t = described(fn)
        assert t.output_schema == schema, returns
        result = execute(toolkit([t]), "fn", {})
        assert (result.output, result.output_structured) == (text, data), returns


def test_text_and_shapeless_returns_have_no_output_schema() -> None:
    for returns in (str, dict, "dict[str, Any]", list, "list[Any]", Any, None, ToolResult):
        def fn() -> None:
            return None

        fn.__annotations__ = {"return": returns}
        assert tool(fn).__nexus_tool__.output_schema is None, returns


def test_a_dataclass_argument_is_rebuilt_from_its_json() -> None:
    @tool
    def area(box: Box) -> int:
        assert isinstance(box, Box)
        return box.width * box.height

    assert area.__nexus_tool__.input_schema["properties"]["box"]["required"] == ["width"]
    assert execute(toolkit([area]), "area", {"box": {"width": 3, "height": 2}}).output_structured == 6
