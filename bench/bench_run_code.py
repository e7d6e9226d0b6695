"""run_code against its peers, side by side in one run: what a script costs to start (wall time
and the CPU time of every process involved, back to back and spaced as an agent's runs are),
what each inner tool call costs, how a 32 x 50 ms fan-out fares, and the memory of the processes
each keeps; plus run_code under 20 concurrent callers, its memory across many runs, what its
host uses at rest, and the sandbox layers that were active.

    .venv/bin/python bench/bench_run_code.py [--quick] [--wait-idle 300] [--peers run_code,monty]

Peers (installed by the root pyproject's `bench` extra: `.venv/bin/pip install -e '.[bench]'`):

- run_code: `Nexus.invoke("run_code", ...)` with one no-op gate plugin registered and the tools
  having input schemas, so every inner call goes through gates and validation; default settings
  except max_workers 8 (a warm zygote forks one sandboxed child per script; scripts persisted).
- smolagents: a fresh `LocalPythonExecutor` per script (its AST interpreter, in this process, with
  its default 30 s timeout, which runs the code on a worker thread); tools are Python callables.
- monty: pydantic-monty's `Monty` pool (Rust interpreter in warm worker processes), one checked-out
  session per script; tools are external functions the script calls.
- subprocess: a fresh `python -I bench/peers/subproc_child.py` per script (start and exit included);
  each tool call is a JSON line to this process, which answers it.

CPU time is counted for every process a peer uses, from the kernel's own accounting: this
process (getrusage: every thread, the in-process peers' work and the hosts' side of the others),
the processes it started and reaped (RUSAGE_CHILDREN), and every live descendant with what it
reaped in turn (/proc/<pid>/stat: utime, stime, cutime, cstime, in clock ticks: counted over
hundreds of runs, the tick is a few microseconds a run). For run_code that is the host, the
zygote, its spares and every child; for monty, its worker processes; for the fresh subprocess,
the interpreter it starts. Memory is PSS (/proc/<pid>/smaps_rollup: a page shared by n
processes counts 1/n in each), so a zygote and its forks are not counted n times over.

Scenarios: a trivial script (`return 1`); 100 sequential calls of a no-op tool; 32 calls of a tool
that sleeps 50 ms, at most 8 at once (run_code: `parallel.map`; monty: `asyncio.gather` in the
script, an `AsyncMonty` pool, the host's async tool under `asyncio.Semaphore(8)`; smolagents has no
parallel primitive, so the host gives it `parallel_map(fn, items)`, a `ThreadPoolExecutor(8)` on the
host side; subprocess: `parallel_map` in the child with 8 threads, the parent answering on a pool of
8). Repetitions are interleaved (each round runs every peer once, in a rotating order) so that noise
from other processes falls on all peers alike. Every result is checked. Not a test: it asserts
nothing about time.

Writes bench/results/run_code-latest.json (all samples, machine, versions, layers).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import math
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, ClassVar

import _machine
from _machine import wait_idle

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CHILD = HERE / "peers" / "subproc_child.py"
RESULTS = HERE / "results" / "run_code-latest.json"
#: where run_code's session folders go (--work): made and removed by each run of the bench
WORK_DIR = "/tmp"

FANOUT_N, FANOUT_SLEEP, FANOUT_WORKERS = 32, 0.05, 8
#: the pause between runs "spaced as an agent's runs are": the model takes at least this long to
#: answer, long enough for every CPU to have gone idle (and for its caches to have cooled)
SPACED = 0.2
NCALLS = 100
NOOP_SCHEMA = {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}

# What each scenario must return, whatever the peer.
EXPECTED = {"trivial": 1, "calls": NCALLS, "fanout": sum(range(FANOUT_N)), "hold": 1}


# -- the tools, as plain Python --------------------------------------------------------------


def noop(x: int = 0) -> str:
    return "ok"


def sleep50(x: int = 0) -> int:
    time.sleep(FANOUT_SLEEP)
    return x


#: `hold` keeps a script waiting in a tool call until the memory measurement has looked
HELD, RELEASE = threading.Event(), threading.Event()


def hold(x: int = 0) -> int:
    HELD.set()
    RELEASE.wait(30)
    return x


# -- the peers -------------------------------------------------------------------------------


class Peer:
    name = ""
    isolation = ""
    fanout_how = ""

    def __init__(self) -> None:
        #: the processes it keeps (found as the children this process gained while it was set up)
        self.roots: list[int] = []

    def setup(self) -> None: ...

    def run(self, scenario: str) -> Any:
        raise NotImplementedError

    def close(self) -> None: ...


class RunCode(Peer):
    name = "run_code"
    isolation = "a forked process + the sandbox layers listed"
    fanout_how = "parallel.map in the script, max_workers 8"

    SCRIPTS: ClassVar[dict[str, str]] = {
        "trivial": "def run(ctx):\n    return 1\n",
        "calls": (
            "import tools\n\n"
            "def run(ctx):\n"
            "    n = 0\n"
            f"    for i in range({NCALLS}):\n"
            "        n += tools.noop(x=i).output == 'ok'\n"
            "    return n\n"
        ),
        "fanout": (
            "import tools, parallel\n\n"
            "def run(ctx):\n"
            f"    return sum(parallel.map(range({FANOUT_N}), lambda i: int(tools.sleep50(x=i).output)))\n"
        ),
        "hold": "import tools\n\ndef run(ctx):\n    return int(tools.hold(x=1).output)\n",
    }

    def setup(self) -> None:
        from nexus_core import Nexus, hookimpl, native_tool

        class NoopGate:
            @hookimpl
            def nexus_before_tool_invoke(self, call, tool):  # type: ignore[no-untyped-def]
                return None

        # the session folders go where --work says (each run makes a folder and four files in it):
        # not /tmp by default, which other jobs on a shared machine keep churning
        self.tmp = tempfile.mkdtemp(prefix="bench-run-code-", dir=WORK_DIR)
        config = {
            "workspace": self.tmp,
            "session_dir": os.path.join(self.tmp, "sessions"),
            "plugins": {
                "active": ["nexus.tool.code_exec"],
                "nexus.tool.code_exec": {"max_workers": FANOUT_WORKERS},
            },
        }
        self.nx = Nexus.from_config(config, plugins=[NoopGate()])
        self.nx.add_tool(native_tool("noop", "does nothing", NOOP_SCHEMA, lambda a: noop(**a)))
        self.nx.add_tool(native_tool("sleep50", "sleeps 50 ms, returns x", NOOP_SCHEMA, lambda a: str(sleep50(**a))))
        self.nx.add_tool(native_tool("hold", "waits to be let go, returns x", NOOP_SCHEMA, lambda a: str(hold(**a))))
        self.run("trivial")  # starts the zygote

    def invoke(self, script: str) -> Any:
        r = self.nx.invoke("run_code", {"script": script})
        if r.is_error:
            raise RuntimeError(f"run_code failed: {r.error}")
        return (r.output_structured or {}).get("result")

    def run(self, scenario: str) -> Any:
        return self.invoke(self.SCRIPTS[scenario])

    def engine(self) -> Any:
        import nexus_tool_code_exec

        return nexus_tool_code_exec.engine_for(self.nx)

    def close(self) -> None:
        self.nx.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


class Smolagents(Peer):
    name = "smolagents"
    isolation = "none: an AST interpreter in the host process"
    fanout_how = "no parallel primitive: the host's parallel_map(fn, items) on a ThreadPoolExecutor(8)"

    SCRIPTS: ClassVar[dict[str, str]] = {
        "trivial": "def run():\n    return 1\nrun()",
        "calls": (
            "def run():\n"
            "    n = 0\n"
            f"    for i in range({NCALLS}):\n"
            "        n += noop(x=i) == 'ok'\n"
            "    return n\n"
            "run()"
        ),
        "fanout": f"def run():\n    return sum(parallel_map(sleep50, range({FANOUT_N})))\nrun()",
        "hold": "def run():\n    return hold(x=1)\nrun()",
    }

    def setup(self) -> None:
        from smolagents.local_python_executor import LocalPythonExecutor

        self.cls = LocalPythonExecutor
        self.pool = ThreadPoolExecutor(FANOUT_WORKERS, thread_name_prefix="smol-fanout")

        def parallel_map(fn: Callable[[Any], Any], items: Any) -> list[Any]:
            return list(self.pool.map(fn, list(items)))

        self.functions = {"noop": noop, "sleep50": sleep50, "hold": hold, "parallel_map": parallel_map}

    def run(self, scenario: str) -> Any:
        executor = self.cls([], additional_functions=self.functions)  # fresh state per script
        executor.send_tools({})
        return executor(self.SCRIPTS[scenario]).output

    def close(self) -> None:
        self.pool.shutdown()


class Monty(Peer):
    name = "monty"
    isolation = "an interpreter with no OS access (Rust), in a pool of warm worker processes"
    fanout_how = "asyncio.gather in the script (AsyncMonty); the host's async tool under asyncio.Semaphore(8)"

    SCRIPTS: ClassVar[dict[str, str]] = {
        "trivial": Smolagents.SCRIPTS["trivial"],
        "calls": Smolagents.SCRIPTS["calls"],
        "fanout": (
            "import asyncio\n\n"
            "async def run():\n"
            f"    return sum(await asyncio.gather(*[sleep50(x=i) for i in range({FANOUT_N})]))\n\n"
            "await run()"
        ),
        "hold": Smolagents.SCRIPTS["hold"],
    }

    def setup(self) -> None:
        import pydantic_monty

        self.pm = pydantic_monty
        self.pool = pydantic_monty.Monty().__enter__()
        self.loop = asyncio.new_event_loop()
        self.apool = self.loop.run_until_complete(self._aenter())
        self.run("trivial")
        self.run("fanout")

    async def _aenter(self) -> Any:
        self.sem = asyncio.Semaphore(FANOUT_WORKERS)
        return await self.pm.AsyncMonty().__aenter__()

    async def _asleep50(self, x: int = 0) -> int:
        async with self.sem:
            await asyncio.sleep(FANOUT_SLEEP)
        return x

    async def _fanout(self) -> Any:
        async with self.apool.checkout() as session:
            return await session.feed_run(self.SCRIPTS["fanout"], external_lookup={"sleep50": self._asleep50})

    def run(self, scenario: str) -> Any:
        if scenario == "fanout":
            return self.loop.run_until_complete(self._fanout())
        with self.pool.checkout() as session:
            return session.feed_run(self.SCRIPTS[scenario], external_lookup={"noop": noop, "hold": hold})

    async def _aexit(self) -> None:
        await self.apool.__aexit__(None, None, None)

    def close(self) -> None:
        self.pool.__exit__(None, None, None)
        self.loop.run_until_complete(self._aexit())
        self.loop.close()


class Subprocess(Peer):
    name = "subprocess"
    isolation = "a fresh process, no sandbox"
    fanout_how = "parallel_map in the child (8 threads); the parent answers on a pool of 8"

    SCRIPTS: ClassVar[dict[str, str]] = {
        "trivial": "def run():\n    return 1\n",
        "calls": (
            "def run():\n"
            "    n = 0\n"
            f"    for i in range({NCALLS}):\n"
            "        n += tools.noop(x=i) == 'ok'\n"
            "    return n\n"
        ),
        "fanout": f"def run():\n    return sum(parallel_map(range({FANOUT_N}), lambda i: int(tools.sleep50(x=i))))\n",
        "hold": "def run():\n    return int(tools.hold(x=1))\n",
    }
    TOOLS: ClassVar[dict[str, Callable[..., Any]]] = {"noop": noop, "sleep50": sleep50, "hold": hold}

    def run(self, scenario: str) -> Any:
        proc = subprocess.Popen([sys.executable, "-I", str(CHILD)], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, bufsize=0)
        assert proc.stdin is not None and proc.stdout is not None
        wfd = proc.stdin.fileno()
        reader = os.fdopen(os.dup(proc.stdout.fileno()), "rb", buffering=1 << 16)
        wlock = threading.Lock()
        pool: ThreadPoolExecutor | None = None

        def send(msg: dict[str, Any]) -> None:
            data = (json.dumps(msg, separators=(",", ":")) + "\n").encode()
            with wlock:
                os.write(wfd, data)

        def answer(msg: dict[str, Any]) -> None:
            try:
                send({"t": "result", "id": msg["id"], "output": self.TOOLS[msg["name"]](**msg["args"])})
            except Exception as exc:  # noqa: BLE001
                send({"t": "result", "id": msg["id"], "error": str(exc)})

        try:
            send({"script": self.SCRIPTS[scenario]})
            while True:
                line = reader.readline()
                if not line:
                    raise RuntimeError("the child exited before it finished")
                msg = json.loads(line)
                if msg["t"] == "call":
                    if msg.get("p"):
                        if pool is None:
                            pool = ThreadPoolExecutor(FANOUT_WORKERS)
                        pool.submit(answer, msg)
                    else:
                        answer(msg)
                elif msg["t"] == "done":
                    return msg["result"]
                else:
                    raise RuntimeError(f"child error: {msg.get('message')}")
        finally:
            if pool is not None:
                pool.shutdown()
            reader.close()
            proc.stdin.close()
            proc.stdout.close()
            proc.kill()
            proc.wait()


PEERS: dict[str, type[Peer]] = {p.name: p for p in (RunCode, Smolagents, Monty, Subprocess)}


# -- measuring -------------------------------------------------------------------------------


def percentile(samples: list[float], p: float) -> float:
    """Nearest-rank percentile (p99 of 10 samples is their maximum)."""
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def summary(samples: list[float]) -> dict[str, Any]:
    return {"n": len(samples), "p50_ms": statistics.median(samples) * 1e3, "p99_ms": percentile(samples, 99) * 1e3,
            "min_ms": min(samples) * 1e3, "mean_ms": statistics.fmean(samples) * 1e3,
            "samples_ms": [round(s * 1e3, 4) for s in samples]}


def measure(peers: list[Peer], scenario: str, reps: int, warmup: int) -> dict[str, dict[str, Any]]:
    times: dict[str, list[float]] = {p.name: [] for p in peers}
    for rnd in range(warmup + reps):
        k = rnd % len(peers)
        for peer in peers[k:] + peers[:k]:  # rotate who goes first
            t0 = time.perf_counter()
            value = peer.run(scenario)
            elapsed = time.perf_counter() - t0
            if value != EXPECTED[scenario]:
                raise RuntimeError(f"{peer.name} {scenario}: got {value!r}, expected {EXPECTED[scenario]!r}")
            if rnd >= warmup:
                times[peer.name].append(elapsed)
    return {name: summary(samples) for name, samples in times.items()}


def rss_kib(pid: int | str = "self") -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


# -- what the processes of a peer cost: CPU time, memory --------------------------------------

TICK = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> list[bytes] | None:
    """/proc/<pid>/stat's fields from field 3 (state) on, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    return raw[raw.rindex(b")") + 2:].split()


