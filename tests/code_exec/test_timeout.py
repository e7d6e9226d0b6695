"""The wall-clock limit: a script past `timeout_seconds` is killed with its whole process group,
and run_code answers `script timed out after ...`, whatever the script was doing (computing,
sleeping, waiting for a tool, fanned out in parallel). How soon after the limit it answers is
the bench's to measure; here, that it answers without waiting for what holds the script up.

The script's process is found from snapshots of this test process's descendants while the
script runs and after run_code answered: what ran and is gone after is the script's process (a
zygote, and any spare child it forks ahead, stay). There must be one, and its process group must
be empty; and no more processes than before the run may be left.
"""

from __future__ import annotations

import os
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest
from nexus_core.testing import NexusFactory, assert_error, assert_ok
from nexus_tool_code_exec.launchers.spares import SPARES
from proc_helpers import alive, descendants, group_members, wait_until

from nexus_core import Nexus, ToolDef, hookimpl
from nexus_tool_code_exec import CodeExecChunk

CE = "nexus.tool.code_exec"
LIMIT = 1


class ProcessSpy:
    """On the first output chunk (the script is running), notes the processes below us."""

    def __init__(self) -> None:
        self.baseline: set[int] = set()
        self.running: set[int] = set()

    @hookimpl
    def nexus_code_exec_stdout(self, chunk: CodeExecChunk) -> None:
        if not chunk.final and not self.running:
            self.running = descendants()


def make(nexus_factory: NexusFactory, spy: ProcessSpy, launcher: str = "auto", tools: tuple[ToolDef, ...] = ()) -> Nexus:
    nx = nexus_factory(plugins=[CE, spy], tools=tools,
                       config={"plugins": {CE: {"timeout_seconds": LIMIT, "launcher": launcher}}})
    assert_ok(nx.invoke("run_code", {"script": "def run(ctx):\n    return 1\n"}))  # the zygote is up
    if launcher != "spawn":  # the zygote and the spares it forks ahead (the warm run's replacement too)
        assert wait_until(lambda: len(descendants()) == 1 + SPARES, spares=True), descendants()
    spy.baseline = descendants()
    return nx


def run(nx: Nexus, script: str) -> Any:
    return nx.invoke("run_code", {"script": textwrap.dedent(script)})


def assert_left_nothing(spy: ProcessSpy) -> None:
    assert spy.running, "the script was never seen running"
    # whatever ran the script is gone once run_code has answered
    assert wait_until(lambda: bool(spy.running - descendants())), "every process seen running is still there"
    for pid in spy.running - descendants():
        assert wait_until(lambda: not alive(pid)), f"the script's process {pid} is still running"
        assert wait_until(lambda: not group_members(pid)), f"processes left in group {pid}: {group_members(pid)}"
    # (the next spare may still be on its way up, with the one it replaces on its way out)
    assert wait_until(lambda: len(descendants()) <= len(spy.baseline)), \
        f"more processes than before the run are left: {descendants()} (before: {spy.baseline})"


@pytest.mark.parametrize("launcher", ["zygote", "spawn"])
def test_an_infinite_loop_times_out_and_leaves_no_process(
        nexus_factory: NexusFactory, launcher: str) -> None:
    spy = ProcessSpy()
    nx = make(nexus_factory, spy, launcher)
    result = run(nx, """\
        def run(ctx):
            print("looping")
            while True:
                pass
        """)
    assert_error(result, "script timed out after")
    # the wall clock, or the CPU-time rlimit (when cpu_seconds is set below the timeout)
    assert result.error in (f"script timed out after {LIMIT}s", "CPU time limit exceeded")
    assert result.output_structured == {"stdout": "looping\n"}  # what it printed before is kept
    assert_left_nothing(spy)
    assert_ok(nx.invoke("run_code", {"script": "def run(ctx):\n    return 'still fine'\n"}))


def test_a_sleeping_script_times_out(nexus_factory: NexusFactory) -> None:
    spy = ProcessSpy()
    nx = make(nexus_factory, spy)
    result = run(nx, "import time\n\ndef run(ctx):\n    print('napping')\n    time.sleep(600)\n")
    assert_error(result, "script timed out after")
    assert_left_nothing(spy)


def test_a_timeout_inside_parallel_callbacks_leaves_no_process(nexus_factory: NexusFactory) -> None:
    spy = ProcessSpy()
    nx = make(nexus_factory, spy)
    result = run(nx, """\
        import parallel

        def spin(i):
            while True:
                i += 1

        def run(ctx):
            print("fanning out")
            parallel.map(range(8), spin)
        """)
    assert_error(result, "script timed out after")
    assert_left_nothing(spy)


