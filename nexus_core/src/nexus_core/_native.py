"""Native tools: a Python function as a tool, with the schema given (`native_tool`) or inferred
from its type hints and docstring (`@tool`)."""

from __future__ import annotations

import enum
import inspect
import re
import types
import typing
from collections.abc import Callable
from typing import Any, Literal, Union

import attrs

from ._models import CallContext, ToolDef

_PRIMITIVES: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}
_INVALID_NAME_CHARS = re.compile(r"[^a-zA-Z0-9_-]")


def sanitize(name: str) -> str:
    """Any string as a valid tool name: characters outside `[a-zA-Z0-9_-]` become `_`,
    cut to 64 characters; an empty string becomes `_`."""
    return _INVALID_NAME_CHARS.sub("_", name)[:64] or "_"


def native_tool(
    name: str,
    description: str = "",
    input_schema: dict[str, Any] | None = None,
    run: Callable[..., Any] | None = None,
    ctx: bool = False,
    *,
    output_schema: dict[str, Any] | None = None,
) -> ToolDef:
    """A tool from a name, a description, a JSON Schema and a function.

    `run(arguments)` is called with the arguments dict, or `run(arguments, ctx)` when `ctx` is
    true. Whatever it returns becomes the result (see `normalize_result`); a raise becomes an
    error result. `description` defaults to "" and `input_schema` to `{"type": "object"}`.
    """
    if run is None:
        raise TypeError(f"native_tool({name!r}) needs run=, the function that does the work")
    return ToolDef(
        name=name,
        handler=run,
        description=description or "",
        input_schema=input_schema if input_schema is not None else {"type": "object"},
        output_schema=output_schema,
        takes_context=ctx,
    )


# -- schema inference -----------------------------------------------------------------------


def _is_optional(tp: Any) -> tuple[bool, Any]:
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) < len(typing.get_args(tp)):
            return True, (args[0] if len(args) == 1 else Union[tuple(args)])  # noqa: UP007
    return False, tp


def schema_for_type(tp: Any) -> dict[str, Any]:
    """The JSON Schema of a Python type hint (str, int, float, bool, list[...], dict[...],
    Optional, Literal, Enum, attrs classes, Any)."""
    if tp is Any or tp is inspect.Parameter.empty or tp is object:
        return {}
    optional, inner = _is_optional(tp)
    if optional:
        schema = schema_for_type(inner)
        if "type" in schema and isinstance(schema["type"], str):
            return {**schema, "type": [schema["type"], "null"]}
        return {"anyOf": [schema, {"type": "null"}]}
    if tp in _PRIMITIVES:
        return {"type": _PRIMITIVES[tp]}
    if tp is type(None):
        return {"type": "null"}
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is Literal:
        values = list(args)
        kinds = {_PRIMITIVES.get(type(v)) for v in values}
        schema: dict[str, Any] = {"enum": values}
        if len(kinds) == 1 and None not in kinds:
            schema["type"] = kinds.pop()
        return schema
    if origin in (Union, types.UnionType):
        return {"anyOf": [schema_for_type(a) for a in args]}
    if tp in (list, tuple, set, frozenset) or origin in (list, tuple, set, frozenset, typing.Sequence):
        schema = {"type": "array"}
        if args and not (origin is tuple and len(args) == 2 and args[1] is Ellipsis and False):
            schema["items"] = schema_for_type(args[0])
        return schema
    if tp is dict or origin is dict or origin is typing.Mapping:
        schema = {"type": "object"}
        if len(args) == 2 and args[1] is not Any:
            schema["additionalProperties"] = schema_for_type(args[1])
        return schema
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return {"enum": [m.value for m in tp]}
    if isinstance(tp, type) and attrs.has(tp):
        return _attrs_schema(tp)
    raise TypeError(f"cannot describe type {tp!r} as JSON Schema")


def _attrs_schema(cls: type) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    props: dict[str, Any] = {}
    required: list[str] = []
    for field in attrs.fields(cls):
        if not field.init:
            continue
        key = field.alias or field.name
        sub = schema_for_type(hints.get(field.name, field.type or Any))
        if field.default is attrs.NOTHING:
            required.append(key)
        elif not isinstance(field.default, attrs.Factory):  # type: ignore[arg-type]
            sub = {**sub, "default": field.default}
        props[key] = sub
    schema: dict[str, Any] = {"type": "object", "properties": props}
    if required:
        schema["required"] = required
    return schema


