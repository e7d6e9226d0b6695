"""A Python function as a tool: `native_tool` (the schema given) and `@tool` (the schema inferred
from the type hints and the docstring), plus `sanitize`, which makes any string a tool name.

Both build a `ToolDef` and nothing else: a native tool is called through the same invocation path
as every plugin's tool (gates, argument validation, result normalisation).

What an `@tool` function's call must convert is decided once, when the function is described:
which arguments are already what their hints say once the JSON is validated (a `str`, an `int`,
a `list[str]`: passed as they are) and which the cattrs converter must structure (attrs classes,
enums, tuples, sets, dates, a `float` sent as `3`); and whether the return value needs turning
into JSON data (an `int` under `-> int`) or is already what result normalisation reads. The
converter's hooks for those types are found at the tool's first call and kept.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import functools
import inspect
import json
import re
import sys
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, Literal, Union

import attrs

from ._docstrings import parse_docstring
from ._models import CallContext, Exposure, ToolDef, ToolResult
from ._results import structured_result
from ._typeschema import (
    MAPPINGS,
    admits_null,
    json_value,
    nullable,
    resolve_attrs_types,
    schema_for_type,
    split_optional,
    strip_annotated,
)

_INVALID_NAME_CHARS = re.compile(r"[^a-zA-Z0-9_-]")
#: the registry's limit (and OpenAI's and Anthropic's)
MAX_TOOL_NAME = 64
_NONE = type(None)
_UNIONS = (Union, types.UnionType)


def sanitize(name: str) -> str:
    """Any string as a valid tool name: each character outside `[a-zA-Z0-9_-]` becomes `_`, the
    result is cut to 64 characters, and an empty string becomes `_`.

    Use it wherever a name comes from outside the code (user data, another server's tool list).
    """
    return _INVALID_NAME_CHARS.sub("_", str(name))[:MAX_TOOL_NAME] or "_"


def native_tool(
    name: str,
    description: str | None = "",
    input_schema: dict[str, Any] | None = None,
    run: Callable[..., Any] | None = None,
    ctx: bool = False,
    *,
    output_schema: dict[str, Any] | None = None,
    exposure: Exposure = "both",
) -> ToolDef:
    """A tool from a name, a description, a JSON Schema and a function.

    `run(arguments)` is called with the arguments dict, or `run(arguments, ctx)` with a
    `CallContext` when `ctx` is true. Whatever it returns becomes the result (see
    `normalize_result`: a dict with an `output` key is a result of its own, toolnexus's rule);
    a raise becomes an error result. `description` defaults to "" and `input_schema` to
    `{"type": "object"}`. `exposure`: see `ToolDef.exposure`.
    """
    if run is None:
        raise TypeError(f"native_tool({name!r}) needs run=, the function that does the work")
    if not callable(run):
        raise TypeError(f"native_tool({name!r}): run must be callable, got {type(run).__name__}")
    if input_schema is not None and not isinstance(input_schema, dict):
        raise TypeError(f"native_tool({name!r}): input_schema must be a dict (a JSON Schema)")
    return ToolDef(
        name=name,
        handler=run,
        description=description or "",
        input_schema=input_schema if input_schema is not None else {"type": "object"},
        output_schema=output_schema,
        exposure=exposure,
        takes_context=bool(ctx),
    )


# -- reading the function -------------------------------------------------------------------


def _is_context_hint(hint: Any) -> bool:
    hint, _ = strip_annotated(hint)
    _, inner = split_optional(hint)
    return inner is CallContext


def _context_param(sig: inspect.Signature, hints: dict[str, Any], ctx: bool | None, where: str) -> str | None:
    """Which parameter receives the CallContext: one annotated `CallContext`, else (unless
    `ctx=False`) one named `ctx` without another annotation; `ctx=True` also accepts `ctx`
    whatever its annotation, and requires one of them."""
    annotated = [n for n in sig.parameters if _is_context_hint(hints.get(n))]
    if len(annotated) > 1:
        raise TypeError(f"@tool {where}: more than one parameter is annotated CallContext: {annotated}")
    if annotated:
        if ctx is False:
            raise TypeError(f"@tool {where}: parameter {annotated[0]!r} is annotated CallContext but ctx=False")
        return annotated[0]
    if "ctx" in sig.parameters and (ctx is True or (ctx is None and "ctx" not in hints)):
        return "ctx"
    if ctx is True:
        raise TypeError(f"@tool {where}: ctx=True, but no parameter is named ctx or annotated CallContext")
    return None


def _caller_locals() -> dict[str, Any]:
    """The local names of the code that applied `@tool` (the first frame outside nexus_core),
    so that string annotations naming classes defined in a function resolve."""
    frame: types.FrameType | None = sys._getframe(1)
    while frame is not None and str(frame.f_globals.get("__name__", "")).split(".")[0] == "nexus_core":
        frame = frame.f_back
    return dict(frame.f_locals) if frame is not None else {}


def _type_hints(func: Callable[..., Any], localns: Mapping[str, Any]) -> dict[str, Any]:
    """The resolved type hints of a function, a `functools.partial` or a callable object."""
    call_method = type(func).__call__ if not inspect.isroutine(func) else None  # a callable object
    candidates = (func, getattr(func, "func", None), call_method)
    for candidate in candidates:
        if candidate is None:
            continue
        try:
            return typing.get_type_hints(candidate, include_extras=True)
        except NameError:
            # a name local to the defining function: resolve with that function's locals
            return typing.get_type_hints(candidate, localns=dict(localns), include_extras=True)
        except TypeError:
            continue  # not a function: try what it wraps
    return {}


def _tool_name(func: Callable[..., Any]) -> str:
    raw = getattr(func, "__name__", None) or type(func).__name__
    return sanitize(raw)


# -- conversions, decided once per tool -----------------------------------------------------

#: hints whose validated JSON value is already of that type
_AS_JSON: frozenset[Any] = frozenset({Any, object, inspect.Parameter.empty, None, _NONE, str, int, bool})
_JSON_CONTAINERS = (list, dict, collections.abc.Sequence, collections.abc.MutableSequence, *MAPPINGS)


def _arrives_as_is(hint: Any) -> bool:
    """Whether a JSON value the schema of `hint` accepts is already what `hint` names, so the
    argument needs no converting: str, int, bool, Any, JSON literals, and lists, dicts and
    unions of those. A float (JSON's `3`), an enum, a tuple, a set, a date or a class does not."""
    hint, _ = strip_annotated(hint)
    if hint in _AS_JSON:
        return True
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is Literal:
        return all(type(a) in (str, int, bool, _NONE) for a in args)
    if origin in _UNIONS:
        return all(_arrives_as_is(a) for a in args)
    if hint in _JSON_CONTAINERS or origin in _JSON_CONTAINERS:
        return all(_arrives_as_is(a) for a in args)
    return False


class _BadArgument(Exception):
    """An argument the validated JSON could not be made into the type its hint names."""


class _Structure:
    """Structures one argument as its hint's type with the converter's hook, found at the first
    call (so describing a tool imports no cattrs) and kept."""

    __slots__ = ("_errors", "_hint", "_hook", "_path")

    def __init__(self, hint: Any, path: str) -> None:
        self._hint = strip_annotated(hint)[0]
        self._path = path
        self._hook: Callable[[Any, Any], Any] | None = None
        self._errors: tuple[type[BaseException], ...] = ()

    def __call__(self, value: Any) -> Any:
        hook = self._hook
        if hook is None:
            from ._converter import STRUCTURE_ERRORS, converter

            self._hook = hook = converter.get_structure_hook(self._hint)
            self._errors = STRUCTURE_ERRORS
        try:
            return hook(value, self._hint)
        except self._errors as exc:
            from ._converter import explain_structure_error

            raise _BadArgument(explain_structure_error(exc, self._hint, self._path)) from None


def _scalar_types(hint: Any) -> bool:
    """Whether `hint` names JSON scalars only (int, float, bool, None, or a union of them),
    which result normalisation writes as data for a tool with an output schema."""
    hint, _ = strip_annotated(hint)
    if hint in (int, float, bool, None, _NONE):
        return True
    return typing.get_origin(hint) in _UNIONS and all(_scalar_types(a) for a in typing.get_args(hint))


def _typed_result(value: Any) -> Any:
    """A value of a tool whose output schema came from its return annotation, as a result: a
    value that result normalisation would only `str()` (an int, a bool, a set, an enum, a date)
    goes as JSON data in `output_structured`, its JSON (or the string itself) in `output`, so
    a run_code binding gets back the type the annotation names. Other values pass on as they are."""
    if value is None or isinstance(value, (ToolResult, str, dict, list, tuple)) or attrs.has(type(value)) \
            or (dataclasses.is_dataclass(value) and not isinstance(value, type)):
        return value
    ok, plain = json_value(value)
    if not ok:
        return value
    text = plain if isinstance(plain, str) else json.dumps(plain, ensure_ascii=False)
    return ToolResult(id="", name="", output=text, output_structured=plain)


def _admits_dict(hint: Any) -> bool:
    hint, _ = strip_annotated(hint)
    if typing.get_origin(hint) in _UNIONS:
        return any(_admits_dict(a) for a in typing.get_args(hint))
    return hint in MAPPINGS or typing.get_origin(hint) in MAPPINGS or typing.is_typeddict(hint)


def _data_not_result_map(value: Any) -> Any:
    # a function that declares what it returns returns data: a dict of it with an `output` key
    # is JSON, not the result map a native tool's handler may return (see normalize_result)
    return structured_result(value) if type(value) is dict and "output" in value else value


def _result_step(hint: Any, inferred: bool) -> Callable[[Any], Any] | None:
    """What a call does with the function's return value before result normalisation, decided
    from the return annotation: None when normalisation already makes the right result."""
    bare, _ = strip_annotated(hint)
    if _admits_dict(bare):
        return _data_not_result_map
    if not inferred:
        return None
    if _scalar_types(bare):
        return None  # normalisation writes an int as data for a tool with an output schema
    origin = typing.get_origin(bare)
    if bare in (list, tuple) or origin in (list, tuple, collections.abc.Sequence) or (
            isinstance(bare, type) and (attrs.has(bare) or dataclasses.is_dataclass(bare))):
        return None  # normalisation writes these as JSON data already
    return _typed_result


def _output_schema(hint: Any, localns: Mapping[str, Any]) -> dict[str, Any] | None:
    """The output schema a return annotation gives: any type `schema_for_type` describes but
    text (`-> str`: the output is the text), None, Any and a bare dict (no shape to promise),
    and what a handler returns to say more than a value (a ToolResult, content blocks)."""
    hint, _ = strip_annotated(hint)
    if hint is Any or hint is inspect.Parameter.empty or hint is None or hint is _NONE or hint is object:
        return None
    if hint is str or (isinstance(hint, type) and issubclass(hint, (str, ToolResult))):
        return None
    if hint in MAPPINGS or (typing.get_origin(hint) in MAPPINGS and len(typing.get_args(hint)) == 2
                            and typing.get_args(hint)[1] is Any):
        return None
    from ._content import CONTENT_TYPES

    if isinstance(hint, type) and issubclass(hint, CONTENT_TYPES):
        return None
    try:
        schema = schema_for_type(hint, localns=localns)
    except TypeError:
        return None  # a type JSON Schema cannot say: the tool returns text, as before
    if not schema or (set(schema) <= {"type", "items", "additionalProperties"} and schema.get("type") in ("array", "object")
                      and not schema.get("items") and not schema.get("additionalProperties")):
        return None  # `-> list[Any]` says nothing a binding could use (and content blocks are lists)
    return schema


def _make_handler(target: Callable[..., Any], structure: dict[str, _Structure], ctx_name: str | None,
                  positional_only: list[inspect.Parameter], finish: Callable[[Any], Any] | None) -> Callable[..., Any]:
    """The ToolDef's handler: the arguments made into their types, the function called, its
    value turned into a result's; the plainest function that does what this tool needs."""
    converting = tuple(structure.items())
    if not converting and ctx_name is None and not positional_only:
        if finish is None:
            return lambda arguments: target(**arguments)
        return lambda arguments: finish(target(**arguments))

    def handler(arguments: Mapping[str, Any], ctx: CallContext | None = None) -> Any:
        values = dict(arguments)
        try:
            for key, structure_as in converting:
                value = values.get(key)
                if value is not None:  # None is None whatever the hint (`x: int = None`)
                    values[key] = structure_as(value)
        except _BadArgument as exc:
            message = f"invalid arguments: {exc}"
            return ToolResult(id="", name="", output=message, error=message, error_kind="invalid_arguments")
        if ctx_name is not None:
            values[ctx_name] = ctx
        args = []
        for param in positional_only:
            if param.name in values:
                args.append(values.pop(param.name))
            elif param.default is not inspect.Parameter.empty:
                args.append(param.default)
            else:
                break  # the call below raises TypeError naming the missing argument
        returned = target(*args, **values)
        return finish(returned) if finish is not None else returned

    return handler


def tool(
    fn: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    output_schema: dict[str, Any] | None = None,
    ctx: bool | None = None,
    exposure: Exposure = "both",
) -> Any:
    """Describe a plain function as a tool, its input schema inferred from its type hints and
    its description and parameter texts from its docstring. The function stays callable as
    before; `nx.register(fn)`, `Nexus(tools=[fn])` or `toolkit([fn])` makes it a tool.

        @tool
        def upper(text: str) -> str:
            "Uppercase the text."
            return text.upper()

    A parameter annotated `CallContext`, or named `ctx`, receives the call context instead of
    an argument (`ctx=True` insists on one; `ctx=False` makes a `ctx` parameter an ordinary
    argument). The return annotation becomes the output schema unless `output_schema=` is
    given (`-> int`, `-> list[str]`, a TypedDict, a dataclass, an attrs class...; not `-> str`,
    whose output is the text, nor `-> dict` or `-> Any`): a run_code binding then returns that
    type. A function with a declared return type returns data: a dict it returns is JSON, even
    one with an `output` key. `exposure`: see `ToolDef.exposure`.
    """

    def describe(func: Callable[..., Any]) -> Callable[..., Any]:
        target = func
        where = getattr(func, "__qualname__", None) or repr(func)
        if not callable(func):
            raise TypeError(f"@tool needs a function, got {type(func).__name__}")
        localns = _caller_locals()
        try:
            sig = inspect.signature(func)
            hints = _type_hints(func, localns)
        except (NameError, TypeError, ValueError) as exc:
            raise TypeError(f"@tool {where}: cannot read its signature or type hints: {exc}") from None
        doc_desc, doc_params = parse_docstring(inspect.getdoc(func))
        ctx_name = _context_param(sig, hints, ctx, where)
        props: dict[str, Any] = {}
        required: list[str] = []
        structure: dict[str, _Structure] = {}
        positional_only: list[inspect.Parameter] = []
        for pname, param in sig.parameters.items():
            if param.kind == param.POSITIONAL_ONLY:
                positional_only.append(param)
            if pname == ctx_name or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                continue
            hint = hints.get(pname, Any)
            try:
                schema = dict(schema_for_type(hint, localns=localns))
            except TypeError as exc:
                raise TypeError(f"@tool {where}: parameter {pname!r}: {exc}") from None
            if pname in doc_params and doc_params[pname] and "description" not in schema:
                schema["description"] = doc_params[pname]
            if param.default is inspect.Parameter.empty:
                required.append(pname)
            else:
                if param.default is None and not admits_null(schema):
                    # `x: int = None` is written to accept None: let the model send null too
                    schema = nullable(schema)
                ok, value = json_value(param.default)
                if ok:
                    schema["default"] = value
            props[pname] = schema
            if not _arrives_as_is(hint):
                resolve_attrs_types(hint, localns)
                structure[pname] = _Structure(hint, pname)
        input_schema: dict[str, Any] = {"type": "object", "properties": props}
        if required:
            input_schema["required"] = required
        input_schema["additionalProperties"] = any(p.kind == p.VAR_KEYWORD for p in sig.parameters.values())

        out_schema = output_schema
        inferred = False
        returns = hints.get("return", Any)
        if out_schema is None:
            out_schema = _output_schema(returns, localns)
            inferred = out_schema is not None

        handler = _make_handler(target, structure, ctx_name, positional_only, _result_step(returns, inferred))
        handler.__nexus_source__ = target  # type: ignore[attr-defined]  # for error messages
        tooldef = ToolDef(
            name=name if name is not None else _tool_name(func),
            handler=handler,
            description=description if description is not None else doc_desc,
            input_schema=input_schema,
            output_schema=out_schema,
            takes_context=ctx_name is not None,
            exposure=exposure,
        )
        try:
            func.__nexus_tool__ = tooldef  # type: ignore[attr-defined]
            return func
        except AttributeError:
            # a bound method or builtin takes no attributes: hand back a wrapper that does
            @functools.wraps(func)
            def wrapper(*a: Any, **kw: Any) -> Any:
                return target(*a, **kw)

            wrapper.__nexus_tool__ = tooldef  # type: ignore[attr-defined]
            return wrapper

    return describe(fn) if fn is not None else describe
