"""Issue 21, item 7 (run_code's part): nothing a run started outlives it. When run_code ends (its
result, an error, its timeout, its own caller's cancel), every inner call it made is cancelled
through its `CancelToken`, the calls still queued never start, and the ones running are waited
for (up to `STOP_GRACE`); the result says what became of each. Before, run_code answered "timed
out after 1s" while its inner calls went on and wrote files a second later.

The slow tool here is real work on a real file: it waits (for its token, or for the test), then
writes into the workspace. Each test waits for events, never for a time. Also here: the line of
the script that made each inner call, on the call (`metadata["script_line"]`), for approvals.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from nexus_core import CallContext, CancelToken, Nexus, ToolCall, ToolDef, ToolResult, Veto, hookimpl
from nexus_core.testing import NexusFactory
from nexus_tool_code_exec import CodeExecChunk
from nexus_tool_code_exec.host.runner import STOP_GRACE

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox is Linux-only")

CE = "nexus.tool.code_exec"
#: the runtime's channel, reached without a dunder (see test_attacks_pipe.py)
REACH = """\
import json, tools, typing

sys = typing.sys
channel = sys.modules["_nexus_rt"]._channel


"""


class Slow:
    """`slow(name=...)`: waits, then writes `name` into the workspace. How it waits:

    - "honours": until its call is cancelled (then it stops, writing nothing), or 60 s;
    - "finishes": it ignores the cancel, but it is what lets it go on: once cancelled it writes
      its file all the same (a tool whose last step cannot be stopped);
    - "hangs": until the test releases it, whatever the cancel says."""

    def __init__(self, workspace: Path, mode: str) -> None:
        self.workspace = workspace
        self.mode = mode
        self.lock = threading.Lock()
        self.entered = 0
        self.in_call = threading.Event()
        self.ended = threading.Event()
        self.release = threading.Event()
        self.cancels: list[str] = []

    def __call__(self, arguments: dict[str, Any], ctx: CallContext) -> Any:
        with self.lock:
            self.entered += 1
        self.in_call.set()
        try:
            if self.mode == "honours":
                if ctx.cancel.wait(60):
                    with self.lock:
                        self.cancels.append(ctx.cancel.reason)
                    raise RuntimeError(f"stopped: {ctx.cancel.reason}")
            elif self.mode == "finishes":
                ctx.cancel.wait(60)
            else:
                self.release.wait(60)
            (self.workspace / arguments["name"]).write_text("written")
            return "wrote"
        finally:
            self.ended.set()

    def tooldef(self) -> ToolDef:
        return ToolDef(name="slow", handler=self, takes_context=True, description="Waits, then writes a file.",
                       input_schema={"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]})


class Watch:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls: list[ToolCall] = []
        self.results: list[ToolResult] = []

    @hookimpl
    def nexus_before_tool_invoke(self, call: ToolCall, tool: ToolDef) -> Veto | None:
        with self.lock:
            self.calls.append(call)
        return None

    @hookimpl
    def nexus_tool_result(self, call: ToolCall, result: ToolResult) -> None:
        with self.lock:
            self.results.append(result)


def make(nexus_factory: NexusFactory, slow: Slow, watch: Any = None, **settings: Any) -> Nexus:
    echo = ToolDef(name="echo", handler=lambda a: a["text"],
                   input_schema={"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]})
    return nexus_factory(plugins=[CE, *([watch] if watch else [])], tools=[slow.tooldef(), echo],
                         config={"workspace": str(slow.workspace),
                                 "plugins": {CE: {"timeout_seconds": 1, "max_workers": 2, **settings}}})


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    path = tmp_path / "ws"
    path.mkdir()
    return path


def test_a_timeout_stops_the_call_in_flight_and_its_write_never_happens(nexus_factory: NexusFactory, workspace: Path) -> None:
    slow = Slow(workspace, "honours")
    nx = make(nexus_factory, slow)
    result = nx.invoke("run_code", {"script": "import tools\n\ndef run(ctx):\n    tools.slow(name='late.txt')\n"})
    assert result.error == ("script timed out after 1s; 1 inner call was still running and was stopped: "
                            "slow (stopped)")
    assert slow.ended.is_set(), "run_code returned while its inner call was still running"
    assert slow.cancels == ["run_code's script timed out after 1s"]
    assert not (workspace / "late.txt").exists()
    assert nx.invoke("run_code", {"script": "def run(ctx):\n    return 1 + 1\n"}).output_structured == {"result": 2}


def test_a_call_that_finishes_after_the_cancel_is_waited_for_and_said_to_have_happened(
        nexus_factory: NexusFactory, workspace: Path) -> None:
    slow = Slow(workspace, "finishes")
    nx = make(nexus_factory, slow)
    result = nx.invoke("run_code", {"script": "import tools\n\ndef run(ctx):\n    tools.slow(name='done.txt')\n"})
    assert result.error == ("script timed out after 1s; 1 inner call was still running and was stopped: "
                            "slow (finished: its effect happened)")
    assert (workspace / "done.txt").read_text() == "written"  # when run_code returned, not later


def test_a_call_that_ignores_the_cancel_is_reported_as_still_running(nexus_factory: NexusFactory, workspace: Path) -> None:
    """Python cannot stop a thread: a tool that does not honour its token is waited for up to
    STOP_GRACE, and the result says it may still do what it does."""
    slow = Slow(workspace, "hangs")
    nx = make(nexus_factory, slow)
    try:
        result = nx.invoke("run_code", {"script": "import tools\n\ndef run(ctx):\n    tools.slow(name='x.txt')\n"})
        assert result.error == (f"script timed out after 1s; 1 inner call was still running and was stopped: slow "
                                f"(still running after {STOP_GRACE:g}s: it did not stop when asked, its effect may "
                                "yet happen)")
        assert not slow.ended.is_set()
    finally:
        slow.release.set()
    assert slow.ended.wait(30)


def test_queued_parallel_calls_never_start_after_the_end(nexus_factory: NexusFactory, workspace: Path) -> None:
    """Six parallel calls forged at once, two workers: two run, two wait in the host's pool (the
    in-flight bound, 2 x max_workers, holds the rest in the child's pipe). At the timeout the two
    running are stopped and the two queued are refused, through the result gates and observers,
    and never run."""
    slow, watch = Slow(workspace, "honours"), Watch()
    nx = make(nexus_factory, slow, watch)
    script = REACH + """\
