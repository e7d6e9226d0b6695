"""The fast path of a run, end to end: the spare child the host holds ahead (replaced after
every run, set up under SCHED_IDLE, lifted when a script takes it), where a run's reader thread
and child are placed while calls go back and forth (and that the reader gets its CPUs back), the
script compiled by the host, and the start message leaving out bindings the child has already.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import pytest

from nexus_core import Nexus, native_tool
from nexus_core.testing import NexusFactory, assert_ok
from nexus_tool_code_exec import engine_for, protocol
from nexus_tool_code_exec.child import runtime
from nexus_tool_code_exec.host import fastpath, runner
from nexus_tool_code_exec.launchers.spares import SPARES
from nexus_tool_code_exec.launchers.zygote import ZygoteLauncher
from proc_helpers import descendants, lift_idle, wait_until

TRIVIAL = "def run(ctx):\n    return 1\n"
ROOT = os.geteuid() == 0
CPUS = len(os.sched_getaffinity(0))


def make(nexus_factory: NexusFactory, *tools: Any, pool: str = "process") -> Nexus:
    nx = nexus_factory(plugins=["nexus.tool.code_exec"], config={"plugins": {"nexus.tool.code_exec": {
        "timeout_seconds": 60, "launcher": "zygote", "pool": pool}}})
    for tool in tools:
        nx.add_tool(tool)
    assert_ok(nx.invoke("run_code", {"script": TRIVIAL}))  # the zygote is up
    return nx


def launcher_of(nx: Nexus) -> ZygoteLauncher:
    launcher = engine_for(nx).launcher()
    assert isinstance(launcher, ZygoteLauncher)
    return launcher


def held_spare_pid(launcher: ZygoteLauncher, keep_idle: bool = False) -> int:
    """The spare the next run will take: the oldest one held, once all are there and have the
    current bindings (spares of older bindings are taken last, and dropped as new ones come).
    SCHED_IDLE is lifted off the zygote and its spares meanwhile (`lift_idle`), or, with
    `keep_idle`, off the zygote alone: its forks are then on time, the spares keep their policy."""

    def held() -> bool:
        if keep_idle and launcher.pid is not None:
            lift_idle({launcher.pid})
        return len(launcher.spares()) == SPARES and all(sp.key == launcher.preloaded_key for sp in launcher.spares())

    assert wait_until(held, spares=not keep_idle), "the launcher does not hold its spares"
    return launcher.spares()[0].pid


def spare_pids(launcher: ZygoteLauncher) -> set[int]:
    return {sp.pid for sp in launcher.spares()}


def test_the_host_holds_spares_and_gets_a_new_one_for_each_taken(nexus_factory: NexusFactory) -> None:
    nx = make(nexus_factory)
    launcher = launcher_of(nx)
    seen = []
    for i in range(3):
        pid = held_spare_pid(launcher)
        assert len(launcher.held_fds()) == 2 * SPARES  # two pipe ends each
        assert spare_pids(launcher) <= descendants(launcher.pid)
        seen.append(pid)
        assert_ok(nx.invoke("run_code", {"script": f"def run(ctx):\n    return {i}\n"}))
        assert wait_until(lambda: len(launcher.spares()) == SPARES and pid not in spare_pids(launcher), spares=True)
    assert len(set(seen)) == 3


def test_runs_back_to_back_each_find_a_spare_ready(nexus_factory: NexusFactory) -> None:
    """With two spares, a run right after another takes the second while the first's
    replacement sets itself up: no fork on request."""
    nx = make(nexus_factory)
    launcher = launcher_of(nx)
    held_spare_pid(launcher)
    forks = []
    zygote = launcher._zygote
    assert zygote is not None
    original = zygote.send

    def spy(msg: Any) -> None:
        if msg.get("t") == protocol.FORK:
            forks.append(msg)
        original(msg)

    zygote.send = spy  # type: ignore[method-assign]
    for i in range(2):
        assert_ok(nx.invoke("run_code", {"script": f"def run(ctx):\n    return {i}\n"}))
    assert forks == []


@pytest.mark.skipif(not ROOT or not hasattr(os, "SCHED_IDLE"), reason="SCHED_IDLE spares need root")
def test_a_waiting_spare_is_idle_priority_and_a_running_child_is_not(nexus_factory: NexusFactory) -> None:
    seen: dict[str, Any] = {}
    nx: Nexus | None = None

    def probe(_args: dict[str, Any]) -> str:
        """Runs in the host while the script waits for it: which of the zygote's children is
        the spare, and each one's scheduling policy."""
        launcher = launcher_of(nx) if nx is not None else None
        assert launcher is not None and launcher.pid is not None
        seen["policies"] = {pid: os.sched_getscheduler(pid) for pid in descendants(launcher.pid)}
        seen["spares"] = spare_pids(launcher)
        return "ok"

    # a zygote of its own: the shared pool's spares may have had SCHED_IDLE lifted by an earlier test
    nx = make(nexus_factory, native_tool("probe", "report", {"type": "object"}, probe), pool="nexus")
    launcher = launcher_of(nx)
    waiting = held_spare_pid(launcher, keep_idle=True)
    assert wait_until(lambda: os.sched_getscheduler(waiting) == os.SCHED_IDLE)
    assert_ok(nx.invoke("run_code", {"script": "import tools\n\ndef run(ctx):\n    return tools.probe().output\n"}))
    running = [pid for pid in seen["policies"] if pid not in seen["spares"]]
    assert waiting in running, seen  # the spare that waited is the one that ran the script
    assert seen["policies"][waiting] == os.SCHED_OTHER, seen


