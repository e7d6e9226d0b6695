"""Issue 21's attacks on the person at `nexus chat`, each in a real pseudo-terminal against the
real SDK and the fake provider server: a command padded so that the approval's cut hides its
end, text (from the model, a file read with --verbose, a question's options, a call's arguments)
that redraws the screen, writes the clipboard or reverses itself, a `y` typed while the model was
still writing that would answer the question shown after it, and a script's inner call approved
without saying a script makes it. Each must fail to mislead: the screen shows the whole call,
inert, and only keys typed after the question answer it."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from fakes.providers import Call, FakeProviders, chat_completion

from .conftest import Workspace, subprocess_env
from .pty_terminal import Terminal

#: asks about the tools named in $NEXUS_TEST_ASK_TOOLS; with $NEXUS_TEST_HOLD set, first says it
#: is about to ask (a file `<hold>.waiting`) and waits until the test creates `<hold>`
HOLDING_GATE = textwrap.dedent("""
    import os, time
    from nexus_core import Ask, hookimpl

    @hookimpl
    def nexus_before_tool_invoke(call, tool):
        if tool.name not in os.environ.get("NEXUS_TEST_ASK_TOOLS", "").split(","):
            return None
        hold = os.environ.get("NEXUS_TEST_HOLD")
        if hold:
            open(hold + ".waiting", "w").close()
            deadline = time.monotonic() + 120
            while not os.path.exists(hold) and time.monotonic() < deadline:
                time.sleep(0.02)
        return Ask(f"May the agent run {tool.name}?")