_GOOGLE_ARG = re.compile(r"^\s{2,}(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
_SPHINX_ARG = re.compile(r"^\s*:param\s+(?:\S+\s+)?(\w+)\s*:\s*(.*)$")


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """(description, {param: text}) from a docstring in Google (`Args:`) or Sphinx (`:param:`)
    style. The description is everything before the parameter section."""
    if not doc:
        return "", {}
    lines = inspect.cleandoc(doc).splitlines()
    desc: list[str] = []
    params: dict[str, str] = {}
    current: str | None = None
    in_args = False
    for line in lines:
        stripped = line.strip()
        if stripped.lower() in ("args:", "arguments:", "parameters:", "params:"):
            in_args, current = True, None
            continue
        sphinx = _SPHINX_ARG.match(line)
        if sphinx:
            current = sphinx.group(1)
            params[current] = sphinx.group(2).strip()
            continue
        if in_args:
            google = _GOOGLE_ARG.match("  " + line if not line.startswith(" ") else line)
            if stripped.endswith(":") and not line.startswith(" "):
                in_args, current = False, None  # e.g. "Returns:" ends the section
                continue
            if google and (line.startswith(" ") or not current):
                current = google.group(1).lstrip("*")
                params[current] = google.group(2).strip()
                continue
            if current and stripped:
                params[current] += " " + stripped
                continue
            if not stripped:
                continue
        if stripped.startswith(":") or (stripped.endswith(":") and stripped[:-1].isalpha() and desc):
            current = None
            in_args = stripped.lower() in ("args:", "arguments:")
            continue
        if current is None and not in_args:
            desc.append(line)
    return "\n".join(desc).strip(), params


def _context_param(sig: inspect.Signature, hints: dict[str, Any]) -> str | None:
    for name, param in sig.parameters.items():
        if hints.get(name) is CallContext or (name == "ctx" and param.annotation is inspect.Parameter.empty):
            return name
    return None


def tool(
    fn: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    output_schema: dict[str, Any] | None = None,
) -> Any:
    """Describe a plain function as a tool, its input schema inferred from its type hints and
    docstring. The function stays callable as before; `register(fn)` or `Nexus(tools=[fn])`
    makes it a tool. A parameter annotated `CallContext` (or named `ctx`) receives the call
    context instead of an argument.

        @tool
        def upper(text: str) -> str:
            "Uppercase the text."
            return text.upper()
    """

    def describe(func: Callable[..., Any]) -> Callable[..., Any]:
        sig = inspect.signature(func)
        hints = typing.get_type_hints(func)
        doc_desc, doc_params = parse_docstring(func.__doc__)
        ctx_name = _context_param(sig, hints)
        props: dict[str, Any] = {}
        required: list[str] = []
        converters: dict[str, Any] = {}
        for pname, param in sig.parameters.items():
            if pname == ctx_name:
                continue
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                continue
            hint = hints.get(pname, Any)
            try:
                schema = dict(schema_for_type(hint))
            except TypeError as exc:
                raise TypeError(f"@tool {func.__qualname__}: parameter {pname!r}: {exc}") from None
            if pname in doc_params:
                schema["description"] = doc_params[pname]
            if param.default is inspect.Parameter.empty:
                required.append(pname)
            elif param.default is not None or "default" not in schema:
                if _jsonable(param.default):
                    schema["default"] = param.default
            props[pname] = schema
            converters[pname] = _converter_for(hint)
        input_schema: dict[str, Any] = {"type": "object", "properties": props}
        if required:
            input_schema["required"] = required
        input_schema["additionalProperties"] = any(
            p.kind == p.VAR_KEYWORD for p in sig.parameters.values()
        )

        def handler(arguments: dict[str, Any], ctx: CallContext | None = None) -> Any:
            kwargs = {k: converters[k](v) if k in converters else v for k, v in arguments.items()}
            if ctx_name is not None:
                kwargs[ctx_name] = ctx
            return func(**kwargs)

        tooldef = ToolDef(
            name=name or func.__name__,
            handler=handler,
            description=description if description is not None else doc_desc,
            input_schema=input_schema,
            output_schema=output_schema,
            takes_context=ctx_name is not None,
        )
        func.__nexus_tool__ = tooldef  # type: ignore[attr-defined]
        return func

    return describe(fn) if fn is not None else describe


def _jsonable(value: Any) -> bool:
    return isinstance(value, (str, int, float, bool, type(None), list, dict))


def _converter_for(hint: Any) -> Callable[[Any], Any]:
    """Arguments arrive as JSON; attrs classes and enums are rebuilt from it."""
    _, inner = _is_optional(hint)
    if (isinstance(inner, type) and (attrs.has(inner) or issubclass(inner, enum.Enum))) or typing.get_args(inner):
        from ._converter import converter

        def convert(value: Any) -> Any:
            if value is None:
                return None
            try:
                return converter.structure(value, hint)
            except Exception:
                return value

        return convert
    return lambda v: v
