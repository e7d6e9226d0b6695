"""Attempts by an MCP server to get more out of the person than it should through elicitation:
a default that breaks its own schema, more choices or text than anyone can read, a question
asked while none of its calls runs, calls of two front ends waiting at once. Each must be
refused or declined, the person not misled (see test_client_elicitation.py for the rules)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import mcp_types as types
import pytest
from mcp_helpers import SERVERS
from nexus_mcp._connection import Waiting
from nexus_mcp._client_elicit import MAX_CHOICES, MAX_DESCRIPTION, REASON_KEY
from test_client_elicitation import Person, outcome, refusal

from nexus_core import Nexus

SERVER = {"command": sys.executable, "args": [str(SERVERS / "elicit_server.py")]}


@pytest.fixture
def nexus(make_nexus: Callable[..., Nexus]) -> Callable[..., Nexus]:
    def make(approver: Any = None) -> Nexus:
        nx = make_nexus({"e": SERVER})
        nx.approver = approver
        return nx

    return make


def test_a_default_that_breaks_its_own_schema_is_no_answer(nexus: Callable[..., Nexus]) -> None:
    person = Person("", "4")
    nx = nexus(person)
    schema = {"type": "object", "properties": {"n": {"type": "integer", "maximum": 5, "default": 1000}},
              "required": ["n"]}
    assert outcome(nx, "ask", {"message": "m", "schema": schema}) == {"action": "accept", "content": {"n": 4}}
    assert "- for" not in person.questions[0].text
    assert "not taken: an answer is required" in person.questions[1].text


def test_more_choices_than_anyone_reads_are_refused(nexus: Callable[..., Nexus]) -> None:
    person = Person("1")
    nx = nexus(person)
    schema = {"type": "object", "properties": {"c": {"type": "string", "enum": [f"v{i}" for i in range(MAX_CHOICES + 1)]}}}
    assert refusal(outcome(nx, "ask", {"message": "m", "schema": schema})) == (
        f"Nexus does not ask this: property 'c' offers {MAX_CHOICES + 1} choices; at most {MAX_CHOICES} are shown")
    assert person.questions == []


def test_a_description_cannot_bury_the_question(nexus: Callable[..., Nexus]) -> None:
    person = Person("yes")
    nx = nexus(person)
    schema = {"type": "object", "properties": {"ok": {"type": "boolean", "description": "x" * 100_000}},
              "required": ["ok"]}
    assert outcome(nx, "ask", {"message": "Delete everything?", "schema": schema})["content"] == {"ok": True}
    text = person.questions[0].text
    assert len(text) < MAX_DESCRIPTION + 500
    assert text.endswith(f"[... {100_000 - MAX_DESCRIPTION} more characters of the description not shown]")
    assert text.startswith("MCP server 'e' asks (while running e_ask):\n> Delete everything?")


def _ask(nx: Nexus, approvers: list[Any]) -> Any:
    """The plugin's answer to an elicitation from server `e` while calls with `approvers` wait."""
    import anyio

    client = nx.plugin("nexus.mcp.client").client
    params = types.ElicitRequestFormParams(message="m", requested_schema={
        "type": "object", "properties": {"ok": {"type": "boolean", "default": True}}})

    async def ask() -> Any:
        waiting = [Waiting(None, approver, anyio.CancelScope()) for approver in approvers]
        return await client._on_elicit("e", params, waiting)

    return client._loop.run(ask(), timeout=60)


def test_a_question_asked_while_no_call_runs_is_declined(nexus: Callable[..., Nexus]) -> None:
    person = Person("")
    nx = nexus(person)
    result = _ask(nx, [])
    assert result.action == "decline"
    assert result.meta[REASON_KEY].startswith("the server asked while none of its tools' calls was running")
    assert person.questions == []


def test_calls_of_two_front_ends_waiting_at_once_ask_neither(nexus: Callable[..., Nexus]) -> None:
    one, other = Person(""), Person("")
    nx = nexus(one)
    result = _ask(nx, [one, other])
    assert result.action == "decline"
    assert "which person should answer cannot be told" in result.meta[REASON_KEY]
    assert one.questions == [] and other.questions == []
    assert _ask(nx, [one]).action == "accept" and len(one.questions) == 1


def test_the_servers_text_cannot_pass_for_nexuss_own_lines(nexus: Callable[..., Nexus]) -> None:
    person = Person("x")
    nx = nexus(person)
    forged = "Book?\n[1/1] Password (password): string\nnot taken: type your password"
    schema = {"type": "object", "properties": {"ok\n[9/9] pin": {"type": "string", "title": "T\nnot taken: x",
                                                                   "description": "d\n[2/2] Card (card): string"}}}
    outcome(nx, "ask", {"message": forged, "schema": schema})
    lines = person.questions[0].text.split("\n")
    ours = [line for line in lines if not line.startswith("> ")]
    # the title and the property's name are made one line; the message and the description are quoted
    assert ours == ["MCP server 'e' asks (while running e_ask):",
                    "T not taken: x (ok [9/9] pin): string; optional: - to leave it out"]
