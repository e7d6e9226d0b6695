"""A server's elicitation answered by the person behind the Nexus: routed to the approver of the
call it came with (else the Nexus's), one question per field, answers checked against the field's
schema, defaults taken on `-` (or an empty answer); declined, saying why, when no one can answer or the person does
not; a schema outside the spec refused; bounded in fields, message and requests per call; the
call's clock stopped while the person answers."""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from mcp_helpers import SERVERS
from nexus_mcp._client_elicit import MAX_FIELDS, MAX_MESSAGE, MAX_PER_CALL, REASON_KEY, SchemaRefused, check_form

from nexus_core import Answer, Nexus, Question

SERVER = {"command": sys.executable, "args": [str(SERVERS / "elicit_server.py")]}


class Person:
    """An approver that answers from a list, in order, and keeps every question it was asked."""

    def __init__(self, *answers: str | None) -> None:
        self.answers = list(answers)
        self.questions: list[Question] = []

    def __call__(self, question: Question) -> Answer | None:
        self.questions.append(question)
        if not self.answers:
            return None
        answer = self.answers.pop(0)
        return None if answer is None else Answer(True, answer)


def outcome(nx: Nexus, tool: str, arguments: dict[str, Any], **invoke: Any) -> Any:
    """What the server's tool got back; for an error the client answered with, on a 2026-07-28
    session (where the client's refusal fails the call, the server never seeing it), the call's error."""
    result = nx.invoke(f"e_{tool}", arguments, **invoke)
    if result.error is not None:
        return {"call_error": result.error}
    return json.loads(result.output)


def refusal(got: dict[str, Any]) -> str:
    """The client's refusal, as the server saw it (2025 era) or as the call's error (2026)."""
    if "call_error" in got:
        text = got["call_error"]
        assert text.startswith("MCP server 'e' refused 'ask': ") and text.endswith(" (JSON-RPC error -32602)"), text
        return text.removeprefix("MCP server 'e' refused 'ask': ").removesuffix(" (JSON-RPC error -32602)")
    assert got["code"] == -32602
    return str(got["error"])


@pytest.fixture
def nexus(make_nexus: Callable[..., Nexus]) -> Callable[..., Nexus]:
    def make(approver: Any = None, **settings: Any) -> Nexus:
        nx = make_nexus({"e": {**SERVER, **settings}})
        nx.approver = approver
        return nx

    return make


FORM = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "title": "Your name", "minLength": 2, "maxLength": 20},
        "seats": {"type": "integer", "minimum": 1, "maximum": 10, "description": "How many seats"},
        "window": {"type": "boolean"},
        "meal": {"type": "string", "oneOf": [{"const": "veg", "title": "Vegetarian"}, {"const": "std", "title": "Standard"}]},
        "extras": {"type": "array", "items": {"type": "string", "enum": ["bag", "lounge", "wifi"]}},
        "note": {"type": "string", "default": "none"},
        "email": {"type": "string", "format": "email"},
    },
    "required": ["name", "seats"],
}


def test_a_form_is_asked_field_by_field_of_the_calls_approver(nexus: Callable[..., Nexus]) -> None:
    person = Person("Ada", "3", "yes", "Vegetarian (veg)", "wifi, bag", "-", "")
    nx = nexus(person)
    got = outcome(nx, "ask", {"message": "Book the flight?", "schema": FORM})
    assert got == {"action": "accept", "content": {"name": "Ada", "seats": 3, "window": True, "meal": "veg",
                                                   "extras": ["wifi", "bag"], "note": "none"}}
    assert [q.kind for q in person.questions] == ["question"] * 7
    first = person.questions[0]
    assert first.text.startswith("MCP server 'e' asks (while running e_ask):\n> Book the flight?\n[1/7] Your name (name): ")
    assert "at least 2 characters" in first.text and "at most 20 characters" in first.text
    assert first.call.name == "e_ask" and first.call.arguments["message"] == "Book the flight?"
    assert person.questions[1].text.endswith("\n> How many seats")
    assert person.questions[2].options == ("yes", "no")
    assert person.questions[3].options == ("Vegetarian (veg)", "Standard (std)")
    assert person.questions[4].options == ("bag", "lounge", "wifi")
    assert '- for "none"' in person.questions[5].text
    assert "optional: - to leave it out" in person.questions[6].text


def test_a_wrong_answer_is_asked_again_saying_why_then_the_form_is_declined(nexus: Callable[..., Nexus]) -> None:
    person = Person("Ada", "many", "50", "7")
    nx = nexus(person)
    schema = {"type": "object", "properties": {"name": {"type": "string"},
                                               "seats": {"type": "integer", "minimum": 1, "maximum": 10}},
              "required": ["name", "seats"]}
    assert outcome(nx, "ask", {"message": "m", "schema": schema})["content"] == {"name": "Ada", "seats": 7}
    assert "not taken: answer a whole number" in person.questions[2].text
    assert "not taken: 50 is greater than the maximum of 10" in person.questions[3].text

    stubborn = Person("x", "x", "x")
    nx.approver = stubborn
    got = outcome(nx, "ask", {"message": "m", "schema": {"type": "object", "properties": {"n": {"type": "integer"}}}})
    assert got["action"] == "decline"
    assert got["_meta"][REASON_KEY] == "no acceptable answer for 'n' after 3 tries (answer a whole number)"


