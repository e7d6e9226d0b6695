"""Many threads through the one invocation path at once: every result arrives, matched to its
call, with gates, rewrites, validation, raising gates and registry changes all in flight."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from nexus_core import Nexus, Rewrite, ToolCall, ToolRegistrationError, ToolResult, Veto, hookimpl, native_tool

THREADS, CALLS = 16, 200

SCHEMA = {
    "type": "object",
    "properties": {"thread": {"type": "integer"}, "n": {"type": "integer"}, "tag": {"type": "string"},
                   "pad": {"type": "string"}},
    "required": ["thread", "n", "tag"],
    "additionalProperties": False,
}


class Tagger:
    """Rewrites every call to carry a tag naming its thread and number."""

    @hookimpl
    def nexus_before_tool_invoke(self, call: ToolCall) -> Rewrite | None:
        if call.name == "compute" and "tag" not in call.arguments:
            return Rewrite({**call.arguments, "tag": f"t{call.arguments['thread']}-{call.arguments['n']}"})
        return None


class Policy:
    """Vetoes every 50th call; raises on every 7th, as `even` or `odd` by thread parity."""

    def __init__(self, parity: int) -> None:
        self.parity = parity

    @hookimpl
    def nexus_before_tool_invoke(self, call: ToolCall) -> Veto | None:
        n, thread = call.arguments.get("n", 0), call.arguments.get("thread", 0)
        if n % 7 == 3 and thread % 2 == self.parity:
            raise RuntimeError(f"policy {self.parity} down")
        if self.parity == 0 and n % 50 == 49:
            return Veto(f"quota for {call.arguments['thread']}")
        return None


class Audit:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.results: dict[str, ToolResult] = {}

    @hookimpl
    def nexus_tool_result(self, call: ToolCall, result: ToolResult) -> None:
        with self.lock:
            assert call.id not in self.results
            self.results[call.id] = result


@pytest.fixture(autouse=True)
def _busy_switching() -> Iterator[None]:
    """Switch threads far more often than usual, so interleavings actually happen."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    yield
    sys.setswitchinterval(before)


