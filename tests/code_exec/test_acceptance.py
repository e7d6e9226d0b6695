"""The acceptance checks of issue 5, one test each, with the real file and shell plugins."""

from __future__ import annotations

import re
import textwrap
import threading
from pathlib import Path
from typing import Any

from nexus_core.testing import NexusFactory, assert_error, assert_ok
from nexus_tool_code_exec.launchers.spares import SPARES
from proc_helpers import descendants, group_members, process_table, wait_until

from nexus_core import Nexus, ToolCall, ToolDef, Veto, hookimpl
from nexus_tool_code_exec import CodeExecChunk, CodeExecResult

CE = "nexus.tool.code_exec"


class Gate:
    """Records every call; vetoes the tools named in `veto`."""

    def __init__(self, veto: tuple[str, ...] = ()) -> None:
        self.calls: list[ToolCall] = []
        self.veto = veto
        self.lock = threading.Lock()
        self.results: list[CodeExecResult] = []

    @hookimpl
    def nexus_before_tool_invoke(self, call: ToolCall, tool: ToolDef) -> Veto | None:
        with self.lock:
            self.calls.append(call)
        return Veto(f"{call.name} is not allowed in this session") if call.name in self.veto else None

    @hookimpl
    def nexus_code_exec_result(self, result: CodeExecResult) -> None:
        self.results.append(result)


def run(nx: Nexus, script: str, call_id: str = "call_accept") -> Any:
    return nx.invoke(ToolCall(id=call_id, name="run_code", arguments={"script": textwrap.dedent(script)}))


def test_glob_then_parallel_reads_print_a_line_per_file_and_return_counts(
        nexus_factory: NexusFactory, nexus_workspace: Path) -> None:
    (nexus_workspace / "alpha.txt").write_text("one\ntwo\n")
    (nexus_workspace / "beta.txt").write_text("three\n")
    (nexus_workspace / "gamma.txt").write_text("four\nfive\nsix\n")
    (nexus_workspace / "notes.md").write_text("not matched\n")
    gate = Gate()
    nx = nexus_factory(plugins=[CE, "nexus.tool.file", gate], config={"plugins": {CE: {"timeout_seconds": 60}}})
    result = assert_ok(run(nx, """\
        import tools, parallel

        def run(ctx):
            found = tools.glob(pattern="*.txt")
            texts = parallel.map(found.paths, lambda p: tools.read(path=p).content)
            for path, text in zip(found.paths, texts):
                print(f"{path}: {len(text.splitlines())} lines")
            return {"files": len(found.paths), "lines": sum(len(t.splitlines()) for t in texts)}
        """))
    assert result.output_structured == {
        "stdout": "alpha.txt: 2 lines\nbeta.txt: 1 lines\ngamma.txt: 3 lines\n",
        "result": {"files": 3, "lines": 6},
    }
    inner = [c for c in gate.calls if c.name != "run_code"]
    assert sorted((c.name, c.arguments.get("path", c.arguments.get("pattern"))) for c in inner) == [
        ("glob", "*.txt"), ("read", "alpha.txt"), ("read", "beta.txt"), ("read", "gamma.txt")]
    assert all(c.parent_call_id == "call_accept" for c in inner)


def test_a_gate_that_vetoes_shell_raises_ToolVetoed_and_the_script_goes_on(nexus_factory: NexusFactory) -> None:
    gate = Gate(veto=("shell",))
    nx = nexus_factory(plugins=[CE, "nexus.tool.shell", "nexus.tool.file", gate],
                       config={"plugins": {CE: {"timeout_seconds": 60}}})
    result = assert_ok(run(nx, """\
        import tools

        def run(ctx):
            try:
                tools.shell(tools.ShellArgs(command="rm -rf /"))
                outcome = "ran"
            except tools.ToolVetoed as exc:
                print("shell refused:", exc.reason)
                outcome = "vetoed"
            written = tools.write(path="after.txt", content="went on\\n")
            return {"shell": outcome, "wrote": written.bytes}
        """))
    assert result.output_structured["result"] == {"shell": "vetoed", "wrote": 8}
    assert result.output_structured["stdout"] == "shell refused: shell is not allowed in this session\n"  # the reason alone
    assert [c.name for c in gate.calls if c.parent_call_id == "call_accept"] == ["shell", "write"]


