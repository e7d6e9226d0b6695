"""Typed bindings for run_code: the `tools` module, generated as Python source from the registry
(runs in the host; the child compiles the source, child/runtime.py).

One `@attrs.define` class per argument schema and per output schema (nested objects become nested
classes), one function per tool. The same pieces, with `...` bodies, are the stubs the model reads
in run_code's description. Source, not `attrs.make_class`: it is what the model reads, what a type
checker understands and what a traceback can point at.
"""

from __future__ import annotations

import keyword
import re
import textwrap
import unicodedata
from collections.abc import Iterable
from typing import Any

import attrs

from nexus_core import ToolDef

#: names the runtime defines in `tools`; a tool or class may not take them
RUNTIME_NAMES = frozenset({"Result", "ToolError", "ToolVetoed", "ToolFailed", "attrs", "Any", "Literal", "_call"})
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


def _one_line(text: str, limit: int = 100) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _doc(text: str, indent: str) -> str:
    text = text.strip().replace("\\", "\\\\").replace('"""', "'''")
    if not text:
        return ""
    if text.endswith('"'):  # `"""Say "hi""""` does not compile
        text = text[:-1] + '\\"'
    if "\n" not in text:
        return f'{indent}"""{text}"""\n'
    return f'{indent}"""\n{textwrap.indent(text, indent)}\n{indent}"""\n'


@attrs.define
class _Class:
    name: str
    description: str
    fields: list[tuple[str, str, str, bool, str]]  # (attr name, json name, type, required, desc)
    #: set for a type alias (`SearchResult = list[str]`) instead of a class
    alias_of: str | None = None


@attrs.define
class Bindings:
    """The generated `tools` source, its stubs, and which tool each function calls."""

    source: str
    stubs: str
    functions: dict[str, str]  # python function name -> tool name


class _Generator:
    def __init__(self) -> None:
        self.classes: list[_Class] = []
        self.class_names: set[str] = set(RUNTIME_NAMES)

    def new_class_name(self, *parts: str) -> str:
        name = class_name(*parts)
        base, n = name, 1
        while name in self.class_names:
            n += 1
            name = f"{base}{n}"
        self.class_names.add(name)
        return name

    def py_type(self, schema: Any, hint: tuple[str, ...]) -> str:
        if not isinstance(schema, dict):
            return "Any"
        if "enum" in schema and all(isinstance(v, (str, int, bool, type(None))) for v in schema["enum"]):
            return f"Literal[{', '.join(repr(v) for v in schema['enum'])}]" if schema["enum"] else "Any"
        if "const" in schema and isinstance(schema["const"], (str, int, bool)):
            return f"Literal[{schema['const']!r}]"
        kind = schema.get("type")
        if isinstance(kind, list):
            rest = [k for k in kind if k != "null"]
            inner = self.py_type({**schema, "type": rest[0]}, hint) if len(rest) == 1 else "Any"
            return f"{inner} | None" if "null" in kind and inner != "Any" else inner
        for combo in ("anyOf", "oneOf"):
            if combo in schema and isinstance(schema[combo], list):
                subs = schema[combo]
                has_null = any(isinstance(s, dict) and s.get("type") == "null" for s in subs)
                types = [self.py_type(s, (*hint, f"option{i + 1}")) for i, s in enumerate(subs)
                         if not (isinstance(s, dict) and s.get("type") == "null")]
                unique = list(dict.fromkeys(types))
                inner = "Any" if "Any" in unique or not unique else " | ".join(unique)
                return f"{inner} | None" if has_null and inner != "Any" else inner
        if kind == "string":
            return "str"
        if kind == "integer":
            return "int"
        if kind == "number":
            return "float"
        if kind == "boolean":
            return "bool"
        if kind == "null":
            return "None"
        if kind == "array":
            return f"list[{self.py_type(schema.get('items'), (*hint, 'item'))}]"
        if kind == "object" or (kind is None and "properties" in schema):
            if schema.get("properties"):
                return self.object_class(schema, hint)
            extra = schema.get("additionalProperties")
            return f"dict[str, {self.py_type(extra, (*hint, 'value'))}]" if isinstance(extra, dict) else "dict[str, Any]"
        return "Any"

    def object_class(self, schema: dict[str, Any], hint: tuple[str, ...]) -> str:
        name = self.new_class_name(*hint)
        required = set(schema.get("required") or [])
        taken: set[str] = set()
        fields = []
        for json_name, sub in (schema.get("properties") or {}).items():
            attr = py_identifier(json_name, taken, reserved=FIELD_RESERVED)
            typ = self.py_type(sub, (*hint, json_name))
            desc = sub.get("description", "") if isinstance(sub, dict) else ""
            fields.append((attr, json_name, typ, json_name in required, desc))
        # nested classes were appended by py_type above, so they come before this one
        self.classes.append(_Class(name, schema.get("description", ""), fields))
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

    def render_class(self, cls: _Class, stub: bool) -> str:
        if cls.alias_of is not None:
            return f"{cls.name} = {cls.alias_of}"
        out = ["@attrs.define(kw_only=True)", f"class {cls.name}:"]
        doc = _doc(cls.description if not stub else _one_line(cls.description), "    ")
        if doc:
            out.append(doc.rstrip("\n"))
        for attr, json_name, typ, required, desc in cls.fields:
            if not required and typ not in ("Any", "None") and not typ.endswith("| None"):
                typ += " | None"
            renamed = attr != json_name
            # attrs drops a leading underscore from the __init__ keyword (`_id` becomes `id`, and
            # `_2fa` becomes `2fa`, which does not compile): keep the name the stubs show
            private = attr.startswith("_")
            if (renamed or private) and not stub:
                opts = [] if required else ["default=None"]
                if private:
                    opts.append(f"alias={attr!r}")
                if renamed:
                    opts.append(f"metadata={{'json': {json_name!r}}}")
                line = f"    {attr}: {typ} = attrs.field({', '.join(opts)})"
            else:
                line = f"    {attr}: {typ}" + ("" if required else " = None")
            if stub and renamed:
                line += f"  # JSON name {json_name!r}"
            if stub and desc:
                line += ("; " if renamed else "  # ") + _one_line(desc, 80)
            out.append(line)
        if not cls.fields:
            out.append("    pass")
        return "\n".join(out)


