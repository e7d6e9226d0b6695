"""Output streaming and the code.exec events.

`nexus_code_exec_stdout` gets a chunk at each newline, when 512 bytes are pending, and a final
chunk (`final=True`), while the script runs; `nexus_code_exec_request` comes before them and
`nexus_code_exec_result` after. `max_output_bytes` caps stdout and stderr together.
"""

from __future__ import annotations

import json
import textwrap
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from nexus_core.testing import NexusFactory, assert_error, assert_ok

from nexus_core import Nexus, ToolCall, ToolDef, hookimpl
from nexus_tool_code_exec import DEFAULT_ALLOWED_PACKAGES, CodeExecChunk, CodeExecRequest, CodeExecResult

CE = "nexus.tool.code_exec"


class Events:
    """Every code.exec event, in the order they came."""

    def __init__(self) -> None:
        self.log: list[tuple[str, Any]] = []
        self.lock = threading.Lock()
        #: what the `peek` tool saw of the chunks, each time a script called it
        self.seen_by_peek: list[list[str]] = []

    @hookimpl
    def nexus_code_exec_request(self, request: CodeExecRequest) -> None:
        with self.lock:
            self.log.append(("request", request))

    @hookimpl
    def nexus_code_exec_stdout(self, chunk: CodeExecChunk) -> None:
        with self.lock:
            self.log.append(("stdout", chunk))

    @hookimpl
    def nexus_code_exec_result(self, result: CodeExecResult) -> None:
        with self.lock:
            self.log.append(("result", result))

    def chunks(self) -> list[CodeExecChunk]:
        return [p for kind, p in self.log if kind == "stdout"]

    def data(self) -> list[str]:
        """The non-final chunks' data."""
        return [c.data for c in self.chunks() if not c.final]


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Nexus, Events]]:
    root = tmp_path_factory.mktemp("streaming")
    events = Events()
    seen_by_peek = events.seen_by_peek

    def peek(arguments: dict[str, Any]) -> str:
        seen_by_peek.append([c.data for c in events.chunks()])
        return "peeked"

    config = {"workspace": str(root), "session_dir": str(root / "sessions"), "skills": [],
              "plugins": {"active": [CE], CE: {"timeout_seconds": 60,
                                               # sys, for print(..., file=sys.stderr)
                                               "allowed_packages": [*DEFAULT_ALLOWED_PACKAGES, "sys"]}}}
    with Nexus.from_config(config, plugins=[events], tools=[ToolDef(name="peek", handler=peek)]) as nx:
        yield nx, events


@pytest.fixture
def events(shared: tuple[Nexus, Events]) -> Events:
    shared[1].log.clear()
    shared[1].seen_by_peek.clear()
    return shared[1]


@pytest.fixture
def nx(shared: tuple[Nexus, Events], events: Events) -> Nexus:
    return shared[0]


def run(nx: Nexus, script: str, call_id: str | None = None) -> Any:
    args = {"script": textwrap.dedent(script)}
    if call_id is None:
        return nx.invoke("run_code", args)
    from nexus_core import ToolCall

    return nx.invoke(ToolCall(id=call_id, name="run_code", arguments=args))


# -- flush rules ----------------------------------------------------------------------------


def test_nexus_code_exec_stdout_chunk_at_each_newline(nx: Nexus, events: Events) -> None:
    assert_ok(run(nx, """\
        def run(ctx):
            print("a")
            print("b", end="")
            print("c")
            print("x\\ny\\nz")
        """))
    assert events.data() == ["a\n", "bc\n", "x\n", "y\n", "z\n"]


def test_nexus_code_exec_stdout_chunk_at_512_pending_bytes(nx: Nexus, events: Events) -> None:
    assert_ok(run(nx, """\
        def run(ctx):
            print("x" * 1300, end="")
            print("y" * 600)
        """))
    chunks = events.chunks()
    assert [len(c.data) for c in chunks if not c.final] == [512, 512, 512, 365]
    assert chunks[-1].final and chunks[-1].data == ""
    assert "".join(c.data for c in chunks) == "x" * 1300 + "y" * 600 + "\n"


