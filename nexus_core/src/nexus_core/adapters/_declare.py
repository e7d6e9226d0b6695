"""Tool declarations in each provider's format (`nx.schemas(format, **options)`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypedDict

import attrs

from .._models import ToolDef
from ._common import PROVIDER, check_format
from ._gemini import GeminiSchemaError, gemini_json_schema, gemini_schema
from ._strict import StrictSchemaError, strict_schema

#: ToolDef.annotations keys that MCP defines as ToolAnnotations
_MCP_ANNOTATIONS = ("title", "readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint")

AllowedCallers = Sequence[str] | Mapping[str, Sequence[str]]


class SchemaOptions(TypedDict, total=False):
    """The keyword options of `to_provider_schemas` / `Nexus.schemas`, each for some formats."""

    #: "openai", "openai-responses": declare every tool in strict mode (schemas rewritten to its rules)
    strict: bool
    #: "anthropic", "openai-responses": who may call the tools (e.g. the provider's code execution)
    allowed_callers: AllowedCallers | None
    #: "gemini": None (per tool, as needed), True (always) or False (never) `parametersJsonSchema`
    json_schema: bool | None


#: the formats that take each option of `to_provider_schemas`
OPTION_FORMATS: dict[str, tuple[str, ...]] = {
    "strict": ("openai", "openai-responses"),
    "allowed_callers": ("anthropic", "openai-responses"),
    "json_schema": ("gemini",),
}


def _object_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """Every provider wants an object schema at the top; a schema with no type gets one."""
    out = dict(schema)
    if "type" not in out:
        out = {"type": "object", **out}
    return out


#: the mark of an MCP outputSchema that wraps a result that is not an object (FastMCP's own,
#: so that its clients unwrap it as they do for FastMCP servers)
WRAP_RESULT = "x-fastmcp-wrap-result"


def is_object_schema(schema: Mapping[str, Any]) -> bool:
    kind = schema.get("type")
    return kind == "object" or (kind is None and "properties" in schema and not (
        {"anyOf", "oneOf", "enum", "const"} & set(schema)))


def mcp_output_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """An output schema as MCP's `outputSchema`, which must describe an object: an object schema
    as it is, any other (`-> int`, `-> list[str]`) wrapped as `{"result": ...}`, the way FastMCP
    does (the result's structuredContent is then wrapped too: see format_tool_result)."""
    if is_object_schema(schema):
        return _object_schema(schema)
    return {"type": "object", "properties": {"result": dict(schema)}, "required": ["result"], WRAP_RESULT: True}


def with_aliases(tools: Iterable[ToolDef]) -> tuple[list[ToolDef], dict[str, str]]:
    """What a model is offered: each tool, and after it one declaration per alias (a name the
    model may call it by: the same schemas, the description saying which tool it is). Also
    returns declared name -> the tool's canonical name."""
    out: list[ToolDef] = []
    canonical: dict[str, str] = {}
    for t in tools:
        out.append(t)
        canonical[t.name] = t.name
        for alias in t.aliases:
            out.append(attrs.evolve(t, name=alias, aliases=(),
                                    description=f"{t.description}\n(Same tool as `{t.name}`.)".lstrip("\n")))
            canonical[alias] = t.name
    return out, canonical


def to_provider_schemas(tools: Iterable[ToolDef], format: str, *, strict: bool = False,
                        allowed_callers: AllowedCallers | None = None,
                        json_schema: bool | None = None) -> list[dict[str, Any]]:
    """`tools` in the named provider's tool-declaration format.

    - "openai" (Chat Completions): `[{"type": "function", "function": {name, description,
      parameters, strict?}}]`
    - "openai-responses" (Responses API): `[{"type": "function", name, description, parameters,
      strict, allowed_callers?}]`; `strict` is always written, as the Responses API treats a
      function without it as strict
    - "anthropic": `[{name, description, input_schema, allowed_callers?}]`
    - "gemini": `[{"functionDeclarations": [...]}]`, one element even with no tools; each
      declaration has `parameters` in Gemini's schema subset (see `gemini_schema`), or
      `parametersJsonSchema` where that subset cannot express the tool's schema
    - "mcp": MCP `Tool` objects: `{name, description, inputSchema, outputSchema?, annotations?}`

    A tool with `aliases` is declared once per name (each alias after it, "(Same tool as
    `<name>`.)" ending its description), since a model may call it by any of them.

    Options (an option a format does not have is an error, not ignored):

    - `strict=True` ("openai", "openai-responses"): every schema rewritten to OpenAI's
      strict-mode rules and declared `strict: true`; a tool that cannot be is reported, by
      name, in one `StrictSchemaError` for all of them.
    - `allowed_callers` ("anthropic", "openai-responses"): the provider's `allowed_callers`,
      which lets the provider's own code execution call the tools. A list (the provider's
      own values, e.g. `["direct", "code_execution_20250825"]` for Anthropic, `["direct",
      "programmatic"]` for OpenAI) applies to every tool; a mapping of tool name to list to
      the tools it names (a name that is not among `tools` is an error; a tool's name covers
      its aliases).
    - `json_schema` ("gemini"): None (the default) declares `parametersJsonSchema` only for the
      tools Gemini's `parameters` subset cannot express; True for every tool; False never
      (such a tool raises `GeminiSchemaError` naming it).
    """
    check_format(format)
    tools, canonical = with_aliases(tools)
    given = {"strict": strict, "allowed_callers": allowed_callers, "json_schema": json_schema}
    for option, value in given.items():
        if value not in (None, False) and format not in OPTION_FORMATS[option]:
            formats = " and ".join(repr(f) for f in OPTION_FORMATS[option])
            raise ValueError(f"{PROVIDER[format]} tools ({format!r}) have no {option!r} option; it is for {formats}")
    callers = _allowed_callers(tools, allowed_callers, canonical)

    if format in ("openai", "openai-responses"):
        parameters = {t.name: _object_schema(t.input_schema) for t in tools}
        if strict:
            problems: list[tuple[str, str, str]] = []
            for t in tools:
                try:
                    parameters[t.name] = strict_schema(parameters[t.name], tool=t.name)
                except StrictSchemaError as exc:
                    problems.extend(exc.problems)
            if problems:
                raise StrictSchemaError(problems)
        if format == "openai":
            out = []
            for t in tools:
                function: dict[str, Any] = {"name": t.name, "description": t.description,
                                            "parameters": parameters[t.name]}
                if strict:
                    function["strict"] = True
                out.append({"type": "function", "function": function})
            return out
        out = []
        for t in tools:
            entry: dict[str, Any] = {"type": "function", "name": t.name, "description": t.description,
                                     "parameters": parameters[t.name], "strict": bool(strict)}
            if t.name in callers:
                entry["allowed_callers"] = callers[t.name]
            out.append(entry)
        return out
    if format == "anthropic":
        out = []
        for t in tools:
            entry = {"name": t.name, "description": t.description, "input_schema": _object_schema(t.input_schema)}
            if t.name in callers:
                entry["allowed_callers"] = callers[t.name]
            out.append(entry)
        return out
    if format == "gemini":
        return [{"functionDeclarations": [_gemini_declaration(t, json_schema) for t in tools]}]
    out = []
    for t in tools:
        entry = {"name": t.name, "description": t.description, "inputSchema": _object_schema(t.input_schema)}
        if t.output_schema is not None:
            entry["outputSchema"] = mcp_output_schema(t.output_schema)
        hints = {k: t.annotations[k] for k in _MCP_ANNOTATIONS if k in t.annotations}
        if hints:
            entry["annotations"] = hints
        out.append(entry)
    return out


def _allowed_callers(tools: list[ToolDef], option: AllowedCallers | None,
                     canonical: Mapping[str, str]) -> dict[str, list[str]]:
    """The `allowed_callers` of each declared name that gets one (an alias: its own entry, else
    its tool's)."""
    if option is None:
        return {}
    names = [t.name for t in tools]
    if isinstance(option, Mapping):
        unknown = [name for name in option if name not in names]
        if unknown:
            raise ValueError(f"allowed_callers names tools that are not declared: {', '.join(map(repr, unknown))}")
        chosen = {name: option[name] if name in option else option[canonical[name]] for name in names
                  if name in option or canonical[name] in option}
    else:
        chosen = dict.fromkeys(names, option)
    out = {}
    for name, callers in chosen.items():
        if isinstance(callers, str) or not isinstance(callers, Sequence) \
                or not all(isinstance(c, str) and c for c in callers):
            raise ValueError(f"allowed_callers for {name!r} must be a list of caller names, got {callers!r}")
        if not callers:
            raise ValueError(f"allowed_callers for {name!r} is empty: nothing could call the tool")
        out[name] = list(callers)
    return out


def _no_parameters(schema: Mapping[str, Any]) -> bool:
    return (not schema.get("properties") and schema.get("additionalProperties", False) is False
            and "patternProperties" not in schema)


def _gemini_declaration(tool: ToolDef, json_schema: bool | None) -> dict[str, Any]:
    declaration: dict[str, Any] = {"name": tool.name, "description": tool.description}
    schema = _object_schema(tool.input_schema)
    if json_schema is True:
        declaration["parametersJsonSchema"] = gemini_json_schema(schema)
        return declaration
    # Gemini rejects an OBJECT with no properties ("properties: should be non-empty for OBJECT
    # type"); a tool without parameters is declared without them, as its SDK does.
    if schema.get("type") == "object" and _no_parameters(schema):
        return declaration
    try:
        declaration["parameters"] = gemini_schema(schema)
    except GeminiSchemaError as exc:
        if json_schema is False:
            raise GeminiSchemaError(exc.path, exc.reason, tool=tool.name) from None
        declaration["parametersJsonSchema"] = gemini_json_schema(schema)
    return declaration
