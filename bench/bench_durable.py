"""What does nexus.durable cost? (issue 24, item 5, the approvals half)

1. A direct call no gate asks about (`Nexus.invoke` of a no-op tool, one no-op gate, schema on),
   in host CPU time (`time.process_time`: every thread of the process, so DBOS's background
   threads, its notification poller among them, are counted), with nexus.durable off and on.
   Each row runs in a fresh process of its own (DBOS is one engine per process, and its threads
   would otherwise be counted against the "off" row too); rounds alternate the rows. The target:
   on costs at most 10% more.
2. An approval answered from another process: a host thread's call waits on an approval; a
   second process (a DBOS client, as `nexus approvals answer` is) sends the answer; the figure is
   the time from just before the send to the call's return in the host. The target: within 1 s.

    .venv/bin/python bench/bench_durable.py [--rounds 5] [--answers 10]

Not a test: it asserts nothing; it prints the figures, and writes them to
bench/results/durable-latest.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench_invoke import ARGUMENTS, SCHEMA, NoopGate, measure, noop

from nexus_core import Ask, Nexus, hookimpl, native_tool

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "durable-latest.json"


def config(root: Path, on: bool) -> dict[str, Any]:
    return {"skills": [], "session_dir": str(root / "session"), "workspace": str(root),
            "plugins": {"active": ["nexus.durable"], "nexus.durable": {"enabled": on}}}


def cpu_row(on: bool, batches: int, batch_size: int) -> float:
    """In this (fresh) process: p50 host CPU ns per call, durable on or off."""
    with tempfile.TemporaryDirectory() as tmp:
        with Nexus(config(Path(tmp), on), plugins=[NoopGate()]) as nx:
            nx.add_tool(native_tool("noop", "does nothing", SCHEMA, noop))
            assert (nx.durability is not None) == on
            assert not nx.invoke("noop", ARGUMENTS).is_error
            # the least of three: CPU time only grows with what else the machine does
            return min(measure(lambda: nx.invoke("noop", ARGUMENTS), batches, batch_size,
                               clock=time.process_time_ns)[0] for _ in range(3))


class AskAlways:
    @hookimpl
    def nexus_before_tool_invoke(self, call: Any, tool: Any) -> Any:
        return Ask("run it?")


ANSWERER = """
import sys, time
from dbos import DBOSClient
client = DBOSClient(system_database_url=sys.argv[1])
print("ready", flush=True)
for line in sys.stdin:
    sent = time.time()
    client.send(line.strip(), {"approved": True, "text": "", "by": "bench"}, topic="nexus.durable.answer")
    print(sent, flush=True)
client.destroy()
"""


def resume_latency(answers: int) -> list[float]:
    from nexus_durable import Approvals

    figures = []
    with tempfile.TemporaryDirectory() as tmp:
        with Nexus(config(Path(tmp), True), plugins=[AskAlways()]) as nx:
            nx.add_tool(native_tool("noop", "does nothing", SCHEMA, noop))
            url = nx.plugin("nexus.durable").url
            answerer = subprocess.Popen([sys.executable, "-c", ANSWERER, url], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True)
            assert answerer.stdin is not None and answerer.stdout is not None
            assert answerer.stdout.readline().strip() == "ready"
            with Approvals(url) as approvals:
                for _ in range(answers):
                    done: list[float] = []

                    def call() -> None:
                        result = nx.invoke("noop", ARGUMENTS)
                        done.append(time.time())
                        assert not result.is_error, result.error

                    thread = threading.Thread(target=call)
                    thread.start()
                    while not (pending := approvals.pending()):
                        time.sleep(0.05)
                    answerer.stdin.write(pending[0].id + "\n")
                    answerer.stdin.flush()
                    sent = float(answerer.stdout.readline())
                    thread.join()
                    figures.append(done[0] - sent)
            answerer.stdin.close()
            answerer.wait()
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--answers", type=int, default=10)
    parser.add_argument("--row", choices=["on", "off"], help=argparse.SUPPRESS)  # a child measuring one row
    opts = parser.parse_args()
    if opts.row:
        print(cpu_row(opts.row == "on", opts.batches, opts.batch_size))
        return 0

    cpu: dict[str, list[float]] = {"off": [], "on": []}
    for _ in range(opts.rounds):
        for row in ("off", "on"):
            out = subprocess.run([sys.executable, __file__, "--row", row, "--batches", str(opts.batches),
                                  "--batch-size", str(opts.batch_size)], capture_output=True, text=True, check=True)
            cpu[row].append(float(out.stdout.strip().splitlines()[-1]))
    # the least over the rounds: on a busy machine CPU time only grows with the others' work
    off, on = min(cpu["off"]), min(cpu["on"])
    median_off, median_on = statistics.median(cpu["off"]), statistics.median(cpu["on"])
    latency = resume_latency(opts.answers)

    print(f"python {platform.python_version()} on {platform.system()} {platform.machine()}, {os.cpu_count()} cpus, "
          f"load {os.getloadavg()[0]:.1f}, {time.strftime('%Y-%m-%d')}; {opts.rounds} rounds of {opts.batches} "
          f"batches x {opts.batch_size} calls, each row in a fresh process")
    print("a direct call no gate asks about, host CPU per call (the least of the rounds' p50s; their median):")
    print(f"  nexus.durable off  {off / 1000:8.2f} us  ({median_off / 1000:.2f} us)")
    print(f"  nexus.durable on   {on / 1000:8.2f} us  ({median_on / 1000:.2f} us)   {100 * (on - off) / off:+.1f}% "
          f"({100 * (median_on - median_off) / median_off:+.1f}%)  (target: at most +10%)")
    print(f"an approval answered from another process, send -> the call returns ({len(latency)} answers):")
    print(f"  median {statistics.median(latency) * 1000:.0f} ms, max {max(latency) * 1000:.0f} ms  (target: within 1 s)")
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps({
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "python": platform.python_version(),
        "cpus": os.cpu_count(), "load": os.getloadavg()[0],
        "direct_call_cpu_ns": {"off": off, "on": on, "increase": (on - off) / off, "median_off": median_off,
                               "median_on": median_on, "rounds": cpu},
        "resume_after_answer_s": {"median": statistics.median(latency), "max": max(latency), "all": latency},
    }, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
