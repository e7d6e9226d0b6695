"""Issue 24, item 2: a run whose inner call waits for a person longer than `suspend_after_seconds`
is suspended (its script's process ends; the host keeps the journal and the question), and once
the person answers, a fresh process runs the script again from the start with the calls made
before answered from the journal: each side effect happens once, the output is streamed once, the
time suspended does not count against the timeout, and the result says it was resumed."""

from __future__ import annotations

import logging
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from journal_helpers import CE, lines, make_tools, wait_for

from nexus_core import Ask, Question, ToolCall, ToolDef, hookimpl
from nexus_core.testing import NexusFactory
from nexus_tool_code_exec import CodeExecChunk


class AsksAbout:
    def __init__(self, *texts: str) -> None:
        self.texts = set(texts)

    @hookimpl
    def nexus_before_tool_invoke(self, call: ToolCall, tool: ToolDef) -> Ask | None:
        return Ask("Go ahead?") if tool.name == "append" and call.arguments.get("text") in self.texts else None


class Suspensions(logging.Handler):
    """The host's log line that a run was suspended: the event a test waits for."""

    def __init__(self) -> None:
        super().__init__()
        self.seen = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if "suspended" in record.getMessage():
            self.seen.set()


@pytest.fixture
def suspensions() -> Any:
    handler = Suspensions()
    logger = logging.getLogger("nexus_tool_code_exec")
    logger.addHandler(handler)
    old = logger.level
    logger.setLevel(logging.INFO)
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(old)


#: the run's timeout; the person takes longer than that to answer, which does not count against it
TIMEOUT = 8

SCRIPT = textwrap.dedent("""\
    import tools, parallel

    def run(ctx):
        print("before")
        tools.append(text="one")
        got = parallel.map(["a", "b", "c", "d"], lambda x: tools.append(text=x).output)
        tools.append(text="two")
        print("after")
        return got
    """)


def test_a_run_waiting_on_a_person_is_suspended_and_resumed_from_its_journal(
        nexus_factory: NexusFactory, tmp_path: Path, suspensions: Suspensions) -> None:
    ledger = tmp_path / "ledger.txt"
    asked: list[Question] = []

    def approver(question: Question) -> bool:
        asked.append(question)
        # the person answers only once the run was suspended (its process ended), and after
        # longer than the run's whole timeout
        assert suspensions.seen.wait(120), "the run was not suspended"
        time.sleep(TIMEOUT + 1)
        return True

    chunks: list[str] = []

    class Output:
        @hookimpl
        def nexus_code_exec_stdout(self, chunk: CodeExecChunk) -> None:
            chunks.append(chunk.data)

    nx = nexus_factory(plugins=[CE, AsksAbout("c"), Output()], tools=make_tools(ledger),
                       config={"plugins": {CE: {"timeout_seconds": TIMEOUT, "suspend_after_seconds": 0.2,
                                                "max_workers": 4}}})
    result = nx.invoke(ToolCall(id="call_suspended", name="run_code", arguments={"script": SCRIPT}),
                       approver=approver)
    assert result.error is None, result.output
    assert result.output_structured["result"] == [f"appended {x}" for x in "abcd"]
    assert len(asked) == 1  # the answer was kept: the resumed run did not ask again
    assert sorted(lines(ledger)) == sorted(["one", "a", "b", "c", "d", "two"])  # each once
    assert result.metadata["resumed"] is True and result.metadata["suspensions"] == 1
    # the resumed attempt got every call made before the suspension from the journal (the one a
    # person decided included): at least "one" and "c"; it made "two" (and any parallel call
    # the suspension cut off) live
    assert 2 <= result.metadata["journal_calls"] <= 5
    # the stream shows the output once, though the script printed it twice
    assert "".join(chunks) == "before\nafter\n"
    assert result.output_structured["stdout"] == "before\nafter\n"


def test_a_suspended_run_whose_call_is_denied_resumes_with_the_veto(
        nexus_factory: NexusFactory, tmp_path: Path, suspensions: Suspensions) -> None:
    ledger = tmp_path / "ledger.txt"

    def approver(question: Question) -> bool:
        assert suspensions.seen.wait(120), "the run was not suspended"
        return False

    nx = nexus_factory(plugins=[CE, AsksAbout("two")], tools=make_tools(ledger),
                       config={"plugins": {CE: {"timeout_seconds": 60, "suspend_after_seconds": 0.2}}})
    script = textwrap.dedent("""\
        import tools

        def run(ctx):
            tools.append(text="one")
            try:
                tools.append(text="two")
            except tools.ToolVetoed as e:
                return "vetoed: " + e.reason
        """)
    result = nx.invoke(ToolCall(id="call_denied", name="run_code", arguments={"script": script}), approver=approver)
    assert result.error is None, result.output
    assert result.output_structured["result"].startswith("vetoed: ")
    assert lines(ledger) == ["one"]
    assert result.metadata == {"resumed": True, "journal_calls": 2, "suspensions": 1}


def test_without_a_journal_a_run_is_never_suspended(nexus_factory: NexusFactory, tmp_path: Path,
                                                    suspensions: Suspensions) -> None:
    ledger = tmp_path / "ledger.txt"
    released = threading.Event()

    def approver(question: Question) -> bool:
        wait_for(lambda: len(lines(ledger)) == 1, "the first call")
        released.set()
        return not suspensions.seen.wait(1.0)  # long past suspend_after_seconds

    nx = nexus_factory(plugins=[CE, AsksAbout("two")], tools=make_tools(ledger),
                       config={"plugins": {CE: {"journal": False, "suspend_after_seconds": 0.1}}})
    script = "import tools\n\ndef run(ctx):\n    tools.append(text='one')\n    tools.append(text='two')\n"
    result = nx.invoke(ToolCall(id="call_plain", name="run_code", arguments={"script": script}), approver=approver)
    assert released.is_set()
    assert result.error is None, result.output
    assert lines(ledger) == ["one", "two"] and result.metadata == {}
