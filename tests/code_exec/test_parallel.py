"""`parallel`: ordered results, at most `max_workers` callbacks at once, the first error stops
what has not started, waits for what has, and is raised with its callback's line.

Concurrency is measured where it happens: a host tool that counts how many of its calls are
inside it at once, and (for pure compute) the script's own count of running callbacks.
"""

from __future__ import annotations

import textwrap
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from nexus_core import Nexus, ToolCall, ToolDef, Veto, hookimpl
from nexus_core.testing import assert_error, assert_ok

CE = "nexus.tool.code_exec"
WORKERS = 3


class Probe:
    """A tool that sleeps `ms` and returns `value`, counting concurrent entries, plus a gate that
    vetoes `value == "veto"`."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.inside = 0
        self.peak = 0
        self.started: list[Any] = []
        self.finished: list[Any] = []

    def reset(self) -> None:
        with self.lock:
            self.inside = self.peak = 0
            self.started.clear()
            self.finished.clear()

    def handler(self, arguments: dict[str, Any]) -> Any:
        with self.lock:
            self.inside += 1
            self.peak = max(self.peak, self.inside)
            self.started.append(arguments.get("value"))
        try:
            time.sleep(arguments.get("ms", 0) / 1000)
        finally:
            with self.lock:
                self.inside -= 1
                self.finished.append(arguments.get("value"))
        return {"value": arguments.get("value")}

    def tooldef(self) -> ToolDef:
        return ToolDef(name="probe", handler=self.handler,
                       input_schema={"type": "object", "properties": {"ms": {"type": "integer"}, "value": {}}},
                       output_schema={"type": "object", "properties": {"value": {}}})

    @hookimpl
    def nexus_before_tool_invoke(self, call: ToolCall, tool: ToolDef) -> Veto | None:
        return Veto("no vetoed values") if call.arguments.get("value") == "veto" else None


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Nexus, Probe]]:
    root = tmp_path_factory.mktemp("parallel")
    probe = Probe()
    config = {"workspace": str(root), "session_dir": str(root / "sessions"), "skills": [],
              "plugins": {"active": [CE], CE: {"timeout_seconds": 60, "max_workers": WORKERS}}}
    with Nexus.from_config(config, plugins=[probe], tools=[probe.tooldef()]) as nx:
        yield nx, probe


@pytest.fixture
def nx(shared: tuple[Nexus, Probe]) -> Nexus:
    shared[1].reset()
    return shared[0]


@pytest.fixture
def probe(shared: tuple[Nexus, Probe]) -> Probe:
    return shared[1]


def run(nx: Nexus, script: str) -> Any:
    return nx.invoke("run_code", {"script": textwrap.dedent(script)})


def value_of(result: Any) -> Any:
    return assert_ok(result).output_structured.get("result")


def test_map_keeps_the_input_order(nx: Nexus) -> None:
    result = run(nx, """\
        import tools, parallel

        def run(ctx):
            delays = [60, 5, 40, 0, 25, 10, 50, 1]
            return parallel.map(list(enumerate(delays)), lambda p: tools.probe(ms=p[1], value=p[0]).value)
        """)
    assert value_of(result) == list(range(8))


def test_map_of_pure_compute_keeps_order(nx: Nexus) -> None:
    result = run(nx, "import parallel\n\ndef run(ctx):\n    return parallel.map(range(50), lambda i: i * i)\n")
    assert value_of(result) == [i * i for i in range(50)]


def test_callbacks_run_concurrently_up_to_max_workers(nx: Nexus, probe: Probe) -> None:
    value_of(run(nx, "import tools, parallel\n\ndef run(ctx):\n    parallel.for_each(range(12), lambda i: tools.probe(ms=40, value=i))\n"))
    assert sorted(probe.started) == list(range(12))
    assert probe.peak == WORKERS  # never more, and the pool is used


def test_the_worker_bound_holds_for_compute_callbacks_too(nx: Nexus) -> None:
    result = run(nx, """\
        import parallel, time

        running, peak = [], [0]

        def work(i):
            running.append(i)
            peak[0] = max(peak[0], len(running))
            time.sleep(0.03)
            running.remove(i)
            return i

        def run(ctx):
            parallel.map(range(12), work)
            return peak[0]
        """)
    assert value_of(result) == WORKERS


def test_all_runs_each_function_once_and_keeps_their_order(nx: Nexus, probe: Probe) -> None:
    result = run(nx, """\
        import tools, parallel

        def run(ctx):
            return parallel.all(
                lambda: tools.probe(ms=30, value="a").value,
                lambda: "computed",
                lambda: tools.probe(ms=1, value="c").value,
                lambda: tools.probe(ms=20, value="d").value,
                lambda: tools.probe(ms=0, value="e").value,
            )
        """)
    assert value_of(result) == ["a", "computed", "c", "d", "e"]
    assert sorted(probe.started) == ["a", "c", "d", "e"]
    assert probe.peak <= WORKERS


def test_for_each_calls_every_item_and_returns_none(nx: Nexus, probe: Probe) -> None:
    result = run(nx, "import tools, parallel\n\ndef run(ctx):\n    return {'r': parallel.for_each(['x', 'y', 'z'], lambda v: tools.probe(value=v))}\n")
    assert value_of(result) == {"r": None}
    assert sorted(probe.started) == ["x", "y", "z"]


@pytest.mark.parametrize(("call", "expected"), [("parallel.map([], str)", []), ("parallel.map((7,), str)", ["7"]),
                                                ("parallel.all()", []), ("parallel.map(iter('ab'), str.upper)", ["A", "B"])])
def test_empty_single_and_iterator_inputs(nx: Nexus, call: str, expected: Any) -> None:
    assert value_of(run(nx, f"import parallel\n\ndef run(ctx):\n    return {call}\n")) == expected


def test_the_first_error_stops_what_has_not_started_waits_for_the_rest_and_is_raised(nx: Nexus, probe: Probe) -> None:
    result = run(nx, """\
        import tools, parallel

        def work(i):
            tools.probe(value=i)
            if i == 1:
                raise ValueError(f"item {i} is bad")
            tools.probe(ms=200, value=f"slow {i}")
            return i

        def run(ctx):
            return parallel.map(range(20), work)
        """)
    assert_error(result, "runtime error: line 6: ValueError: item 1 is bad")
    started = [v for v in probe.started if isinstance(v, int)]
    assert 1 in started
    assert max(started) < WORKERS, f"items started after the error: {started}"
    # the callbacks already running were waited for, not abandoned half-way
    assert {f"slow {i}" for i in started if i != 1} <= set(probe.finished)


def test_a_callback_exception_names_the_callbacks_line(nx: Nexus) -> None:
    result = run(nx, """\
        import parallel

        def parse(text):
            return int(text)

        def run(ctx):
            return parallel.map(["1", "2", "three", "4"], parse)
        """)
    assert_error(result, "runtime error: line 4: ValueError: invalid literal for int() with base 10: 'three'")


def test_the_script_can_catch_the_error_and_go_on(nx: Nexus) -> None:
    result = run(nx, """\
        import parallel

        def check(i):
            if i % 5 == 3:
                raise KeyError(i)
            return i

        def run(ctx):
            try:
                parallel.map(range(10), check)
            except KeyError as exc:
                caught = exc.args[0]
            return {"caught": caught, "after": parallel.map(range(3), check)}
        """)
    value = value_of(result)
    assert value["caught"] in (3, 8) and value["after"] == [0, 1, 2]


def test_a_veto_inside_parallel_is_ToolVetoed(nx: Nexus) -> None:
    result = run(nx, """\
        import tools, parallel

        def run(ctx):
            try:
                parallel.map(["ok", "veto", "fine"], lambda v: tools.probe(value=v).value)
            except tools.ToolVetoed as exc:
                return exc.reason
        """)
    assert value_of(result) == "no vetoed values"  # the reason alone


def test_nested_parallel_calls_do_not_deadlock(nx: Nexus, probe: Probe) -> None:
    result = run(nx, """\
        import tools, parallel

        def row(i):
            return parallel.map(range(4), lambda j: tools.probe(value=i * 10 + j).value)

        def run(ctx):
            return parallel.map(range(4), row)
        """)
    assert value_of(result) == [[i * 10 + j for j in range(4)] for i in range(4)]
    assert probe.peak <= WORKERS


def test_max_workers_one_runs_in_order_one_at_a_time(nexus_factory: Any) -> None:
    probe = Probe()
    nx = nexus_factory(plugins=[CE], tools=[probe.tooldef()],
                       config={"plugins": {CE: {"timeout_seconds": 60, "max_workers": 1}}})
    result = run(nx, "import tools, parallel\n\ndef run(ctx):\n    return parallel.map(range(5), lambda i: tools.probe(ms=5, value=i).value)\n")
    assert value_of(result) == list(range(5))
    assert probe.started == list(range(5)) and probe.peak == 1


def test_max_workers_above_the_sandboxs_thread_limit_still_works(nexus_factory: Any) -> None:
    """The rlimits layer caps a script's threads (RLIMIT_NPROC); a max_workers above that cap
    must mean 'as many as can run', not a RuntimeError from parallel.map."""
    nx = nexus_factory(plugins=[CE], config={"plugins": {CE: {"timeout_seconds": 60, "max_workers": 200}}})
    result = run(nx, """\
        import parallel, time

        def run(ctx):
            return parallel.map(range(300), lambda i: time.sleep(0.02) or i)
        """)
    assert value_of(result) == list(range(300))
