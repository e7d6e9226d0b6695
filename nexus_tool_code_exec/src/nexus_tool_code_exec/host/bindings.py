"""Typed bindings for run_code: the `tools` module, generated as Python source from the registry
(runs in the host; the child compiles the source, child/runtime.py).

One `@attrs.define` class per argument schema and per output schema (nested objects become nested
classes), one function per tool. The stubs the model reads are made from the same pieces: each
function with its real keyword signature (`def read(*, path: str, offset: int | None = None) ->
ReadResult:`), its arguments' descriptions in full with their defaults and constraints, and the
classes of its result. Source, not `attrs.make_class`: it is what the model reads, what a type
checker understands and what a traceback can point at.

Each tool's piece is generated once and cached (`BindingsCache`), keyed on its `ToolDef`: a
registry of 500 tools costs one piece per registration, not 500. The pieces are put together
(names that collide across tools are settled then) only when a run or a description needs it.
"""

from __future__ import annotations

import functools
import json
import keyword
import re
import textwrap
import threading
import unicodedata
from collections.abc import Iterable
from typing import Any

import attrs

from nexus_core import ToolDef

#: names the runtime defines in `tools`; a tool or class may not take them
RUNTIME_NAMES = frozenset({"Result", "ToolError", "ToolVetoed", "ToolFailed", "attrs", "Any", "Literal", "_call",
                           "_Record", "_SIGNATURES"})
#: what a tool without an output schema returns (child/runtime.py's `Result`)
RESULT_FIELDS = ("output", "error", "output_file")
#: names the generated annotations use. A field that takes one binds it in the class body (its
#: default, or its `attrs.field(...)`), and every later annotation of that class would see that
#: value instead of the type: `str | None` would become `None | None` and the module would fail.
ANNOTATION_NAMES = frozenset({"str", "int", "float", "bool", "list", "dict"})
#: names a field may not take: the annotation names, and `self` (attrs' __init__ has it already)
FIELD_RESERVED = RUNTIME_NAMES | ANNOTATION_NAMES | {"self"}


def py_identifier(name: str, taken: set[str] | None = None, reserved: frozenset[str] = RUNTIME_NAMES) -> str:
    """A valid, non-keyword Python identifier for `name`, unique within `taken` (then added).

    Soft keywords (`match`, `case`, `type`, `_`) are valid names wherever the bindings put
    them, so they are kept as they are. The result is NFKC-normalised, as Python normalises
    identifiers when it parses them: otherwise the name in the source (`ℌ`) and the attribute
    it makes (`H`) differ, and the field's JSON name is lost."""
    # `\w` is wider than what an identifier may hold (`²`, `①` are word characters)
    ident = "".join(c if ("a" + c).isidentifier() else "_" for c in unicodedata.normalize("NFKC", name)) or "_"
    if not ident[0].isidentifier():
        ident = "_" + ident
    if keyword.iskeyword(ident) or ident in reserved:
        ident += "_"
    if ident.startswith("__"):
        ident = "f" + ident
    if taken is not None:
        base, n = ident, 1
        while ident in taken:
            n += 1
            ident = f"{base}_{n}"
        taken.add(ident)
    return ident


def class_name(*parts: str) -> str:
    """`("foo_bar", "args")` -> `FooBarArgs`."""
    words = [w for p in parts for w in re.split(r"[^0-9a-zA-Z]+", p) if w]
    name = "".join(w[:1].upper() + w[1:] for w in words) or "Anon"
    return ("T" + name) if name[0].isdigit() else name


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _doc(text: str, indent: str) -> str:
    text = text.strip().replace("\\", "\\\\").replace('"""', "'''")
    if not text:
        return ""
    if text.endswith('"'):  # `"""Say "hi""""` does not compile
        text = text[:-1] + '\\"'
    if "\n" not in text:
        return f'{indent}"""{text}"""\n'
    return f'{indent}"""\n{textwrap.indent(text, indent)}\n{indent}"""\n'


def _comment(text: str) -> str:
    """`text` as the tail of a `# ...` comment: one line, in full."""
    return _one_line(text)


