"""Many sessions on one machine (issue 26, item 4): N concurrent sessions in this process (N = 1, 10,
50, 200), each running a short script with 5 inner calls in a loop, and what that costs:
throughput, p50/p99 latency of a run, total PSS (this process and every process it started) and
PSS per added idle session, beside the same load on pydantic-monty and on a fresh subprocess.

    .venv/bin/python bench/bench_sessions.py [--quick] [--peers run_code,monty_per_session,...]
                                             [--sessions 1,10,50,200] [--seconds 10]

Peers:

- run_code: each session is a `Nexus` of its own (`Nexus.from_config`, a session folder of its
  own, one no-op gate, the tool with an input schema), calling `Nexus.invoke("run_code", ...)`;
  its sandbox comes from whatever launcher run_code has (a zygote per Nexus before issue 26's
  shared pool; the pool after it): the bench measures what is there, and says which.
- monty_per_session: a `pydantic_monty.Monty` pool of one worker process per session.
- monty_shared: one `Monty` pool (default size: a worker per CPU) for all sessions.
- subprocess: a fresh `python -I bench/peers/subproc_child.py` per run; nothing is kept between runs.

For each N, the sessions are made (added to those of the smaller N), each runs the script once,
and the PSS of every process is read at rest: PSS per added idle session is what N sessions
cost beyond one, over N - 1. Then every session runs the script in a loop on a thread of its own
for `--seconds`; each run's wall time is a latency sample. Throughput is runs a second; "per
core" divides it by min(N, CPUs), and "per CPU second" divides the runs by the CPU time every
process used meanwhile (this one, its children, what they reaped). Targets (run_code): PSS per
added idle session <= 2 MiB; at 50 sessions, throughput per core >= 80% of one session's, and
p99 <= 5x p50. Not a test: it asserts nothing about time. Writes bench/results/sessions-latest.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import _machine
from bench_run_code import CHILD, TICK, children_of, pss_kib, tree, tree_ticks

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "sessions-latest.json"
CALLS = 5
SCHEMA = {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}


def noop(x: int = 0) -> str:
    return "ok"


# -- the peers: a peer makes sessions; a session runs the script once per `run()` ----------------


class Peer:
    name = ""
    what = ""

    def setup(self, work: str) -> None:
        self.work = work

    def session(self, i: int) -> Any:
        raise NotImplementedError

    def note(self) -> str:
        return ""

    def close(self) -> None: ...


class RunCodeSession:
    SCRIPT = ("import tools\n\n"
              "def run(ctx):\n"
              "    n = 0\n"
              f"    for i in range({CALLS}):\n"
              "        n += tools.noop(x=i).output == 'ok'\n"
              "    return n\n")

    def __init__(self, work: str, i: int) -> None:
        from nexus_core import Nexus, hookimpl, native_tool

        class NoopGate:
            @hookimpl
            def nexus_before_tool_invoke(self, call, tool):  # type: ignore[no-untyped-def]
                return None

        folder = os.path.join(work, f"s{i}")
        config = {"workspace": folder, "session_dir": os.path.join(folder, "sessions"),
                  "plugins": {"active": ["nexus.tool.code_exec"]}}
        os.makedirs(folder)
        self.nx = Nexus.from_config(config, plugins=[NoopGate()])
        self.nx.add_tool(native_tool("noop", "does nothing", SCHEMA, lambda a: noop(**a)))

    def run(self) -> Any:
        r = self.nx.invoke("run_code", {"script": self.SCRIPT})
        if r.is_error:
            raise RuntimeError(f"run_code failed: {r.error}")
        return (r.output_structured or {}).get("result")

    def close(self) -> None:
        self.nx.close()


class RunCode(Peer):
    name = "run_code"
    what = "a Nexus per session; a sandboxed process per run, from run_code's launcher"

    def setup(self, work: str) -> None:
        super().setup(work)
        self.first: RunCodeSession | None = None

    def session(self, i: int) -> Any:
        s = RunCodeSession(self.work, i)
        self.first = self.first or s
        return s

    def note(self) -> str:
        import nexus_tool_code_exec

        if self.first is None:
            return ""
        engine = nexus_tool_code_exec.engine_for(self.first.nx)
        return str(getattr(engine, "launcher_note", "")) if engine is not None else ""


MONTY_SCRIPT = ("def run():\n"
                "    n = 0\n"
                f"    for i in range({CALLS}):\n"
                "        n += noop(x=i) == 'ok'\n"
                "    return n\n"
                "run()")


class MontySession:
    def __init__(self, pool: Any, own: bool) -> None:
        self.pool, self.own = pool, own

    def run(self) -> Any:
        with self.pool.checkout() as session:
            return session.feed_run(MONTY_SCRIPT, external_lookup={"noop": noop})

    def close(self) -> None:
        if self.own:
            self.pool.__exit__(None, None, None)


class MontyPerSession(Peer):
    name = "monty_per_session"
    what = "pydantic-monty: a Monty pool of one warm worker process per session"

    def session(self, i: int) -> Any:
        import pydantic_monty

        pool = pydantic_monty.Monty(min_processes=1, max_processes=1).__enter__()
        return MontySession(pool, own=True)


class MontyShared(Peer):
    name = "monty_shared"
    what = "pydantic-monty: one Monty pool (a worker per CPU, its default) for every session"

    def setup(self, work: str) -> None:
        import pydantic_monty

        super().setup(work)
        self.pool = pydantic_monty.Monty().__enter__()

    def session(self, i: int) -> Any:
        return MontySession(self.pool, own=False)

    def close(self) -> None:
        self.pool.__exit__(None, None, None)


class FreshSession:
    SCRIPT = ("def run():\n"
              "    n = 0\n"
              f"    for i in range({CALLS}):\n"
              "        n += tools.noop(x=i) == 'ok'\n"
              "    return n\n")

    def run(self) -> Any:
        proc = subprocess.Popen([sys.executable, "-I", str(CHILD)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                bufsize=0)
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write((json.dumps({"script": self.SCRIPT}) + "\n").encode())
            reader = proc.stdout
            buf = b""
            while True:
                while b"\n" not in buf:
                    data = reader.read(65536)
                    if not data:
                        raise RuntimeError("the child exited before it finished")
                    buf += data
                line, buf = buf.split(b"\n", 1)
                msg = json.loads(line)
                if msg["t"] == "call":
                    proc.stdin.write((json.dumps({"t": "result", "id": msg["id"],
                                                  "output": noop(**msg["args"])}) + "\n").encode())
                elif msg["t"] == "done":
                    return msg["result"]
                else:
                    raise RuntimeError(f"child error: {msg.get('message')}")
        finally:
            proc.stdin.close()
            proc.stdout.close()
            proc.kill()
            proc.wait()

    def close(self) -> None: ...


class Fresh(Peer):
    name = "subprocess"
    what = "a fresh python -I per run (no sandbox), its calls answered by this process"

    def session(self, i: int) -> Any:
        return FreshSession()


PEERS: dict[str, type[Peer]] = {p.name: p for p in (RunCode, MontyPerSession, MontyShared, Fresh)}


# -- measuring -------------------------------------------------------------------------------


def total_pss_kib() -> tuple[int, int]:
    """PSS of this process and every process it started (theirs too), and how many there are."""
    pids = [os.getpid(), *tree(children_of(os.getpid()))]
    return sum(pss_kib(pid) or 0 for pid in pids), len(pids)


def all_cpu_seconds() -> float:
    """CPU time of this process, what it reaped, and every live descendant (with what they reaped)."""
    import resource

    me = resource.getrusage(resource.RUSAGE_SELF)
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    live = tree_ticks(tree(children_of(os.getpid()))) / TICK
    return me.ru_utime + me.ru_stime + reaped.ru_utime + reaped.ru_stime + live


def percentile(samples: list[float], p: float) -> float:
    ordered = sorted(samples)
    return ordered[max(0, min(len(ordered) - 1, int(round(p / 100 * len(ordered) + 0.5)) - 1))]


def load(sessions: list[Any], seconds: float) -> dict[str, Any]:
    """Every session runs the script in a loop on its own thread for `seconds`."""
    start = threading.Barrier(len(sessions) + 1)
    stop = threading.Event()
    lat: list[list[float]] = [[] for _ in sessions]
    errors: list[str] = []

    def loop(k: int) -> None:
        start.wait()
        mine, run = lat[k], sessions[k].run
        while not stop.is_set():
            t0 = time.perf_counter()
            try:
                value = run()
            except Exception as exc:  # noqa: BLE001 - counted and reported
                errors.append(f"{type(exc).__name__}: {exc}")
                continue
            mine.append(time.perf_counter() - t0)
            if value != CALLS:
                errors.append(f"session {k}: got {value!r}")

    threads = [threading.Thread(target=loop, args=(k,), daemon=True) for k in range(len(sessions))]
    for t in threads:
        t.start()
    cpu0 = all_cpu_seconds()
    start.wait()
    t0 = time.perf_counter()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join(120)
    wall = time.perf_counter() - t0
    cpu = all_cpu_seconds() - cpu0
    samples = [s for per in lat for s in per]
    runs = len(samples)
    out: dict[str, Any] = {"seconds": wall, "runs": runs, "errors": len(errors), "first_errors": errors[:3],
                           "runs_per_s": runs / wall, "cpu_s": cpu, "runs_per_cpu_s": runs / cpu if cpu else None,
                           "sessions_that_ran": sum(1 for per in lat if per)}
    if samples:
        out.update(p50_ms=statistics.median(samples) * 1e3, p99_ms=percentile(samples, 99) * 1e3,
                   max_ms=max(samples) * 1e3)
    return out


def measure(peer: Peer, counts: list[int], seconds: float, work: str) -> dict[str, Any]:
    peer.setup(work)
    base_pss, base_procs = total_pss_kib()
    sessions: list[Any] = []
    rows = []
    try:
        for n in counts:
            t0 = time.perf_counter()
            while len(sessions) < n:
                s = peer.session(len(sessions))
                sessions.append(s)
                if s.run() != CALLS:  # warm: its zygote or worker is up
                    raise RuntimeError(f"{peer.name}: a session's first run went wrong")
            made = time.perf_counter() - t0
            time.sleep(2.0)  # spares refilled, workers back in their pools
            pss, procs = total_pss_kib()
            row = {"sessions": n, "made_s": made, "idle_pss_kib": pss, "processes": procs,
                   "idle_pss_over_start_kib": pss - base_pss}
            row.update(load(sessions, seconds))
            rows.append(row)
            print(f"  {peer.name:18} N={n:<4} {row['runs_per_s']:8.1f} runs/s  p50 {row.get('p50_ms', 0):7.2f} ms  "
                  f"p99 {row.get('p99_ms', 0):8.2f} ms  idle PSS {pss / 1024:8.1f} MiB in {procs} processes"
                  + (f"  {row['errors']} errors: {row['first_errors']}" if row["errors"] else ""), flush=True)
    finally:
        note = peer.note()
        for s in sessions:
            try:
                s.close()
            except Exception as exc:  # noqa: BLE001
                print(f"  closing a {peer.name} session: {exc}", file=sys.stderr)
        peer.close()
    one = rows[0]
    cpus = len(os.sched_getaffinity(0))
    for row in rows:
        n = row["sessions"]
        row["pss_per_added_session_kib"] = ((row["idle_pss_kib"] - one["idle_pss_kib"]) / (n - one["sessions"])
                                            if n > one["sessions"] else None)
        row["per_core_vs_one"] = (row["runs_per_s"] / min(n, cpus)) / (one["runs_per_s"] / min(one["sessions"], cpus))
        if row.get("runs_per_cpu_s") and one.get("runs_per_cpu_s"):
            row["per_cpu_s_vs_one"] = row["runs_per_cpu_s"] / one["runs_per_cpu_s"]
        if row.get("p50_ms"):
            row["p99_over_p50"] = row["p99_ms"] / row["p50_ms"]
    return {"what": peer.what, "note": note, "base_pss_kib": base_pss, "base_processes": base_procs, "rows": rows}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="N = 1 and 10, 3 s each (a smoke run)")
    parser.add_argument("--peers", default=",".join(PEERS))
    parser.add_argument("--sessions", default="1,10,50,200")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--wait-idle", type=float, default=0, metavar="SECONDS",
                        help="first wait up to this long for the 1-minute load to drop below 0.5")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--work", type=Path, default=Path("/dev/shm/nexus-bench") if Path("/dev/shm").is_dir()
                        else HERE / ".work", help="where session folders go (default a tmpfs)")
    opts = parser.parse_args()
    if opts.wait_idle:
        _machine.wait_idle(opts.wait_idle)
    counts = [1, 10] if opts.quick else [int(n) for n in opts.sessions.split(",")]
    seconds = 3.0 if opts.quick else opts.seconds
    opts.work.mkdir(parents=True, exist_ok=True)
    info = _machine.machine(["pydantic-monty", "pluggy", "jsonschema", "attrs", "cattrs"])
    load_before = os.getloadavg()[0]
    print(f"{info['cpu_model']}, nproc {info['nproc']}, Python {info['python']}, {info['date']}; "
          f"1-min load {load_before:.2f}; sessions {counts}, {seconds:g} s each")
    results: dict[str, Any] = {}
    for name in opts.peers.split(","):
        peer = PEERS[name.strip()]()
        work = tempfile.mkdtemp(prefix=f"bench-sessions-{peer.name}-", dir=opts.work)
        try:
            results[peer.name] = measure(peer, counts, seconds, work)
        except Exception as exc:  # noqa: BLE001 - a peer that cannot run is reported, not fatal
            results[peer.name] = {"unavailable": f"{type(exc).__name__}: {exc}"}
            print(f"  {peer.name}: unavailable ({exc})")
        finally:
            shutil.rmtree(work, ignore_errors=True)
    load_after = os.getloadavg()[0]

    print(f"\n{'peer':19}{'N':>5}{'runs/s':>9}{'per core':>9}{'per CPU s':>10}{'p50 ms':>9}{'p99 ms':>9}"
          f"{'p99/p50':>8}{'PSS MiB':>9}{'+MiB/session':>13}")
    for name, res in results.items():
        for row in res.get("rows", []):
            added = row["pss_per_added_session_kib"]
            print(f"{name:19}{row['sessions']:>5}{row['runs_per_s']:>9.1f}{row['per_core_vs_one']:>8.0%} "
                  f"{row.get('per_cpu_s_vs_one', 0):>9.0%}{row.get('p50_ms', 0):>9.2f}{row.get('p99_ms', 0):>9.2f}"
                  f"{row.get('p99_over_p50', 0):>8.1f}{row['idle_pss_kib'] / 1024:>9.1f}"
                  f"{'' if added is None else f'{added / 1024:.2f}':>13}")
        if res.get("note"):
            print(f"{'':19}launcher: {res['note']}")
    out = {"command": "python bench/bench_sessions.py " + " ".join(sys.argv[1:]), "machine": info,
           "load_1min": {"before": load_before, "after": load_after}, "calls_per_run": CALLS,
           "seconds_per_n": seconds, "sessions": counts, "peers": results}
    opts.out.parent.mkdir(parents=True, exist_ok=True)
    opts.out.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {opts.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
