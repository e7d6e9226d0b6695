"""Typed bindings for run_code: the `tools` module, generated as Python source from the registry
(runs in the host; the child executes the pieces it uses, inside its sandbox: child/runtime.py).

One `@attrs.define` class per argument schema and per output schema (nested objects become nested
classes), one function per tool. The stubs the model reads are made from the same pieces: each
function with its real keyword signature (`def read(*, path: str, offset: int | None = None) ->
ReadResult:`), its arguments' descriptions in full with their defaults and constraints, and the
classes of its result. Source, not `attrs.make_class`: it is what the model reads, what a type
checker understands and what a traceback can point at.

A tool's metadata is untrusted (an MCP server writes it), so each tool's piece is made on its own
and can only fail on its own:

- everything taken from the metadata is escaped for the place it lands in: descriptions made
  visible (`visible`: controls, bidi controls, separators as `\\x1b`-style text) before they go
  into a docstring or a comment, names made identifiers, values written with `repr`;
- what the metadata can make big is capped (`MAX_*` below): past a cap the type is looser (`Any`,
  the values' type, a dict) and the stub says which cap, and a stub that is still too big gives
  a loose piece (keywords passed as they are, the result as JSON);
- each piece is checked to be exactly what the generator writes, and compiled, on its own
  (piece_check.py); a piece that fails for any reason leaves its tool out of the bindings, with
  the reason, and never breaks another tool (`LeftOut`).

Each tool's piece is generated once and cached (`BindingsCache`), keyed on its `ToolDef`: a
registry of 500 tools costs one piece per registration, not 500. The pieces are put together
(names that collide across tools are settled then) only when a run or a description needs it.
"""

from __future__ import annotations

import functools
import json
import keyword
import logging
import math
import re
import textwrap
import threading
import types
import unicodedata
from collections.abc import Iterable
from typing import Any

import attrs

from nexus_core import ToolDef

from .. import protocol
from .piece_check import PieceRejected, check_piece, check_stub

log = logging.getLogger("nexus_tool_code_exec")

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
#: the decorator of every generated class. No __repr__ or __eq__ of its own (`_Record` has one for
#: all) and no slots: each of those is code attrs generates and compiles per class, in the child
#: that first uses the tool (about half of what making the class costs)
DECORATOR = "@attrs.define(kw_only=True, slots=False, repr=False, eq=False)"

# -- caps: what one tool's metadata may make of the bindings -------------------------------------
#: schemas nested deeper than this (objects in arrays in objects...) are typed Any
MAX_DEPTH = 8
#: an anyOf / oneOf of more options than this is typed Any
MAX_UNION = 16
#: an enum of more values than this is typed as its values' type, not a Literal
MAX_LITERALS = 64
#: a string value longer than this is not written as a literal
MAX_LITERAL_CHARS = 200
#: an object of more properties than this is a dict, not a class (the arguments: a loose piece)
MAX_PROPERTIES = 128
#: classes one tool's piece may make; past it, nested objects are dicts
MAX_CLASSES = 48
#: a field's or class's generated name is cut to this many characters (its JSON name is kept)
MAX_NAME_CHARS = 64
#: characters of a description in a stub (a docstring's paragraph, a field's comment) ...
MAX_STUB_DOC_CHARS = 2000
#: ... and of a docstring in the module's source
MAX_SOURCE_DOC_CHARS = 8000
#: the stub of one tool, its classes included; past it the tool gets a loose piece
MAX_STUB_BYTES = 16384


def visible(text: str) -> str:
    """`text` with every character that changes how a line reads shown as an escape (`\\x1b`,
    `\\u202e`): C0 and C1 controls but newline and tab, DEL, the format characters (bidi controls,
    zero-width ones), line and paragraph separators, and surrogates that pair with nothing. The
    model and a terminal read the same text; no character can end a comment, reorder a line or
    make the source uncompilable (a NUL)."""
    return _INVISIBLE.sub(_escape, text)


_INVISIBLE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\xad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u180e\u200b-\u200f"
    "\u2028-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb\ud800-\udfff\U000110bd\U000110cd"
    "\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else (f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit].rstrip() + f" [... {len(text) - limit} characters more]"


def py_identifier(name: str, taken: set[str] | None = None, reserved: frozenset[str] = RUNTIME_NAMES) -> str:
    """A valid, non-keyword Python identifier for `name`, unique within `taken` (then added).

    Soft keywords (`match`, `case`, `type`, `_`) are valid names wherever the bindings put
    them, so they are kept as they are. The result is NFKC-normalised, as Python normalises
    identifiers when it parses them: otherwise the name in the source (`ℌ`) and the attribute
    it makes (`H`) differ, and the field's JSON name is lost."""
    # `\w` is wider than what an identifier may hold (`²`, `①` are word characters)
    normal = unicodedata.normalize("NFKC", name)[:MAX_NAME_CHARS]
    ident = "".join(c if ("a" + c).isidentifier() else "_" for c in normal) or "_"
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
    name = ("".join(w[:1].upper() + w[1:] for w in words) or "Anon")[:MAX_NAME_CHARS]
    return ("T" + name) if name[0].isdigit() else name


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _doc(text: str, indent: str, limit: int = MAX_SOURCE_DOC_CHARS) -> str:
    text = visible(_cut(text.strip(), limit)).replace("\\", "\\\\").replace('"""', "'''")
    if not text:
        return ""
    if text.endswith('"'):  # `"""Say "hi""""` does not compile
        text = text[:-1] + '\\"'
    if "\n" not in text:
        return f'{indent}"""{text}"""\n'
    return f'{indent}"""\n{textwrap.indent(text, indent)}\n{indent}"""\n'


