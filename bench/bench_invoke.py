"""How much does the gated invocation path cost? Calls per second of `Nexus.invoke` on a no-op tool
(one no-op gate, schema validation on) against a direct Python call of the same function, measured
in the same run.

    .venv/bin/python bench/bench_invoke.py [--batches 300] [--batch-size 100]

Calls are timed in batches (time.perf_counter_ns around `batch-size` calls) after a warm-up, so the
timer's own cost does not swamp a direct call. p50 is the median per-call time over the batches;
throughput is all calls divided by all time. Two extra rows take the gate and the schema away, to
show where the cost is. Not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable

from nexus_core import Nexus, hookimpl, native_tool

SCHEMA = {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}
ARGUMENTS = {"x": 1}


def noop(arguments: dict) -> str:
    return "ok"


class NoopGate:
    @hookimpl
    def nexus_before_tool_invoke(self, call, tool):  # type: ignore[no-untyped-def]
        return None


def measure(fn: Callable[[], object], batches: int, batch_size: int) -> tuple[float, float]:
    """(p50 ns per call, calls per second)."""
    for _ in range(batch_size * 20):  # warm-up: caches, the validator's lazy paths
        fn()
    per_call: list[float] = []
    total_ns = 0
    calls = range(batch_size)
    for _ in range(batches):
        start = time.perf_counter_ns()
        for _ in calls:
            fn()
        elapsed = time.perf_counter_ns() - start
        total_ns += elapsed
        per_call.append(elapsed / batch_size)
    return statistics.median(per_call), batches * batch_size / (total_ns / 1e9)


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


if __name__ == "__main__":
    sys.exit(main())
