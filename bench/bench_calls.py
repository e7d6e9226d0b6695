"""What one inner call of a run_code script costs the host, next to the same tool called directly,
and how fast calls and runs go back to back (issue 26, items 2 and 3), all in one run:

- host CPU per call of a native tool called directly (`Nexus.invoke`), of the same tool called
  from a script, and the same pair for an `@tool` function doing the same work. A script's calls
  are counted as what a script of NCALLS calls costs the host (this process: every thread, by
  getrusage) beyond what a trivial script costs it, over NCALLS; the direct ones as process CPU
  time over batches of calls. Targets: from a script <= 2.5x direct; `@tool` <= 1.5x native.
- wall time of an inner call as the script sees it (NCALLS calls timed inside the script) and
  of a trivial script back to back. Targets: <= 40 us and <= 2 ms, medians.
- what the host and run_code's processes use at rest, after all that: the target is nothing.

    .venv/bin/python bench/bench_calls.py [--quick] [--profile]

Every figure is the median over many runs, with the load average before and after: the machine
is shared, so read the ratios (measured in the same minutes) more than the absolute figures.
`--profile` prints where the host's time goes over 20 runs of the NCALLS script (cProfile on
every thread). Not a test: it asserts nothing about time. Writes bench/results/calls-latest.json.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import _machine

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "calls-latest.json"
NCALLS = 200
SCHEMA = {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}

TRIVIAL = "def run(ctx):\n    return 1\n"


def calls_script(tool: str) -> str:
    return ("import tools\n\n"
            "def run(ctx):\n"
            "    n = 0\n"
            f"    for i in range({NCALLS}):\n"
            f"        n += tools.{tool}(x=i) is not None\n"
            "    return n\n")


def timed_script(tool: str) -> str:
    """NCALLS calls timed inside the script, after a first call (the first hands the pipe to a
    reader thread and places the run: not in the loop); microseconds each."""
    return ("import time, tools\n\n"
            "def run(ctx):\n"
            f"    tools.{tool}(x=0)\n"
            "    t0 = time.perf_counter()\n"
            f"    for i in range({NCALLS}):\n"
            f"        tools.{tool}(x=i)\n"
            f"    return (time.perf_counter() - t0) / {NCALLS} * 1e6\n")


def host_cpu() -> float:
    me = resource.getrusage(resource.RUSAGE_SELF)
    return me.ru_utime + me.ru_stime


#: CPU seconds the host's threads spent inside PipeReader.read (polling for, or sleeping until,
#: the child's next message): counted by `count_waiting`, so the host's work shows without it
WAITING = [0.0]


def count_waiting() -> None:
    """Wrap the host's PipeReader.read to add the CPU time spent in it to WAITING (the child is
    another process: its reader is not wrapped)."""
    from nexus_tool_code_exec import protocol

    read = protocol.PipeReader.read

    def counted(self: Any, size: int = 1 << 16) -> bytes:
        t0 = time.thread_time()
        try:
            return read(self, size)
        finally:
            WAITING[0] += time.thread_time() - t0

    protocol.PipeReader.read = counted  # type: ignore[method-assign]


def setup(work: str, journal: bool = True) -> Any:
    from nexus_core import Nexus, hookimpl, native_tool, tool

    class NoopGate:
        @hookimpl
        def nexus_before_tool_invoke(self, call, tool):  # type: ignore[no-untyped-def]
            return None

    @tool
    def typed(x: int) -> int:
        """Returns x (an int argument that arrives as it is, an int back as data)."""
        return x

    work = os.path.join(work, "journal" if journal else "no-journal")
    os.makedirs(work)
    config = {"workspace": work, "session_dir": os.path.join(work, "sessions"),
              "plugins": {"active": ["nexus.tool.code_exec"], "nexus.tool.code_exec": {"journal": journal}}}
    nx = Nexus.from_config(config, plugins=[NoopGate()])
    # the same work as `typed`, written by hand: the same schemas, the int back as data
    nx.add_tool(native_tool("native", "returns x", SCHEMA, lambda a: int(a["x"]),
                            output_schema=typed.__nexus_tool__.output_schema))
    nx.register(typed)
    return nx


def invoke(nx: Any, script: str) -> Any:
    r = nx.invoke("run_code", {"script": script})
    if r.is_error:
        raise RuntimeError(f"run_code failed: {r.error}")
    return (r.output_structured or {}).get("result")


def direct_cpu_us(nx: Any, name: str, batches: int, size: int = 200) -> float:
    """Host CPU per direct `Nexus.invoke(name, {"x": 1})`: the median over batches."""
    arguments = {"x": 1}
    for _ in range(size * 5):
        nx.invoke(name, arguments)
    per: list[float] = []
    for _ in range(batches):
        t0 = time.process_time_ns()
        for _ in range(size):
            nx.invoke(name, arguments)
        per.append((time.process_time_ns() - t0) / size / 1e3)
    return statistics.median(per)


def script_cpu_ms(nx: Any, script: str, runs: int, expect: Any, waits: list[float] | None = None) -> list[float]:
    """Host CPU of each of `runs` runs of `script` (this process, every thread), in ms; the part
    of it spent waiting for the child's messages is appended to `waits`."""
    out = []
    for _ in range(runs):
        w0 = WAITING[0]
        t0 = host_cpu()
        value = invoke(nx, script)
        out.append((host_cpu() - t0) * 1e3)
        if waits is not None:
            waits.append((WAITING[0] - w0) * 1e3)
        if value != expect:
            raise RuntimeError(f"got {value!r}, expected {expect!r}")
    return out