def _json_text(value: Any) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        text = "(a value JSON cannot show)"
    return _cut(text, MAX_LITERAL_CHARS)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def constraints(schema: Any, said: str = "", default: bool = True) -> str:
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

    if default and "default" in schema and "default" not in said:
        out.append(f"default {_json_text(schema['default'])}")
    for key, words in (("minimum", "at least"), ("maximum", "at most"), ("exclusiveMinimum", "more than"),
                       ("exclusiveMaximum", "less than")):
        value = schema.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            add(f"{words} {value:g}" if isinstance(value, float) else f"{words} {_cut(str(value), 40)}", value)
    if isinstance(schema.get("minLength"), int) and schema["minLength"] > 1:  # 1: an empty string is refused
        add(f"at least {_plural(schema['minLength'], 'character')}", schema["minLength"])
    for key, words, unit in (("maxLength", "at most", "character"), ("minItems", "at least", "item"),
                             ("maxItems", "at most", "item")):
        value = schema.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            add(f"{words} {_plural(value, unit)}", value)
    if isinstance(schema.get("pattern"), str):
        out.append(f"matching {_cut(schema['pattern'], MAX_LITERAL_CHARS)!r}")
    if isinstance(schema.get("format"), str):
        out.append(f"format {_cut(schema['format'], 40)}")
    return ", ".join(out)


def _field_doc(desc: str, schema: Any, notes: list[str], default: bool = True) -> str:
    desc = _one_line(desc)
    more = constraints(schema, desc, default)
    if more:
        more = more[0].upper() + more[1:] + "."
        desc = f"{desc} {more}" if desc else more
    if notes:
        desc = (desc + " " if desc else "") + " ".join(f"({note})" for note in dict.fromkeys(notes))
    return visible(_one_line(_cut(desc, MAX_STUB_DOC_CHARS)))


@attrs.define
class Field:
    """One field of a generated class, or one keyword of a tool's function."""

    attr: str  # its Python name
    json_name: str
    type: str  # its annotation, `| None` added for an optional field
    required: bool
    doc: str  # its description, defaults and constraints, in one line (escaped)
    #: an argument's default as the stub shows it (`= 500`), where its schema has a short literal
    #: one: the function takes None as well (the tool then applies that default)
    shown_default: str | None = None

    def param(self) -> str:
        if self.shown_default is not None:
            return f"{self.attr}: {self.type.removesuffix(' | None')} = {self.shown_default}"
        return f"{self.attr}: {self.type}" + ("" if self.required else " = None")


#: the longest default a stub's signature shows as a literal (longer ones are in its comment)
MAX_SHOWN_DEFAULT_CHARS = 40


def shown_default(schema: Any, type_text: str) -> str | None:
    """An argument's default, written as the stub's signature shows it, when it is a short
    literal of the argument's type (`500`, `'.'`, `False`); else None (the comment says it)."""
    if not isinstance(schema, dict) or "default" not in schema:
        return None
    value = schema["default"]
    base = type_text.removesuffix(" | None")
    fits = (isinstance(value, bool) and base == "bool"
            or isinstance(value, int) and not isinstance(value, bool) and base in ("int", "float")
            and -(1 << 53) < value < (1 << 53)
            or isinstance(value, float) and base == "float" and math.isfinite(value)
            or isinstance(value, str) and base == "str" and len(value) <= MAX_SHOWN_DEFAULT_CHARS
            or base.startswith("Literal[") and _literal(value) and repr(value) in base[8:-1].split(", "))
    if not fits:
        return None
    return visible(repr(value))


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
    #: a loose piece (its schema past the caps): any keyword goes, as the tool's JSON name
    loose: bool = False


def _literal(value: Any) -> bool:
    """Whether `value` can be written as a Literal's value, in a reasonable size."""
    if value is None or isinstance(value, bool):
        return True
    if isinstance(value, int):
        return -(1 << 63) <= value < (1 << 63)
    return isinstance(value, str) and len(value) <= MAX_LITERAL_CHARS


def _type_of_values(values: list[Any]) -> str | None:
    """The JSON type that every one of `values` has, as a schema `type`, if they share one."""
    kinds = {"string" if isinstance(v, str) else "boolean" if isinstance(v, bool) else
             "integer" if isinstance(v, int) else "number" if isinstance(v, float) else "other" for v in values}
    return kinds.pop() if len(kinds) == 1 and "other" not in kinds else None


