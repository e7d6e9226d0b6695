"""`nexus ask` and `nexus chat` as real subprocesses, with the real SDKs talking to the fake
provider server on loopback: streamed answers, one line per tool call, approvals by policy and at
the prompt, the question tool, exit statuses, Ctrl-C (a real terminal, and a signal), and the API
key in no output and no file."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from fakes.providers import Call, FakeProviders, anthropic_message, chat_completion

from nexus_agent import read_transcript

from .conftest import API_KEY, GATE_ENV, RunNexus, Workspace, subprocess_env
from .pty_terminal import Terminal
from .stalling import Answer, Stall, StallingServer


def transcripts(workspace: Workspace) -> list[Path]:
    return sorted((workspace.sessions / "plugins" / "nexus.agent").glob("*.jsonl"))


def no_key_anywhere(workspace: Workspace, *outputs: str) -> None:
    for text in outputs:
        assert API_KEY not in text
    for path in workspace.files_written():
        assert API_KEY.encode() not in path.read_bytes(), path


def test_ask_streams_the_answer_and_shows_each_call_on_one_line(fake: FakeProviders, workspace: Workspace,
                                                               run_nexus: RunNexus) -> None:
    (workspace.root / "todo.txt").write_text("buy milk\ncall bob\n")
    fake.script("openai.chat",
                chat_completion("Reading the list.", [Call("read", {"path": "todo.txt"}), Call("glob", {"pattern": "*"})]),
                chat_completion("Two things: buy milk, call bob."))
    workspace.config()
    proc = run_nexus("ask", "What", "is", "on", "my", "list?")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "Reading the list.\nTwo things: buy milk, call bob.\n"
    lines = proc.stderr.splitlines()
    assert '  tool read {"path": "todo.txt"} -> ok, 2 lines' in lines
    assert any(line.startswith('  tool glob {"pattern": "*"} -> ok') for line in lines)
    assert fake.requests_for("openai.chat")[0].body["messages"][1] == {"role": "user", "content": "What is on my list?"}
    assert all(r.stream for r in fake.requests_for("openai.chat"))
    [path] = transcripts(workspace)
    assert read_transcript(path)[-1]["reason"] == "final_answer"
    no_key_anywhere(workspace, proc.stdout, proc.stderr)


def test_ask_verbose_shows_the_whole_call(fake: FakeProviders, workspace: Workspace, run_nexus: RunNexus) -> None:
    (workspace.root / "todo.txt").write_text("buy milk\n")
    fake.script("openai.chat", chat_completion(None, [Call("read", {"path": "todo.txt"})]), chat_completion("Milk."))
    workspace.config()
    proc = run_nexus("ask", "-v", "list?")
    assert proc.returncode == 0, proc.stderr
    assert '"path": "todo.txt"' in proc.stderr and "buy milk" in proc.stderr and "output:" in proc.stderr


def test_ask_json_gives_the_whole_transcript(fake: FakeProviders, workspace: Workspace, run_nexus: RunNexus) -> None:
    fake.script("anthropic.messages", anthropic_message("Listing.", [Call("list", {})]),
                anthropic_message("Empty folder."))
    workspace.config(model="anthropic:claude-sonnet-4-5")
    proc = run_nexus("ask", "--json", "what is here?")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["answer"] == "Empty folder." and data["stop_reason"] == "final_answer" and data["turns"] == 2
    assert [r["type"] for r in data["records"]] == ["session", "message", "request", "response", "call",
                                                    "tool_result", "request", "response", "stop"]
    assert data["records"] == read_transcript(data["transcript"])
    assert data["usage"]["total_tokens"] == sum(r["usage"]["total_tokens"] for r in data["records"]
                                                if r["type"] == "response")


@pytest.mark.parametrize("flag", ["--yes", "--no", None])
def test_ask_answers_approvals_by_its_policy(flag: str | None, fake: FakeProviders, workspace: Workspace,
                                            run_nexus: RunNexus, gate_site: Path) -> None:
    fake.script("openai.chat", chat_completion(None, [Call("write", {"path": "out.txt", "content": "hi"})]),
                chat_completion("Done."))
    workspace.config()
    env = subprocess_env(gate_site, **{GATE_ENV: "write"})
    proc = run_nexus("ask", *([flag] if flag else []), "write hi to out.txt", env=env)
    assert proc.returncode == 0, proc.stderr
    [sent] = [m["content"] for m in fake.last("openai.chat").body["messages"] if m["role"] == "tool"]
    if flag == "--yes":
        assert (workspace.root / "out.txt").read_text() == "hi"
        assert "  approved (--yes): write" in proc.stderr
        assert not sent.startswith("vetoed")
    else:
        assert not (workspace.root / "out.txt").exists()
        if flag == "--no":
            assert "  refused (--no): write" in proc.stderr and sent == "vetoed: denied by nexus ask --no"
        else:
            assert "(nexus ask --yes approves such calls)" in proc.stderr
            assert sent == ("vetoed: denied by nexus ask: no one is here to approve it (nexus ask was run "
                            "without --yes)")


def test_ask_exit_status_when_the_turn_limit_is_hit(fake: FakeProviders, workspace: Workspace,
                                                   run_nexus: RunNexus) -> None:
    fake.script("openai.chat", *[chat_completion(None, [Call("list", {})]) for _ in range(2)])
    workspace.config()
    proc = run_nexus("ask", "--max-turns", "2", "loop")
    assert proc.returncode == 1
    assert proc.stderr.splitlines()[-1] == "nexus: stopped (max_turns): after 2 model requests (max_turns)"


@pytest.mark.parametrize(("args", "message"), [
    (["--model", "nope:m1"],
     "nexus: --model nope:m1: no model provider 'nope': the providers here are 'anthropic', 'gemini', 'openai'\n"),
    (["--model", "opnai:gpt-4.1"],
     "nexus: --model opnai:gpt-4.1: no model provider 'opnai' (did you mean 'openai'?): the providers here are "),
    # the plugin's id where the provider's name goes
    (["--model", "nexus.provider.openai:gpt-4.1"], "no model provider 'nexus.provider.openai' (did you mean 'openai'?)"),
    (["--model", "gpt-4.1"], "--model: model 'gpt-4.1' is not provider:model"),
])
def test_ask_refuses_a_model_it_cannot_use(args: list[str], message: str, workspace: Workspace,
                                          run_nexus: RunNexus) -> None:
    workspace.config()
    proc = run_nexus("ask", *args, "hi")
    assert proc.returncode == 2
    assert message in proc.stderr


def test_a_model_whose_provider_plugin_is_not_active_says_so(workspace: Workspace, run_nexus: RunNexus) -> None:
    """The config's model names a provider whose plugin is installed but left out of
    plugins.active: the error says that, not "install it"."""
    workspace.config(model="anthropic:claude-sonnet-4-5",
                     active=["nexus.agent", "nexus.provider.openai", "nexus.tool.file"])
    proc = run_nexus("ask", "hi")
    assert proc.returncode == 2
    assert proc.stderr == ("nexus: model anthropic:claude-sonnet-4-5: no model provider 'anthropic': the providers "
                           "here are 'openai'; the plugin nexus.provider.anthropic is installed but inactive "
                           "(`nexus plugins` says why)\n")


def test_ask_without_a_model_says_how_to_give_one(workspace: Workspace, run_nexus: RunNexus) -> None:
    config = workspace.config()
    del config["model"]
    workspace.config_path.write_text(yaml.safe_dump(config))
    proc = run_nexus("--trust-config", "ask", "hi")  # the test's own edit of its trusted config
    assert proc.returncode == 2 and "no model: pass --model provider:model" in proc.stderr


def test_model_on_the_command_line_wins_over_the_config(fake: FakeProviders, workspace: Workspace,
                                                       run_nexus: RunNexus) -> None:
    fake.script("openai.chat", chat_completion("From the command line's model."))
    workspace.config(model="anthropic:claude-sonnet-4-5")
    proc = run_nexus("ask", "--model", "openai:gpt-4.1-mini", "hi")
    assert proc.returncode == 0, proc.stderr
    assert fake.last("openai.chat").body["model"] == "gpt-4.1-mini" and not fake.requests_for("anthropic.messages")


def test_ask_with_no_key_names_the_variable(fake: FakeProviders, workspace: Workspace, run_nexus: RunNexus) -> None:
    workspace.config()
    env = {k: v for k, v in subprocess_env().items() if k != "OPENAI_API_KEY"}
    proc = run_nexus("ask", "hi", env=env)
    assert proc.returncode == 1
    assert ("nexus: stopped (error): no OpenAI API key: the environment variable OPENAI_API_KEY is not set"
            in proc.stderr)
    assert fake.requests == []


def test_ask_reads_the_prompt_from_stdin(fake: FakeProviders, workspace: Workspace, run_nexus: RunNexus) -> None:
    fake.script("openai.chat", chat_completion("Got it."))
    workspace.config()
    proc = run_nexus("ask", "-", input="a prompt\nover two lines\n")
    assert proc.returncode == 0, proc.stderr
    assert fake.last("openai.chat").body["messages"][-1]["content"] == "a prompt\nover two lines\n"


def test_chat_asks_at_the_prompt(fake: FakeProviders, workspace: Workspace, run_nexus: RunNexus,
                                 gate_site: Path) -> None:
    """Two messages: the first makes two writes (one approved, one refused with a reason typed at
    the prompt), the second a question answered by number."""
    fake.script("openai.chat",
                chat_completion("Writing.", [Call("write", {"path": "a.txt", "content": "A"}),
                                             Call("write", {"path": "b.txt", "content": "B"})]),
                chat_completion("Wrote a.txt only."),
                chat_completion(None, [Call("question", {"question": "Which format?", "options": ["csv", "json"]})]),
                chat_completion("JSON then."))
    workspace.config(agent={"max_parallel_calls": 1})  # the two writes ask in a known order
    env = subprocess_env(gate_site, **{GATE_ENV: "write"})
    proc = run_nexus("chat", input="write both files\ny\nnot b, it is mine\nexport it\n2\n", env=env)
    assert proc.returncode == 0, proc.stderr
    assert (workspace.root / "a.txt").read_text() == "A" and not (workspace.root / "b.txt").exists()
    out = proc.stdout
    assert ("? allow write {\"path\": \"a.txt\", \"content\": \"A\"}\n  asked by test.ask_gate:\n"
            "  | May the agent run write {'path': 'a.txt', 'content': 'A'}?\n  from: a direct call, not from a script\n") in out
    assert "  tool write {\"path\": \"b.txt\", \"content\": \"B\"} -> error: vetoed: denied by the user: not b, it is mine" in out
    assert "? Which format?\n  1) csv\n  2) json\n" in out
    assert '  tool question {"question": "Which format?", "options": ["csv", "json"]} -> ok, 1 line' in out
    assert out.rstrip().endswith("JSON then.")
    question_result = [m for m in fake.last("openai.chat").body["messages"] if m["role"] == "tool"][-1]
    assert question_result["content"] == "json"
    [path] = transcripts(workspace)
    records = read_transcript(path)
    assert [r["reason"] for r in records if r["type"] == "stop"] == ["final_answer", "final_answer"]
    assert [(r["approved"], r.get("text")) for r in records if r["type"] == "answer"] == \
        [(True, ""), (False, "not b, it is mine"), (True, "json")]
    no_key_anywhere(workspace, proc.stdout, proc.stderr)


def test_help_lists_the_agent_commands(run_nexus: RunNexus) -> None:
    proc = run_nexus("--help")
    assert proc.returncode == 0
    assert "chat" in proc.stdout and "ask" in proc.stdout
    proc = run_nexus("ask", "--help")
    assert "--yes" in proc.stdout and "--json" in proc.stdout and "--model" in proc.stdout


def test_ctrl_c_in_chat_stops_the_turn_not_the_chat(workspace: Workspace) -> None:
    with StallingServer(Stall("Let me think"), Answer("Still here.")) as server:
        workspace.config(nexus__provider__openai={"base_url": server.url + "/v1", "max_retries": 0})
        term = Terminal(["chat"], workspace.root, subprocess_env(TERM="dumb"))
        try:
            term.read_until("> ")
            term.type(b"think hard\r")
            term.read_until("Let me think")
            assert server.stalled.wait(30)
            term.type(b"\x03")  # Ctrl-C
            term.read_until("[stopped: interrupted]")
            assert server.disconnected.wait(30)  # the stream was closed, not left hanging
            term.read_until("> ", timeout=30)
            term.type(b"are you there?\r")
            term.read_until("Still here.\n> ")
            term.type(b"\x04")  # Ctrl-D ends the chat
            assert term.wait() == 0
        finally:
            try:
                os.kill(term.pid, signal.SIGKILL)
                os.waitpid(term.pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
    [path] = transcripts(workspace)
    assert [r["reason"] for r in read_transcript(path) if r["type"] == "stop"] == ["interrupted", "final_answer"]
    assert len(server.bodies) == 2


def test_a_signal_interrupts_ask(workspace: Workspace) -> None:
    with StallingServer(Stall("Working on it")) as server:
        workspace.config(nexus__provider__openai={"base_url": server.url + "/v1", "max_retries": 0})
        proc = subprocess.Popen([sys.executable, "-m", "nexus_core.cli", "ask", "a long task"], cwd=workspace.root,
                                env=subprocess_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert server.stalled.wait(60)
            time.sleep(0.2)  # let the client take the streamed text (nothing asserts on this time)
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=60)
        finally:
            proc.kill()
    assert proc.returncode == 130, err
    assert "nexus: stopped: interrupted" in err
    [path] = transcripts(workspace)
    assert read_transcript(path)[-1]["reason"] == "interrupted"


def test_plugins_lists_the_model_providers(workspace: Workspace, run_nexus: RunNexus) -> None:
    workspace.config()
    proc = run_nexus("plugins")
    assert proc.returncode == 0
    lines = proc.stdout.splitlines()
    assert lines[lines.index(next(x for x in lines if x.startswith("nexus.provider.openai "))) + 1] == \
        "    model providers: openai"
    assert "    model providers: anthropic" in lines


def test_chat_asks_about_concurrent_calls_one_at_a_time(fake: FakeProviders, workspace: Workspace,
                                                       run_nexus: RunNexus, gate_site: Path) -> None:
    """Three calls of one turn ask at once: the person gets one question at a time, each whole,
    and each answer goes to its own call."""
    calls = [Call("write", {"path": f"{name}.txt", "content": name}) for name in ("a", "b", "c")]
    fake.script("openai.chat", chat_completion(None, calls), chat_completion("Done."))
    workspace.config()
    env = subprocess_env(gate_site, **{GATE_ENV: "write"})
    proc = run_nexus("chat", input="write three files\ny\nno thanks\ny\n", env=env)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    asked = [i for i, line in enumerate(lines) if line.startswith("? allow write")]
    assert len(asked) == 3
    for i in asked:  # each question whole: its call, then its gate's question
        path = json.loads(lines[i].removeprefix("? allow write "))["path"]
        assert lines[i + 1:i + 3] == ["  asked by test.ask_gate:",
                                      f"  | May the agent run write {{'path': '{path}', 'content': '{path[0]}'}}?"]
    order = [json.loads(lines[i].removeprefix("? allow write "))["path"] for i in asked]
    written = {p.name for p in workspace.root.glob("*.txt")}
    assert written == {order[0], order[2]}  # the first and third answers were "y"
    [path] = transcripts(workspace)
    answers = [(r["approved"], r.get("text")) for r in read_transcript(path) if r["type"] == "answer"]
    assert sorted(answers) == [(False, "no thanks"), (True, ""), (True, "")]


def test_chat_lists_the_interrupted_sessions_and_resume_goes_on_with_one(fake: FakeProviders,
                                                                         workspace: Workspace) -> None:
    """`nexus chat` lists, as it starts, the sessions whose task was cut when their host stopped
    (not one another process has open) and goes on with none by itself; `/resume` goes on with
    the latest one, in the chat's terminal, and the chat goes on after it."""
    import fcntl

    workspace.config()
    folder = workspace.sessions / "plugins" / "nexus.agent"
    folder.mkdir(parents=True)
    cut, held = "20261202T000000Z-0123abcd", "20261202T000001Z-4567ef01"
    for session in (cut, held):  # each killed in its model request: the request has no response
        records = [{"type": "session", "seq": 1, "id": session, "provider": "openai", "model": "gpt-4.1"},
                   {"type": "message", "seq": 2, "role": "user", "text": "What is six times seven?"},
                   {"type": "request", "seq": 3, "turn": 1, "id": "r1"}]
        (folder / f"{session}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    lock = os.open(folder / f"{held}.lock", os.O_RDWR | os.O_CREAT)  # `held` is open in a live process
    fcntl.flock(lock, fcntl.LOCK_EX)
    fake.script("openai.chat", chat_completion("Forty-two."), chat_completion("Hello."))
    term = Terminal(["chat"], workspace.root, subprocess_env(TERM="dumb"))
    try:
        term.read_until("/resume [ID] goes on")
        at_prompt(term)
        listed = term.output
        assert cut in listed and held not in term.output
        assert fake.requests_for("openai.chat") == []  # the chat goes on with no session by itself
        term.type(b"/help\r")
        term.read_until("such session; the chat lists them as it starts")
        at_prompt(term)
        term.type(b"/resume\r")
        term.read_until(f"[resuming session {cut}]")
        term.read_until("Forty-two.")
        term.read_until(f"[session {cut}: done]")
        at_prompt(term)
        term.type(b"/resume " + cut.encode() + b"\r")  # its task ended now
        term.read_until("its last task ended; nothing to resume")
        at_prompt(term)
        term.type(b"hi\r")
        term.read_until("Hello.\n")
        at_prompt(term)
        term.type(b"\x04")
        assert term.wait() == 0
    finally:
        os.close(lock)
        try:
            os.kill(term.pid, signal.SIGKILL)
            os.waitpid(term.pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
    records = read_transcript(folder / f"{cut}.jsonl")
    assert [(r["reason"], r["text"]) for r in records if r["type"] == "stop"] == [("final_answer", "Forty-two.")]
    [first, _] = fake.requests_for("openai.chat")
    assert [m["content"] for m in first.body["messages"] if m["role"] == "user"] == ["What is six times seven?"]
    assert interrupted_task_of(folder / f"{held}.jsonl") is not None  # left as it was


def interrupted_task_of(path: Path) -> object:
    from nexus_agent._session import interrupted_task

    return interrupted_task(read_transcript(path))


def at_prompt(term: Terminal) -> None:
    """Wait until the chat shows its prompt again (`read_until` finds the first one ever)."""
    term.wait_for(lambda: term.output.endswith("> "), "the chat's prompt")


FLAG_PLUGIN = """\
import os
from nexus_core import hookimpl

@hookimpl
def nexus_register_tools(register, nexus):
    # what a plugin that takes over as the Nexus starts (nexus.durable's `recover: start`) finds
    with open(os.environ["NEXUS_TEST_FLAG_FILE"], "a") as out:
        out.write(f"{nexus.plugin('nexus.agent').take_over_turns}\\n")
"""


def test_chat_leaves_interrupted_turns_to_resume_even_while_its_nexus_starts(
        fake: FakeProviders, workspace: Workspace, run_nexus: RunNexus, tmp_path: Path) -> None:
    """`nexus chat` does not go on with a cut-off agent turn by itself, also with `recover: start`,
    which takes over while the Nexus starts: the agent plugin is made not to, before it starts.
    `nexus ask` (not a chat) keeps the default."""
    site = tmp_path / "flag-site"
    info = site / "nexus_test_flag-0.1.dist-info"
    info.mkdir(parents=True)
    (site / "nexus_test_flag.py").write_text(FLAG_PLUGIN, encoding="utf-8")
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: nexus-test-flag\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[nexus.plugins]\ntest.flag = nexus_test_flag\n")
    flags = tmp_path / "flags.txt"
    workspace.config()
    fake.script("openai.chat", chat_completion("Hi."))
    env = subprocess_env(site, NEXUS_TEST_FLAG_FILE=str(flags))
    chat = run_nexus("chat", input="/exit\n", env=env)
    assert chat.returncode == 0, chat.stderr
    ask = run_nexus("ask", "hello", env=env)
    assert ask.returncode == 0, ask.stderr
    assert flags.read_text().splitlines() == ["False", "True"]