def run_threads(work: Any) -> list[BaseException]:
    errors: list[BaseException] = []
    barrier = threading.Barrier(THREADS)

    def runner(thread: int) -> None:
        try:
            barrier.wait()
            work(thread)
        except BaseException as exc:  # collected: an assert in a thread must fail the test
            errors.append(exc)

    threads = [threading.Thread(target=runner, args=(t,)) for t in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    return errors


def test_sixteen_threads_invoking_at_once_get_each_their_own_result() -> None:
    audit = Audit()

    def compute(arguments: dict[str, Any]) -> dict[str, Any]:
        if arguments["n"] % 40 == 17:
            raise ValueError(f"unlucky {arguments['tag']}")
        return {"thread": arguments["thread"], "n": arguments["n"], "tag": arguments["tag"]}

    results: dict[tuple[int, int], tuple[str, ToolResult]] = {}
    lock = threading.Lock()

    with Nexus(autoload=False, plugins=[Tagger(), Policy(0), Policy(1), audit],
               tools=[native_tool("compute", "", SCHEMA, compute)]) as nx:

        def work(thread: int) -> None:
            for n in range(CALLS):
                arguments: dict[str, Any] = {"thread": thread, "n": n}
                if n % 30 == 11:
                    arguments["pad"] = 5  # invalid: fails validation after the rewrite
                call = ToolCall(id=f"c-{thread}-{n}", name="compute", arguments=arguments)
                result = nx.invoke(call)
                with lock:
                    results[(thread, n)] = (call.id, result)

        assert run_threads(work) == []

    assert len(results) == THREADS * CALLS and len(audit.results) == THREADS * CALLS
    for (thread, n), (call_id, result) in results.items():
        assert result.id == call_id and result.name == "compute"
        assert audit.results[call_id] is result
        tag = f"t{thread}-{n}"
        if n % 7 == 3:
            assert result.error_kind == "vetoed"
            assert result.metadata["vetoed_by"] == ("Policy#2" if thread % 2 else "Policy")  # the one that raised
            assert f"policy {thread % 2} down" in result.output
        elif n % 50 == 49:
            assert (result.error, result.metadata["vetoed_by"]) == (f"vetoed: quota for {thread}", "Policy")
        elif n % 30 == 11:
            assert result.error == "invalid arguments for compute: pad: expected string, got 5"
        elif n % 40 == 17:
            assert result.error == f"ValueError: unlucky {tag}"
        else:
            assert not result.is_error, result.error
            assert result.output_structured == {"thread": thread, "n": n, "tag": tag}


def test_registry_changes_while_calls_are_in_flight() -> None:
    """Half the threads add and remove their own tools while the others call a stable one: no
    call to the stable tool fails, and each flapping tool is found exactly when it exists."""
    with Nexus(autoload=False, tools=[native_tool("stable", run=lambda a: str(a["i"]))]) as nx:

        def work(thread: int) -> None:
            for i in range(CALLS):
                if thread % 2:
                    name = f"flap_{thread}"
                    nx.add_tool(native_tool(name, run=lambda a, i=i: f"flap {i}"))
                    assert nx.invoke(name).output == f"flap {i}"
                    assert nx.remove_tool(name) is not None
                    assert nx.invoke(name).error_kind == "unknown_tool"
                else:
                    result = nx.invoke("stable", {"i": i})
                    assert (result.is_error, result.output) == (False, str(i)), result.error
                    assert len(nx.tools()) >= 1

        assert run_threads(work) == []
        assert [t.name for t in nx.tools()] == ["stable"]


def test_nested_calls_from_many_threads_keep_their_parents() -> None:
    audit = Audit()

    def outer(arguments: dict[str, Any], ctx: Any) -> str:
        inner = ctx.nexus.invoke(ToolCall(name="inner", arguments=arguments, parent_call_id=ctx.call_id))
        return inner.output

    calls: list[tuple[str, str | None]] = []

    class Parents:
        @hookimpl
        def nexus_tool_invoke(self, call: ToolCall) -> None:
            calls.append((call.id, call.parent_call_id))

    with Nexus(autoload=False, plugins=[audit, Parents()],
               tools=[native_tool("outer", run=outer, ctx=True), native_tool("inner", run=lambda a: str(a["k"]))]) as nx:

        def work(thread: int) -> None:
            for i in range(50):
                result = nx.invoke(ToolCall(id=f"o-{thread}-{i}", name="outer", arguments={"k": thread * 1000 + i}))
                assert result.output == str(thread * 1000 + i)

        assert run_threads(work) == []

    parents = dict(calls)
    inner_ids = [cid for cid, parent in calls if parent is not None]
    assert len(inner_ids) == THREADS * 50
    for cid in inner_ids:
        parent = parents[cid]
        assert parent is not None and parent.startswith("o-")
        assert audit.results[cid].output == str(int(parent.split("-")[1]) * 1000 + int(parent.split("-")[2]))


def test_a_tool_replaced_while_calls_are_in_flight_is_never_missing() -> None:
    """run_code refreshes its own definition as tools come and go: `replace` swaps it in one step."""
    with Nexus(autoload=False, tools=[native_tool("live", run=lambda a: "v0")]) as nx:
        registry = nx._registry  # the core's own test of the private registry

        def work(thread: int) -> None:
            for i in range(CALLS):
                if thread == 0:
                    registry.replace(native_tool("live", f"version {i}", run=lambda a, i=i: f"v{i}"))
                else:
                    result = nx.invoke("live")
                    assert not result.is_error, result.error

        assert run_threads(work) == []
        assert nx.invoke("live").output == f"v{CALLS - 1}"
        with pytest.raises(ToolRegistrationError, match="the host cannot replace tool 'absent': it is not registered"):
            registry.replace(native_tool("absent", run=lambda a: 1))
        registry.add(native_tool("theirs", run=lambda a: 1), plugin="other.plugin")
        with pytest.raises(ToolRegistrationError, match="is registered by plugin 'other.plugin'"):
            registry.replace(native_tool("theirs", run=lambda a: 2))