class _Generator:
    def __init__(self, taken: Iterable[str] = ()) -> None:
        self.classes: list[_Class] = []
        self.class_names: set[str] = set(RUNTIME_NAMES) | set(taken)
        self.made: list[str] = []
        #: what a cap changed in the type being made, for its field's comment
        self.notes: list[str] = []
        #: an argument's nested class by its fields' shape, for a result of the same shape
        self.shapes: dict[tuple[tuple[str, str, str, bool], ...], str] = {}

    def new_class_name(self, *parts: str) -> str:
        name = class_name(*parts)
        base, n = name, 1
        while name in self.class_names:
            n += 1
            name = f"{base}{n}"
        self.class_names.add(name)
        self.made.append(name)
        return name

    def py_type(self, schema: Any, hint: tuple[str, ...], kind: str, depth: int = 0) -> str:
        if not isinstance(schema, dict):
            return "Any"
        if depth > MAX_DEPTH:
            self.notes.append(f"nested more than {MAX_DEPTH} levels deep: typed Any")
            return "Any"
        enum = schema.get("enum")
        if isinstance(enum, list) and all(isinstance(v, (str, int, bool, type(None))) for v in enum):
            if not enum:
                return "Any"
            if len(enum) <= MAX_LITERALS and all(_literal(v) for v in enum):
                return f"Literal[{', '.join(repr(v) for v in enum)}]"
            self.notes.append(f"one of {len(enum)} values, more than the {MAX_LITERALS} bindings list"
                              if len(enum) > MAX_LITERALS else "values too long to list")
            loose = {k: v for k, v in schema.items() if k != "enum"}
            loose.setdefault("type", _type_of_values(enum))
            return self.py_type(loose, hint, kind, depth)
        const = schema.get("const")
        if isinstance(const, (str, int, bool)) and "const" in schema:
            if _literal(const):
                return f"Literal[{const!r}]"
            self.notes.append("a value too long to show")
            return self.py_type({"type": _type_of_values([const])}, hint, kind, depth)
        kind_ = schema.get("type")
        if isinstance(kind_, list):
            rest = [k for k in kind_ if k != "null"]
            inner = self.py_type({**schema, "type": rest[0]}, hint, kind, depth) if len(rest) == 1 else "Any"
            return f"{inner} | None" if "null" in kind_ and inner != "Any" else inner
        for combo in ("anyOf", "oneOf"):
            if combo in schema and isinstance(schema[combo], list):
                subs = schema[combo]
                if len(subs) > MAX_UNION:
                    self.notes.append(f"{combo} of {len(subs)} options, more than the {MAX_UNION} bindings show: "
                                      "typed Any")
                    return "Any"
                has_null = any(isinstance(s, dict) and s.get("type") == "null" for s in subs)
                types_ = [self.py_type(s, (*hint, f"option{i + 1}"), kind, depth + 1) for i, s in enumerate(subs)
                          if not (isinstance(s, dict) and s.get("type") == "null")]
                unique = list(dict.fromkeys(types_))
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
            return f"list[{self.py_type(schema.get('items'), (*hint, 'item'), kind, depth + 1)}]"
        if kind_ == "object" or (kind_ is None and "properties" in schema):
            properties = schema.get("properties")
            if isinstance(properties, dict) and properties:
                if len(properties) > MAX_PROPERTIES:
                    self.notes.append(f"an object of {len(properties)} properties, more than the {MAX_PROPERTIES} "
                                      "a class takes: a dict")
                    return "dict[str, Any]"
                if len(self.made) >= MAX_CLASSES:
                    self.notes.append(f"past the {MAX_CLASSES} classes one tool's bindings make: a dict")
                    return "dict[str, Any]"
                return self.object_class(schema, hint, kind, depth)
            extra = schema.get("additionalProperties")
            if isinstance(extra, dict):
                return f"dict[str, {self.py_type(extra, (*hint, 'value'), kind, depth + 1)}]"
            return "dict[str, Any]"
        return "Any"

    def object_class(self, schema: dict[str, Any], hint: tuple[str, ...], kind: str, depth: int = 0) -> str:
        """A class for an object schema: `kind` "args" (a tool's Args), "nested" (an object inside
        the arguments) or "result" (the result, or an object inside it)."""
        name = self.new_class_name(*hint)
        inner = "result" if kind == "result" else "nested"
        listed = schema.get("required")
        required = {r for r in listed if isinstance(r, str)} if isinstance(listed, list) else set()
        taken: set[str] = set()
        fields = []
        properties = schema.get("properties")
        for json_name, sub in (properties.items() if isinstance(properties, dict) else ()):
            attr = py_identifier(json_name, taken, reserved=FIELD_RESERVED)
            saved, self.notes = self.notes, []
            typ = self.py_type(sub, (*hint, json_name), inner, depth + 1)
            notes, self.notes = self.notes, saved
            is_required = json_name in required
            if not is_required and typ not in ("Any", "None") and not typ.endswith("| None"):
                typ += " | None"
            desc = sub.get("description", "") if isinstance(sub, dict) else ""
            if not isinstance(desc, str):
                desc = ""
            default = shown_default(sub, typ) if kind == "args" and not is_required else None
            fields.append(Field(attr, json_name, typ, is_required, _field_doc(desc, sub, notes, default is None),
                                shown_default=default))
        description = schema.get("description", "")
        description = description if isinstance(description, str) else ""
        # a result's object of exactly an argument's shape (todowrite's list, sent and returned) is
        # that argument's class: one class to read, not two alike
        shape = tuple((f.attr, f.json_name, f.type, f.required) for f in fields)
        same = self.shapes.get(shape) if kind == "result" else None
        if same is not None and not description:
            self.made.remove(name)
            self.class_names.discard(name)
            return same
        if kind == "nested" and fields:
            self.shapes.setdefault(shape, name)
        # nested classes were appended by py_type above, so they come before this one
        self.classes.append(_Class(name, description, fields, kind=kind))
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

    def unshadow(self) -> None:
        """No field takes the name of one of this piece's classes: its value (None, or its
        `attrs.field(...)`) would be what a later annotation of its class reads for that name
        (`b: RtTArgsB | None` beside a field `RtTArgsB` became `None | None`)."""
        names = set(self.made)
        for cls in self.classes:
            taken = {f.attr for f in cls.fields}
            for f in cls.fields:
                if f.attr in names:
                    f.attr = py_identifier(f.attr + "_", taken | names, reserved=FIELD_RESERVED)
                    taken.add(f.attr)


