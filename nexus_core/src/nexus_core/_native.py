"""Native tools: a Python function as a tool, with the schema given (`native_tool`) or inferred
from its type hints and docstring (`@tool`); plus `toolkit` / `execute`, a set of tools used
without any plugin, and `sanitize`, which makes any string a valid tool name.

Everything here builds `ToolDef`s and hands them to a `Nexus`: there is no second way to call a
tool, so gates, argument validation and result normalisation apply to native tools as well.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import datetime
import enum
import functools
import inspect
import json
import pathlib
import re
import sys
import types
import typing
import uuid
import weakref
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Annotated, Any, Literal, Union

import attrs

from ._models import CallContext, Exposure, ToolDef, ToolResult

if TYPE_CHECKING:
    from ._nexus import Nexus

_PRIMITIVES: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}
_INVALID_NAME_CHARS = re.compile(r"[^a-zA-Z0-9_-]")
#: the registry's limit (and OpenAI's and Anthropic's)
MAX_TOOL_NAME = 64
_NONE = type(None)
_SEQUENCES = (list, tuple, set, frozenset, collections.abc.Sequence, collections.abc.MutableSequence,
              collections.abc.Set, collections.abc.MutableSet, collections.abc.Iterable,
              collections.abc.Collection)
_MAPPINGS = (dict, collections.abc.Mapping, collections.abc.MutableMapping)
# types that travel as JSON strings, with the JSON Schema format that says so (None: no format);
# datetime comes before date, its base class
_STRING_TYPES: tuple[tuple[type, str | None], ...] = (
    (datetime.datetime, "date-time"), (datetime.date, "date"), (datetime.time, "time"),
    (uuid.UUID, "uuid"), (pathlib.PurePath, None),
)


def _string_type(tp: Any) -> tuple[type, str | None] | None:
    if isinstance(tp, type):
        for cls, fmt in _STRING_TYPES:
            if issubclass(tp, cls):
                return cls, fmt
    return None


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
    `normalize_result`); a raise becomes an error result. `description` defaults to "" and
    `input_schema` to `{"type": "object"}`. `exposure`: see `ToolDef.exposure`.
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


# -- schema inference -----------------------------------------------------------------------


def _strip_annotated(tp: Any) -> tuple[Any, str | None]:
    """`Annotated[T, "text", ...]` as (T, "text"); anything else as (tp, None)."""
    if typing.get_origin(tp) is Annotated:
        inner, *extras = typing.get_args(tp)
        text = next((e for e in extras if isinstance(e, str)), None)
        return inner, text
    return tp, None


def _split_optional(tp: Any) -> tuple[bool, Any]:
    """(True, T) for `T | None` / `Optional[T]`; (False, tp) otherwise."""
    if typing.get_origin(tp) in (Union, types.UnionType):
        args = typing.get_args(tp)
        rest = [a for a in args if a is not _NONE]
        if len(rest) < len(args):
            return True, (rest[0] if len(rest) == 1 else Union[tuple(rest)])  # noqa: UP007
    return False, tp


def _json_kind(values: Iterable[Any]) -> str | None:
    """The one JSON type of all `values` (for an enum's `type`), or None when they are mixed."""
    kinds = {_PRIMITIVES.get(type(v)) for v in values}
    if kinds == {"integer", "number"}:
        return "number"
    return kinds.pop() if len(kinds) == 1 and None not in kinds else None


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` that also admits null."""
    if _admits_null(schema):
        return schema
    if "enum" in schema:
        out = {**schema, "enum": [*schema["enum"], None]} if None not in schema["enum"] else dict(schema)
        if isinstance(out.get("type"), str):
            out["type"] = [out["type"], "null"]
        return out
    if isinstance(schema.get("type"), str) and set(schema) <= {"type", "items", "additionalProperties",
                                                               "description", "default"}:
        return {**schema, "type": [schema["type"], "null"]}
    return {"anyOf": [schema, {"type": "null"}]}


def _admits_null(schema: dict[str, Any]) -> bool:
    kind = schema.get("type")
    if not {"type", "enum", "const", "anyOf", "oneOf", "allOf"} & set(schema):
        return True  # no constraint on the value's type: null is fine
    if kind == "null" or (isinstance(kind, list) and "null" in kind):
        return True
    if None in schema.get("enum", ()):
        return True
    return any(_admits_null(s) for s in schema.get("anyOf", ()) if isinstance(s, dict))


def schema_for_type(tp: Any, _seen: tuple[type, ...] = (), localns: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The JSON Schema of a Python type hint: str, int, float, bool, None, list/tuple/set[...],
    dict[str, ...], Optional / unions, Literal, Enum, attrs classes, Annotated[T, "description"]
    and Any. Raises TypeError for a type it cannot describe. `localns` resolves string hints of
    attrs classes defined inside a function."""
    tp, text = _strip_annotated(tp)
    schema = _schema_for(tp, _seen, localns)
    if text:
        schema = {**schema, "description": text}
    return schema


def _schema_for(tp: Any, seen: tuple[type, ...], localns: Mapping[str, Any] | None) -> dict[str, Any]:
    if tp is Any or tp is inspect.Parameter.empty or tp is object:
        return {}
    if tp is None or tp is _NONE:
        return {"type": "null"}
    optional, inner = _split_optional(tp)
    if optional:
        return _nullable(schema_for_type(inner, seen, localns))
    if tp in _PRIMITIVES:
        return {"type": _PRIMITIVES[tp]}
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is Literal:
        values = list(args)
        schema: dict[str, Any] = {"enum": values}
        kind = _json_kind(values)
        if kind:
            schema["type"] = kind
        return schema
    if origin in (Union, types.UnionType):
        return {"anyOf": [schema_for_type(a, seen, localns) for a in args]}
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        values = [m.value for m in tp]
        schema = {"enum": values}
        kind = _json_kind(values)
        if kind:
            schema["type"] = kind
        return schema
    if tp in (bytes, bytearray):
        raise TypeError(f"cannot describe type {tp!r} as JSON Schema (JSON has no bytes; use str)")
    if tp is str or (isinstance(tp, type) and issubclass(tp, str)):
        return {"type": "string"}
    as_string = _string_type(tp)
    if as_string is not None:
        return {"type": "string", "format": as_string[1]} if as_string[1] else {"type": "string"}
    if tp in _MAPPINGS or origin in _MAPPINGS:
        schema = {"type": "object"}
        if len(args) == 2:
            if args[0] is not str and _strip_annotated(args[0])[0] is not str:
                raise TypeError(f"cannot describe {tp!r} as JSON Schema: JSON object keys are strings")
            if args[1] is not Any:
                schema["additionalProperties"] = schema_for_type(args[1], seen, localns)
        return schema
    if origin is tuple or tp is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return {"type": "array", "items": schema_for_type(args[0], seen, localns)}
        if args and args != ((),):
            items = [schema_for_type(a, seen, localns) for a in args]
            return {"type": "array", "prefixItems": items, "minItems": len(items), "maxItems": len(items)}
        return {"type": "array"}
    if tp in _SEQUENCES or origin in _SEQUENCES:
        # a set is a plain array: it absorbs duplicates, so refusing them would only cost a retry
        schema = {"type": "array"}
        if args:
            schema["items"] = schema_for_type(args[0], seen, localns)
        return schema
    if isinstance(tp, type) and (attrs.has(tp) or dataclasses.is_dataclass(tp) or typing.is_typeddict(tp)):
        if tp in seen:
            raise TypeError(f"cannot describe {tp.__qualname__} as JSON Schema: it contains itself")
        if attrs.has(tp):
            return _attrs_schema(tp, (*seen, tp), localns)
        if dataclasses.is_dataclass(tp):
            return _dataclass_schema(tp, (*seen, tp), localns)
        return _typeddict_schema(tp, (*seen, tp), localns)
    raise TypeError(f"cannot describe type {tp!r} as JSON Schema")


_ATTRS_HINTS: weakref.WeakKeyDictionary[type, dict[str, Any]] = weakref.WeakKeyDictionary()


def _attrs_hints(cls: type, localns: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The resolved field hints of an attrs class, cached: schema inference resolves them (with
    the defining scope's names when the class is local) and argument rebuilding reuses them."""
    hints = _ATTRS_HINTS.get(cls)
    if hints is None:
        names = {**(localns or {}), cls.__name__: cls}  # a class may name itself
        try:
            hints = typing.get_type_hints(cls, localns=names, include_extras=True)
        except NameError as exc:
            raise TypeError(f"cannot resolve the type hints of {cls.__qualname__}: {exc}") from None
        _ATTRS_HINTS[cls] = hints
    return hints


def _attrs_schema(cls: type, seen: tuple[type, ...], localns: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """An object schema from an attrs class: one property per init field (by its alias), required
    unless it has a default; a field's `metadata={"description": ...}` becomes its description."""
    hints = _attrs_hints(cls, localns)
    props: dict[str, Any] = {}
    required: list[str] = []
    for field in attrs.fields(cls):
        if not field.init:
            continue
        key = field.alias or field.name
        sub = schema_for_type(hints.get(field.name, field.type or Any), seen, localns)
        note = field.metadata.get("description")
        if isinstance(note, str):
            sub = {**sub, "description": note}
        if field.default is attrs.NOTHING:
            required.append(key)
        elif not isinstance(field.default, attrs.Factory):  # type: ignore[arg-type]
            ok, value = _json_value(field.default)
            if ok:
                sub = {**sub, "default": value}
        props[key] = sub
    schema: dict[str, Any] = {"type": "object", "properties": props}
    if required:
        schema["required"] = required
    # the class's __init__ rejects unknown keys anyway; saying so lets validation name them
    schema["additionalProperties"] = False
    return schema


def _class_hints(cls: type, localns: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The resolved field hints of a dataclass or TypedDict (with the defining scope's names)."""
    names = {**(localns or {}), cls.__name__: cls}
    try:
        return typing.get_type_hints(cls, localns=names, include_extras=True)
    except NameError as exc:
        raise TypeError(f"cannot resolve the type hints of {cls.__qualname__}: {exc}") from None


def _dataclass_schema(cls: type, seen: tuple[type, ...], localns: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """An object schema from a dataclass: one property per init field, required unless it has
    a default; `metadata={"description": ...}` becomes its description."""
    hints = _class_hints(cls, localns)
    props: dict[str, Any] = {}
    required: list[str] = []
    for field in dataclasses.fields(cls):
        if not field.init:
            continue
        sub = schema_for_type(hints.get(field.name, Any), seen, localns)
        note = field.metadata.get("description")
        if isinstance(note, str):
            sub = {**sub, "description": note}
        if field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            required.append(field.name)
        elif field.default is not dataclasses.MISSING:
            ok, value = _json_value(field.default)
            if ok:
                sub = {**sub, "default": value}
        props[field.name] = sub
    schema: dict[str, Any] = {"type": "object", "properties": props}
    if required:
        schema["required"] = required
    schema["additionalProperties"] = False
    return schema


def _strip_required(hint: Any) -> Any:
    """`Required[T]` / `NotRequired[T]` (a TypedDict's markers) as T."""
    while typing.get_origin(hint) in (typing.Required, typing.NotRequired):
        hint = typing.get_args(hint)[0]
    return hint


def _typeddict_schema(cls: type, seen: tuple[type, ...], localns: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """An object schema from a TypedDict: its keys, required as `total` / `Required` say."""
    raw = _class_hints(cls, localns)
    hints = {key: _strip_required(hint) for key, hint in raw.items()}
    props = {key: schema_for_type(hint, seen, localns) for key, hint in hints.items()}
    schema: dict[str, Any] = {"type": "object", "properties": props}
    # the markers, read from the resolved hints too: under `from __future__ import annotations`
    # the class's own __required_keys__ cannot see a NotRequired written as text
    total = getattr(cls, "__required_keys__", frozenset(hints))
    required = [key for key, hint in raw.items()
                if typing.get_origin(hint) is typing.Required
                or (typing.get_origin(hint) is not typing.NotRequired and key in total)]
    if required:
        schema["required"] = required
    schema["additionalProperties"] = False
    return schema


def _json_value(value: Any) -> tuple[bool, Any]:
    """(True, value as JSON data) when `value` can be written as JSON, else (False, None)."""
    if isinstance(value, enum.Enum):
        value = value.value
    elif attrs.has(type(value)) or (dataclasses.is_dataclass(value) and not isinstance(value, type)):
        from ._converter import unstructure

        value = unstructure(value)
    elif isinstance(value, (tuple, set, frozenset)):
        value = list(value)
    elif isinstance(value, (datetime.date, datetime.time)):
        value = value.isoformat()
    elif isinstance(value, (uuid.UUID, pathlib.PurePath)):
        value = str(value)
    try:
        return True, json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError):
        return False, None


# -- docstrings -----------------------------------------------------------------------------

_ARG_SECTIONS = {"args", "arguments", "parameters", "params", "keyword args", "keyword arguments",
                 "kwargs", "other parameters"}
_OTHER_SECTIONS = {"returns", "return", "yields", "yield", "raises", "raise", "examples", "example",
                   "notes", "note", "see also", "references", "attributes", "warns", "warnings",
                   "warning", "todo", "methods"}
# `name: text`, `name (type): text`, `*args: text` (Google style)
_GOOGLE_ENTRY = re.compile(r"^\*{0,2}(\w+)\s*(?:\([^)]*\))?\s*:(?:\s+(.*))?$")
# `name : type` or `name` (NumPy style; the text follows on indented lines)
_NUMPY_ENTRY = re.compile(r"^\*{0,2}(\w+)\s*(?::.*)?$")
# `:param name: text` or `:param type name: text` (Sphinx style)
_SPHINX_PARAM = re.compile(r"^:param\s+(?:[^:]*\s)?\*{0,2}(\w+)\s*:\s*(.*)$")
_SPHINX_FIELD = re.compile(r"^:\w[^:]*:")
_UNDERLINE = re.compile(r"^-{3,}$")


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """(description, {parameter: text}) from a docstring in Google (`Args:`), NumPy
    (`Parameters` underlined) or Sphinx (`:param x:`) style.

    The description is the text before the first section; `Returns:`, `Raises:` and the like
    are left out of both, since the model needs neither to call the tool.
    """
    if not doc:
        return "", {}
    lines = inspect.cleandoc(doc).splitlines()
    desc: list[str] = []
    params: dict[str, str] = {}
    mode = "desc"  # desc | google | numpy | sphinx | other
    current: str | None = None
    entry_indent: int | None = None
    i = 0
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        i += 1
        # NumPy header: a title line underlined with dashes
        if indent == 0 and stripped and i < len(lines) and _UNDERLINE.match(lines[i].strip()):
            title = stripped.lower()
            mode = "numpy" if title in _ARG_SECTIONS else "other"
            current, entry_indent = None, None
            i += 1
            continue
        # Google header: `Args:` alone on a line at the left margin
        if indent == 0 and stripped.endswith(":") and stripped[:-1].strip().lower() in _ARG_SECTIONS | _OTHER_SECTIONS:
            mode = "google" if stripped[:-1].strip().lower() in _ARG_SECTIONS else "other"
            current, entry_indent = None, None
            continue
        sphinx = _SPHINX_PARAM.match(stripped)
        if sphinx and indent == 0:
            mode, current = "sphinx", sphinx.group(1)
            params[current] = sphinx.group(2).strip()
            continue
        if _SPHINX_FIELD.match(stripped) and indent == 0:
            mode, current = "other", None  # :type x:, :returns:, :raises E: ...
            continue
        if mode == "desc":
            desc.append(line)
        elif mode == "google":
            if not stripped:
                continue
            if entry_indent is None:
                entry_indent = indent
            match = _GOOGLE_ENTRY.match(stripped)
            if indent <= entry_indent and match:
                current = match.group(1)
                params[current] = (match.group(2) or "").strip()
            elif current is not None:
                params[current] = (params[current] + " " + stripped).strip()
        elif mode == "numpy":
            if not stripped:
                continue
            match = _NUMPY_ENTRY.match(stripped)
            if indent == 0 and match:
                current = match.group(1)
                params.setdefault(current, "")
            elif current is not None:
                params[current] = (params[current] + " " + stripped).strip()
        elif mode == "sphinx":
            if stripped and indent > 0 and current is not None:
                params[current] = (params[current] + " " + stripped).strip()
            elif stripped:
                mode, current = "other", None
    return "\n".join(desc).strip(), params


# -- @tool ----------------------------------------------------------------------------------


def _is_context_hint(hint: Any) -> bool:
    hint, _ = _strip_annotated(hint)
    _, inner = _split_optional(hint)
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
    frame = sys._getframe(1)
    while frame is not None and str(frame.f_globals.get("__name__", "")).split(".")[0] == "nexus_core":
        frame = frame.f_back  # type: ignore[assignment]
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
    type. `exposure`: see `ToolDef.exposure`.
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
        rebuild: dict[str, Any] = {}
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
                if param.default is None and not _admits_null(schema):
                    # `x: int = None` is written to accept None: let the model send null too
                    schema = _nullable(schema)
                ok, value = _json_value(param.default)
                if ok:
                    schema["default"] = value
            props[pname] = schema
            rebuild[pname] = hint
        input_schema: dict[str, Any] = {"type": "object", "properties": props}
        if required:
            input_schema["required"] = required
        input_schema["additionalProperties"] = any(p.kind == p.VAR_KEYWORD for p in sig.parameters.values())

        out_schema = output_schema
        inferred = False
        if out_schema is None:
            out_schema = _output_schema(hints.get("return", Any), localns)
            inferred = out_schema is not None

        def handler(arguments: Mapping[str, Any], ctx: CallContext | None = None) -> Any:
            values = {k: (_rebuild(v, rebuild[k], k) if k in rebuild else v) for k, v in arguments.items()}
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
            value = target(*args, **values)
            return _typed_result(value) if inferred else value

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


# -- results: the return annotation as the output schema ------------------------------------


def _output_schema(hint: Any, localns: Mapping[str, Any]) -> dict[str, Any] | None:
    """The output schema a return annotation gives: any type `schema_for_type` describes but
    text (`-> str`: the output is the text), None, Any and a bare dict (no shape to promise),
    and what a handler returns to say more than a value (a ToolResult, content blocks)."""
    hint, _ = _strip_annotated(hint)
    if hint is Any or hint is inspect.Parameter.empty or hint is None or hint is _NONE or hint is object:
        return None
    if hint is str or (isinstance(hint, type) and issubclass(hint, (str, ToolResult))):
        return None
    if hint in _MAPPINGS or (typing.get_origin(hint) in _MAPPINGS and len(typing.get_args(hint)) == 2
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


def _typed_result(value: Any) -> Any:
    """A handler's value, for a tool whose output schema came from its return annotation: a value
    that result normalisation would only `str()` (an int, a bool, a set, an enum, a date) is sent
    as JSON data in `output_structured`, its JSON (or the string itself) in `output`, so that a
    run_code binding gets back the type the annotation names."""
    if value is None or isinstance(value, (ToolResult, str, dict, list, tuple)) or attrs.has(type(value)) \
            or (dataclasses.is_dataclass(value) and not isinstance(value, type)):
        return value
    ok, plain = _json_value(value)
    if not ok:
        return value
    text = plain if isinstance(plain, str) else json.dumps(plain, ensure_ascii=False)
    return ToolResult(id="", name="", output=text, output_structured=plain)


# -- arguments: JSON back into the annotated Python types -----------------------------------


def _fits(value: Any, hint: Any) -> bool:
    """Whether JSON `value` is of the shape `hint` describes (to pick a union's member)."""
    hint, _ = _strip_annotated(hint)
    if hint is Any or hint is object or hint is inspect.Parameter.empty:
        return True
    if hint is None or hint is _NONE:
        return value is None
    origin = typing.get_origin(hint)
    if origin is Literal:
        return value in typing.get_args(hint)
    if origin in (Union, types.UnionType):
        return any(_fits(value, a) for a in typing.get_args(hint))
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return any(value == m.value for m in hint)
    if hint is str or (isinstance(hint, type) and issubclass(hint, str)) or _string_type(hint):
        return isinstance(value, str)
    if hint in _MAPPINGS or origin in _MAPPINGS or (isinstance(hint, type) and (
            attrs.has(hint) or dataclasses.is_dataclass(hint) or typing.is_typeddict(hint))):
        return isinstance(value, dict)
    if hint in _SEQUENCES or origin in _SEQUENCES or origin is tuple:
        return isinstance(value, list)
    return True


def _rebuild(value: Any, hint: Any, path: str) -> Any:
    """A validated JSON argument as the type its parameter is annotated with: attrs instances,
    enum members, tuples, sets, paths, dates and UUIDs are rebuilt, ints become floats where a
    float is wanted.
    Raises ValueError naming the argument path when the value does not fit."""
    hint, _ = _strip_annotated(hint)
    if hint is Any or hint is object or hint is inspect.Parameter.empty or value is None:
        return value
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (Union, types.UnionType):
        for member in args:
            if member is not _NONE and _fits(value, member):
                return _rebuild(value, member, path)
        raise ValueError(f"argument {path}: {value!r} fits none of {hint!r}")
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        try:
            return hint(value)
        except ValueError:
            raise ValueError(f"argument {path}: {value!r} is not a {hint.__name__}") from None
    as_string = _string_type(hint)
    if as_string is not None and isinstance(value, str):
        cls = as_string[0]
        try:
            if cls in (datetime.datetime, datetime.date, datetime.time):
                return hint.fromisoformat(value)
            return hint(value)
        except ValueError:
            raise ValueError(f"argument {path}: {value!r} is not a valid {hint.__name__}") from None
    if isinstance(hint, type) and attrs.has(hint):
        if not isinstance(value, dict):
            raise ValueError(f"argument {path}: expected an object for {hint.__name__}, got {type(value).__name__}")
        field_hints = _attrs_hints(hint)
        by_key = {(f.alias or f.name): f for f in attrs.fields(hint) if f.init}
        unknown = sorted(set(value) - set(by_key))
        if unknown:
            raise ValueError(f"argument {path}: unknown key {unknown[0]!r} for {hint.__name__}")
        kwargs = {
            key: _rebuild(v, field_hints.get(by_key[key].name, Any), f"{path}.{key}") for key, v in value.items()
        }
        try:
            return hint(**kwargs)
        except TypeError as exc:
            raise ValueError(f"argument {path}: {exc}") from None
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        if not isinstance(value, dict):
            raise ValueError(f"argument {path}: expected an object for {hint.__name__}, got {type(value).__name__}")
        field_hints = _class_hints(hint)
        names = {f.name for f in dataclasses.fields(hint) if f.init}
        unknown = sorted(set(value) - names)
        if unknown:
            raise ValueError(f"argument {path}: unknown key {unknown[0]!r} for {hint.__name__}")
        try:
            return hint(**{k: _rebuild(v, field_hints.get(k, Any), f"{path}.{k}") for k, v in value.items()})
        except TypeError as exc:
            raise ValueError(f"argument {path}: {exc}") from None
    if isinstance(hint, type) and typing.is_typeddict(hint) and isinstance(value, dict):
        field_hints = _class_hints(hint)
        return {k: _rebuild(v, _strip_required(field_hints.get(k, Any)), f"{path}.{k}") for k, v in value.items()}
    if (origin is tuple or hint is tuple) and isinstance(value, list):
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_rebuild(v, args[0], f"{path}[{i}]") for i, v in enumerate(value))
        if args and len(args) == len(value):
            return tuple(_rebuild(v, a, f"{path}[{i}]") for i, (v, a) in enumerate(zip(value, args, strict=True)))
        return tuple(value)
    if (hint in _SEQUENCES or origin in _SEQUENCES) and isinstance(value, list):
        items = [_rebuild(v, args[0], f"{path}[{i}]") for i, v in enumerate(value)] if args else list(value)
        if hint in (set, frozenset) or origin in (set, frozenset, collections.abc.Set, collections.abc.MutableSet):
            return frozenset(items) if frozenset in (hint, origin) else set(items)
        return items
    if (hint in _MAPPINGS or origin in _MAPPINGS) and isinstance(value, dict) and len(args) == 2:
        return {k: _rebuild(v, args[1], f"{path}.{k}") for k, v in value.items()}
    return value


# -- a toolkit without plugins --------------------------------------------------------------


def _describe_source(obj: Any, index: int) -> str:
    """Where tool number `index` of a toolkit came from, for a duplicate-name error."""
    fn = obj.handler if isinstance(obj, ToolDef) else obj
    fn = getattr(fn, "__nexus_source__", fn)  # the function @tool described, not its adapter
    fn = getattr(fn, "__wrapped__", fn)
    where = f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', type(fn).__name__)}"
    if isinstance(obj, ToolDef):
        return f"tools[{index}] (ToolDef with handler {where})"
    return f"tools[{index}] ({where})"


def toolkit(tools: Iterable[Any] = (), *, plugins: Iterable[object] = (), config: Any = None) -> Nexus:
    """A `Nexus` holding just these tools (ToolDefs or `@tool` functions) and no installed
    plugins: the same invocation path, gates included, without any configuration.

    A name given twice raises `ToolRegistrationError` naming both entries.
    """
    from ._nexus import Nexus
    from ._registry import ToolRegistrationError, as_tooldef

    items = list(tools)
    seen: dict[str, int] = {}
    for index, obj in enumerate(items):
        tool_name = as_tooldef(obj).name
        if tool_name in seen:
            first = seen[tool_name]
            raise ToolRegistrationError(
                f"duplicate tool name {tool_name!r}: {_describe_source(items[first], first)} "
                f"and {_describe_source(obj, index)}"
            )
        seen[tool_name] = index
    return Nexus(config, plugins=plugins, tools=items, autoload=False)


def execute(
    tk: Nexus,
    name: str,
    args: Mapping[str, Any] | None = None,
    ctx: Mapping[str, Any] | None = None,
    *,
    context: Mapping[str, Any] | None = None,
    answer: Any = None,
    parent_call_id: str | None = None,
) -> ToolResult:
    """Call a tool of `tk` by name: `tk.invoke(name, args, context=ctx)`. Never raises for a
    tool's failure; an unknown name is an error result. `ctx` (or `context=`) is your own data,
    which a context-taking tool reads as `CallContext.data`."""
    if ctx is not None and context is not None:
        raise TypeError("execute() takes ctx or context=, not both")
    return tk.invoke(name, args or {}, context=ctx if ctx is not None else context, answer=answer,
                     parent_call_id=parent_call_id)
