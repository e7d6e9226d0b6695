"""What a process per script costs at the least, on this machine: the CPU time and page faults of
a fork and an exit, of processes built as run_code's zygote is, step by step, measured without
the host, the protocol's other end or the session folder.

    sudo .venv/bin/python bench/bench_fork_floor.py [--forks 400] [--out bench/results/fork-floor-latest.json]

Rows (each: the parent's CPU per fork, the child's CPU from fork to exit, the child's page faults):

- bare: `python -I` with nothing imported forks a child that exits at once;
- zygote image: the same after the zygote's imports (the child runtime, the sandbox, attrs,
  cattrs, the default allowed packages) and its gc.freeze(): the fork itself is dearer (more
  page tables to copy, more to tear down at exit);
- + a trivial run: the child reads a start message and runs `def run(ctx): return 1` as a run's
  child does (no sandbox), sends its end and exits;
- + the sandbox: the same, with every layer the machine has entered first, as a zygote's child
  does (needs root for all six).

Everything here is in the zygote's and the child's CPU time in bench_run_code.py; the host's part
(the check, Nexus.invoke, the session folder) is not. Not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import resource
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "fork-floor-latest.json"


def usage(who: int) -> tuple[float, int]:
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime, r.ru_minflt


def forks(n: int, child: Any, expect: bytes = b"") -> dict[str, float]:
    """Fork `n` children that each run `child(write_end)` and exit; CPU and faults per fork.
    Each child's output must begin with `expect` (a run's end: not an error's path measured)."""
    p0, c0 = usage(resource.RUSAGE_SELF), usage(resource.RUSAGE_CHILDREN)
    for _ in range(n):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                os.close(r)
                child(w)
            except BaseException:  # noqa: BLE001 - the measurement says it: the row is wrong
                code = 1
            os._exit(code)
        os.close(w)
        out = b""
        while chunk := os.read(r, 1 << 16):
            out += chunk
        os.close(r)
        if not out.startswith(expect):
            raise RuntimeError(f"a child said {out[:200]!r}, not {expect!r}...")
        _, status = os.waitpid(pid, 0)
        if status != 0:
            raise RuntimeError(f"a child failed (status {status})")
    p1, c1 = usage(resource.RUSAGE_SELF), usage(resource.RUSAGE_CHILDREN)
    return {"parent_us": (p1[0] - p0[0]) / n * 1e6, "child_us": (c1[0] - c0[0]) / n * 1e6,
            "total_us": (p1[0] - p0[0] + c1[0] - c0[0]) / n * 1e6,
            "child_faults": (c1[1] - c0[1]) / n, "parent_faults": (p1[1] - p0[1]) / n}


def rss_anon_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1])
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--forks", type=int, default=400)
    parser.add_argument("--out", type=Path, default=RESULTS)
    opts = parser.parse_args()
    rows: dict[str, Any] = {}

    def exit_at_once(w: int) -> None:
        pass

    rows["bare"] = {**forks(opts.forks, exit_at_once), "rss_anon_kib": rss_anon_kib()}

    from nexus_tool_code_exec import DEFAULT_ALLOWED_PACKAGES, protocol, sandbox
    from nexus_tool_code_exec.child import runtime
    from nexus_tool_code_exec.zygote.main import _preimport

    statuses = sandbox.layer_statuses()
    layers = sorted(name for name, st in statuses.items() if st.active)
    root = tempfile.mkdtemp(prefix="nexus-floor-")
    os.chmod(root, 0o711)
    policy: dict[str, Any] = {"layers": layers, "limits": {"memory_mb": 512, "cpu_seconds": 31},
                              "read_paths": list(sandbox.runtime_read_paths())}
    net_fd = _preimport(list(DEFAULT_ALLOWED_PACKAGES), policy, root)  # type: ignore[arg-type]
    policy["net_fd"] = net_fd
    made = runtime.sandbox_policy(policy)  # type: ignore[arg-type]  # as the zygote does: made once, before the forks
    gc.collect()
    gc.freeze()
    rows["zygote image"] = {**forks(opts.forks, exit_at_once), "rss_anon_kib": rss_anon_kib()}

    code = protocol.pack_code(compile("def run(ctx):\n    return 1\n", protocol.SCRIPT_FILENAME, "exec"))
    start = protocol.encode({"t": protocol.START, "call_id": "c", "script": "def run(ctx):\n    return 1\n",
                             "code": code, "bindings_key": "", "bindings": {"pieces": [], "signatures": {}}, "skills": {}, "max_workers": 1,
                             "max_output_bytes": 100, "max_result_bytes": 100, "timeout": 5})

    folders: list[str] = []

    def trivial_run(w: int, policy: dict[str, Any] | None = None) -> None:
        r, hw = os.pipe()  # the start message comes on a pipe, as from the host
        os.write(hw, start)
        os.close(hw)
        if policy is not None:
            signal.set_wakeup_fd(-1)
            runtime.isolate({**policy, "scratch": folders.pop()}, r, w, made)  # type: ignore[typeddict-item]
        runtime.serve(r, w)

    done = b'{"t":"done","result":"1"'
    rows["+ a trivial run"] = forks(opts.forks, trivial_run, done)

    # as the zygote gives them: the namespace it made, and a folder each (made here, before the
    # measurement: the zygote keeps folders its scripts left untouched)
    folders[:] = [tempfile.mkdtemp(dir=root) for _ in range(opts.forks)]
    rows["+ the sandbox"] = {**forks(opts.forks, lambda w: trivial_run(w, policy), done), "layers": layers}

    print(f"Linux {platform.release()}, Python {platform.python_version()}, {os.cpu_count()} CPUs, "
          f"1-min load {os.getloadavg()[0]:.2f}; {opts.forks} forks a row")
    print(f"{'':20}{'parent us':>11}{'child us':>10}{'total us':>10}{'child faults':>14}")
    for name, row in rows.items():
        print(f"{name:20}{row['parent_us']:>11.0f}{row['child_us']:>10.0f}{row['total_us']:>10.0f}"
              f"{row['child_faults']:>14.0f}")
    print(f"zygote image: {rows['zygote image']['rss_anon_kib'] / 1024:.1f} MiB of anonymous memory; "
          f"sandbox layers: {', '.join(layers) or 'none'}")
    report = {"machine": {"kernel": platform.release(), "python": platform.python_version(),
                          "nproc": os.cpu_count(), "load_1min": os.getloadavg()[0],
                          "date": time.strftime("%Y-%m-%d %H:%M:%S %Z")},
              "forks": opts.forks, "rows": rows}
    opts.out.parent.mkdir(parents=True, exist_ok=True)
    opts.out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {opts.out}")
    shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