def _render_source_class(cls: _Class) -> str:
    if cls.alias_of is not None:
        return f"{cls.name} = {cls.alias_of}"
    out = [DECORATOR, f"class {cls.name}(_Record):"]
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
        parts.append(f"JSON name {visible(repr(_cut(f.json_name, MAX_LITERAL_CHARS)))}")
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
    out = [head]
    doc = _doc(_one_line(cls.description), "    ", MAX_STUB_DOC_CHARS)
    if doc:
        out.append(doc.rstrip("\n"))
    # fields with nothing to say share a line (`pid: int; name: str`): each line costs the model
    plain: list[str] = []
    for f in cls.fields:
        line = _field_comment(f, f"    {f.param()}")
        if "#" not in line:
            plain.append(f.param())
            continue
        if plain:
            out.append("    " + "; ".join(plain))
            plain = []
        out.append(line)
    if plain:
        out.append("    " + "; ".join(plain))
    if not cls.fields:
        out.append("    pass")
    if len(out) == 2 and not doc:  # `class ListResult: path: str; truncated: bool`
        return f"{head} {out[1].strip()}" if "#" not in out[1] else "\n".join(out)
    return "\n".join(out)


def _signature(fname: str, params: list[Field], result: str) -> str:
    inner = ", ".join(p.param() for p in params)
    return f"{fname}(*, {inner}) -> {result}" if params else f"{fname}() -> {result}"


def script_description(tool: ToolDef) -> str:
    """What a tool says to scripts: its `code_description`, or else its description."""
    text = getattr(tool, "code_description", None)
    return text if isinstance(text, str) and text.strip() else (tool.description or "")


def function_name(tool_name: str) -> str:
    """The Python name of tool `tool_name` in `tools` (before collisions are settled)."""
    return py_identifier(tool_name)


@attrs.define(eq=False)
class ToolPiece:
    """One tool's part of the bindings, made without knowing the other tools: its classes, its
    function (and the tool's aliases, each one line: `bash = shell`), their source, checked and
    compiled (`code`), and its stub."""

    tool: ToolDef
    fname: str
    classes: list[_Class]
    class_names: frozenset[str]  # the classes and aliases it defines
    args_class: str
    result: str
    result_fields: tuple[str, ...] | None
    params: list[Field]
    class_source: str  # its classes, as the module's source
    function_source: str  # its function (and its aliases), as the module's source
    function_stub: str  # its function's stub, what a note says first included
    stub_classes: str = ""  # the classes the model needs (the result's, the nested arguments'), as stubs
    code: types.CodeType | None = None  # its source, compiled once it passed the check (set by make_piece)
    loose: bool = False  # its schemas were past the caps: keywords go as they are
    note: str = ""  # why its function does not have its own name (`foo_bar_2`), where it does not
    #: (alias, its Python name) for each of the tool's aliases bound to its function
    aliases: tuple[tuple[str, str], ...] = ()

    @property
    def names(self) -> list[str]:
        """Every name it defines in `tools`."""
        return [*sorted(self.class_names), self.fname, *(fname for _, fname in self.aliases)]

    @property
    def source(self) -> str:
        return (self.class_source + "\n\n\n" if self.class_source else "") + self.function_source

    @property
    def stub(self) -> str:
        """Its function's stub, its aliases' lines, then the classes the model needs: what
        `run_code_api` returns."""
        lines = "".join(f"\n{alias} = {self.fname}" for _, alias in self.aliases)
        return self.function_stub + lines + ("\n\n" + self.stub_classes if self.stub_classes else "")


