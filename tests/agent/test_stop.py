"""Ctrl-C stops the agent, tested as a person meets it: a real `nexus ask` or `nexus chat` on a
pseudo-terminal (the Ctrl-C is the terminal driver's SIGINT), the real SDKs, the real shell and
run_code tools. Waiting for a model's first byte (a loopback server that sends none), the request
ends and the server sees its connection closed; during a tool call, the command's processes are
killed and the person is told so; nothing about the stopped turn is printed after it stopped; a
second Ctrl-C quits. Every wait is for an event, with a generous timeout; nothing times anything.

Also `/help` and unknown `/commands` in `nexus chat`."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakes.providers import Call, FakeProviders, chat_completion

from nexus_agent import read_transcript

from .conftest import Workspace, alive, subprocess_env
from .pty_terminal import Terminal
from .stalling import Answer, Silent, StallingServer

#: how long any wait of these tests may take: generous, for a machine loaded many times over
#: (each wait ends as soon as its event happens)
WAIT = 300

#: (model, the provider's config section but its base_url, whether the base URL ends in /v1)
PROVIDERS = {
    "openai-chat": ("openai:gpt-4.1", {"api": "chat"}, True),
    "openai-responses": ("openai:gpt-4.1", {"api": "responses"}, True),
    "anthropic": ("anthropic:claude-sonnet-4-5", {}, False),
    "gemini": ("gemini:gemini-2.5-flash", {"api_key_env": "NEXUS_TEST_GEMINI_KEY"}, False),
}


@pytest.fixture
def terminals() -> Iterator[list[Terminal]]:
    """The terminals a test opens, their `nexus` killed at its end whatever happened."""
    opened: list[Terminal] = []
    yield opened
    for term in opened:
        term.kill()


def open_terminal(terminals: list[Terminal], workspace: Workspace, *args: str, site: Path | None = None) -> Terminal:
    term = Terminal(list(args), workspace.root, subprocess_env(site, TERM="dumb", NEXUS_TEST_GEMINI_KEY="k"))
    terminals.append(term)
    return term


def stalling_config(workspace: Workspace, server: StallingServer, provider: str, stream: bool) -> None:
    model, section, v1 = PROVIDERS[provider]
    plugin = f"nexus.provider.{model.partition(':')[0]}"
    # the SDKs' own retries left on (max_retries: 2): a cancelled request must not be sent again
    sections = {plugin.replace(".", "__"): {**section, "base_url": server.url + ("/v1" if v1 else ""),
                                           "max_retries": 2}}
    workspace.config(model=model, agent={"stream": stream}, **sections)


def transcript(workspace: Workspace) -> list[dict]:
    [path] = sorted((workspace.sessions / "plugins" / "nexus.agent").glob("*.jsonl"))
    return read_transcript(path)


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "not-streamed"])
@pytest.mark.parametrize("provider", list(PROVIDERS))
def test_ctrl_c_before_the_first_byte_ends_ask_and_closes_the_connection(
        provider: str, stream: bool, workspace: Workspace, terminals: list[Terminal]) -> None:
    with StallingServer(Silent()) as server:
        stalling_config(workspace, server, provider, stream)
        term = open_terminal(terminals, workspace, "ask", "a long task")
        term.wait_for(server.stalled.is_set, "the request reaching the server", timeout=WAIT)
        term.type(b"\x03")
        term.read_until("nexus: stopped: interrupted", timeout=WAIT)
        assert server.disconnected.wait(WAIT), "the request was not closed"
        assert term.wait(WAIT) == 130
    assert len(server.bodies) == 1  # not sent again by the SDK's retries
    assert term.output.endswith("nexus: stopped: interrupted\n")
    assert transcript(workspace)[-1]["reason"] == "interrupted"


def test_ctrl_c_before_the_first_byte_in_chat_returns_the_prompt_and_the_chat_goes_on(
        workspace: Workspace, terminals: list[Terminal]) -> None:
    with StallingServer(Silent(), Answer("Still here.")) as server:
        stalling_config(workspace, server, "openai-chat", True)
        term = open_terminal(terminals, workspace, "chat")
        term.read_until("> ", timeout=WAIT)
        term.type(b"think hard\r")
        term.wait_for(server.stalled.is_set, "the request reaching the server", timeout=WAIT)
        term.type(b"\x03")
        term.read_until("[stopped: interrupted]\n> ", timeout=WAIT)
        assert server.disconnected.wait(WAIT), "the request was not closed"
        term.type(b"are you there?\r")
        term.read_until("Still here.\n> ", timeout=WAIT)
        term.type(b"\x04")
        assert term.wait(WAIT) == 0
    assert len(server.bodies) == 2  # the stopped request once, then the next message
    assert server.bodies[1]["messages"][-1] == {"role": "user", "content": "are you there?"}


SLEEPER = "sleep 600 & echo $! > sleep.pid; wait"


def wait_for_pid(term: Terminal, path: Path) -> int:
    term.wait_for(lambda: path.exists() and path.read_text().strip().isdigit(), f"{path.name} written", timeout=WAIT)
    pid = int(path.read_text())
    assert alive(pid)
    return pid


def test_ctrl_c_in_ask_kills_the_shell_command_and_prints_nothing_after_stopped(
        fake: FakeProviders, workspace: Workspace, terminals: list[Terminal]) -> None:
    fake.script("openai.chat", chat_completion("Waiting.", [Call("shell", {"command": SLEEPER})]))
    workspace.config()
    term = open_terminal(terminals, workspace, "ask", "wait a while")
    pid = wait_for_pid(term, workspace.root / "sleep.pid")
    term.type(b"\x03")
    term.read_until("^C: stopped shell (killed ", timeout=WAIT)
    assert term.wait(WAIT) == 130
    assert not alive(pid)
    out = term.output
    assert "^C: stopping the turn (Ctrl-C again quits)\n" in out
    stopped = out[out.index("^C: stopped shell"):]
    assert stopped.splitlines()[1:] == ["nexus: stopped: interrupted"]  # and nothing after it
    assert "tool shell" not in out  # no result line for the stopped call, before or after
    [result] = [r for r in transcript(workspace) if r["type"] == "tool_result"]
    assert result["result"]["error_kind"] == "cancelled"
    assert len(fake.requests_for("openai.chat")) == 1


def test_ctrl_c_in_chat_kills_the_shell_command_before_the_prompt_returns(
        fake: FakeProviders, workspace: Workspace, terminals: list[Terminal]) -> None:
    fake.script("openai.chat", chat_completion(None, [Call("shell", {"command": SLEEPER})]),
                chat_completion("Yes, here."))
    workspace.config()
    term = open_terminal(terminals, workspace, "chat")
    term.read_until("> ", timeout=WAIT)
    term.type(b"wait a while\r")
    pid = wait_for_pid(term, workspace.root / "sleep.pid")
    term.type(b"\x03")
    term.read_until("[stopped: interrupted]\n> ", timeout=WAIT)
    assert not alive(pid)  # gone by the time the prompt is back
    out = term.output
    assert "^C: stopped shell (killed " in out and "tool shell" not in out
    term.type(b"still there?\r")
    term.read_until("Yes, here.\n> ", timeout=WAIT)
    term.type(b"\x04")
    assert term.wait(WAIT) == 0
    assert "tool shell" not in term.output  # no late result line, ever
    # the model is told what became of the call it made
    tool_message = [m for m in fake.last("openai.chat").body["messages"] if m["role"] == "tool"][-1]
    assert "cancelled" in tool_message["content"]


RUN_CODE_SCRIPT = """\
import tools