""")

REDRAW = "\x1b[1A\x1b[2K? allow read {\"path\": \"notes.txt\"}"
CLIPBOARD = "\x1b]52;c;cm0gLXJmIH4K\x07"
BIDI = "\u202etxt.exe"
#: what must never reach the terminal as bytes
RAW = {"cursor up": b"\x1b[1A", "erase line": b"\x1b[2K", "OSC 52": b"\x1b]52", "RLO": "\u202e".encode(),
       "8-bit CSI": "\x9b".encode()}


@pytest.fixture
def site(tmp_path: Path) -> Path:
    site = tmp_path / "site"
    info = site / "nexus_test_holding_gate-0.1.dist-info"
    info.mkdir(parents=True)
    (site / "nexus_test_holding_gate.py").write_text(HOLDING_GATE, encoding="utf-8")
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: nexus-test-holding-gate\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[nexus.plugins]\ntest.holding_gate = nexus_test_holding_gate\n")
    return site


def chat(workspace: Workspace, site: Path, ask: str, *args: str, **env: str) -> Terminal:
    return Terminal(["chat", *args], workspace.root,
                    subprocess_env(site, NEXUS_TEST_ASK_TOOLS=ask, TERM="dumb", **env))


def end(term: Terminal) -> None:
    term.type(b"\x04")  # Ctrl-D at the prompt ends the chat
    assert term.wait() == 0


def question_on_screen(screen: str) -> str:
    """The last question shown: from its `? allow` line to its prompt."""
    start = screen.rindex("? allow")
    return screen[start:screen.index("allow? [", start)]


def test_the_padded_command_of_the_truncation_attack_is_shown_whole(fake: FakeProviders, workspace: Workspace,
                                                                    site: Path) -> None:
    """`? allow shell {"command": "git status      ...` was cut at 100 characters; `y` ran
    `git status; touch PWNED`. Called as `bash`, asked about by a gate written for `shell`."""
    command = "git status" + " " * 120 + "; touch PWNED"
    fake.script("openai.chat", chat_completion(None, [Call("bash", {"command": command})]),
                chat_completion("Left it alone."))
    workspace.config()
    term = chat(workspace, site, "shell")
    try:
        term.read_until("> ")
        term.type(b"check the repository\r")
        question = question_on_screen(term.read_until("allow? ["))
        assert question.startswith("? allow shell (called as bash)\n")
        assert "    command: git status[120 spaces]; touch PWNED\n" in question
        assert "  note: the shell runs this command as you: it can do anything your user can" in question
        assert "  from: a direct call, not from a script\n" in question
        term.type(b"n\r")
        term.read_until("Left it alone.\n> ")  # the next prompt (a "> " is on the screen already)
        end(term)
    finally:
        term.kill()
    assert not (workspace.root / "PWNED").exists()


def test_text_from_the_model_a_file_a_question_and_arguments_cannot_drive_the_terminal(
        fake: FakeProviders, workspace: Workspace, site: Path) -> None:
    """With --verbose: a model's streamed text that redraws a fake `? allow read` line and
    writes the clipboard, a file read (its output shown) holding the same, a question whose
    options carry them, and a call whose arguments hold a bidi override. None reaches the
    terminal as a control; each shows as its escape."""
    workspace.config()
    (workspace.root / "notes.txt").write_text(f"first\n{REDRAW}\n{CLIPBOARD}{BIDI}\nlast\n", encoding="utf-8")
    fake.script("openai.chat",
                chat_completion(f"Sure.{REDRAW}{CLIPBOARD} {BIDI}", [Call("read", {"path": "notes.txt"})]),
                chat_completion(None, [Call("question", {"question": f"Pick one{REDRAW}",
                                                         "options": [f"keep {BIDI}", f"drop{CLIPBOARD}"]})]),
                chat_completion(None, [Call("write", {"path": f"out{BIDI}.sh", "content": "x"})]),
                chat_completion("Done."))
    term = chat(workspace, site, "write", "--verbose")
    try:
        term.read_until("> ")
        term.type(b"go\r")
        term.read_until("answer (")
        term.type(b"1\r")
        question = question_on_screen(term.read_until("allow? ["))
        assert '? allow write {"path": "out\\u202etxt.exe.sh", "content": "x"}' in question
        term.type(b"n\r")
        term.read_until("Done.\n> ")  # the next prompt (a "> " is on the screen already)
        end(term)
    finally:
        term.kill()
    for what, sequence in RAW.items():
        assert sequence not in term.raw, f"{what} reached the terminal:\n{term.output}"
    screen = term.output
    assert "Sure.\\x1b[1A\\x1b[2K? allow read" in screen  # the model's text, inert
    assert "\\x1b]52;c;cm0gLXJmIH4K\\x07" in screen
    assert screen.count("\\u202etxt.exe") >= 4  # model text, the file's output, an option, the arguments
    assert "? Pick one\\x1b[1A\\x1b[2K? allow read" in screen and "  1) keep \\u202etxt.exe" in screen
    assert not list(workspace.root.glob("out*"))


def test_a_key_typed_before_the_question_appears_does_not_answer_it(fake: FakeProviders, workspace: Workspace,
                                                                     site: Path, tmp_path: Path) -> None:
    """In `nexus chat`, a `y` typed while the model was still answering approved the call whose
    question appeared afterwards. The gate here holds its question until the test has typed `y`
    and Enter; the approval must wait for keys typed after it is shown."""
    hold = tmp_path / "release"
    fake.script("openai.chat", chat_completion("Writing it.", [Call("write", {"path": "a.txt", "content": "A"})]),
                chat_completion("Not written."))
    workspace.config()
    term = chat(workspace, site, "write", NEXUS_TEST_HOLD=str(hold))
    try:
        term.read_until("> ")
        term.type(b"write a.txt\r")
        waiting = Path(str(hold) + ".waiting")
        term.read_until("Writing it.")
        term.wait_for(waiting.exists, "the gate holding its question")
        term.type(b"y\r")  # typed ahead, before the question exists
        hold.touch()
        question = question_on_screen(term.read_until("allow? ["))
        assert question.startswith('? allow write {"path": "a.txt", "content": "A"}')
        term.type(b"not this one\r")  # the answer given after seeing the question
        term.read_until("Not written.\n> ")  # the next prompt (a "> " is on the screen already)
        end(term)
    finally:
        term.kill()
    assert not (workspace.root / "a.txt").exists()
    assert "error: vetoed: denied by the user: not this one" in term.output


SCRIPT = """\
import tools

def run(ctx):
    notes = tools.read(path="notes.txt").content
    tools.write(path="copy.txt", content=notes)
    return "copied"
"""


def test_an_inner_call_of_a_script_says_which_script_makes_it(fake: FakeProviders, workspace: Workspace,
                                                             site: Path) -> None:
    """An approval for one of run_code's inner calls did not say that a script was making it:
    it names the run_code call and shows the script whole."""
    (workspace.root / "notes.txt").write_text("n\n", encoding="utf-8")
    fake.script("openai.chat", chat_completion(None, [Call("run_code", {"script": SCRIPT})]),
                chat_completion("Stopped."))
    workspace.config()
    term = chat(workspace, site, "write")
    try:
        term.read_until("> ")
        term.type(b"copy the notes\r")
        question = question_on_screen(term.read_until("allow? ["))
        assert question.startswith("? allow write\n") and "    path: copy.txt\n" in question
        assert "  from: run_code call call_" in question and "a direct call" not in question
        for n, line in enumerate(SCRIPT.splitlines(), 1):
            assert f"{n} | {line}".rstrip() in question
        term.type(b"n\r")
        term.read_until("Stopped.\n> ")  # the next prompt (a "> " is on the screen already)
        end(term)
    finally:
        term.kill()
    assert not (workspace.root / "copy.txt").exists()
