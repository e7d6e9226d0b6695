"""A child that breaks the protocol cannot reach a tool around the gates.

The AST check stops a script from reaching the runtime's channel (no dunders), and it is not
the boundary anyway: these tests play a hostile child directly. A real subprocess (a small
program written here) speaks to the host's `ScriptRun` over the same pipes a script's process
uses, and sends what it likes: calls to run_code and to unregistered tools, garbage, an
over-long line, floods. The host must refuse each, put every call it does answer through the
gates, and end the run with a clear error.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from nexus_core.testing import NexusFactory
from nexus_tool_code_exec.host.fastpath import Seat
from nexus_tool_code_exec.host.runner import Outcome, ScriptRun, Settings
from nexus_tool_code_exec.launchers.base import Child, Launcher

from nexus_core import Nexus, ToolCall, ToolDef, Veto, hookimpl
from nexus_tool_code_exec import CodeExecChunk, engine_for

CE = "nexus.tool.code_exec"

FAKE_CHILD = textwrap.dedent('''\
    """A hostile run_code child: follows a list of actions given as JSON in argv[1]."""
    import json, os, sys, time

    rfd, wfd = 0, 1
    actions = json.loads(sys.argv[1])
    buf = b""

    def read_line():
        global buf
        while b"\\n" not in buf:
            chunk = os.read(rfd, 65536)
            if not chunk:
                sys.exit(9)
            buf += chunk
        line, _, buf = buf.partition(b"\\n")
        return json.loads(line)

    def write(data):
        view = memoryview(data)
        while view:
            view = view[os.write(wfd, view):]

    start = read_line()
    assert start["t"] == "start"
    replies = []
    for action in actions:
        kind, arg = next(iter(action.items()))
        if kind == "send":
            write((json.dumps(arg) + "\\n").encode())
        elif kind == "raw":
            write(arg.encode())
        elif kind == "big":
            piece = b"x" * (1 << 20)
            for _ in range(arg):
                write(piece)
        elif kind == "call":
            write((json.dumps(arg) + "\\n").encode())
            replies.append(read_line())
        elif kind == "read":
            replies.extend(read_line() for _ in range(arg))
        elif kind == "done":
            write((json.dumps({"t": "done", "result": json.dumps(replies)}) + "\\n").encode())
        elif kind == "sleep":
            time.sleep(arg)
        elif kind == "exit":
            os._exit(arg)
    time.sleep(30)  # a hostile child does not leave by itself
''')


class FakeLauncher(Launcher):
    """Launches the hostile child as a real process in its own process group."""

    def __init__(self, program: Path, actions: list[dict[str, Any]]) -> None:
        self.program = program
        self.actions = actions
        self.pid: int | None = None

    def launch(self) -> Child:
        proc = subprocess.Popen([sys.executable, str(self.program), json.dumps(self.actions)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True)
        assert proc.stdin is not None and proc.stdout is not None
        rfd, wfd = os.dup(proc.stdout.fileno()), os.dup(proc.stdin.fileno())
        proc.stdout.close()
        proc.stdin.close()
        self.pid = proc.pid

        def wait(timeout: float) -> int | None:
            try:
                return proc.wait(timeout)
            except subprocess.TimeoutExpired:
                return None

        return Child(proc.pid, rfd, wfd, waiter=wait)

    def close(self) -> None:
        pass


class Watch:
    """Records what the gates saw and which handlers ran."""

    def __init__(self) -> None:
        self.gated: list[ToolCall] = []
        self.invoked: list[ToolCall] = []
        self.lock = threading.Lock()

    @hookimpl
    def nexus_before_tool_invoke(self, call: ToolCall, tool: ToolDef) -> Veto | None:
        with self.lock:
            self.gated.append(call)
        return Veto("not that") if call.arguments.get("text") == "blocked" else None

    @hookimpl
    def nexus_tool_invoke(self, call: ToolCall, tool: ToolDef) -> None:
        with self.lock:
            self.invoked.append(call)


ECHO = ToolDef(name="echo", handler=lambda arguments: arguments["text"],
               input_schema={"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]})


@pytest.fixture
def program(tmp_path: Path) -> Path:
    path = tmp_path / "hostile_child.py"
    path.write_text(FAKE_CHILD)
    return path


@pytest.fixture
def watch() -> Watch:
    return Watch()


@pytest.fixture
def nx(nexus_factory: NexusFactory, watch: Watch) -> Nexus:
    return nexus_factory(plugins=[CE, watch], tools=[ECHO])


def play(nx: Nexus, program: Path, actions: list[dict[str, Any]], **settings: Any) -> tuple[Outcome, FakeLauncher, list[CodeExecChunk]]:
    engine = engine_for(nx)
    assert engine is not None
    bound = frozenset(engine.bindings().functions.values())
    assert "echo" in bound and "run_code" not in bound
    chunks: list[CodeExecChunk] = []
    values = {"timeout_seconds": 3.0, "max_output_bytes": 1000, "max_workers": 4, "max_tool_calls": 10,
              "max_result_bytes": 1 << 20, **settings}
    run = ScriptRun(nx, "call_parent", Settings(**values), bound, emit_chunk=chunks.append)
    launcher = FakeLauncher(program, actions)
    start = {"t": "start", "script": "", "bindings": ""}
    outcome = run.run(launcher, Seat.take(launcher), start)  # type: ignore[arg-type]
    return outcome, launcher, chunks


def call(rid: Any, name: Any, args: Any, parallel: bool = False) -> dict[str, Any]:
    return {"t": "call", "id": rid, "name": name, "args": args, "p": parallel}


def gone(pid: int | None, within: float = 2.0) -> bool:
    """The process ends within `within` seconds (a zombie counts: it runs nothing)."""
    assert pid is not None

    def ended() -> bool:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return True
        return state == "Z"

    end = time.monotonic() + within
    while not ended():
        if time.monotonic() > end:
            return False
        time.sleep(0.02)
    return True


def assert_gates_saw_every_invocation(watch: Watch) -> None:
    gated = {c.id for c in watch.gated}
    assert all(c.id in gated for c in watch.invoked), "a handler ran for a call no gate saw"
    assert all(c.parent_call_id == "call_parent" for c in watch.gated)
    assert "run_code" not in {c.name for c in watch.gated + watch.invoked}


def test_forged_calls_are_refused_and_real_ones_go_through_the_gates(nx: Nexus, program: Path, watch: Watch) -> None:
    outcome, launcher, _ = play(nx, program, [
        {"call": call(1, "run_code", {"script": "def run(ctx):\n    return 1\n"})},
        {"call": call(2, "not_a_tool", {})},
        {"call": call(3, "echo", {"text": "hi"})},
        {"call": call(4, "echo", {"text": "blocked"})},
        {"call": call(5, "echo", {"text": 5})},
        {"done": True},
    ])
    assert outcome.error is None, outcome.error
    replies = {r["id"]: r["result"] for r in outcome.result}
    assert replies[1]["error_kind"] == "unknown_tool" and "run_code" in replies[1]["error"]
    assert replies[2]["error_kind"] == "unknown_tool" and "not_a_tool" in replies[2]["error"]
    assert "error" not in replies[3] and replies[3]["output"] == "hi"  # only the fields set are sent
    assert replies[4]["error_kind"] == "vetoed"
    assert replies[5]["error_kind"] == "invalid_arguments"
    assert [c.arguments for c in watch.gated] == [{"text": "hi"}, {"text": "blocked"}, {"text": 5}]
    assert [c.arguments for c in watch.invoked] == [{"text": "hi"}]
    assert_gates_saw_every_invocation(watch)
    assert [c["name"] for c in outcome.calls] == ["run_code", "not_a_tool", "echo", "echo", "echo"]
    assert gone(launcher.pid)


@pytest.mark.parametrize(("actions", "violation"), [
    ([{"raw": "this is not json\n"}], "a line that is not JSON"),
    ([{"send": [1, 2, 3]}], "a message that is not an object"),
    ([{"send": {"t": "exec", "code": "import os"}}], "an unknown message type 'exec'"),
    ([{"send": call("one", "echo", {"text": "x"})}], "a call needs an integer id, a tool name and an arguments object"),
    ([{"send": call(1, "echo", ["x"])}], "a call needs an integer id, a tool name and an arguments object"),
    ([{"send": call(1, ["echo"], {})}], "a call needs an integer id, a tool name and an arguments object"),
], ids=["garbage", "not-an-object", "unknown-type", "string-id", "args-list", "name-list"])
def test_a_protocol_violation_stops_the_child_with_a_clear_error(
        nx: Nexus, program: Path, watch: Watch, actions: list[dict[str, Any]], violation: str) -> None:
    outcome, launcher, _ = play(nx, program, [*actions, {"call": call(9, "echo", {"text": "after"})}])
    # stopped at once: the child never leaves by itself, and at the timeout the error would say so
    assert outcome.error == f"runtime error: the script's process broke the protocol ({violation}) and was stopped"
    assert gone(launcher.pid)
    assert watch.gated == [] and watch.invoked == []


@pytest.mark.parametrize(("message", "violation"), [
    ({"t": "call", "id": 1, "name": "echo", "args": {}, "exec": "import os"},
     "a call with a field it does not have ('exec')"),
    ({"t": "call", "id": 1, "name": "echo", "args": {}, "p": "yes"}, "a call's 'p' must be true or false, not 'yes'"),
    ({"t": "out", "s": "stdout", "d": "x", "dropped": -5}, "output's 'dropped' must be a count of bytes, not -5"),
    ({"t": "error", "kind": "fatal", "message": "x"}, "an error of an unknown kind 'fatal'"),
    ({"t": "done", "result": 1}, "the end's result must be JSON text, not 1"),
    ({"t": "x" * 50_000}, "an unknown message type 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx..."),
], ids=["unknown-field", "p-not-bool", "dropped-negative", "error-kind", "done-not-text", "huge-type"])
def test_every_field_is_checked_once_and_a_bad_one_stops_the_run_naming_it(
        nx: Nexus, program: Path, watch: Watch, message: dict[str, Any], violation: str) -> None:
    """What protocol.read_child refuses ends the run, its words in the error, never more than a
    piece of what came (test_protocol_contract.py has every field of every message)."""
    outcome, launcher, _ = play(nx, program, [{"send": message}, {"call": call(9, "echo", {"text": "after"})}])
    assert outcome.error == f"runtime error: the script's process broke the protocol ({violation}) and was stopped"
    assert gone(launcher.pid)
    assert watch.gated == [] and watch.invoked == []


def test_an_over_long_line_stops_the_child_without_exhausting_the_host(nx: Nexus, program: Path, watch: Watch) -> None:
    # (that each byte is read once, not rescanned per read, is test_framing.py's)
    outcome, launcher, _ = play(nx, program, [{"big": 40}], timeout_seconds=20.0)
    assert outcome.error == ("runtime error: the script's process broke the protocol "
                             "(a message longer than the limit) and was stopped")
    assert gone(launcher.pid)


def test_a_flood_of_calls_is_capped_by_max_tool_calls(nx: Nexus, program: Path, watch: Watch) -> None:
    flood = [{"send": call(i, "echo", {"text": str(i)}, parallel=True)} for i in range(1, 16)]
    outcome, _, _ = play(nx, program, [*flood, {"read": 15}, {"done": True}], max_tool_calls=10)
    assert outcome.error is None, outcome.error
    results = [r["result"] for r in outcome.result]
    refused = [r for r in results if r.get("error", "") and "tool call limit reached" in r["error"]]
    assert len(refused) == 5
    assert len(watch.gated) == 10 and len(watch.invoked) == 10
    assert_gates_saw_every_invocation(watch)


def test_forged_output_is_capped_and_odd_streams_are_ignored(nx: Nexus, program: Path) -> None:
    outcome, _, chunks = play(nx, program, [
        {"send": {"t": "out", "s": "stdout", "d": "y" * 5000}},
        {"send": {"t": "out", "s": "/etc/passwd", "d": "ignored"}},
        {"send": {"t": "out", "s": "stdout", "d": {"not": "text"}}},
        {"done": True},
    ], max_output_bytes=1000)
    assert outcome.error is None
    assert outcome.stdout == "y" * 1000 and outcome.stdout_truncated
    assert sum(len(c.data.encode()) for c in chunks) == 1000
    assert {c.stream for c in chunks} == {"stdout"}


def test_a_child_that_exits_early_is_a_clear_error(nx: Nexus, program: Path) -> None:
    outcome, _, _ = play(nx, program, [{"exit": 3}])
    assert outcome.error == "runtime error: the script's process exited with status 3 before it finished"


def test_a_done_message_with_invalid_json_is_refused(nx: Nexus, program: Path) -> None:
    outcome, _, _ = play(nx, program, [{"send": {"t": "done", "result": "{not json"}}])
    assert outcome.error == "result is not JSON-serializable: the script's process sent invalid JSON"


def test_a_silent_child_is_stopped_at_the_timeout(nx: Nexus, program: Path) -> None:
    outcome, launcher, _ = play(nx, program, [{"sleep": 30}], timeout_seconds=1.0)
    assert outcome.error == "script timed out after 1s"
    assert gone(launcher.pid)