def interleaved(nx: Any, bare: Any, rounds: int, runs: int, batches: int) -> dict[str, Any]:
    """Each round measures everything once, so that the ratios come from the same minutes.
    `bare` is a Nexus whose run_code keeps no journal: what the journal costs a call."""
    rows: dict[str, list[float]] = {k: [] for k in (
        "direct_native_us", "direct_typed_us", "script_native_us", "script_typed_us", "trivial_cpu_ms",
        "script_native_no_journal_us", "script_native_waiting_us")}
    for _ in range(rounds):
        rows["direct_native_us"].append(direct_cpu_us(nx, "native", batches))
        rows["direct_typed_us"].append(direct_cpu_us(nx, "typed", batches))
        trivial_waits: list[float] = []
        trivial = statistics.median(script_cpu_ms(nx, TRIVIAL, runs, 1, trivial_waits))
        rows["trivial_cpu_ms"].append(trivial)
        for tool in ("native", "typed"):
            waits: list[float] = []
            ms = statistics.median(script_cpu_ms(nx, calls_script(tool), runs, NCALLS, waits))
            rows[f"script_{tool}_us"].append((ms - trivial) / NCALLS * 1e3)
            if tool == "native":
                rows["script_native_waiting_us"].append(
                    (statistics.median(waits) - statistics.median(trivial_waits)) / NCALLS * 1e3)
        bare_trivial = statistics.median(script_cpu_ms(bare, TRIVIAL, runs, 1))
        ms = statistics.median(script_cpu_ms(bare, calls_script("native"), runs, NCALLS))
        rows["script_native_no_journal_us"].append((ms - bare_trivial) / NCALLS * 1e3)
    med = {k: statistics.median(v) for k, v in rows.items()}
    return {"rounds": rounds, "runs_per_round": runs, "samples": rows, "median": med,
            "ratios": {"script_over_direct_native": med["script_native_us"] / med["direct_native_us"],
                       "script_over_direct_typed": med["script_typed_us"] / med["direct_typed_us"],
                       "typed_over_native_direct": med["direct_typed_us"] / med["direct_native_us"],
                       "typed_over_native_script": med["script_typed_us"] / med["script_native_us"],
                       "script_no_journal_over_direct_native": med["script_native_no_journal_us"] / med["direct_native_us"],
                       "script_less_waiting_over_direct_native":
                           (med["script_native_us"] - med["script_native_waiting_us"]) / med["direct_native_us"]}}


def walls(nx: Any, trivial_runs: int, timed_runs: int) -> dict[str, Any]:
    for _ in range(20):
        invoke(nx, TRIVIAL)
    trivial = []
    for _ in range(trivial_runs):
        t0 = time.perf_counter()
        invoke(nx, TRIVIAL)
        trivial.append((time.perf_counter() - t0) * 1e3)
    inside = [float(invoke(nx, timed_script("native"))) for _ in range(timed_runs)]
    trivial.sort()
    return {"trivial_back_to_back_ms": {"n": len(trivial), "p50": statistics.median(trivial),
                                        "p99": trivial[max(0, int(len(trivial) * 0.99) - 1)], "min": trivial[0]},
            "call_inside_script_us": {"n": len(inside), "p50": statistics.median(inside), "min": min(inside),
                                      "samples": [round(v, 2) for v in inside]}}


def at_rest(seconds: float) -> dict[str, Any]:
    """CPU this process and its descendants use in `seconds` with no run going on."""
    from bench_run_code import TICK, children_of, tree, tree_ticks

    time.sleep(1.0)
    kids0 = tree_ticks(tree(children_of(os.getpid())))
    me0 = host_cpu()
    time.sleep(seconds)
    me1 = host_cpu()
    kids1 = tree_ticks(tree(children_of(os.getpid())))
    return {"seconds": seconds, "host_cpu_ms": (me1 - me0) * 1e3, "run_code_processes_cpu_ms": (kids1 - kids0) / TICK * 1e3,
            "threads": sorted(t.name for t in threading.enumerate())}