def test_32_calls_through_parallel_map_with_8_workers_run_8_at_once(nexus_factory: NexusFactory) -> None:
    """The calls of a fan-out are answered concurrently, as many at once as max_workers allows
    and no more: each call waits until 8 are in flight (the last of the 32 once all have come),
    which calls answered one at a time, or fewer than 8 at a time, never reach."""
    lock = threading.Condition()
    in_flight, peak, came = [0], [0], [0]

    def nap(arguments: dict[str, Any]) -> str:
        with lock:
            in_flight[0] += 1
            came[0] += 1
            peak[0] = max(peak[0], in_flight[0])
            lock.notify_all()
            lock.wait_for(lambda: in_flight[0] >= 8 or came[0] == 32, timeout=5)
            in_flight[0] -= 1
        return str(arguments["i"])

    gate = Gate()
    tool = ToolDef(name="nap", handler=nap, input_schema={"type": "object", "properties": {"i": {"type": "integer"}}})
    nx = nexus_factory(plugins=[CE, gate], tools=[tool],
                       config={"plugins": {CE: {"timeout_seconds": 60, "max_workers": 8}}})
    result = assert_ok(run(nx, """\
        import tools, parallel

        def run(ctx):
            return parallel.map(range(32), lambda i: tools.nap(i=i).output)
        """))
    assert result.output_structured["result"] == [str(i) for i in range(32)]
    assert peak[0] == 8  # 8 at once, never more
    assert gate.results[-1].tool_calls == 32


def test_an_infinite_loop_times_out_at_the_limit_and_leaves_no_process(
        nexus_factory: NexusFactory) -> None:
    running: list[set[int]] = []

    class Spy:
        @hookimpl
        def nexus_code_exec_stdout(self, chunk: CodeExecChunk) -> None:
            if not chunk.final and not running:
                running.append(descendants())

    nx = nexus_factory(plugins=[CE, Spy()], config={"plugins": {CE: {"timeout_seconds": 1}}})
    assert_ok(run(nx, "def run(ctx):\n    return 1\n", "call_warm"))  # the zygote exists before the snapshot
    # the zygote and the children it forked ahead for the next scripts (the warm run's
    # replacement included): one of them runs the loop
    assert wait_until(lambda: len(descendants()) == 1 + SPARES, spares=True), descendants()
    baseline = descendants()
    result = run(nx, "def run(ctx):\n    print('start')\n    while True:\n        pass\n")
    assert_error(result, "script timed out after")
    # the wall clock, or the CPU-time rlimit (when cpu_seconds is set below the timeout)
    assert result.error in ("script timed out after 1s", "CPU time limit exceeded")
    assert running, "the script's output was not seen while it ran"
    assert wait_until(lambda: bool(baseline - descendants())), "the process that ran the loop is still there"
    table = process_table()
    for pid in baseline - descendants():
        assert pid not in table or table[pid].state == "Z", f"the script's process {pid} is still running"
        assert group_members(pid) == set()
    # (its replacement may still be on its way up, with the one it replaces on its way out)
    assert wait_until(lambda: len(descendants()) <= len(baseline)), \
        f"a process was left behind (beyond the zygote and its spares): {descendants()} (before: {baseline})"


def test_print_in_a_loop_past_max_output_bytes_is_truncated_and_the_host_is_fine(nexus_factory: NexusFactory) -> None:
    nx = nexus_factory(plugins=[CE], config={"plugins": {CE: {"timeout_seconds": 60, "max_output_bytes": 4096}}})
    result = assert_ok(run(nx, """\
        def run(ctx):
            for i in range(300000):
                print("line", i, "of a long, long listing")
            return "finished"
        """))  # within its 60 s: past them it would be "script timed out"
    body = result.output_structured
    assert body["stdout_truncated"] is True and body["result"] == "finished"
    assert len(body["stdout"].encode()) <= 4096 and body["stdout"].startswith("line 0 of a long, long listing\n")
    # the head and the tail, and how much was dropped between them (issue 14.8)
    assert body["stdout"].endswith("line 299999 of a long, long listing\n")
    assert re.search(r"\n\[\.\.\. \d+ bytes dropped \.\.\.\]\n", body["stdout"])
    assert_ok(run(nx, "def run(ctx):\n    print('next')\n    return 2\n", "call_next"), "next\n--- result ---\n2")