def test_nexus_code_exec_stdout_final_chunk_carries_the_tail(nx: Nexus, events: Events) -> None:
    result = assert_ok(run(nx, "def run(ctx):\n    print('line')\n    print('no newline', end='')\n"))
    chunks = events.chunks()
    assert [(c.data, c.final) for c in chunks] == [("line\n", False), ("no newline", True)]
    assert result.output_structured["stdout"] == "line\nno newline"


@pytest.mark.parametrize("script", ["def run(ctx):\n    return 1\n", "def run(ctx):\n    raise ValueError('x')\n",
                                    "def run(ctx):\n    print('out')\n    return {1}\n"],
                         ids=["no-output", "runtime-error", "bad-result"])
def test_nexus_code_exec_stdout_final_chunk_comes_once_and_last(nx: Nexus, events: Events, script: str) -> None:
    run(nx, script)
    finals = [c for c in events.chunks() if c.final]
    assert len(finals) == 1 and events.chunks()[-1] is finals[0]


def test_nexus_code_exec_stdout_streams_while_the_script_runs(nx: Nexus, events: Events) -> None:
    assert_ok(run(nx, "import tools\n\ndef run(ctx):\n    print('before the call')\n    tools.peek()\n    print('after')\n"))
    seen = events.seen_by_peek
    assert seen == [["before the call\n"]]  # the observer had it while the script was still running
    assert events.data() == ["before the call\n", "after\n"]


def test_nexus_code_exec_stdout_stderr_chunks_are_marked(nx: Nexus, events: Events) -> None:
    result = assert_ok(run(nx, """\
        import sys

        def run(ctx):
            print("to stdout")
            print("to stderr", file=sys.stderr)
        """))
    assert [(c.stream, c.data) for c in events.chunks() if not c.final] == [("stdout", "to stdout\n"),
                                                                            ("stderr", "to stderr\n")]
    assert result.output_structured["stdout"] == "to stdout\nto stderr\n"


def test_nexus_code_exec_stdout_multibyte_text_is_never_split_inside_a_character(nx: Nexus, events: Events) -> None:
    text = "é" * 600 + "漢字" * 200
    result = assert_ok(run(nx, f"def run(ctx):\n    print({text!r}, end='')\n"))
    chunks = events.chunks()
    assert all(len(c.data.encode()) <= 512 for c in chunks)
    assert "".join(c.data for c in chunks) == text == result.output_structured["stdout"]


def test_nexus_code_exec_stdout_chunks_carry_the_call_id(nx: Nexus, events: Events) -> None:
    assert_ok(run(nx, "def run(ctx):\n    print('x')\n", call_id="call_chunks"))
    assert {c.call_id for c in events.chunks()} == {"call_chunks"}


def test_nexus_code_exec_stdout_an_observer_that_raises_does_not_break_the_run(nexus_factory: NexusFactory) -> None:
    class Broken:
        @hookimpl
        def nexus_code_exec_stdout(self, chunk: CodeExecChunk) -> None:
            raise RuntimeError("observer bug")

    nx = nexus_factory(plugins=[CE, Broken()], config={"plugins": {CE: {"timeout_seconds": 60}}})
    result = assert_ok(run(nx, "def run(ctx):\n    print('fine')\n    return 7\n"))
    assert result.output_structured == {"stdout": "fine\n", "result": 7}


# -- the events around a run ----------------------------------------------------------------


def test_nexus_code_exec_request_then_nexus_code_exec_stdout_then_nexus_code_exec_result(
        nx: Nexus, events: Events) -> None:
    script = "import tools\n\ndef run(ctx):\n    print('one')\n    tools.peek()\n    print('two')\n    return {'n': 2}\n"
    assert_ok(run(nx, script, call_id="call_events"))
    kinds = [kind for kind, _ in events.log]
    assert kinds == ["request", "stdout", "stdout", "stdout", "result"]
    request, result = events.log[0][1], events.log[-1][1]
    assert request.call_id == "call_events" and request.script == script
    assert request.session_dir is not None and request.session_dir.endswith("nexus.tool.code_exec/call_events")
    assert result.call_id == "call_events" and result.error is None
    assert result.result == {"n": 2} and result.stdout == "one\ntwo\n" and not result.stdout_truncated
    assert result.tool_calls == 1 and result.duration_seconds > 0