def children_of(pid: int) -> list[int]:
    """The processes `pid` started (every thread's), zombies included."""
    found: list[int] = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                found += [int(x) for x in f.read().split()]
        except OSError:
            continue
    return found


def tree(roots: list[int]) -> list[int]:
    """`roots` and all their descendants that are there now."""
    out, todo = [], list(roots)
    while todo:
        pid = todo.pop()
        if _stat(pid) is not None:
            out.append(pid)
            todo += children_of(pid)
    return out


def tree_ticks(pids: list[int]) -> float:
    """CPU time used by these processes and by every child they reaped, in clock ticks: each
    process's own time to the nanosecond (/proc/<pid>/task/*/schedstat, the scheduler's sum of
    its threads' time on a CPU), its reaped children's as the kernel keeps it (cutime + cstime,
    whole ticks). Over a tree of live processes each moment is counted once: a child's time
    moves into its parent's cutime only when the parent reaps it."""
    total = 0.0
    for pid in pids:
        fields = _stat(pid)
        if fields is None:
            continue
        total += int(fields[16 - 3]) + int(fields[17 - 3])
        own = 0
        try:
            for tid in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                    own += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):  # no schedstat here: the ticks the kernel counted
            own = 0
        # threads that ended have left schedstat but not utime + stime (whole ticks)
        total += max(own / 1e9 * TICK, int(fields[14 - 3]) + int(fields[15 - 3]))
    return total


