"""The person at `nexus chat` answers what an MCP server asks during a call (elicitation), in a
real pseudo-terminal against the fake provider server and a real MCP server (tests/mcp/servers/
elicit_server.py): each field is a question at the chat's prompt, the server's text shown inert,
and the answers reach the server."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from fakes.providers import Call, FakeProviders, chat_completion

from .conftest import Workspace, subprocess_env
from .pty_terminal import Terminal

SERVER = Path(__file__).resolve().parents[1] / "mcp" / "servers" / "elicit_server.py"
SCHEMA = {"type": "object", "required": ["name", "window"],
          "properties": {"name": {"type": "string", "title": "Your name"}, "window": {"type": "boolean"},
                         "seats": {"type": "integer", "default": 1}}}


def prompt(term: Terminal, field: str) -> None:
    """Wait for the question about `field` and the prompt after it (keys typed before a prompt
    are dropped: the console discards what was typed ahead)."""
    term.wait_for(lambda: field in term.output and "empty for none): " in term.output[term.output.rindex(field):],
                  f"the prompt for {field}")


def test_the_person_at_nexus_chat_answers_a_servers_form(fake: FakeProviders, workspace: Workspace) -> None:
    workspace.config(nexus__mcp__client={"servers": {"e": {"command": sys.executable, "args": [str(SERVER)],
                                                           "start": "eager"}}})
    fake.script("openai.chat",
                chat_completion(None, [Call("e_ask", {"message": "Book the 09:40?\x1b[2K\x1b]52;c;eA==\x07",
                                                      "schema": SCHEMA})]),
                chat_completion("Booked."))
    term = Terminal(["chat"], workspace.root, subprocess_env(TERM="dumb"))
    try:
        term.read_until("> ")
        term.type(b"book it\r")
        for field, keys in (("[1/3]", b"Ada\r"), ("[2/3]", b"1\r"), ("[3/3]", b"-\r")):  # 1: the first option, yes
            prompt(term, field)
            term.type(keys)
        term.read_until("Booked.\n> ")
        term.type(b"\x04")
        assert term.wait() == 0
    finally:
        term.kill()
    screen = term.output
    assert "? MCP server 'e' asks (while running e_ask):" in screen
    assert "> Book the 09:40?\\x1b[2K\\x1b]52;c;eA==\\x07" in screen  # the server's text, inert
    assert b"\x1b[2K" not in term.raw and b"\x1b]52" not in term.raw
    assert "[1/3] Your name (name): string" in screen and "1) yes" in screen and "- for 1" in screen
    tool_message = next(m for m in fake.last("openai.chat").body["messages"] if m["role"] == "tool")
    assert json.loads(tool_message["content"]) == {"action": "accept",
                                                   "content": {"name": "Ada", "window": True, "seats": 1}}
