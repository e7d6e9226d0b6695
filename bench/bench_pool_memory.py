"""What N Nexus cost in run_code's processes, with the process's shared sandbox pool (`pool:
process`, the default) against a zygote per Nexus (`pool: nexus`): the PSS of every process
run_code keeps (zygotes and their spares), at rest, once each Nexus has run one trivial script.

    .venv/bin/python bench/bench_pool_memory.py [--sessions 1 10 50] [--out bench/results/pool-memory-latest.json]

PSS (a page shared by n processes counts 1/n in each) from /proc/<pid>/smaps_rollup, summed over
every descendant of this process. The host's own memory is not in it (the Nexus objects are the
same either way). Not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "pool-memory-latest.json"


def descendants(root: int) -> set[int]:
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parents[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                pass
    found: set[int] = set()
    todo = [root]
    while todo:
        pid = todo.pop()
        for child, parent in parents.items():
            if parent == pid and child not in found:
                found.add(child)
                todo.append(child)
    return found


def pss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def settle(count: int, within: float = 120.0) -> set[int]:
    """The descendants once their number has stopped changing (spares being forked)."""
    deadline = time.monotonic() + within
    last: set[int] = set()
    steady = 0
    while time.monotonic() < deadline and steady < 10:
        time.sleep(0.1)
        now = descendants(os.getpid())
        steady = steady + 1 if len(now) == len(last) and len(now) >= count else 0
        last = now
    return last


def measure(pool: str, sessions: int, work: str) -> dict[str, Any]:
    from nexus_core import Nexus

    made = []
    try:
        for i in range(sessions):
            folder = Path(work) / f"{pool}-{sessions}-{i}"
            folder.mkdir()
            nx = Nexus.from_config({"workspace": str(folder), "session_dir": str(folder / "s"), "skills": [],
                                    "plugins": {"active": ["nexus.tool.code_exec"],
                                                "nexus.tool.code_exec": {"pool": pool, "launcher": "zygote",
                                                                         "persist_scripts": False}}})
            made.append(nx)
            result = nx.invoke("run_code", {"script": "def run(ctx):\n    return 1\n"})
            assert result.error is None, result.error
        procs = settle(3 if pool == "process" else 3 * sessions)
        total = sum(pss_kib(pid) for pid in procs)
        return {"pool": pool, "sessions": sessions, "processes": len(procs), "pss_mib": round(total / 1024, 1),
                "pss_mib_per_session": round(total / 1024 / sessions, 2)}
    finally:
        for nx in made:
            nx.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, nargs="+", default=[1, 10, 50])
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-pool-") as work:
        for sessions in args.sessions:
            for pool in ("process", "nexus"):
                row = measure(pool, sessions, work)
                rows.append(row)
                print(json.dumps(row), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"machine": platform.platform(), "python": sys.version.split()[0],
                                    "cpus": os.cpu_count(), "load": os.getloadavg(), "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