def test_a_timeout_while_a_tool_call_is_in_flight_still_answers_on_time(nexus_factory: NexusFactory) -> None:
    """The script's limit covers its tool calls: a slow inner tool does not hold run_code past
    the limit (the tool's own call finishes in the background, its result unused): run_code
    answers while the tool is still in its call."""
    release = threading.Event()
    entered = threading.Event()
    returned = threading.Event()

    def slow(arguments: dict[str, Any]) -> str:
        entered.set()
        release.wait(30)
        returned.set()
        return "late"

    spy = ProcessSpy()
    nx = make(nexus_factory, spy, tools=(ToolDef(name="slow", handler=slow),))
    try:
        result = run(nx, "import tools\n\ndef run(ctx):\n    print('calling')\n    return tools.slow().output\n")
        assert entered.is_set()
        assert not returned.is_set(), "run_code waited for the tool call"
        assert_error(result, "script timed out after")
        assert_left_nothing(spy)
    finally:
        release.set()


def test_a_script_that_finishes_in_time_is_not_cut(nexus_factory: NexusFactory) -> None:
    spy = ProcessSpy()
    nx = make(nexus_factory, spy)
    result = run(nx, "import time\n\ndef run(ctx):\n    time.sleep(0.5)\n    return 'done'\n")
    assert assert_ok(result).output_structured == {"result": "done"}


def test_the_cpu_time_limit_is_its_own_clear_error(nexus_factory: NexusFactory) -> None:
    """With the rlimits layer and cpu_seconds below the timeout, a busy script hits RLIMIT_CPU
    first and is told so."""
    # the wall clock far past the CPU limit, even on a loaded machine (1 s of CPU at load 20 is 10 s of
    # wall time; a timeout would say so)
    nx = nexus_factory(plugins=[CE], config={"plugins": {CE: {"timeout_seconds": 90, "cpu_seconds": 1}}})
    from nexus_tool_code_exec import engine_for

    engine = engine_for(nx)
    if "rlimits" not in engine.active_layers():
        pytest.skip(f"the rlimits layer is not active here: {engine.layer_statuses()['rlimits'].detail}")
    result = run(nx, "def run(ctx):\n    while True:\n        pass\n")
    assert result.error == "CPU time limit exceeded"


def test_closing_the_nexus_leaves_no_process_behind(nexus_factory: NexusFactory) -> None:
    before = descendants()
    nx = nexus_factory(plugins=[CE], config={"plugins": {CE: {"timeout_seconds": LIMIT}}})
    assert_ok(nx.invoke("run_code", {"script": "def run(ctx):\n    return 1\n"}))
    assert_error(nx.invoke("run_code", {"script": "def run(ctx):\n    while True:\n        pass\n"}), "script timed out")
    started = descendants() - before
    assert started, "run_code ran without any process of its own"
    nx.close()
    assert wait_until(lambda: not (descendants() & started)), f"left running: {descendants() & started}"


def test_a_dead_zygote_is_restarted_for_the_next_script(nexus_factory: NexusFactory) -> None:
    import signal as _signal

    from nexus_tool_code_exec import engine_for

    nx = nexus_factory(plugins=["nexus.tool.code_exec"], config={"plugins": {"nexus.tool.code_exec": {"timeout_seconds": 5}}})
    assert_ok(nx.invoke("run_code", {"script": "def run(ctx):\n    return 1\n"}))
    launcher = engine_for(nx).launcher()
    first = launcher.pid
    os.kill(first, _signal.SIGKILL)
    assert wait_until(lambda: not alive(first))
    # the first run after: its child (a spare of the dead zygote) died with it, so the run is
    # served by a child of a new zygote
    result = nx.invoke("run_code", {"script": "def run(ctx):\n    return 2\n"})
    assert not result.is_error, result
    assert result.output_structured["result"] == 2
    assert launcher.pid != first


def test_a_killed_zygote_leaves_no_scratch_folder_once_the_nexus_closes(nexus_factory: NexusFactory) -> None:
    import signal as _signal
    import tempfile as _tempfile

    from nexus_tool_code_exec import engine_for

    def ours() -> set[Path]:
        return set(Path(_tempfile.gettempdir()).glob("nexus-run-*"))

    before = ours()
    nx = nexus_factory(plugins=["nexus.tool.code_exec"])
    assert_ok(nx.invoke("run_code", {"script": "def run(ctx):\n    return 1\n"}))
    os.kill(engine_for(nx).launcher().pid, _signal.SIGKILL)  # no chance to remove its spare's folder
    assert_ok(nx.invoke("run_code", {"script": "def run(ctx):\n    return 2\n"}))  # a new zygote
    nx.close()
    assert wait_until(lambda: ours() <= before), f"left behind: {ours() - before}"