def _json_text(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return repr(value)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def constraints(schema: Any, said: str = "") -> str:
    """What a schema says about a value beyond its type, in words (`default 1, at least 1`),
    leaving out what the description `said` already (its own "default 60, at most 600")."""
    if not isinstance(schema, dict):
        return ""
    said = said.lower()
    out = []

    def add(text: str, number: Any = None) -> None:
        if number is not None and re.search(rf"(?<![\d.]){re.escape(str(number))}(?![\d.])", said):
            return
        out.append(text)

    if "default" in schema and "default" not in said:
        out.append(f"default {_json_text(schema['default'])}")
    for key, words in (("minimum", "at least"), ("maximum", "at most"), ("exclusiveMinimum", "more than"),
                       ("exclusiveMaximum", "less than")):
        value = schema.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            add(f"{words} {value:g}" if isinstance(value, float) else f"{words} {value}", value)
    if isinstance(schema.get("minLength"), int) and schema["minLength"] > 1:  # 1: an empty string is refused
        add(f"at least {_plural(schema['minLength'], 'character')}", schema["minLength"])
    for key, words, unit in (("maxLength", "at most", "character"), ("minItems", "at least", "item"),
                             ("maxItems", "at most", "item")):
        value = schema.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            add(f"{words} {_plural(value, unit)}", value)
    if isinstance(schema.get("pattern"), str):
        out.append(f"matching {schema['pattern']!r}")
    if isinstance(schema.get("format"), str):
        out.append(f"format {schema['format']}")
    return ", ".join(out)


def _field_doc(desc: str, schema: Any) -> str:
    desc = _one_line(desc)
    more = constraints(schema, desc)
    if more:
        more = more[0].upper() + more[1:] + "."
        desc = f"{desc} {more}" if desc else more
    return desc


@attrs.define
class Field:
    """One field of a generated class, or one keyword of a tool's function."""

    attr: str  # its Python name
    json_name: str
    type: str  # its annotation, `| None` added for an optional field
    required: bool
    doc: str  # its description, defaults and constraints, in one line

    def param(self) -> str:
        return f"{self.attr}: {self.type}" + ("" if self.required else " = None")


@attrs.define
class _Class:
    name: str
    description: str
    fields: list[Field]
    #: set for a type alias (`SearchResult = list[str]`) instead of a class
    alias_of: str | None = None
    kind: str = "result"  # "args" (the tool's Args class), "nested" (in the arguments), "result"


@attrs.define
class ClassApi:
    """What the static check needs of a generated class: its fields, which are required, and
    how to show its signature."""

    name: str
    fields: dict[str, bool]  # attr name -> required
    signature: str


@attrs.define
class FunctionApi:
    """What the static check needs of a tool's function."""

    name: str  # the Python name in `tools`
    tool: str  # the tool's name
    args_class: str
    result: str  # the result's class (or alias) name
    result_fields: tuple[str, ...] | None  # the result's attributes, None when it is not a class
    params: dict[str, bool]  # keyword -> required
    signature: str  # `read(*, path: str, ...) -> ReadResult`


class _Generator:
    def __init__(self, taken: Iterable[str] = ()) -> None:
        self.classes: list[_Class] = []
        self.class_names: set[str] = set(RUNTIME_NAMES) | set(taken)
        self.made: list[str] = []

    def new_class_name(self, *parts: str) -> str:
        name = class_name(*parts)
        base, n = name, 1
        while name in self.class_names:
            n += 1
            name = f"{base}{n}"
        self.class_names.add(name)
        self.made.append(name)
        return name

    def py_type(self, schema: Any, hint: tuple[str, ...], kind: str) -> str:
        if not isinstance(schema, dict):
            return "Any"
        if "enum" in schema and all(isinstance(v, (str, int, bool, type(None))) for v in schema["enum"]):
            return f"Literal[{', '.join(repr(v) for v in schema['enum'])}]" if schema["enum"] else "Any"
        if "const" in schema and isinstance(schema["const"], (str, int, bool)):
            return f"Literal[{schema['const']!r}]"
        kind_ = schema.get("type")
        if isinstance(kind_, list):
            rest = [k for k in kind_ if k != "null"]
            inner = self.py_type({**schema, "type": rest[0]}, hint, kind) if len(rest) == 1 else "Any"
            return f"{inner} | None" if "null" in kind_ and inner != "Any" else inner
        for combo in ("anyOf", "oneOf"):
            if combo in schema and isinstance(schema[combo], list):
                subs = schema[combo]
                has_null = any(isinstance(s, dict) and s.get("type") == "null" for s in subs)
                types = [self.py_type(s, (*hint, f"option{i + 1}"), kind) for i, s in enumerate(subs)
                         if not (isinstance(s, dict) and s.get("type") == "null")]
                unique = list(dict.fromkeys(types))
                inner = "Any" if "Any" in unique or not unique else " | ".join(unique)
                return f"{inner} | None" if has_null and inner != "Any" else inner
        if kind_ == "string":
            return "str"
        if kind_ == "integer":
            return "int"
        if kind_ == "number":
            return "float"
        if kind_ == "boolean":
            return "bool"
        if kind_ == "null":
            return "None"
        if kind_ == "array":
            return f"list[{self.py_type(schema.get('items'), (*hint, 'item'), kind)}]"
        if kind_ == "object" or (kind_ is None and "properties" in schema):
            if schema.get("properties"):
                return self.object_class(schema, hint, kind)
            extra = schema.get("additionalProperties")
            if isinstance(extra, dict):
                return f"dict[str, {self.py_type(extra, (*hint, 'value'), kind)}]"
            return "dict[str, Any]"
        return "Any"

    def object_class(self, schema: dict[str, Any], hint: tuple[str, ...], kind: str) -> str:
        """A class for an object schema: `kind` "args" (a tool's Args), "nested" (an object inside
        the arguments) or "result" (the result, or an object inside it)."""
        name = self.new_class_name(*hint)
        inner = "result" if kind == "result" else "nested"
        required = set(schema.get("required") or [])
        taken: set[str] = set()
        fields = []
        for json_name, sub in (schema.get("properties") or {}).items():
            attr = py_identifier(json_name, taken, reserved=FIELD_RESERVED)
            typ = self.py_type(sub, (*hint, json_name), inner)
            is_required = json_name in required
            if not is_required and typ not in ("Any", "None") and not typ.endswith("| None"):
                typ += " | None"
            desc = sub.get("description", "") if isinstance(sub, dict) else ""
            if not isinstance(desc, str):
                desc = ""
            fields.append(Field(attr, json_name, typ, is_required, _field_doc(desc, sub)))
        description = schema.get("description", "")
        # nested classes were appended by py_type above, so they come before this one
        self.classes.append(_Class(name, description if isinstance(description, str) else "", fields, kind=kind))
        return name

    def alias(self, type_text: str, *hint: str) -> str:
        """A generated name for a type that is not a generated class (`SearchResult = list[str]`).
        Function signatures and bodies then name only generated names, so a tool function
        called `list` or `str` cannot shadow a type that a later function needs."""
        if type_text in self.class_names:
            return type_text
        name = self.new_class_name(*hint)
        self.classes.append(_Class(name, "", [], alias_of=type_text))
        return name


def _render_source_class(cls: _Class) -> str:
    if cls.alias_of is not None:
        return f"{cls.name} = {cls.alias_of}"
    out = ["@attrs.define(kw_only=True)", f"class {cls.name}(_Record):"]
    doc = _doc(cls.description, "    ")
    if doc:
        out.append(doc.rstrip("\n"))
    for f in cls.fields:
        renamed = f.attr != f.json_name
        # attrs drops a leading underscore from the __init__ keyword (`_id` becomes `id`, and
        # `_2fa` becomes `2fa`, which does not compile): keep the name the stubs show
        private = f.attr.startswith("_")
        if renamed or private:
            opts = [] if f.required else ["default=None"]
            if private:
                opts.append(f"alias={f.attr!r}")
            if renamed:
                opts.append(f"metadata={{'json': {f.json_name!r}}}")
            out.append(f"    {f.attr}: {f.type} = attrs.field({', '.join(opts)})")
        else:
            out.append(f"    {f.attr}: {f.type}" + ("" if f.required else " = None"))
    if not cls.fields:
        out.append("    pass")
    return "\n".join(out)


#: where a stub's comments and docstrings wrap (a description is kept whole, on as many lines as
#: it takes); wider than most descriptions: every line break costs the model tokens
COMMENT_WIDTH = 300


def _field_comment(f: Field, code: str) -> str:
    """`code` (a field or a parameter) with its comment: the JSON name where it differs, the
    description, defaults and constraints, in full, wrapped under one another."""
    parts = []
    if f.attr != f.json_name:
        parts.append(f"JSON name {f.json_name!r}")
    if f.doc:
        parts.append(f.doc)
    if not parts:
        return code
    lines = textwrap.wrap("; ".join(parts), max(COMMENT_WIDTH - len(code) - 4, 40), break_long_words=False,
                          break_on_hyphens=False) or [""]
    pad = " " * (len(code) + 2)
    return f"{code}  # {lines[0]}" + "".join(f"\n{pad}# {line}" for line in lines[1:])


def _render_stub_class(cls: _Class) -> str:
    if cls.alias_of is not None:
        return f"{cls.name} = {cls.alias_of}"
    head = f"class {cls.name}:"
    if cls.kind == "nested":
        head += "  # or a dict with these keys"
    out = [head]
    doc = _doc(_one_line(cls.description), "    ")
    if doc:
        out.append(doc.rstrip("\n"))
    for f in cls.fields:
        out.append(_field_comment(f, f"    {f.param()}"))
    if not cls.fields:
        out.append("    pass")
    return "\n".join(out)


def _signature(fname: str, params: list[Field], result: str) -> str:
    inner = ", ".join(p.param() for p in params)
    return f"{fname}(*, {inner}) -> {result}" if params else f"{fname}() -> {result}"


@attrs.define(eq=False)
class ToolPiece:
    """The generated text of one tool, made without knowing the other tools. Its function's
    name is settled when the pieces are put together (`assemble`)."""

    tool: ToolDef
    classes: list[_Class]
    class_names: frozenset[str]
    args_class: str
    result: str
    result_fields: tuple[str, ...] | None
    params: list[Field]
    source_classes: str  # the classes, as the module's source
    stub_classes: str  # the classes the model needs (the result's, the nested arguments'), as stubs
    description: str  # the function's docstring in the source: all of it

    @property
    def summary(self) -> str:
        """The function's docstring in the stubs: the first paragraph, in full."""
        first = self.description.strip().split("\n\n")[0] if self.description else ""
        if max((len(line) for line in first.splitlines()), default=0) <= COMMENT_WIDTH:
            return first
        return "\n".join(textwrap.wrap(" ".join(first.split()), COMMENT_WIDTH - 4, break_long_words=False,
                                        break_on_hyphens=False))

    def function_source(self, fname: str) -> str:
        sig = f"def {fname}(args: {self.args_class} | None = None, /, **kwargs: Any) -> {self.result}:"
        return (f"{sig}\n{_doc(self.description, '    ')}"
                f"    return _call({self.tool.name!r}, {self.args_class}, args, kwargs, {self.result})")

    def function_stub(self, fname: str) -> str:
        doc = _doc(self.summary, "    ")
        if any(p.doc or p.attr != p.json_name for p in self.params):
            lines = [f"def {fname}(", "    *,"]
            lines += [_field_comment(p, f"    {p.param()},") for p in self.params]
            lines.append(f") -> {self.result}:")
            head = "\n".join(lines)
        else:
            inner = ", ".join(p.param() for p in self.params)
            head = f"def {fname}(*, {inner}) -> {self.result}:" if self.params else f"def {fname}() -> {self.result}:"
        return f"{head}\n{doc}    ..."

    def stub(self, fname: str) -> str:
        """The function's stub and the classes it names: what `run_code_api` returns."""
        return self.function_stub(fname) + ("\n\n" + self.stub_classes if self.stub_classes else "")


def _script_description(tool: ToolDef) -> str:
    """What a tool says to scripts: its `code_description`, or else its description."""
    text = getattr(tool, "code_description", None)
    return text if isinstance(text, str) and text.strip() else tool.description


def make_piece(tool: ToolDef, taken: Iterable[str] = ()) -> ToolPiece:
    """One tool's classes and function, with class names outside `taken`."""
    gen = _Generator(taken)
    schema = dict(tool.input_schema or {"type": "object"})
    schema.setdefault("type", "object")
    if not schema.get("properties"):
        schema["properties"] = {}
    schema.pop("description", None)
    args_cls = gen.object_class(schema, (tool.name, "args"), "args")
    result_fields: tuple[str, ...] | None = RESULT_FIELDS
    if tool.output_schema is not None:
        result = gen.alias(gen.py_type(tool.output_schema, (tool.name, "result"), "result"), tool.name, "result")
        cls = next((c for c in gen.classes if c.name == result), None)
        result_fields = tuple(f.attr for f in cls.fields) if cls is not None and cls.alias_of is None else None
    else:
        result = "Result"
    args = next(c for c in gen.classes if c.name == args_cls)
    shown = [c for c in gen.classes if c.kind != "args"]
    return ToolPiece(
        tool=tool, classes=gen.classes, class_names=frozenset(gen.made), args_class=args_cls, result=result,
        result_fields=result_fields, params=args.fields,
        source_classes="\n\n\n".join(_render_source_class(c) for c in gen.classes),
        stub_classes="\n\n".join(_render_stub_class(c) for c in shown),
        description=_script_description(tool),
    )


SOURCE_HEADER = (
    '"""Typed bindings for the tools of this Nexus (generated)."""\n\n'
    "from typing import Any, Literal\n\n"
    "import attrs\n\n"
    "from _nexus_rt import Record as _Record, Result, ToolError, ToolFailed, ToolVetoed, call_tool as _call\n"
)

STUB_HEADER = (
    "# tools: call a function with keywords (or its Args object: tools.read(tools.ReadArgs(path=...)));\n"
    "# a nested class may be a dict. A veto raises tools.ToolVetoed, a failure tools.ToolFailed (both\n"
    "# tools.ToolError, with .reason); a tool without an output schema returns tools.Result(output, error, output_file).\n"
)


class Bindings:
    """The `tools` module of one registry: its functions, and (made when first asked for) its
    source, its stubs, and what the static check needs to know of it."""

    def __init__(self, pieces: list[tuple[str, ToolPiece]]) -> None:
        #: (python function name, piece), sorted by tool name
        self.pieces = pieces
        #: python function name -> tool name
        self.functions: dict[str, str] = {fname: piece.tool.name for fname, piece in pieces}
        self.by_tool: dict[str, tuple[str, ToolPiece]] = {piece.tool.name: (fname, piece) for fname, piece in pieces}

    @functools.cached_property
    def source(self) -> str:
        parts = [piece.source_classes for _, piece in self.pieces]
        parts += [piece.function_source(fname) for fname, piece in self.pieces]
        signatures = {piece.tool.name: self.api[fname].signature for fname, piece in self.pieces}
        parts.append(f"_SIGNATURES = {signatures!r}")
        return SOURCE_HEADER + "\n\n" + "\n\n\n".join(parts) + "\n"

    @functools.cached_property
    def stubs(self) -> str:
        if not self.pieces:
            return STUB_HEADER + "# (no tools registered)\n"
        return STUB_HEADER + "\n" + "\n\n\n".join(piece.stub(fname) for fname, piece in self.pieces) + "\n"

    def stub_of(self, tool_name: str) -> str:
        fname, piece = self.by_tool[tool_name]
        return piece.stub(fname)

    @functools.cached_property
    def api(self) -> dict[str, FunctionApi]:
        """Each function of `tools`, as the static check needs it."""
        return {
            fname: FunctionApi(
                name=fname, tool=piece.tool.name, args_class=piece.args_class, result=piece.result,
                result_fields=piece.result_fields, params={p.attr: p.required for p in piece.params},
                signature=_signature(fname, piece.params, piece.result))
            for fname, piece in self.pieces
        }

    @functools.cached_property
    def classes(self) -> dict[str, ClassApi | None]:
        """Each class (or alias: None) of `tools`, as the static check needs it."""
        out: dict[str, ClassApi | None] = {}
        for _, piece in self.pieces:
            for cls in piece.classes:
                if cls.alias_of is not None:
                    out[cls.name] = None
                else:
                    out[cls.name] = ClassApi(cls.name, {f.attr: f.required for f in cls.fields},
                                             _signature(cls.name, cls.fields, cls.name))
        return out

    @functools.cached_property
    def names(self) -> frozenset[str]:
        """Every name `tools` has (the runtime's among them: the check helps, the sandbox guards)."""
        return frozenset(self.functions) | frozenset(self.classes) | RUNTIME_NAMES


class BindingsCache:
    """Pieces per tool, kept across registry changes: a new tool costs its own piece only."""

    def __init__(self) -> None:
        self._pieces: dict[str, ToolPiece] = {}
        self._lock = threading.Lock()

    def piece(self, tool: ToolDef) -> ToolPiece:
        with self._lock:
            cached = self._pieces.get(tool.name)
        if cached is not None and cached.tool is tool:
            return cached
        piece = make_piece(tool)
        with self._lock:
            self._pieces[tool.name] = piece
        return piece

    def forget(self, name: str) -> None:
        with self._lock:
            self._pieces.pop(name, None)

    def assemble(self, tools: Iterable[ToolDef]) -> Bindings:
        """The bindings of `tools` (already filtered), names settled across tools: the first
        tool (by name) keeps a class name, a later one whose class would take it is generated
        again with other names; functions never take a class's name."""
        taken: set[str] = set(RUNTIME_NAMES)
        chosen: list[ToolPiece] = []
        for tool in sorted(tools, key=lambda t: t.name):
            piece = self.piece(tool)
            if piece.class_names & taken:
                piece = make_piece(tool, taken)  # rare: not cached, it depends on the others
            taken |= piece.class_names
            chosen.append(piece)
        fnames: set[str] = set(taken)
        return Bindings([(py_identifier(piece.tool.name, fnames), piece) for piece in chosen])


def generate(tools: Iterable[ToolDef], skip: Iterable[str] = ()) -> Bindings:
    """Bindings for `tools`, leaving out the names in `skip` (run_code itself) and the tools a
    script may not call (`exposure` "direct")."""
    skip_set = set(skip)
    return BindingsCache().assemble(t for t in tools if t.name not in skip_set and t.exposure != "direct")