def cpu_seconds(peers: list[Peer], last: bool) -> dict[str, float]:
    """CPU seconds so far: this process (every thread), the processes it reaped, each peer's
    processes with what they reaped, and any other child. This process's own figure is read
    last (`last`, at the start of a measurement) or first (at its end), so that the reading of
    /proc is left out of it."""
    me = resource.getrusage(resource.RUSAGE_SELF) if not last else None
    kept = {pid for p in peers for pid in p.roots}
    out = {f"peer:{p.name}": tree_ticks(tree(p.roots)) / TICK for p in peers}
    out["others"] = tree_ticks(tree([pid for pid in children_of(os.getpid()) if pid not in kept])) / TICK
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    out["reaped"] = reaped.ru_utime + reaped.ru_stime
    me = me or resource.getrusage(resource.RUSAGE_SELF)
    out["host"] = me.ru_utime + me.ru_stime
    return out


def cost(peer: Peer, peers: list[Peer], scenario: str, runs: int, pause: float) -> dict[str, Any]:
    """`runs` runs of `scenario` by `peer` alone, `pause` seconds apart (0: back to back): the
    wall time of each, and the CPU time per run of this process (the host's side, or all of an
    in-process peer) and of the peer's other processes (kept, or started for a run)."""
    walls = []
    before = cpu_seconds(peers, last=True)
    for _ in range(runs):
        if pause:
            time.sleep(pause)
        t0 = time.perf_counter()
        value = peer.run(scenario)
        walls.append(time.perf_counter() - t0)
        if value != EXPECTED[scenario]:
            raise RuntimeError(f"{peer.name} {scenario}: got {value!r}, expected {EXPECTED[scenario]!r}")
    after = cpu_seconds(peers, last=False)
    host = (after["host"] - before["host"]) / runs * 1e3
    helpers = (after["reaped"] - before["reaped"] + after["others"] - before["others"]
               + after[f"peer:{peer.name}"] - before[f"peer:{peer.name}"]) / runs * 1e3
    return {"runs": runs, "pause_s": pause, "wall": summary(walls),
            "cpu_ms_per_run": {"host": host, "helpers": helpers, "total": host + helpers}}


