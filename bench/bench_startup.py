"""How long does the `nexus` command line take to start? Wall time of fresh processes, each against
`python -c pass` measured in the same run (the interpreter's own start), spaced so no run finds
the previous one's pages warm in the CPU caches more than an agent's command would.

    .venv/bin/python bench/bench_startup.py [--runs 30] [--out bench/results/startup-latest.json]

Rows: the bare interpreter; `import nexus_core`; `from nexus_core import Nexus` (what a program
pays before it builds one); `nexus --version`; `nexus --help` (every installed plugin's commands
are collected, so every plugin's top module is imported); `nexus tools` (a whole Nexus built from
the installed plugins). The packages' bytecode is compiled first, and the children may read it
(PYTHONDONTWRITEBYTECODE only stops writing), as a pip-installed package is. The aim of issue 10:
`nexus --help` within 100 ms of `python -c pass`. Not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
NEXUS = Path(sys.executable).with_name("nexus")

CASES: list[tuple[str, list[str]]] = [
    ("python -c pass", [sys.executable, "-c", "pass"]),
    ("import nexus_core", [sys.executable, "-c", "import nexus_core"]),
    ("from nexus_core import Nexus", [sys.executable, "-c", "from nexus_core import Nexus"]),
    ("nexus --version", [str(NEXUS), "--version"]),
    ("nexus --help", [str(NEXUS), "--help"]),
    ("nexus tools", [str(NEXUS), "tools"]),
]


def once(cmd: list[str], cwd: str, env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return (time.perf_counter() - start) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--pause", type=float, default=0.05, help="seconds between runs")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "startup-latest.json")
    args = parser.parse_args()

    for src in REPO.glob("nexus_*/src"):
        compileall.compile_dir(str(src), quiet=1)
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEXUS_")}
    samples: dict[str, list[float]] = {name: [] for name, _ in CASES}
    with tempfile.TemporaryDirectory() as cwd:
        for name, cmd in CASES:  # warm the page cache once
            once(cmd, cwd, env)
        for _ in range(args.runs):  # interleaved, so a slow spell of the machine hits every row
            for name, cmd in CASES:
                samples[name].append(once(cmd, cwd, env))
                time.sleep(args.pause)

    base = statistics.median(samples["python -c pass"])
    print(f"{platform.python_implementation()} {platform.python_version()} on {platform.machine()}, "
          f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}; {args.runs} runs each, medians")
    print(f"{'command':<30} {'p50 ms':>8} {'p90 ms':>8} {'over python -c pass':>20}")
    rows = []
    for name, _ in CASES:
        p50 = statistics.median(samples[name])
        p90 = statistics.quantiles(samples[name], n=10)[-1]
        rows.append({"command": name, "p50_ms": round(p50, 2), "p90_ms": round(p90, 2),
                     "over_python_ms": round(p50 - base, 2), "samples_ms": [round(s, 2) for s in samples[name]]})
        print(f"{name:<30} {p50:>8.1f} {p90:>8.1f} {p50 - base:>+19.1f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"python": platform.python_version(), "cpus": os.cpu_count(),
                                    "load": os.getloadavg()[0], "runs": args.runs, "rows": rows}, indent=2) + "\n")
    print(f"samples: {args.out.relative_to(REPO) if args.out.is_relative_to(REPO) else args.out}")


if __name__ == "__main__":
    main()