def run(ctx):
    tools.shell(command="sleep 600 & echo $! > inner.pid; wait")
    return "done"
"""


def test_ctrl_c_stops_run_code_and_the_inner_shell_call(fake: FakeProviders, workspace: Workspace,
                                                         terminals: list[Terminal]) -> None:
    fake.script("openai.chat", chat_completion(None, [Call("run_code", {"script": RUN_CODE_SCRIPT})]))
    workspace.config()
    term = open_terminal(terminals, workspace, "ask", "run it")
    pid = wait_for_pid(term, workspace.root / "inner.pid")
    term.type(b"\x03")
    term.read_until("nexus: stopped: interrupted", timeout=WAIT)
    assert term.wait(WAIT) == 130
    assert not alive(pid)  # killed by the inner shell call, whose token run_code cancelled
    lines = term.output.splitlines()
    stopping = lines.index("^C: stopping the turn (Ctrl-C again quits)")
    # what became of run_code (its child killed, its inner call stopped), and nothing after
    [what, last] = lines[stopping + 1:]
    assert what.startswith("^C: stopped run_code ("), what
    assert last == "nexus: stopped: interrupted"
    assert "tool run_code" not in term.output


#: a tool plugin whose call ignores its cancel token: it sleeps, whatever happens
STUBBORN = textwrap.dedent("""
    import time
    from nexus_core import hookimpl, tool

    @tool
    def stubborn(seconds: int) -> str:
        "Sleep, and hear no Ctrl-C."
        open("stubborn.started", "w").close()
        time.sleep(seconds)
        return "slept"

    @hookimpl
    def nexus_register_tools(register):
        register(stubborn)
