"""The console approver's own rules, driven in-process: `v` shows a folded question whole before
the answer, keys typed ahead are discarded before each read, a script shown once is shown by its
lines around the call afterwards, and every line written is escaped."""

from __future__ import annotations

import io
import threading

from nexus_agent._console import ConsoleApprover, Display
from nexus_core import Answer, Question, ToolCall, ToolDef


class ScriptedReader:
    """Answers prompts from a list, and counts the discards (what LineReader does on a tty)."""

    def __init__(self, *answers: str) -> None:
        self.answers = list(answers)
        self.prompts: list[str] = []
        self.discards = 0

    def discard_pending(self) -> None:
        self.discards += 1

    def __call__(self, prompt: str) -> str:
        self.prompts.append(prompt)
        return self.answers.pop(0)


def ask(question: Question, reader: ScriptedReader, approver: ConsoleApprover | None = None) -> tuple[Answer, str]:
    if approver is None:
        out = io.StringIO()
        approver = ConsoleApprover(Display(out, out), reader)
    done = threading.Event()
    answers: list[Answer] = []
    worker = threading.Thread(target=lambda: (answers.append(approver(question)), done.set()))
    worker.start()
    approver.pump(done)
    worker.join()
    return answers[0], approver.display.out.getvalue()  # type: ignore[attr-defined]


def test_v_shows_everything_then_the_answer_is_asked_again() -> None:
    command = "echo " + "x" * 5000 + "; touch PWNED"
    question = Question("approval", ToolCall(name="shell", arguments={"command": command}), "Run it?",
                        tool=ToolDef(name="shell", handler=print))
    reader = ScriptedReader("v", "no, too long")
    answer, screen = ask(question, reader)
    assert answer == Answer(False, "no, too long")
    assert reader.prompts == ["  allow? [y/N, v to see it all, or a reason to refuse] ",
                              "  allow? [y/N, or a reason to refuse] "]
    assert reader.discards == 2  # before each read
    folded, whole = screen.split("\n? allow shell\n")
    assert "characters folded ...]" in folded and command not in folded
    assert command in whole and "folded" not in whole


def test_a_script_shown_once_is_shown_by_its_lines_around_the_call_afterwards() -> None:
    script = "import tools\n\ndef run(ctx):\n" + "".join(f"    tools.write(path='f{i}')\n" for i in range(20))
    parent = ToolCall(name="run_code", arguments={"script": script}, id="call_run")
    out = io.StringIO()
    reader = ScriptedReader("y", "y")
    approver = ConsoleApprover(Display(out, out), reader)
    for line in (4, 20):
        inner = ToolCall(name="write", arguments={"path": f"f{line - 4}"}, parent_call_id="call_run",
                         metadata={"script_line": line})
        answer, _ = ask(Question("approval", inner, "Write?", chain=(parent,)), reader, approver)
        assert answer.approved
    first, second = out.getvalue().split("? allow write", 2)[1:]
    assert "tools.write(path='f19')" in first  # the whole script, the first time
    assert "its script (shown whole before), lines 17-23 of 23:" in second
    assert "tools.write(path='f0')" not in second
    assert reader.prompts[1] == "  allow? [y/N, v to see it all, or a reason to refuse] "


def test_what_the_display_writes_is_escaped() -> None:
    out = io.StringIO()
    display = Display(out, out)
    display.write(out, "text\x1b[2J\x1b]52;c;eA==\x07 \u202eabc\n")
    assert out.getvalue() == "text\\x1b[2J\\x1b]52;c;eA==\\x07 \\u202eabc\n"
