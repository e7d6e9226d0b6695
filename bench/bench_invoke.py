"""How much does the gated invocation path cost? Calls per second of `Nexus.invoke` on a no-op tool
(one no-op gate, schema validation on) against a direct Python call of the same function, measured
in the same run.

    .venv/bin/python bench/bench_invoke.py [--batches 300] [--batch-size 100]

Calls are timed in batches (time.perf_counter_ns around `batch-size` calls) after a warm-up, so the
timer's own cost does not swamp a direct call. p50 is the median per-call time over the batches;
throughput is all calls divided by all time. Two extra rows take the gate and the schema away, to
show where the cost is. Then an `@tool` function against the same function written as a
`native_tool` (the same input schema, the same work), in host CPU per call (process time over the
same batches): issue 26 wants the `@tool` one at most 1.5x. Not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
import enum
from collections.abc import Callable
from typing import Any

import attrs

from nexus_core import Nexus, hookimpl, native_tool, tool

SCHEMA = {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}
ARGUMENTS = {"x": 1}


def noop(arguments: dict) -> str:
    return "ok"


class NoopGate:
    @hookimpl
    def nexus_before_tool_invoke(self, call, tool):  # type: ignore[no-untyped-def]
        return None


def measure(fn: Callable[[], object], batches: int, batch_size: int,
            clock: Callable[[], int] = time.perf_counter_ns) -> tuple[float, float]:
    """(p50 ns per call, calls per second), by `clock` (wall time, or this process's CPU time)."""
    for _ in range(batch_size * 20):  # warm-up: caches, the validator's lazy paths
        fn()
    per_call: list[float] = []
    total_ns = 0
    calls = range(batch_size)
    for _ in range(batches):
        start = clock()
        for _ in calls:
            fn()
        elapsed = clock() - start
        total_ns += elapsed
        per_call.append(elapsed / batch_size)
    return statistics.median(per_call), batches * batch_size / (max(total_ns, 1) / 1e9)


# -- @tool against native_tool: the same functions, described and written by hand ---------------

class Unit(enum.Enum):
    METRE = "m"
    FOOT = "ft"


@attrs.frozen
class Length:
    value: float
    unit: Unit = Unit.METRE


@tool
def add(a: int, b: int) -> int:
    """Add two numbers (arguments that arrive as they are, a typed int back)."""
    return a + b


@tool
def describe(length: Length, scale: float = 1.0, note: str = "") -> str:
    """A length as text (an attrs argument with an enum inside, a float: all converted)."""
    return f"{length.value * scale:g} {length.unit.value}{note}"


def add_by_hand(arguments: dict[str, Any]) -> int:
    return int(arguments["a"] + arguments["b"])


def describe_by_hand(arguments: dict[str, Any]) -> str:
    length = arguments["length"]
    value, unit = float(length["value"]), Unit(length.get("unit", "m"))
    return f"{value * float(arguments.get('scale', 1.0)):g} {unit.value}{arguments.get('note', '')}"


def tool_rows(batches: int, batch_size: int) -> None:
    """Host CPU per call of each `@tool` function and its `native_tool` twin, in one Nexus."""
    pairs = [
        ("add(a: int, b: int) -> int", add, add_by_hand, {"a": 1, "b": 2}),
        ("describe(length: Length, ...) -> str", describe, describe_by_hand,
         {"length": {"value": 3, "unit": "ft"}, "scale": 2}),
    ]
    nx = Nexus(autoload=False)
    for _, described, by_hand, arguments in pairs:
        tooldef = described.__nexus_tool__
        nx.add_tool(tooldef)
        nx.add_tool(native_tool(f"{tooldef.name}_native", "", tooldef.input_schema, by_hand,
                                output_schema=tooldef.output_schema))
        assert nx.invoke(tooldef.name, arguments).output == nx.invoke(f"{tooldef.name}_native", arguments).output
    print(f"\n@tool against native_tool (the same schema and work), host CPU per call:")
    print(f"{'':40}{'native_tool':>14}{'@tool':>12}{'ratio':>8}")
    for label, described, _, arguments in pairs:
        name = described.__nexus_tool__.name
        native, _ = measure(lambda: nx.invoke(f"{name}_native", arguments), batches, batch_size, time.process_time_ns)
        typed, _ = measure(lambda: nx.invoke(name, arguments), batches, batch_size, time.process_time_ns)
        print(f"{label:40}{native / 1000:>11.2f} us{typed / 1000:>9.2f} us{typed / native:>7.2f}x")
    nx.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=300)
    parser.add_argument("--batch-size", type=int, default=100)
    opts = parser.parse_args()

    def nexus(gate: bool, schema: bool) -> Nexus:
        nx = Nexus(autoload=False, plugins=[NoopGate()] if gate else [])
        nx.add_tool(native_tool("noop", "does nothing", SCHEMA if schema else {}, noop))
        assert not nx.invoke("noop", ARGUMENTS).is_error
        return nx

    full, no_gate, no_schema = nexus(True, True), nexus(False, True), nexus(True, False)
    rows = [
        ("direct call noop(arguments)", lambda: noop(ARGUMENTS)),
        ("Nexus.invoke, 1 gate, schema", lambda: full.invoke("noop", ARGUMENTS)),
        ("Nexus.invoke, no gate, schema", lambda: no_gate.invoke("noop", ARGUMENTS)),
        ("Nexus.invoke, 1 gate, no schema", lambda: no_schema.invoke("noop", ARGUMENTS)),
    ]
    results = [(label, *measure(fn, opts.batches, opts.batch_size)) for label, fn in rows]

    print(f"python {platform.python_version()} on {platform.system()} {platform.machine()}, "
          f"{os.cpu_count()} cpus, {time.strftime('%Y-%m-%d')}; "
          f"{opts.batches} batches x {opts.batch_size} calls after warm-up")
    print(f"{'':34}{'p50 per call':>14}{'calls/s':>14}{'vs direct':>11}")
    direct_p50 = results[0][1]
    for label, p50, rate in results:
        print(f"{label:34}{p50 / 1000:>11.2f} us{rate:>14,.0f}{p50 / direct_p50:>10.0f}x")
    overhead = (results[1][1] - direct_p50) / 1000
    print(f"\noverhead of Nexus.invoke (1 gate, schema) over a direct call: {overhead:.1f} us per call")
    for nx in (full, no_gate, no_schema):
        nx.close()
    tool_rows(opts.batches, opts.batch_size)


if __name__ == "__main__":
    sys.exit(main())
