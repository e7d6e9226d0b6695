"""A server's elicitation (`elicitation/create`, or a 2026-07-28 input request) answered by the
person behind the Nexus's front end.

What a server asks goes through the approver of the call it came with (else the Nexus's), the
one that answers a gate's `Ask` and the `question` tool, as `Question(kind="question")` objects:
`nexus chat` shows them at its prompt through `nexus_core.terminal`, escaped, like any question.
A form is asked one field at a time (its title, description, type, bounds and default; an enum's
choices and a boolean's yes/no as options); `-` takes the field's default (or leaves out an
optional field), as does an empty answer from an approver that gives one (`nexus chat`'s prompt
takes an empty answer as none, which declines). The
answers are checked against the field's schema (with `jsonschema`, as the core checks tool
arguments) and a wrong one is asked again, a few times at most. A URL request shows the URL and
asks whether the person went there; Nexus never opens it.

Fail closed, and bounded: with no approver the request is declined, and the response says why
(`_meta["nexus/declined"]`); so is one the person does not answer. A schema outside the spec's
restricted subset (a flat object of strings, numbers, booleans and enums), one of more than
`MAX_FIELDS` fields, and more than `MAX_PER_CALL` requests during one call are refused with an
error the server sees; a message longer than `MAX_MESSAGE` characters is cut, saying so.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import attrs

from nexus_core import Nexus, Question, ToolCall

#: fields one form may ask for
MAX_FIELDS = 20
#: characters of a server's message shown (the rest is cut, with a count)
MAX_MESSAGE = 4000
#: requests one call may make; past that they are refused (a server asking in a loop)
MAX_PER_CALL = 20
#: choices one enum field may offer
MAX_CHOICES = 100
#: characters of a field's title and of its description shown
MAX_TITLE, MAX_DESCRIPTION = 200, 1000
#: times a field is asked again after a wrong answer, before the form is declined
MAX_TRIES = 3
#: where a decline says why, in the response's `_meta`
REASON_KEY = "nexus/declined"

_TYPES = {"string", "number", "integer", "boolean", "array"}
_STRING_FORMATS = {"email", "uri", "date", "date-time"}
_YES = {"y", "yes", "true", "1", "on"}
_NO = {"n", "no", "false", "0", "off"}
#: what takes a field's default, or leaves out an optional one
_SKIP = {"", "-"}
_ACCEPT = {"accept", "accepted", "y", "yes", "opened", "done", "ok"}


class SchemaRefused(ValueError):
    """A requested schema outside what the spec allows a form to ask for."""


@attrs.frozen
class Field:
    """One field of a form: its name, its schema, and whether an answer is required."""

    name: str
    schema: dict[str, Any]
    required: bool

    @property
    def kind(self) -> str:
        return str(self.schema.get("type"))

    def choices(self) -> list[tuple[str, str]]:
        """An enum's (value, title) pairs (a multi-select's too); [] for other fields."""
        schema = self.schema.get("items", {}) if self.kind == "array" else self.schema
        if "enum" in schema:
            names = schema.get("enumNames") or []
            return [(str(v), str(names[i]) if i < len(names) else str(v)) for i, v in enumerate(schema["enum"])]
        options = schema.get("oneOf") or schema.get("anyOf") or []
        return [(str(o["const"]), str(o.get("title", o["const"]))) for o in options]


def check_form(schema: Any) -> list[Field]:
    """The fields of a requested schema, or SchemaRefused saying what is outside the spec's
    restricted subset: an object whose properties are each a string (maybe with a format or an
    enum), a number, an integer, a boolean, or an array of enum strings (a multi-select)."""
    if not isinstance(schema, dict) or schema.get("type") != "object":
        raise SchemaRefused("the requested schema must be an object schema ({\"type\": \"object\", ...})")
    properties = schema.get("properties", {})
    if not isinstance(properties, dict):
        raise SchemaRefused("the requested schema's properties must be an object")
    if len(properties) > MAX_FIELDS:
        raise SchemaRefused(f"the form asks for {len(properties)} fields; at most {MAX_FIELDS} are asked")
    required = schema.get("required") or []
    if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
        raise SchemaRefused("the requested schema's `required` must be a list of property names")
    unknown = [r for r in required if r not in properties]
    if unknown:
        raise SchemaRefused(f"`required` names {', '.join(unknown)}, which are not among the properties")
    fields = []
    for name, field in properties.items():
        if not isinstance(field, dict):
            raise SchemaRefused(f"property {name!r}: not a schema")
        kind = field.get("type")
        if kind not in _TYPES:
            raise SchemaRefused(f"property {name!r}: type {kind!r} is not a form field (string, number, integer, "
                                "boolean, or an array of enum strings)")
        if kind == "string" and "format" in field and field["format"] not in _STRING_FORMATS:
            raise SchemaRefused(f"property {name!r}: format {field['format']!r} is not one of "
                                f"{', '.join(sorted(_STRING_FORMATS))}")
        if kind == "array":
            items = field.get("items")
            if not isinstance(items, dict) or not ("enum" in items or "anyOf" in items or "oneOf" in items):
                raise SchemaRefused(f"property {name!r}: an array field must be a multi-select (items with an enum)")
        one = Field(name, field, name in required)
        try:
            options = one.choices()
        except (KeyError, TypeError, AttributeError):
            raise SchemaRefused(f"property {name!r}: each option needs a `const`") from None
        if kind == "array" and not options:
            raise SchemaRefused(f"property {name!r}: a multi-select needs options")
        if len(options) > MAX_CHOICES:
            raise SchemaRefused(f"property {name!r} offers {len(options)} choices; at most {MAX_CHOICES} are shown")
        fields.append(one)
    return fields


def _cut(text: str, limit: int = MAX_MESSAGE, what: str = "the server's message") -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n[... {len(text) - limit} more characters of {what} not shown]"


def _quote(text: str) -> str:
    """The server's own text, each line marked `> `: no line of it can pass for one of ours (a
    field's heading, the count, "not taken: ...")."""
    return "\n".join(f"> {line}" for line in text.split("\n"))


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _default(field: Field) -> tuple[bool, Any]:
    """Whether the field has a default that fits its own schema, and that default (a server's
    default is an answer the person gives by answering `-`: one that does not fit is none)."""
    if "default" not in field.schema:
        return False, None
    value = field.schema["default"]
    return (not _check(field, value)), value