def pss_kib(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def memory_in_flight(peer: Peer, peers: list[Peer]) -> dict[str, Any]:
    """PSS of the peer's processes while one of its scripts waits in a tool call: for run_code,
    the zygote, its spares and the script's child. The processes another peer keeps are left
    out; a process started for the run (the fresh subprocess) is counted."""
    HELD.clear()
    RELEASE.clear()
    box: list[Any] = []
    runner = threading.Thread(target=lambda: box.append(peer.run("hold")))
    runner.start()
    try:
        if not HELD.wait(30):
            raise RuntimeError(f"{peer.name}: the script never reached its tool call")
        claimed = {pid for p in peers if p is not peer for pid in tree(p.roots)}
        mine = [pid for pid in tree(children_of(os.getpid())) if pid not in claimed]
        sizes = {pid: pss_kib(pid) for pid in mine}
    finally:
        RELEASE.set()
        runner.join(30)
    if box != [EXPECTED["hold"]]:
        raise RuntimeError(f"{peer.name} hold: got {box!r}")
    return {"processes": len(sizes), "pss_kib": sum(v or 0 for v in sizes.values()),
            "each_kib": sorted((v or 0 for v in sizes.values()), reverse=True), "host_pss_kib": pss_kib(os.getpid())}


def thread_ticks() -> dict[str, int]:
    """CPU ticks of each thread of this process, by thread name (ids for threads Python did not start)."""
    names = {t.native_id: t.name for t in threading.enumerate()}
    out: dict[str, int] = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat", "rb") as f:
                raw = f.read()
            fields = raw[raw.rindex(b")") + 2:].split()
        except OSError:
            continue
        name = names.get(int(tid), f"tid {tid}")
        out[name] = out.get(name, 0) + int(fields[14 - 3]) + int(fields[15 - 3])
    return out


def at_rest(peers: list[Peer], seconds: float) -> dict[str, Any]:
    """What this process's threads and each peer's processes use while nothing runs: CPU
    ticks over `seconds`, after a second to settle. A thread or process that polls shows here."""
    time.sleep(1.0)
    threads0 = thread_ticks()
    procs0 = {p.name: tree_ticks(tree(p.roots)) for p in peers}
    time.sleep(seconds)
    threads1 = thread_ticks()
    procs1 = {p.name: tree_ticks(tree(p.roots)) for p in peers}
    busy_threads = {name: t - threads0.get(name, 0) for name, t in threads1.items() if t - threads0.get(name, 0)}
    return {"seconds": seconds, "tick_ms": 1000 / TICK,
            "threads": sorted(f"{name}" for name in threads1),
            "busy_thread_ticks": busy_threads,
            "process_ticks": {name: procs1[name] - procs0[name] for name in procs1},
            "processes": {p.name: len(tree(p.roots)) for p in peers}}


MEMORY_SCRIPT = (
    "import tools\n\n"
    "def run(ctx):\n"
    "    print('run', ctx.call_id)\n"
    "    return [tools.noop(x=i).output for i in range(3)]\n"
)


def memory_growth(rc: RunCode, checkpoints: list[int]) -> dict[str, Any]:
    """Host and zygote RSS after 0, ... runs of a script that prints and makes 3 calls."""
    launcher = rc.engine().launcher()
    zygote_pid = getattr(launcher, "pid", None)
    rows = []
    done = 0
    t0 = time.perf_counter()
    for target in checkpoints:
        while done < target:
            if rc.invoke(MEMORY_SCRIPT) != ["ok", "ok", "ok"]:
                raise RuntimeError("memory script: wrong result")
            done += 1
        gc.collect()
        rows.append({"runs": done, "host_rss_kib": rss_kib(),
                     "zygote_rss_kib": rss_kib(zygote_pid) if zygote_pid else None})
    if getattr(launcher, "pid", None) != zygote_pid:
        rows.append({"note": f"the zygote was restarted (pid {zygote_pid} -> {launcher.pid})"})
    return {"script": MEMORY_SCRIPT, "zygote_pid": zygote_pid, "rows": rows,
            "seconds": time.perf_counter() - t0}


TIMED_CALLS = (
    "import time, tools\n\n"
    "def run(ctx):\n"
    "    tools.noop(x=0)\n"  # the first call hands the pipe to a reader thread: not in the loop
    "    t0 = time.perf_counter()\n"
    f"    for i in range({NCALLS}):\n"
    "        tools.noop(x=i)\n"
    f"    return (time.perf_counter() - t0) / {NCALLS} * 1e6\n"
)


def calls_inside(rc: RunCode, runs: int) -> dict[str, Any]:
    """A call's round trip as the script sees it: 100 sequential calls timed inside the script
    (after its first call), in microseconds each; the median over `runs` scripts."""
    per_call = [float(rc.invoke(TIMED_CALLS)) for _ in range(runs)]
    return {"runs": runs, "p50_us": statistics.median(per_call), "min_us": min(per_call),
            "samples_us": [round(v, 2) for v in per_call]}


def concurrency(rc: RunCode, n: int = 20) -> dict[str, Any]:
    """n threads each invoke run_code once at the same moment; every result must be its own."""
    barrier = threading.Barrier(n)
    results: list[Any] = [None] * n
    errors: list[str] = []

    def one(i: int) -> None:
        script = ("import tools\n\n"
                  "def run(ctx):\n"
                  f"    outs = [tools.noop(x={i} * 10 + k).output for k in range(5)]\n"
                  f"    return {{'i': {i}, 'calls': len(outs), 'ok': outs.count('ok')}}\n")
        barrier.wait()
        try:
            results[i] = rc.invoke(script)
        except Exception as exc:  # noqa: BLE001
            errors.append(f"{i}: {exc}")

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    correct = sum(1 for i, r in enumerate(results) if r == {"i": i, "calls": 5, "ok": 5})
    return {"threads": n, "correct": correct, "errors": errors, "wall_ms": wall * 1e3}


# -- the machine -----------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    try:
        import nexus_tool_code_exec

        source = str(Path(nexus_tool_code_exec.__file__).parent)
    except ImportError:
        source = ""
    return {
        "run_code_measured_from": source,  # the checkout measured (this file can measure another's)
        **_machine.machine(("smolagents", "pydantic-monty", "pluggy", "jsonschema", "attrs", "cattrs")),
        "affinity": len(os.sched_getaffinity(0)), "executable": sys.executable,
        "git_uncommitted_in_run_code_and_core": len(_machine.git("status", "--porcelain", "--", "nexus_tool_code_exec",
                                                        "nexus_core").splitlines()),
    }


def folder_cost(parent: str, n: int = 200) -> float:
    """CPU microseconds this process spends making (and removing) a folder with four files in
    `parent`: what each run's session folder costs the file system there."""
    base = tempfile.mkdtemp(prefix="bench-fs-", dir=parent)
    try:
        t0 = time.thread_time()
        for i in range(n):
            folder = os.path.join(base, str(i))
            os.mkdir(folder)
            for name in ("script.py", "stdout.txt", "result.json", "calls.jsonl"):
                os.close(os.open(os.path.join(folder, name), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644))
        return (time.thread_time() - t0) / n * 1e6
    finally:
        shutil.rmtree(base, ignore_errors=True)


# -- main ------------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (a smoke run, not for the docs)")
    parser.add_argument("--peers", default=",".join(PEERS), help="comma-separated subset of " + ", ".join(PEERS))
    parser.add_argument("--wait-idle", type=float, default=0, metavar="SECONDS",
                        help="first wait up to this long for the 1-minute load to drop below 0.5")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--alone-only", action="store_true",
                        help="only each peer alone (wall and CPU per run), its memory and its rest: "
                             "what comparing two checkouts of run_code needs (run this file with each's python)")
    parser.add_argument("--work", type=Path, metavar="DIR",
                        default=Path("/dev/shm/nexus-bench") if Path("/dev/shm").is_dir() else HERE / ".work",
                        help="where run_code's session folders go (default: a tmpfs, /dev/shm, so that what "
                             "is measured is run_code and not the disk; what a folder costs on the disk is "
                             "measured and reported beside it)")
    opts = parser.parse_args()
    global WORK_DIR
    opts.work.mkdir(parents=True, exist_ok=True)
    WORK_DIR = str(opts.work)

    if opts.quick:
        reps = {"trivial": (40, 5), "calls": (10, 2), "fanout": (3, 1)}
        checkpoints = [0, 10, 50, 100]
        alone = {"back to back": ("trivial", 100, 0.0), "spaced": ("trivial", 20, SPACED),
                 "calls, back to back": ("calls", 10, 0.0)}
        rest = 3.0
    else:
        reps = {"trivial": (200, 20), "calls": (50, 5), "fanout": (10, 2)}
        checkpoints = [0, 100, 500, 1000]
        alone = {"back to back": ("trivial", 500, 0.0), "spaced": ("trivial", 100, SPACED),
                 "calls, back to back": ("calls", 50, 0.0)}
        rest = 10.0

    load_before = os.getloadavg()[0]
    if opts.wait_idle:
        load_before = wait_idle(opts.wait_idle)
    info = machine()
    disk = HERE / ".work"
    disk.mkdir(exist_ok=True)
    info["folder_cost_us"] = {d: folder_cost(d) for d in dict.fromkeys((WORK_DIR, str(disk), tempfile.gettempdir()))}
    print(f"{info['cpu_model']}, nproc {info['nproc']}, Linux {info['kernel']}, Python {info['python']}, "
          f"{info['date']}; 1-min load {load_before:.2f}")
    print("a folder and four files cost " + ", ".join(f"{us:.0f} us of CPU in {d}" for d, us in info["folder_cost_us"].items()))

    peers: list[Peer] = []
    unavailable: dict[str, str] = {}
    for name in opts.peers.split(","):
        peer = PEERS[name.strip()]()
        had = set(children_of(os.getpid()))
        try:
            peer.setup()
            peer.roots = [pid for pid in children_of(os.getpid()) if pid not in had]
        except Exception as exc:  # noqa: BLE001 - a missing peer is reported, not fatal
            unavailable[peer.name] = f"{type(exc).__name__}: {exc}"
            print(f"  {peer.name}: unavailable ({unavailable[peer.name]})")
            continue
        peers.append(peer)

    rc = next((p for p in peers if isinstance(p, RunCode)), None)
    layers: list[str] | str = "run_code not measured"
    layer_detail: dict[str, Any] = {}
    launcher_note = ""
    if rc is not None:
        engine = rc.engine()
        if engine is not None and hasattr(engine, "active_layers"):
            layers = engine.active_layers() or "no layers"
            for name, st in engine.layer_statuses().items():
                layer_detail[name] = {"active": bool(getattr(st, "active", False)), "detail": getattr(st, "detail", "")}
        else:
            layers = "no layers (active_layers() is not there)"
        launcher_note = getattr(engine, "launcher_note", "")
        print(f"run_code sandbox layers active: {', '.join(layers) if isinstance(layers, list) else layers}")
        print(f"run_code launcher: {launcher_note}")

    scenarios: dict[str, Any] = {}
    labels = {"trivial": "trivial script (return 1)", "calls": f"{NCALLS} sequential no-op calls",
              "fanout": f"{FANOUT_N} x {FANOUT_SLEEP * 1e3:.0f} ms fan-out, 8 at once"}
    try:
        for scenario, (n, warmup) in reps.items():
            if not opts.alone_only:
                scenarios[scenario] = measure(peers, scenario, n, warmup)

        # each peer alone: back to back, spaced as an agent's runs are, and its 100-call script
        costs: dict[str, dict[str, Any]] = {}
        for label, (scenario, n, pause) in alone.items():
            costs[label] = {}
            for peer in peers:
                peer.run(scenario)  # warm after the other peers' turns
                costs[label][peer.name] = cost(peer, peers, scenario, n, pause)
        memory = {peer.name: memory_in_flight(peer, peers) for peer in peers}
        extra: dict[str, Any] = {"alone": costs, "memory_in_flight": memory, "at_rest": at_rest(peers, rest)}
        if rc is not None:
            extra["calls_inside"] = calls_inside(rc, 10 if opts.quick else 50)
        if rc is not None and not opts.alone_only:
            extra["concurrency"] = concurrency(rc)
            extra["memory"] = memory_growth(rc, checkpoints)
    finally:
        for peer in peers:
            try:
                peer.close()
            except Exception as exc:  # noqa: BLE001 - do not hide what ended the run
                print(f"  closing {peer.name}: {type(exc).__name__}: {exc}", file=sys.stderr)
    load_after = os.getloadavg()[0]

    # per inner call: what 100 calls add to the trivial script, at the median (interleaved with
    # the other peers, and each peer alone, back to back)
    per_call = {name: (scenarios["calls"][name]["p50_ms"] - scenarios["trivial"][name]["p50_ms"]) / NCALLS * 1e3
                for name in scenarios.get("trivial", {})}
    alone_runs = extra["alone"]
    per_call_alone = {name: (alone_runs["calls, back to back"][name]["wall"]["p50_ms"]
                             - alone_runs["back to back"][name]["wall"]["p50_ms"]) / NCALLS * 1e3
                      for name in alone_runs["back to back"]}

    print()
    print(f"{'scenario':36}{'peer':12}{'p50 ms':>10}{'p99 ms':>10}{'run_code/peer p50':>19}{'p99':>8}")
    for scenario, by_peer in scenarios.items():
        base = by_peer.get("run_code")
        for name, s in by_peer.items():
            ratio = ratio99 = ""
            if base is not None and name != "run_code":
                ratio = f"{base['p50_ms'] / s['p50_ms']:.1f}x"
                ratio99 = f"{base['p99_ms'] / s['p99_ms']:.1f}x"
            print(f"{labels[scenario]:36}{name:12}{s['p50_ms']:>10.3f}{s['p99_ms']:>10.3f}{ratio:>19}{ratio99:>8}")
    print()
    print("per inner call ((p50 of 100 calls - p50 trivial) / 100): "
          + ", ".join(f"{name} {us:.1f} us" for name, us in per_call.items()))
    print("the same, each peer alone: " + ", ".join(f"{name} {us:.1f} us" for name, us in per_call_alone.items()))
    if "calls_inside" in extra:
        print(f"run_code's calls timed inside the script: p50 {extra['calls_inside']['p50_us']:.1f} us each "
              f"(best script {extra['calls_inside']['min_us']:.1f} us)")
    print()
    print(f"{'each peer alone':22}{'peer':12}{'p50 ms':>9}{'p99 ms':>9}{'CPU ms/run':>12}{'host':>8}{'others':>8}")
    for label, by_peer in extra["alone"].items():
        for name, c in by_peer.items():
            cpu = c["cpu_ms_per_run"]
            print(f"{label:22}{name:12}{c['wall']['p50_ms']:>9.3f}{c['wall']['p99_ms']:>9.3f}{cpu['total']:>12.3f}"
                  f"{cpu['host']:>8.3f}{cpu['helpers']:>8.3f}")
    print()
    for name, m in extra["memory_in_flight"].items():
        print(f"{name}: {m['processes']} processes besides this one, {m['pss_kib'] / 1024:.1f} MiB PSS "
              f"({', '.join(f'{k / 1024:.1f}' for k in m['each_kib'])}) while a script waits in a tool call")
    r = extra["at_rest"]
    print(f"at rest for {r['seconds']:.0f} s: threads that used CPU {r['busy_thread_ticks'] or 'none'}; "
          f"ticks of each peer's processes {r['process_ticks']} (a tick is {r['tick_ms']:.0f} ms)")
    if rc is not None and "concurrency" in extra:
        c = extra["concurrency"]
        print(f"20 concurrent run_code calls: {c['correct']}/{c['threads']} correct in {c['wall_ms']:.0f} ms"
              + (f"; errors: {c['errors']}" if c["errors"] else ""))
        print("RSS (KiB) after N runs: " + "; ".join(
            f"{r['runs']}: host {r['host_rss_kib']}, zygote {r['zygote_rss_kib']}" for r in extra["memory"]["rows"]
            if "runs" in r))
    print(f"1-min load: {load_before:.2f} before, {load_after:.2f} after")

    report = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "quick": opts.quick, "machine": info, "load_1min": {"before": load_before, "after": load_after},
        "session_dir_parent": WORK_DIR,
        "peers": {p.name: {"isolation": p.isolation, "fanout": p.fanout_how} for p in peers},
        "unavailable": unavailable,
        "run_code": {"layers": layers, "layer_detail": layer_detail, "launcher": launcher_note},
        "scenarios": {s: {"label": labels[s], "results": r} for s, r in scenarios.items()},
        "per_call_us": per_call, "per_call_alone_us": per_call_alone,
        **extra,
    }
    opts.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = opts.out.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(report, indent=1) + "\n")
    tmp.replace(opts.out)
    print(f"wrote {opts.out.relative_to(ROOT) if opts.out.is_relative_to(ROOT) else opts.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