def test_nexus_code_exec_result_reports_a_runtime_error(nx: Nexus, events: Events) -> None:
    assert_error(run(nx, "def run(ctx):\n    print('partial')\n    return 1 / 0\n"))
    result = events.log[-1][1]
    assert events.log[-1][0] == "result"
    assert result.error == "runtime error: line 3: ZeroDivisionError: division by zero"
    assert result.result is None and result.stdout == "partial\n"


def test_nexus_code_exec_request_is_not_fired_for_a_rejected_script(nx: Nexus, events: Events) -> None:
    assert_error(run(nx, "import socket\n\ndef run(ctx):\n    return 1\n"), "script rejected:")
    assert [kind for kind, _ in events.log if kind in ("request", "stdout")] == []


def test_a_script_whose_process_cannot_start_is_still_announced_then_answered(
        nexus_factory: NexusFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    from nexus_tool_code_exec import engine_for

    events = Events()
    nx = nexus_factory(plugins=[CE, events])
    assert_ok(nx.invoke("run_code", {"script": "def run(ctx):\n    return 1\n"}))
    launcher = engine_for(nx).launcher()

    def broken() -> Any:
        raise OSError("no processes left")

    monkeypatch.setattr(launcher, "launch", broken)
    events.log.clear()
    result = nx.invoke(ToolCall(name="run_code", arguments={"script": "def run(ctx):\n    return 1\n"},
                                id="call_nostart"))
    assert_error(result, "runtime error: could not start the script's process: no processes left")
    assert [kind for kind, _ in events.log] == ["request", "result"]  # no output, not even a final chunk
    request = events.log[0][1]
    assert request.call_id == "call_nostart" and request.session_dir.endswith("nexus.tool.code_exec/call_nostart")


# -- the output cap -------------------------------------------------------------------------


@pytest.fixture
def capped(nexus_factory: NexusFactory) -> tuple[Nexus, Events]:
    events = Events()
    nx = nexus_factory(plugins=[CE, events], config={"plugins": {CE: {
        "timeout_seconds": 60, "max_output_bytes": 100, "allowed_packages": [*DEFAULT_ALLOWED_PACKAGES, "sys"]}}})
    return nx, events


def test_max_output_bytes_caps_stdout_and_stderr_together(capped: tuple[Nexus, Events]) -> None:
    nx, events = capped
    result = assert_ok(run(nx, """\
        import sys

        def run(ctx):
            print("o" * 79)
            print("e" * 79, file=sys.stderr)
            return "done"
        """))
    body = result.output_structured
    assert body["stdout"] == "o" * 79 + "\n" + "e" * 20
    assert body["stdout_truncated"] is True and body["result"] == "done"
    assert result.output == body["stdout"] + "\n--- result ---\ndone"  # issue 14.8: the text as it is
    assert sum(len(c.data.encode()) for c in events.chunks()) == 100


def test_output_just_under_the_cap_is_not_truncated(capped: tuple[Nexus, Events]) -> None:
    nx, _ = capped
    result = assert_ok(run(nx, "def run(ctx):\n    print('x' * 99)\n"))
    assert result.output_structured == {"stdout": "x" * 99 + "\n"}


def test_the_truncation_flag_survives_a_runtime_error(capped: tuple[Nexus, Events]) -> None:
    nx, events = capped
    result = assert_error(run(nx, "def run(ctx):\n    for i in range(100):\n        print(i)\n    raise ValueError('after the output')\n"))
    assert result.error == "runtime error: line 4: ValueError: after the output"
    assert result.output_structured.get("stdout_truncated") is True
    assert events.log[-1][1].stdout_truncated is True


def test_the_truncation_flag_survives_a_timeout(nexus_factory: NexusFactory) -> None:
    nx = nexus_factory(plugins=[CE], config={"plugins": {CE: {"timeout_seconds": 1, "max_output_bytes": 100}}})
    result = assert_error(run(nx, "def run(ctx):\n    print('x' * 300)\n    while True:\n        pass\n"),
                          "script timed out after")
    assert result.output_structured == {"stdout": "x" * 100, "stdout_truncated": True}