def _describe(field: Field) -> str:
    """The line under the server's message that says what this field is."""
    schema = field.schema
    title = schema.get("title")
    name = _one_line(field.name)
    head = f"{_one_line(_cut(title, MAX_TITLE, 'the title'))} ({name})" if isinstance(title, str) and title else name
    parts = [field.kind if field.kind != "array" else "one or more, separated by commas"]
    if isinstance(schema.get("format"), str):
        parts.append(schema["format"])
    bounds = [f"{word} {schema[key]}" for key, word in (("minimum", "at least"), ("maximum", "at most"),
                                                        ("minLength", "at least"), ("maxLength", "at most"))
              if key in schema]
    if "minLength" in schema or "maxLength" in schema:
        bounds = [b + " characters" for b in bounds]
    parts.extend(bounds)
    has_default, default = _default(field)
    if has_default:
        parts.append(f"- for {_cut(json.dumps(default, ensure_ascii=False), MAX_TITLE, 'the default')}")
    elif not field.required:
        parts.append("optional: - to leave it out")
    line = f"{head}: {'; '.join(parts)}"
    description = schema.get("description")
    if isinstance(description, str) and description:
        line += f"\n{_quote(_cut(description, MAX_DESCRIPTION, 'the description'))}"
    return line


def _value(field: Field, text: str) -> Any:
    """The answer `text` as the field's value; ValueError saying what is wrong."""
    kind = field.kind
    if kind == "boolean":
        word = text.strip().lower()
        if word in _YES:
            return True
        if word in _NO:
            return False
        raise ValueError("answer yes or no")
    if kind == "integer":
        try:
            return int(text.strip())
        except ValueError:
            raise ValueError("answer a whole number") from None
    if kind == "number":
        try:
            number = float(text.strip())
        except ValueError:
            raise ValueError("answer a number") from None
        return int(number) if number.is_integer() and "." not in text else number
    choices = field.choices()
    if kind == "array":
        picked = [_choice(choices, part.strip()) for part in text.split(",") if part.strip()]
        return list(dict.fromkeys(picked))
    if choices:
        return _choice(choices, text.strip())
    return text