def _reason_text(text: object) -> str:
    return visible(_cut(str(text), 600))


@attrs.define(eq=False)
class LeftOut:
    """A tool that is not in the bindings, and why (its piece failed, or its name is another's)."""

    tool: ToolDef
    reason: str = attrs.field(converter=_reason_text)


def _summary(description: str) -> str:
    """A function's docstring in the stubs: the first paragraph of its description, in full
    (up to MAX_STUB_DOC_CHARS)."""
    first = _cut(description.strip().split("\n\n")[0], MAX_STUB_DOC_CHARS) if description else ""
    if max((len(line) for line in first.splitlines()), default=0) <= COMMENT_WIDTH:
        return first
    return "\n".join(textwrap.wrap(" ".join(first.split()), COMMENT_WIDTH - 4, break_long_words=False,
                                    break_on_hyphens=False))


def _function_source(fname: str, tool: str, args_class: str | None, result: str, description: str) -> str:
    arg_type = f"{args_class} | None" if args_class else "dict[str, Any] | None"
    return (f"def {fname}(args: {arg_type} = None, /, **kwargs: Any) -> {result}:\n{_doc(description, '    ')}"
            f"    return _call({tool!r}, {args_class or 'None'}, args, kwargs, {result})")


def _function_stub(fname: str, params: list[Field], result: str, summary: str) -> str:
    """`def f(*, a: int, b: str = '.') -> R:` on one line, then one docstring: the tool's summary,
    then one line per argument that has something to say (`a: what it is. At least 1.`)."""
    inner = ", ".join(p.param() for p in params)
    head = f"def {fname}(*, {inner}) -> {result}:" if params else f"def {fname}() -> {result}:"
    if len(head) > COMMENT_WIDTH:  # one argument a line
        head = "\n".join([f"def {fname}(", "    *,", *(f"    {p.param()}," for p in params), f") -> {result}:"])
    lines = [summary.strip()] if summary.strip() else []
    for p in params:
        said = [f"JSON name {visible(repr(_cut(p.json_name, MAX_LITERAL_CHARS)))}"] if p.attr != p.json_name else []
        said += [p.doc] if p.doc else []
        if said:  # a long one wrapped, as the summary is: every line break costs, but so does width
            lines += textwrap.wrap(f"{p.attr}: " + "; ".join(said), COMMENT_WIDTH - 4, break_long_words=False,
                                   break_on_hyphens=False, subsequent_indent="  ")
    return f"{head}\n{_docstring(lines, '    ')}" if lines else f"{head}\n    ..."


def _docstring(lines: list[str], indent: str) -> str:
    """A docstring of `lines` (escaped as `_doc` escapes), its quotes on its first and last line:
    single quotes, which the JSON of a declaration carries as they are (`\\"` costs a token)."""
    text = "\n".join(lines)
    text = visible(_cut(text, MAX_STUB_BYTES)).replace("\\", "\\\\").replace("'''", '"""')
    if text.endswith("'"):
        text = text[:-1] + "\\'"
    return indent + "'''" + textwrap.indent(text, indent).lstrip(" ") + "'''"


def _loose_piece(tool: ToolDef, fname: str, why: str) -> ToolPiece:
    """The piece of a tool whose schemas are past what a stub may hold: its function takes its
    arguments as keywords (its JSON names) or a dict, unchecked here (the host validates them),
    and returns what the tool returns, as JSON (or `Result` without an output schema)."""
    result = "Result" if tool.output_schema is None else "Any"
    description = script_description(tool)
    properties = (tool.input_schema or {}).get("properties")
    names = [visible(repr(_cut(str(n), MAX_NAME_CHARS))) for n in properties] if isinstance(properties, dict) else []
    listed = ", ".join(names)
    if len(listed) > MAX_STUB_DOC_CHARS:
        listed = listed[:MAX_STUB_DOC_CHARS].rsplit(", ", 1)[0] + f", ... ({len(names)} in all)"
    note = f"# {why}: pass its arguments as keywords (or one dict), by their JSON names; they are not checked here"
    if listed:
        note += f"\n# its arguments: {listed}"
    stub = f"{note}\ndef {fname}(**arguments: Any) -> {result}:\n{_doc(_summary(description), '    ', MAX_STUB_DOC_CHARS)}    ..."
    return ToolPiece(tool=tool, fname=fname, classes=[], class_names=frozenset(), args_class="dict", result=result,
                     result_fields=RESULT_FIELDS if result == "Result" else None, params=[], class_source="",
                     function_source=_function_source(fname, tool.name, None, result, description),
                     function_stub=stub, loose=True)