@pytest.mark.skipif(CPUS < 2, reason="placement needs two CPUs")
def test_a_lone_run_with_calls_keeps_its_reader_and_child_on_different_cpus(nexus_factory: NexusFactory) -> None:
    seen: list[tuple[set[int], set[int]]] = []
    running: list[int] = []

    def where(_args: dict[str, Any]) -> str:
        """Answered on the run's reader thread: its CPUs, and the script's child's."""
        seen.append((os.sched_getaffinity(0), os.sched_getaffinity(running[0])))
        return "ok"

    nx = make(nexus_factory, native_tool("where", "report", {"type": "object"}, where))
    full = os.sched_getaffinity(0)
    running.append(held_spare_pid(launcher_of(nx)))  # the child that will run the script
    script = "import tools\n\ndef run(ctx):\n    return [tools.where().output for _ in range(3)]\n"
    assert_ok(nx.invoke("run_code", {"script": script}))
    assert len(seen) == 3
    for reader, child in seen:
        assert len(reader) == 1 and child and not reader & child, seen
    # and the reader threads have all their CPUs back once the run is over
    assert wait_until(lambda: all(_affinity_of(tid) == full for tid in _reader_threads()))
    assert _reader_threads(), "no reader thread was used"


def test_concurrent_runs_are_left_where_the_scheduler_puts_them(nexus_factory: NexusFactory) -> None:
    seen: list[set[int]] = []
    both = threading.Barrier(2, timeout=60)  # two runs starting on a busy machine

    def where(_args: dict[str, Any]) -> str:
        both.wait()  # both runs are going on now
        seen.append(os.sched_getaffinity(0))
        return "ok"

    nx = make(nexus_factory, native_tool("where", "report", {"type": "object"}, where))
    results: list[Any] = []
    script = "import tools\n\ndef run(ctx):\n    return tools.where().output\n"
    threads = [threading.Thread(target=lambda: results.append(nx.invoke("run_code", {"script": script})))
               for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert [r.output_structured["result"] for r in results] == ["ok", "ok"], results
    assert seen == [os.sched_getaffinity(0)] * 2  # nobody pinned


def test_more_runs_at_once_than_spares_get_children_forked_for_them(nexus_factory: NexusFactory) -> None:
    """Long runs hold more children than there are spares; a run beside them still starts, and
    ends while they are still held up."""
    release = threading.Event()
    waiting = threading.Semaphore(0)

    def hold(_args: dict[str, Any]) -> str:
        waiting.release()
        release.wait(30)
        return "slow"

    nx = make(nexus_factory, native_tool("hold", "wait to be let go", {"type": "object"}, hold))
    held_spare_pid(launcher_of(nx))
    slow_script = "import tools\n\ndef run(ctx):\n    return tools.hold().output\n"
    slow_results: list[Any] = []
    slow = [threading.Thread(target=lambda: slow_results.append(nx.invoke("run_code", {"script": slow_script})))
            for _ in range(SPARES + 1)]
    try:
        for t in slow:
            t.start()
        for _ in slow:  # every slow run has its child, and waits in its tool call
            assert waiting.acquire(timeout=10)
        result = nx.invoke("run_code", {"script": "def run(ctx):\n    return 'quick'\n"})
        assert_ok(result)
        assert result.output_structured["result"] == "quick"
        assert not slow_results  # it did not wait for the slow runs' end
    finally:
        release.set()
        for t in slow:
            t.join(10)
    assert [r.output_structured["result"] for r in slow_results] == ["slow"] * (SPARES + 1)


@pytest.mark.parametrize("pool", ["nexus", "process"])
def test_the_start_message_carries_the_hosts_code_and_no_bindings_the_child_has(
        nexus_factory: NexusFactory, monkeypatch: pytest.MonkeyPatch, pool: str) -> None:
    """A Nexus's own zygote (`pool: nexus`) compiles its bindings, and its spares have them: the
    START leaves them out. A shared pool's zygote compiles no session's: the START carries them."""
    sent: list[dict[str, Any]] = []
    original = runner.ScriptRun._send

    def spy(self: Any, msg: dict[str, Any]) -> None:
        sent.append(msg)
        original(self, msg)

    monkeypatch.setattr(runner.ScriptRun, "_send", spy)
    nx = make(nexus_factory, native_tool("echo", "echo", {"type": "object", "properties": {"text": {"type": "string"}}},
                                          lambda a: a.get("text", "")), pool=pool)
    launcher = launcher_of(nx)
    held_spare_pid(launcher)
    if pool == "nexus":
        assert wait_until(lambda: len(launcher.spares()) == SPARES and all(sp.key for sp in launcher.spares()),
                          spares=True)
    else:
        assert launcher.preloaded_key == "" and all(sp.key == "" for sp in launcher.spares())
    sent.clear()
    script = "import tools\n\ndef run(ctx):\n    return [tools.echo(text='hi').output for _ in range(2)]\n"
    result = nx.invoke("run_code", {"script": script})
    assert_ok(result)
    assert result.output_structured["result"] == ["hi", "hi"]
    start, answers = sent[0], sent[1:]
    assert start["t"] == "start"
    if pool == "nexus":
        assert "bindings" not in start  # the spare compiled them in the zygote
    else:
        assert [p["tool"] for p in start["bindings"]["pieces"]] == ["echo"]
    assert start["limits"] == {"memory_mb": 512, "cpu_seconds": 61}  # lowered to by the child
    assert start["code"]["magic"] == protocol.pack_code(compile("", "x", "exec"))["magic"]  # compiled here
    assert [a["t"] for a in answers] == ["result", "result"]
    if CPUS >= 2:
        # a lone run is placed at its first call; its first answer tells the child to poll for the next
        assert answers[0].get("spin") is True and "spin" not in answers[1]


def test_code_for_another_bytecode_version_is_compiled_from_the_source() -> None:
    start = {"script": "def run(ctx):\n    return 7\n",
             "code": {"magic": "00000000", "marshal": "not even base64 of anything"}}
    module: dict[str, Any] = {}
    exec(runtime.load_code(start), module)
    assert module["run"](None) == 7
    start["code"] = compiled("def run(ctx):\n    return 8\n")
    exec(runtime.load_code(start), module)
    assert module["run"](None) == 8  # the host's code, not the source's


def test_a_runtime_error_names_the_script_line_with_host_compiled_code(nexus_factory: NexusFactory) -> None:
    nx = make(nexus_factory)
    result = nx.invoke("run_code", {"script": "def run(ctx):\n    x = 1\n    return x / 0\n"})
    assert result.error is not None and result.error.startswith("runtime error: line 3: ZeroDivisionError")


def compiled(source: str) -> protocol.CompiledCode:
    """The code of `source`, as the host sends it in a START."""
    return protocol.pack_code(compile(source, protocol.SCRIPT_FILENAME, "exec", dont_inherit=True))


def _reader_threads() -> list[int]:
    return [t.native_id for t in threading.enumerate() if t.name == "run_code-reader" and t.native_id]


def _affinity_of(tid: int) -> set[int]:
    return os.sched_getaffinity(tid)


def test_a_rejected_script_takes_no_child(nexus_factory: NexusFactory) -> None:
    """The script is checked before a child is taken: a rejected one leaves the spares as they
    were, no run counted as going on, and the next run takes the spare that waited."""
    nx = make(nexus_factory)
    launcher = launcher_of(nx)
    waiting = held_spare_pid(launcher)
    result = nx.invoke("run_code", {"script": "import socket\n\ndef run(ctx):\n    return 1\n"})
    assert result.error is not None and result.error.startswith("script rejected:")
    assert fastpath.placements.active == 0 and fastpath.placements.placed == []
    assert waiting in spare_pids(launcher) and waiting in descendants(launcher.pid)
    assert_ok(nx.invoke("run_code", {"script": TRIVIAL}))
    assert wait_until(lambda: waiting not in descendants(launcher.pid))  # that run took it


def test_a_failure_before_the_launch_leaves_nothing_taken(
        nexus_factory: NexusFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    nx = make(nexus_factory)
    launcher = launcher_of(nx)
    waiting = held_spare_pid(launcher)

    def broken(*args: Any) -> Any:
        raise RuntimeError("the compiler broke")

    # after the check, before the launch: the bindings are looked up
    monkeypatch.setattr(type(engine_for(nx)), "bindings", broken)
    result = nx.invoke("run_code", {"script": TRIVIAL})
    assert result.error is not None and "the compiler broke" in result.error
    assert fastpath.placements.active == 0 and fastpath.placements.placed == []
    assert waiting in spare_pids(launcher)
    monkeypatch.undo()
    assert_ok(nx.invoke("run_code", {"script": TRIVIAL}))