""")


@pytest.fixture
def stubborn_site(tmp_path: Path) -> Path:
    site = tmp_path / "stubborn-site"
    info = site / "nexus_test_stubborn-0.1.dist-info"
    info.mkdir(parents=True)
    (site / "nexus_test_stubborn.py").write_text(STUBBORN, encoding="utf-8")
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: nexus-test-stubborn\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[nexus.plugins]\ntest.stubborn = nexus_test_stubborn\n")
    return site


def test_a_second_ctrl_c_quits_while_a_call_will_not_stop(fake: FakeProviders, workspace: Workspace,
                                                          terminals: list[Terminal], stubborn_site: Path) -> None:
    fake.script("openai.chat", chat_completion(None, [Call("stubborn", {"seconds": 600})]))
    workspace.config(agent={"stop_grace_seconds": 600})
    term = open_terminal(terminals, workspace, "chat", site=stubborn_site)
    term.read_until("> ", timeout=WAIT)
    term.type(b"sleep\r")
    term.wait_for((workspace.root / "stubborn.started").exists, "the stubborn call starting", timeout=WAIT)
    term.type(b"\x03")
    term.read_until("^C: stopping the turn (Ctrl-C again quits)", timeout=WAIT)
    term.type(b"\x03")
    term.read_until("^C: quitting", timeout=WAIT)
    assert term.wait(WAIT) == 130


def test_a_call_that_does_not_stop_is_said_to_be_still_ending(fake: FakeProviders, workspace: Workspace,
                                                              terminals: list[Terminal], stubborn_site: Path) -> None:
    fake.script("openai.chat", chat_completion(None, [Call("stubborn", {"seconds": 600})]), chat_completion("Here."))
    workspace.config(agent={"stop_grace_seconds": 0.5})
    term = open_terminal(terminals, workspace, "chat", site=stubborn_site)
    term.read_until("> ", timeout=WAIT)
    term.type(b"sleep\r")
    term.wait_for((workspace.root / "stubborn.started").exists, "the stubborn call starting", timeout=WAIT)
    term.type(b"\x03")
    term.read_until("^C: stubborn is still ending (interrupted by the user; the call had not ended 0.5s later)\n"
                    "[stopped: interrupted]\n> ", timeout=WAIT)
    term.type(b"hello\r")
    term.read_until("Here.\n> ", timeout=WAIT)
    term.type(b"\x04")
    assert term.wait(WAIT) == 0
    assert "tool stubborn" not in term.output


def test_help_lists_the_chat_commands_and_is_not_sent_to_the_model(
        fake: FakeProviders, workspace: Workspace, terminals: list[Terminal]) -> None:
    fake.script("openai.chat", chat_completion("It maps names to addresses."))
    workspace.config()
    term = open_terminal(terminals, workspace, "chat")
    term.read_until("> ", timeout=WAIT)
    term.type(b"/help\r")
    term.read_until("  /exit, /quit  end the chat (as Ctrl-D does)\n", timeout=WAIT)
    term.read_until("> ", timeout=WAIT)
    term.type(b"/frobnicate now\r")
    term.read_until("unknown command /frobnicate", timeout=WAIT)
    term.read_until("  /help         this list\n", timeout=WAIT)
    term.read_until("> ", timeout=WAIT)
    term.type(b"/etc/hosts: what is it for?\r")  # a path is not a command: the model gets it
    term.read_until("It maps names to addresses.\n> ", timeout=WAIT)
    term.type(b"/exit\r")
    assert term.wait(WAIT) == 0
    [request] = fake.requests_for("openai.chat")
    assert request.body["messages"][-1] == {"role": "user", "content": "/etc/hosts: what is it for?"}