def _full_piece(tool: ToolDef, fname: str, taken: Iterable[str]) -> ToolPiece:
    gen = _Generator(taken)
    schema = dict(tool.input_schema or {"type": "object"})
    schema.setdefault("type", "object")
    if not schema.get("properties"):
        schema["properties"] = {}
    schema.pop("description", None)
    count = len(schema["properties"]) if isinstance(schema["properties"], dict) else 0
    if count > MAX_PROPERTIES:
        raise _TooBig(f"its input schema has {count} properties, more than the {MAX_PROPERTIES} a class takes")
    args_cls = gen.object_class(schema, (tool.name, "args"), "args")
    result = "Result"
    if tool.output_schema is not None:  # a note on the result's own type goes with the docstring
        result = gen.alias(gen.py_type(tool.output_schema, (tool.name, "result"), "result"), tool.name, "result")
    gen.unshadow()
    result_fields: tuple[str, ...] | None = RESULT_FIELDS
    if tool.output_schema is not None:
        cls = next((c for c in gen.classes if c.name == result), None)
        result_fields = tuple(f.attr for f in cls.fields) if cls is not None and cls.alias_of is None else None
    args = next(c for c in gen.classes if c.name == args_cls)
    shown = [c for c in gen.classes if c.kind != "args"]
    description = script_description(tool)
    notes = "".join(f"\n({note})" for note in dict.fromkeys(gen.notes))
    piece = ToolPiece(tool=tool, fname=fname, classes=gen.classes, class_names=frozenset(gen.made),
                      args_class=args_cls, result=result, result_fields=result_fields, params=args.fields,
                      class_source="\n\n\n".join(_render_source_class(c) for c in gen.classes),
                      function_source=_function_source(fname, tool.name, args_cls, result, description),
                      function_stub=_function_stub(fname, args.fields, result, _summary(description) + notes),
                      stub_classes="\n\n".join(_render_stub_class(c) for c in shown))
    size = len(piece.stub.encode("utf-8", "surrogatepass"))
    if size > MAX_STUB_BYTES:
        raise _TooBig(f"its stub would take {size} bytes, more than the {MAX_STUB_BYTES} one tool's may")
    return piece


class _TooBig(Exception):
    """A tool's schemas are past what one piece may hold: it gets a loose piece instead."""


def alias_names(tool: ToolDef) -> tuple[tuple[str, str], ...]:
    """(alias, its Python name) for each of the tool's aliases (before collisions are settled)."""
    aliases = getattr(tool, "aliases", ()) or ()
    return tuple((alias, function_name(alias)) for alias in aliases)


def make_piece(tool: ToolDef, taken: Iterable[str] = (), fname: str | None = None, note: str = "",
               aliases: tuple[tuple[str, str], ...] | None = None) -> ToolPiece | LeftOut:
    """One tool's piece, with class names outside `taken` (and its function called `fname`, the
    stub saying `note` first, where the tool cannot have its own name; `aliases` bound, by
    default all the tool's): the full piece, or past the caps a loose one, checked and compiled;
    or, when that fails, the tool left out with the reason. Never raises: one tool's metadata
    cannot stop the others' bindings."""
    fname = fname or function_name(tool.name)
    try:
        try:
            piece = _full_piece(tool, fname, taken)
        except _TooBig as exc:
            piece = _loose_piece(tool, fname, str(exc))
        piece.aliases = alias_names(tool) if aliases is None else aliases
        piece.function_source += "".join(f"\n\n\n{alias} = {fname}" for _, alias in piece.aliases)
        if note:
            piece.note = visible(_one_line(note))
            piece.function_stub = f"# {piece.note}\n{piece.function_stub}"
        piece.code = check_piece(piece.source, tool.name, fname, piece.class_names,
                                 aliases=[alias for _, alias in piece.aliases])
        check_stub(piece.stub, set(piece.names))
        return piece
    except PieceRejected as exc:
        return LeftOut(tool, f"its bindings failed their check: {exc}")
    except Exception as exc:  # noqa: BLE001 - whatever the metadata made the generator do (RecursionError ...)
        return LeftOut(tool, f"its bindings could not be made: {type(exc).__name__}: {_cut(str(exc), 300)}")


SOURCE_HEADER = (
    '"""Typed bindings for the tools of this Nexus (generated)."""\n\n'
    "from typing import Any, Literal\n\n"
    "import attrs\n\n"
    "from _nexus_rt import Record as _Record, Result, ToolError, ToolFailed, ToolVetoed, call_tool as _call\n"
)

#: what the stubs start with: nothing, the tools' contract (keywords, results as objects, the
#: error classes, `Result`) is run_code's description's, said once there whether it lists the
#: stubs or the groups
STUB_HEADER = ""