def run(ctx):
    for i in range(6):
        channel.send({"t": "call", "id": 100 + i, "name": "slow", "args": {"name": f"f{i}.txt"}, "p": True})
    while True:
        pass
"""
    result = nx.invoke("run_code", {"script": script})
    assert result.error is not None and result.error.startswith(
        "script timed out after 1s; 4 inner calls were still running and were stopped: "), result.error
    said = result.error.split("stopped: ", 1)[1].split(", ")
    assert sorted(said) == ["slow (queued: never started)"] * 2 + ["slow (stopped)"] * 2
    assert slow.entered == 2
    refused = [r for r in watch.results if r.name == "slow" and r.error_kind == "cancelled"]
    assert len(refused) == 2 and all("was not run" in (r.error or "") for r in refused)
    # the next run takes the pool afresh: had a queued call started late, it would count here
    assert nx.invoke("run_code", {"script": "def run(ctx):\n    return 1 + 1\n"}).output_structured == {"result": 2}
    assert slow.entered == 2 and list(workspace.iterdir()) == []


def test_a_script_that_returns_with_a_forged_call_in_flight(nexus_factory: NexusFactory, workspace: Path) -> None:
    slow = Slow(workspace, "honours")
    nx = make(nexus_factory, slow, timeout_seconds=30)
    script = REACH + """\
def run(ctx):
    channel.send({"t": "call", "id": 7, "name": "slow", "args": {"name": "forged.txt"}, "p": True})
    sys.modules["time"].sleep(0.3)  # the call is in the host's hands
    return "returned"