def generate(tools: Iterable[ToolDef], skip: Iterable[str] = ()) -> Bindings:
    """Bindings for `tools`, leaving out the names in `skip` (run_code itself)."""
    skip_set = set(skip)
    gen = _Generator()
    typed: list[tuple[ToolDef, str, str]] = []  # (tool, args class, result type)
    for tool in sorted(tools, key=lambda t: t.name):
        if tool.name in skip_set:
            continue
        schema = dict(tool.input_schema or {"type": "object"})
        schema.setdefault("type", "object")
        if not schema.get("properties"):
            schema["properties"] = {}
        schema.pop("description", None)
        args_cls = gen.object_class(schema, (tool.name, "args"))
        if tool.output_schema is not None:
            result_type = gen.alias(gen.py_type(tool.output_schema, (tool.name, "result")), tool.name, "result")
        else:
            result_type = "Result"
        typed.append((tool, args_cls, result_type))

    # the functions come after every class and alias, and may not take their names (a tool
    # called `EchoArgs` would replace the class that `echo` needs)
    funcs: list[tuple[str, str, str, str, str]] = []  # (py name, tool name, args cls, result type, doc)
    taken: set[str] = set(RUNTIME_NAMES) | gen.class_names
    mapping: dict[str, str] = {}
    for tool, args_cls, result_type in typed:
        fname = py_identifier(tool.name, taken)
        funcs.append((fname, tool.name, args_cls, result_type, tool.description))
        mapping[fname] = tool.name

    def render(stub: bool) -> str:
        parts = [gen.render_class(c, stub) for c in gen.classes]
        for fname, tname, args_cls, result_type, desc in funcs:
            sig = f"def {fname}(args: {args_cls} | None = None, /, **kwargs: Any) -> {result_type}:"
            if stub:
                first = desc.strip().split("\n\n")[0] if desc else ""
                parts.append(f"{sig}\n{_doc(_one_line(first, 240), '    ') or ''}    ...")
            else:
                parts.append(
                    f"{sig}\n{_doc(desc, '    ')}"
                    f"    return _call({tname!r}, {args_cls}, args, kwargs, {result_type})"
                )
        return "\n\n\n".join(parts)

    header = (
        '"""Typed bindings for the tools of this Nexus (generated)."""\n\n'
        "from typing import Any, Literal\n\n"
        "import attrs\n\n"
        "from _nexus_rt import Result, ToolError, ToolFailed, ToolVetoed, call_tool as _call\n"
    )
    stub_header = (
        "# tools: call them as tools.NAME(tools.NAMEArgs(...)) or tools.NAME(field=...).\n"
        "# A veto raises tools.ToolVetoed, a failure tools.ToolFailed (both tools.ToolError).\n"
        "# Tools without an output schema return tools.Result(output, error, output_file).\n"
    )
    source = header + "\n\n" + render(stub=False) + "\n"
    stubs = stub_header + "\n" + render(stub=True) + "\n" if funcs else stub_header + "# (no tools registered)\n"
    return Bindings(source=source, stubs=stubs, functions=mapping)