class Bindings:
    """The `tools` module of one registry: its functions, the tools left out and why, and (made
    when first asked for) its stubs, what the child gets of it, and what the static check needs
    to know of it."""

    def __init__(self, pieces: list[ToolPiece], left_out: list[LeftOut] | None = None,
                 renamed: dict[str, str] | None = None) -> None:
        #: (python function name, piece), sorted by tool name
        self.pieces = [(piece.fname, piece) for piece in pieces]
        #: python function name -> tool name (an alias's function -> its tool's name)
        self.functions: dict[str, str] = {piece.fname: piece.tool.name for piece in pieces}
        self.by_tool: dict[str, tuple[str, ToolPiece]] = {piece.tool.name: (piece.fname, piece) for piece in pieces}
        #: a tool's alias bound in the bindings -> (its Python name, the tool's name)
        self.aliases: dict[str, tuple[str, str]] = {}
        for piece in pieces:
            for alias, fname in piece.aliases:
                self.aliases[alias] = (fname, piece.tool.name)
                self.functions[fname] = piece.tool.name
        #: tool name -> why it is not in the bindings
        self.left_out: dict[str, str] = {gone.tool.name: gone.reason for gone in left_out or ()}
        #: tool name -> the note on why its function is not called by its own Python name
        self.renamed: dict[str, str] = dict(renamed or {})
        #: the Python name a left-out tool would have had -> the tool and why it has not
        self.left_out_names: dict[str, tuple[str, str]] = {
            function_name(gone.tool.name): (gone.tool.name, gone.reason) for gone in left_out or ()}

    @functools.cached_property
    def payload(self) -> protocol.BindingsPayload:
        """What a child needs to make `tools`: each piece's names and source (it executes a
        piece when the script first uses one of its names), and the signatures for errors."""
        return {
            "pieces": [{"tool": piece.tool.name, "function": fname, "names": piece.names, "source": piece.source}
                       for fname, piece in self.pieces],
            "signatures": {piece.tool.name: self.api[fname].signature for fname, piece in self.pieces},  # (by tool name)
        }

    @functools.cached_property
    def source(self) -> str:
        """The whole module as one source (what a reader or a type checker would look at; the
        child executes the pieces one by one). The classes come first, so that a function called
        `list` or `str` shadows no type a later piece names."""
        parts = [piece.class_source for _, piece in self.pieces if piece.class_source]
        parts += [piece.function_source for _, piece in self.pieces]
        parts.append(f"_SIGNATURES = {self.payload['signatures']!r}")
        return SOURCE_HEADER + "\n\n" + "\n\n\n".join(parts) + "\n"

    @functools.cached_property
    def stubs(self) -> str:
        note = self.left_out_note()
        if not self.pieces:
            return STUB_HEADER + note + "# (no tools registered)\n"
        return STUB_HEADER + note + "\n\n\n".join(piece.stub for _, piece in self.pieces) + "\n"

    def left_out_note(self) -> str:
        """The description's lines about the tools left out and renamed, if any."""
        return left_out_note(self.left_out, self.renamed)

    def stub_of(self, tool_name: str) -> str:
        """The stub of a tool (or the one line of an alias: `bash = shell`)."""
        if tool_name in self.aliases:
            fname, tool = self.aliases[tool_name]
            return f"{fname} = {self.by_tool[tool][0]}"
        return self.by_tool[tool_name][1].stub

    @functools.cached_property
    def callable_names(self) -> frozenset[str]:
        """Every name a call from a script may give: each bound tool's, and its aliases'."""
        return frozenset(self.by_tool) | frozenset(self.aliases)

    @functools.cached_property
    def api(self) -> dict[str, FunctionApi]:
        """Each function of `tools` (an alias's as its tool's), as the static check needs it."""
        return {
            name: FunctionApi(
                name=name, tool=piece.tool.name, args_class=piece.args_class, result=piece.result,
                result_fields=piece.result_fields, params={p.attr: p.required for p in piece.params},
                signature=(f"{name}(**arguments: Any) -> {piece.result}" if piece.loose
                           else _signature(name, piece.params, piece.result)),
                loose=piece.loose)
            for fname, piece in self.pieces for name in (fname, *(alias for _, alias in piece.aliases))
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


def left_out_note(left_out: Iterable[str], renamed: Iterable[str] = ()) -> str:
    """The description's lines about the tools left out of the bindings and those bound under
    another name, if any."""
    out = ""
    for names, what in ((sorted(left_out), "left out of the bindings (their metadata could not be made "
                                           "into them; nexus doctor says why)"),
                        (sorted(renamed), "bound under another name (their Python name is another's; "
                                          "each stub says which)")):
        if names:
            shown = ", ".join(names[:8]) + (f", and {len(names) - 8} more" if len(names) > 8 else "")
            out += f"# {_plural(len(names), 'tool')} {what}: {visible(shown)}\n"
    return out


class BindingsCache:
    """Pieces per tool, kept across registry changes: a new tool costs its own piece only."""

    def __init__(self) -> None:
        self._pieces: dict[str, ToolPiece | LeftOut] = {}
        self._lock = threading.Lock()
        self._reported: set[tuple[str, str]] = set()

    def piece(self, tool: ToolDef) -> ToolPiece | LeftOut:
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
        """The bindings of `tools` (already filtered), names settled across tools:

        - class names: a tool whose name is exactly its Python name first, then by name, each
          keeps its class names unless an earlier tool has them, else it is generated again with
          other names;
        - function names: where two tools map to one Python name (`github_enterprise-create_issue`
          of MCP server `github`, `create_issue` of server `github_enterprise`), the one whose name
          is exactly that keeps it, and none where none is; the others, and a function that would
          take a class's name, are bound as `name_2`, ... with a first line in their stub saying
          whose name it is, and are reported (`renamed`: nexus doctor, the description). No tool
          takes another's name, and none is renamed without a word: a script's arguments meant
          for one must not reach the other."""
        left_out: list[LeftOut] = []
        made: list[ToolPiece] = []
        for tool in tools:
            piece = self.piece(tool)
            if isinstance(piece, ToolPiece):
                made.append(piece)
            else:
                left_out.append(piece)
        # who cannot have its function's name, and why (by tool name)
        why_not: dict[str, str] = {}
        contested: set[str] = set()
        by_fname: dict[str, list[ToolPiece]] = {}
        for piece in made:
            by_fname.setdefault(piece.fname, []).append(piece)
        for fname, group in by_fname.items():
            if len(group) < 2:
                continue
            contested.add(fname)
            owner = next((p.tool.name for p in group if p.tool.name == fname), None)
            names = ", ".join(repr(p.tool.name) for p in sorted(group, key=lambda p: p.tool.name))
            for piece in group:
                if piece.tool.name != owner:
                    why_not[piece.tool.name] = (
                        f"its Python name tools.{fname} is the name of tool {owner!r}" if owner is not None else
                        f"tools {names} all map to the Python name tools.{fname}, which is none of theirs exactly")
        # class names, first come first named
        classes: set[str] = set(RUNTIME_NAMES)
        placed: list[ToolPiece] = []
        for piece in sorted(made, key=lambda p: (p.tool.name != p.fname, p.tool.name)):
            if piece.class_names & classes:
                again = make_piece(piece.tool, classes)  # rare: not cached, it depends on the others
                if isinstance(again, LeftOut):
                    left_out.append(again)
                    continue
                piece = again
            classes |= piece.class_names
            placed.append(piece)
        for piece in placed:
            if piece.fname in classes and piece.tool.name not in why_not:
                why_not[piece.tool.name] = f"its Python name tools.{piece.fname} is a class of another tool's bindings"
                contested.add(piece.fname)
        # the functions that cannot have their name get the next free one, said in their stub
        used = classes | contested | {p.fname for p in placed if p.tool.name not in why_not}
        settled: list[ToolPiece] = []
        renamed: dict[str, str] = {}
        for piece in sorted(placed, key=lambda p: p.tool.name):
            why = why_not.get(piece.tool.name)
            if why is None:
                settled.append(piece)
                continue
            fname = py_identifier(piece.fname, used)
            note = f"tool {piece.tool.name!r} is tools.{fname} here: {why}"
            again = make_piece(piece.tool, classes - piece.class_names, fname=fname, note=note)
            if isinstance(again, LeftOut):
                left_out.append(again)
                continue
            renamed[piece.tool.name] = again.note
            settled.append(again)
        # a tool's aliases last: each is one line (`bash = shell`) unless its Python name is taken
        used = classes | {p.fname for p in settled}
        bound: list[ToolPiece] = []
        for piece in settled:
            kept = []
            for alias, fname in alias_names(piece.tool):
                if fname in used:
                    renamed[alias] = (f"alias {alias!r} of tool {piece.tool.name!r} is not in the bindings: its Python "
                                      f"name tools.{fname} is taken (call tools.{piece.fname})")
                    continue
                used.add(fname)
                kept.append((alias, fname))
            if tuple(kept) != piece.aliases:
                again = make_piece(piece.tool, classes - piece.class_names, fname=piece.fname, note=piece.note,
                                   aliases=tuple(kept))
                if isinstance(again, LeftOut):
                    left_out.append(again)
                    continue
                piece = again
            bound.append(piece)
        left_out.sort(key=lambda g: g.tool.name)
        self._report(left_out, renamed)
        return Bindings(bound, left_out, renamed)

    def _report(self, left_out: list[LeftOut], renamed: dict[str, str]) -> None:
        """Log each tool left out or renamed, once for each reason (nexus doctor lists them all)."""
        said = [(gone.tool.name, f"left out of the bindings: {gone.reason}") for gone in left_out]
        said += [(name, note) for name, note in renamed.items()]
        for key in said:
            with self._lock:
                new = key not in self._reported
                self._reported.add(key)
            if new:
                log.warning("run_code: tool %r: %s", *key)


def generate(tools: Iterable[ToolDef], skip: Iterable[str] = ()) -> Bindings:
    """Bindings for `tools`, leaving out the names in `skip` (run_code itself) and the tools a
    script may not call (`exposure` "direct")."""
    skip_set = set(skip)
    return BindingsCache().assemble(t for t in tools if t.name not in skip_set and t.exposure != "direct")