"""
    result = nx.invoke("run_code", {"script": script})
    assert result.error is None, result.error
    # stopped while it ran, or refused if the host's pool had not started it yet: never after
    assert result.output in ("returned\n(1 inner call was still running and was stopped: slow (stopped))",
                             "returned\n(1 inner call was still running and was stopped: slow (queued: never started))")
    assert slow.ended.is_set() == (slow.entered == 1) and not (workspace / "forged.txt").exists()


# -- run_code's own call cancelled (Ctrl-C in the agent) -----------------------------------------------


def invoke_in_thread(nx: Nexus, script: str, token: CancelToken) -> tuple[threading.Thread, list[ToolResult]]:
    out: list[ToolResult] = []
    thread = threading.Thread(target=lambda: out.append(nx.invoke("run_code", {"script": script}, cancel=token)))
    thread.start()
    return thread, out


def test_cancelling_run_code_kills_the_script_and_stops_its_calls(nexus_factory: NexusFactory, workspace: Path) -> None:
    slow = Slow(workspace, "honours")
    nx = make(nexus_factory, slow, timeout_seconds=60)
    token = CancelToken()
    thread, out = invoke_in_thread(nx, "import tools\n\ndef run(ctx):\n    tools.slow(name='c.txt')\n", token)
    assert slow.in_call.wait(30)
    token.cancel("Ctrl-C")
    thread.join(30)
    assert not thread.is_alive(), "run_code did not end when its caller cancelled it"
    [result] = out
    assert result.error == ("cancelled: run_code was stopped by its caller (Ctrl-C); 1 inner call was still running "
                            "and was stopped: slow (stopped)")
    assert result.error_kind == "cancelled"
    assert slow.cancels == ["run_code was cancelled: Ctrl-C"] and not (workspace / "c.txt").exists()


class Printed:
    def __init__(self) -> None:
        self.event = threading.Event()

    @hookimpl
    def nexus_code_exec_stdout(self, chunk: CodeExecChunk) -> None:
        if "spinning" in chunk.data:
            self.event.set()


def test_cancelling_run_code_while_the_script_computes(nexus_factory: NexusFactory, workspace: Path) -> None:
    printed = Printed()
    nx = make(nexus_factory, Slow(workspace, "honours"), printed, timeout_seconds=60)
    token = CancelToken()
    thread, out = invoke_in_thread(nx, "def run(ctx):\n    print('spinning')\n    while True:\n        pass\n", token)
    assert printed.event.wait(30), "the script never started"
    token.cancel("the person pressed Ctrl-C")
    thread.join(30)
    assert not thread.is_alive()
    assert out[0].error == "cancelled: run_code was stopped by its caller (the person pressed Ctrl-C)"


def test_a_cancelled_token_refuses_run_code_before_anything_runs(nexus_factory: NexusFactory, workspace: Path) -> None:
    slow = Slow(workspace, "honours")
    nx = make(nexus_factory, slow)
    token = CancelToken()
    token.cancel("too late")
    result = nx.invoke("run_code", {"script": "import tools\n\ndef run(ctx):\n    tools.slow(name='n.txt')\n"},
                       cancel=token)
    assert result.error_kind == "cancelled" and slow.entered == 0


# -- where an inner call comes from ------------------------------------------------------------


def test_each_inner_call_carries_the_scripts_line(nexus_factory: NexusFactory, workspace: Path) -> None:
    watch = Watch()
    nx = make(nexus_factory, Slow(workspace, "honours"), watch, timeout_seconds=30)
    script = REACH + """\
import parallel

def run(ctx):
    tools.echo(text="a")
    parallel.map([1, 2], lambda i: tools.echo(text=str(i)))
    for line in (3, 999, 0, -1, True, "7"):
        channel.request({"t": "call", "name": "echo", "args": {"text": "forged"}, "line": line})
    return "ok"
"""
    result = nx.invoke("run_code", {"script": script})
    assert result.output_structured == {"result": "ok"}, result.error
    first = script.splitlines().index('    tools.echo(text="a")') + 1
    lines = [c.metadata.get("script_line") for c in watch.calls if c.name == "echo"]
    # the forged lines: one within the script (a script can claim any of its own lines), the
    # others out of it or not a number, and left off
    assert lines == [first, first + 1, first + 1, 3, None, None, None, None, None]
    run_code = next(c for c in watch.calls if c.name == "run_code")
    assert all(c.parent_call_id == run_code.id for c in watch.calls if c.name == "echo")