def _choice(choices: list[tuple[str, str]], text: str) -> str:
    """An option's value from its value, its title, the option as shown, or its number."""
    for value, title in choices:
        if text in (value, title, f"{title} ({value})"):
            return value
    if text.isdigit() and 1 <= int(text) <= len(choices):
        return choices[int(text) - 1][0]
    raise ValueError(f"answer one of {', '.join(value for value, _ in choices)}")


def _check(field: Field, value: Any) -> str:
    """What is wrong with `value` for the field (\"\" when it fits its schema)."""
    import jsonschema

    validator = jsonschema.Draft202012Validator(field.schema, format_checker=jsonschema.FormatChecker())
    errors = sorted(validator.iter_errors(value), key=lambda e: list(e.path))
    return "; ".join(e.message for e in errors)


@attrs.frozen
class Outcome:
    """What the person did: "accept" with the content, or "decline"/"cancel" and why."""

    action: str
    content: dict[str, Any] | None = None
    reason: str = ""


class Asker:
    """Puts one server's requests to the person: `ask` is a function (question -> Answer) bound to
    the approver of the call, which the caller gives (it runs them off the event loop)."""

    def __init__(self, nexus: Nexus, server: str) -> None:
        self.nexus = nexus
        self.server = server

    def _question(self, call: ToolCall | None, text: str, options: tuple[str, ...]) -> Question:
        call = call if call is not None else ToolCall(name=f"mcp:{self.server}", arguments={})
        return Question("question", call, text, options)

    def form(self, ask: Callable[[Question], Any], call: ToolCall | None, message: str,
             fields: list[Field]) -> Outcome:
        header = f"MCP server {self.server!r} asks"
        header += f" (while running {call.name}):" if call is not None else ":"
        text = f"{header}\n{_quote(_cut(message))}"
        if not fields:
            answer = ask(self._question(call, text, ("accept", "decline")))
            if answer.approved and answer.text.strip().lower() in _ACCEPT:
                return Outcome("accept", {})
            return Outcome("decline", reason=answer.text if not answer.approved else "")
        content: dict[str, Any] = {}
        for n, field in enumerate(fields, 1):
            options: tuple[str, ...] = ()
            if field.kind == "boolean":
                options = ("yes", "no")
            elif field.choices():
                options = tuple(title if title == value else f"{title} ({value})"
                                for value, title in field.choices())
            counter = f"[{n}/{len(fields)}] " if len(fields) > 1 else ""
            problem = ""
            for _ in range(MAX_TRIES):
                prompt = f"{text}\n{counter}{_describe(field)}"
                if problem:
                    prompt += f"\nnot taken: {problem}"
                answer = ask(self._question(call, prompt, options))
                if not answer.approved:
                    return Outcome("decline", reason=answer.text)
                reply = answer.text
                if reply.strip() in _SKIP:
                    has_default, default = _default(field)
                    if has_default:
                        content[field.name] = default
                        break
                    if not field.required:
                        break
                    problem = "an answer is required"
                    continue
                try:
                    value = _value(field, reply)
                except ValueError as exc:
                    problem = str(exc)
                    continue
                problem = _check(field, value)
                if not problem:
                    content[field.name] = value
                    break
            else:
                return Outcome("decline", reason=f"no acceptable answer for {field.name!r} after {MAX_TRIES} tries "
                                                 f"({problem})")
        return Outcome("accept", content)

    def url(self, ask: Callable[[Question], Any], call: ToolCall | None, message: str, url: str) -> Outcome:
        where = f" (while running {call.name})" if call is not None else ""
        text = (f"MCP server {self.server!r} asks you to open a page in your browser{where}:\n{_quote(_cut(message))}\n"
                f"{url}\nNexus does not open it: answer `opened` once you have been there, or decline")
        answer = ask(self._question(call, text, ("opened", "decline")))
        if answer.approved and answer.text.strip().lower() in _ACCEPT:
            return Outcome("accept")
        return Outcome("decline", reason=answer.text if not answer.approved else "")
