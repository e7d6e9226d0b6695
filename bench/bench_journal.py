"""What does run_code's journal cost an inner call? The host's CPU time per inner call (user +
system, every thread of the host process: getrusage(RUSAGE_SELF)) of a script that makes CALLS
sequential calls of a no-op tool (one no-op gate), with the journal on (journal.jsonl: a start
and a done line per call, one O_APPEND write each) and off, both with the session record on
(persist_scripts, the default). Issue 24 item 5 asks for at most 25% more with it.

    .venv/bin/python bench/bench_journal.py [--rounds 15] [--calls 200]

A call's figure is (CPU of a run of CALLS calls - CPU of a run of none) / CALLS, so the run's own
cost (the child's start, the record's files) is left out. The rows are interleaved: each round
measures every row once, and a row's figure is its median over rounds, so a busy machine's slow
moments fall on all rows alike. Also the time per run (wall clock), for reference. Not a test:
it asserts nothing. Results: bench/results/journal-latest.json.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _machine import ROOT, machine, wait_idle

from nexus_core import Nexus, ToolCall, ToolDef, hookimpl, native_tool

CE = "nexus.tool.code_exec"


class NoopGate:
    @hookimpl
    def nexus_before_tool_invoke(self, call: ToolCall, tool: ToolDef) -> None:
        return None


def cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def script(calls: int) -> str:
    return ("import tools\n\ndef run(ctx):\n    n = 0\n"
            f"    for i in range({calls}):\n        n += len(tools.noop(x=i).output)\n    return n\n")


def nexus(folder: Path, journal: bool) -> Nexus:
    config = {"workspace": str(folder), "session_dir": str(folder / "sessions"), "skills": [],
              "plugins": {"active": [CE], CE: {"timeout_seconds": 120, "journal": journal,
                                               "max_tool_calls": 100000}}}
    nx = Nexus.from_config(config, plugins=[NoopGate()],
                           tools=[native_tool("noop", "does nothing", {"type": "object", "properties": {
                               "x": {"type": "integer"}}}, lambda a: "ok")])
    for _ in range(3):  # the zygote, the bindings, a folder made ahead
        assert not nx.invoke("run_code", {"script": script(5)}).is_error
    return nx


def measure(nx: Nexus, calls: int) -> tuple[float, float]:
    """(host CPU seconds, wall seconds) of one run of `calls` calls."""
    began_cpu, began = cpu(), time.perf_counter()
    result = nx.invoke("run_code", {"script": script(calls)})
    took_cpu, took = cpu() - began_cpu, time.perf_counter() - began
    assert not result.is_error, result.error
    return took_cpu, took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "journal-latest.json")
    args = parser.parse_args()
    load = wait_idle(60)
    with tempfile.TemporaryDirectory() as tmp:
        rows = {"journal off": nexus(Path(tmp) / "off", False), "journal on": nexus(Path(tmp) / "on", True)}
        per_call: dict[str, list[float]] = {name: [] for name in rows}
        wall: dict[str, list[float]] = {name: [] for name in rows}
        try:
            for _ in range(args.rounds):
                for name, nx in rows.items():
                    empty_cpu, _ = measure(nx, 0)
                    full_cpu, full_wall = measure(nx, args.calls)
                    per_call[name].append((full_cpu - empty_cpu) / args.calls)
                    wall[name].append(full_wall)
        finally:
            for nx in rows.values():
                nx.close()
    figures: dict[str, Any] = {}
    for name in rows:
        figures[name] = {"host_cpu_us_per_call": round(statistics.median(per_call[name]) * 1e6, 2),
                         "run_wall_ms": round(statistics.median(wall[name]) * 1e3, 2)}
    off = figures["journal off"]["host_cpu_us_per_call"]
    on = figures["journal on"]["host_cpu_us_per_call"]
    ratio = on / off if off > 0 else float("nan")
    report = {"bench": "journal", "rounds": args.rounds, "calls_per_run": args.calls,
              "load_at_start": round(load, 2), "figures": figures,
              "journal_cpu_ratio": round(ratio, 3), "target": "journal on / off <= 1.25",
              "machine": machine(["nexus-rt-core", "nexus-rt-tool-code-exec"])}
    for name, figure in figures.items():
        print(f"{name:12}  {figure['host_cpu_us_per_call']:8.1f} us host CPU per inner call   "
              f"{figure['run_wall_ms']:8.1f} ms per run of {args.calls} calls")
    print(f"journal on / off: {ratio:.3f} (target <= 1.25)  load at start {load:.2f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