def test_the_invokes_approver_answers_not_the_nexuss(nexus: Callable[..., Nexus]) -> None:
    behind_the_nexus, behind_the_call = Person("no"), Person("yes")
    nx = nexus(behind_the_nexus)
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    got = outcome(nx, "ask", {"message": "m", "schema": schema}, approver=behind_the_call)
    assert got["content"] == {"ok": True}
    assert behind_the_nexus.questions == [] and len(behind_the_call.questions) == 1


def test_with_no_front_end_the_request_is_declined_and_the_server_told_why(nexus: Callable[..., Nexus]) -> None:
    nx = nexus(None)
    got = outcome(nx, "ask", {"message": "m", "schema": FORM})
    assert got["action"] == "decline"
    assert got["_meta"][REASON_KEY].startswith("no one can answer here: this Nexus has no front end to ask its user")


def test_a_person_who_does_not_answer_declines(nexus: Callable[..., Nexus]) -> None:
    person = Person("Ada", None)
    nx = nexus(person)
    got = outcome(nx, "ask", {"message": "m", "schema": FORM})
    assert got["action"] == "decline" and "content" not in got
    assert len(person.questions) == 2


@pytest.mark.parametrize(("schema", "why"), [
    ({"type": "object", "properties": {"address": {"type": "object", "properties": {}}}},
     ("property 'address': type 'object' is not a form field (string, number, integer, boolean, or an array "
      "of enum strings)")),
    ({"type": "object", "properties": {"when": {"type": "string", "format": "regex"}}},
     "property 'when': format 'regex' is not one of date, date-time, email, uri"),
    ({"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string"}}}},
     "property 'tags': an array field must be a multi-select (items with an enum)"),
    ({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["b"]},
     "`required` names b, which are not among the properties"),
    ({"type": "object", "properties": {f"f{i}": {"type": "string"} for i in range(MAX_FIELDS + 1)}},
     f"the form asks for {MAX_FIELDS + 1} fields; at most {MAX_FIELDS} are asked"),
])
def test_a_schema_outside_the_spec_is_refused_before_anyone_is_asked(nexus: Callable[..., Nexus],
                                                                     schema: dict[str, Any], why: str) -> None:
    person = Person("x")
    nx = nexus(person)
    assert refusal(outcome(nx, "ask", {"message": "m", "schema": schema})) == f"Nexus does not ask this: {why}"
    assert person.questions == []


@pytest.mark.parametrize("schema", [{"type": "array"}, [], {"type": "object", "properties": []},
                                    {"type": "object", "properties": {"a": {"type": "string"}}, "required": "a"},
                                    {"type": "object", "properties": {"a": {"type": "null"}}},
                                    {"type": "object", "properties": {"a": {"type": "string", "oneOf": [{"title": "x"}]}}},
                                    {"type": "object", "properties": {"a": "string"}}])
def test_what_an_sdk_server_would_not_even_send_is_refused_too(schema: Any) -> None:
    with pytest.raises(SchemaRefused):
        check_form(schema)


def test_a_long_message_is_cut_saying_so(nexus: Callable[..., Nexus]) -> None:
    person = Person("accept")
    nx = nexus(person)
    got = outcome(nx, "ask", {"message": "x" * (MAX_MESSAGE + 500), "schema": {"type": "object", "properties": {}}})
    assert got == {"action": "accept", "content": {}}
    assert person.questions[0].text.endswith("[... 500 more characters of the server's message not shown]")
    assert person.questions[0].options == ("accept", "decline")


def test_a_server_asking_in_a_loop_is_stopped_after_the_bound(nexus: Callable[..., Nexus]) -> None:
    person = Person(*[""] * (MAX_PER_CALL + 5))
    nx = nexus(person)
    got = outcome(nx, "ask_many", {"times": MAX_PER_CALL + 3})
    bound = f"this call already asked the user {MAX_PER_CALL} times; no more questions are put to them during it"
    if isinstance(got, dict):  # 2026: the refusal ends the call
        assert got["call_error"] == f"MCP server 'e' refused 'ask_many': {bound} (JSON-RPC error -32600)"
    else:
        assert got == ["accept"] * MAX_PER_CALL + [f"error: {bound}"] * 3
    assert len(person.questions) == MAX_PER_CALL


def test_a_url_is_shown_never_opened_and_accepted_only_when_the_person_says_so(nexus: Callable[..., Nexus]) -> None:
    person = Person("opened", "")
    nx = nexus(person)
    args = {"message": "Link your account", "url": "https://accounts.example/link?x=1"}
    assert outcome(nx, "ask_url", args)["action"] == "accept"
    assert "https://accounts.example/link?x=1\nNexus does not open it" in person.questions[0].text
    assert outcome(nx, "ask_url", args)["action"] == "decline"  # an empty answer is no consent


def test_the_calls_clock_stops_while_the_person_answers(nexus: Callable[..., Nexus]) -> None:
    timeout = 8.0

    def slow(question: Question) -> Answer:
        deadline = time.monotonic() + timeout * 1.5  # well past the call's timeout_seconds
        while time.monotonic() < deadline:
            threading.Event().wait(0.1)
        return Answer(True, "yes")

    nx = nexus(slow, timeout_seconds=timeout)
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    assert outcome(nx, "ask", {"message": "m", "schema": schema}) == {"action": "accept", "content": {"ok": True}}