def profile(nx: Any, runs: int) -> None:
    """cProfile of this process's threads (this one and the reader threads started from now on,
    which answer the calls) over `runs` runs of the NCALLS script of the `@tool` function."""
    import cProfile
    import pstats

    profs = [cProfile.Profile(time.thread_time)]

    def start(*_: Any) -> None:  # the first event of a new thread: profile it from there on
        p = cProfile.Profile(time.thread_time)
        profs.append(p)
        p.enable()

    threading.setprofile(start)
    profs[0].enable()
    for _ in range(runs):
        invoke(nx, calls_script("typed"))
    profs[0].disable()
    threading.setprofile(None)
    stats = pstats.Stats(profs[0])
    for p in profs[1:]:
        p.disable()
        stats.add(p)
    stats.sort_stats("tottime").print_stats(35)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds (a smoke run, not for the docs)")
    parser.add_argument("--profile", action="store_true", help="print a cProfile of the host over 20 runs, then stop")
    parser.add_argument("--wait-idle", type=float, default=0, metavar="SECONDS",
                        help="first wait up to this long for the 1-minute load to drop below 0.5")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--work", type=Path, default=Path("/dev/shm/nexus-bench") if Path("/dev/shm").is_dir()
                        else HERE / ".work", help="where the session folders go (default a tmpfs)")
    opts = parser.parse_args()
    if opts.wait_idle:
        _machine.wait_idle(opts.wait_idle)
    opts.work.mkdir(parents=True, exist_ok=True)
    work = tempfile.mkdtemp(prefix="bench-calls-", dir=opts.work)
    load_before = os.getloadavg()[0]
    count_waiting()
    nx, bare = setup(work), setup(work, journal=False)
    try:
        invoke(nx, TRIVIAL)  # the zygote
        invoke(bare, TRIVIAL)
        if opts.profile:
            profile(nx, 20)
            return 0
        rounds, runs, batches = (3, 5, 10) if opts.quick else (9, 9, 20)
        cpu = interleaved(nx, bare, rounds, runs, batches)
        wall = walls(nx, 100 if opts.quick else 400, 10 if opts.quick else 40)
        rest = at_rest(3.0 if opts.quick else 10.0)
    finally:
        nx.close()
        bare.close()
        shutil.rmtree(work, ignore_errors=True)
    load_after = os.getloadavg()[0]
    med, ratios = cpu["median"], cpu["ratios"]
    print(f"host CPU per call (median of {rounds} rounds; 1-min load {load_before:.2f} -> {load_after:.2f}):")
    print(f"  {'':26}{'direct':>10}{'from a script':>16}{'ratio':>8}")
    for tool, label in (("native", "native_tool"), ("typed", "@tool")):
        print(f"  {label:26}{med[f'direct_{tool}_us']:>7.1f} us{med[f'script_{tool}_us']:>13.1f} us"
              f"{ratios[f'script_over_direct_{tool}']:>7.2f}x   (target <= 2.5x)")
    print(f"  {'native_tool, no journal':26}{'':10}{med['script_native_no_journal_us']:>13.1f} us"
          f"{ratios['script_no_journal_over_direct_native']:>7.2f}x")
    print(f"  {'native_tool, less waiting':26}{'':10}{med['script_native_us'] - med['script_native_waiting_us']:>13.1f} us"
          f"{ratios['script_less_waiting_over_direct_native']:>7.2f}x   (the host's CPU in PipeReader.read left out: "
          f"{med['script_native_waiting_us']:.1f} us a call, polling for or sleeping until the next message)")
    print(f"  @tool / native_tool: direct {ratios['typed_over_native_direct']:.2f}x, from a script "
          f"{ratios['typed_over_native_script']:.2f}x   (target <= 1.5x)")
    print(f"  a trivial script's host CPU: {med['trivial_cpu_ms']:.2f} ms")
    t, c = wall["trivial_back_to_back_ms"], wall["call_inside_script_us"]
    print(f"trivial script back to back: p50 {t['p50']:.2f} ms, p99 {t['p99']:.2f} ms (target p50 <= 2 ms)")
    print(f"an inner call inside the script: p50 {c['p50']:.1f} us, best {c['min']:.1f} us (target p50 <= 40 us)")
    print(f"at rest for {rest['seconds']:.0f} s: host {rest['host_cpu_ms']:.1f} ms CPU, run_code's processes "
          f"{rest['run_code_processes_cpu_ms']:.1f} ms (target 0)")
    out = {"command": "python bench/bench_calls.py" + (" --quick" if opts.quick else ""), "quick": opts.quick,
           "machine": _machine.machine(["pluggy", "jsonschema", "attrs", "cattrs"]),
           "load_1min": {"before": load_before, "after": load_after}, "ncalls": NCALLS,
           "host_cpu": cpu, "wall": wall, "at_rest": rest}
    opts.out.parent.mkdir(parents=True, exist_ok=True)
    opts.out.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {opts.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
