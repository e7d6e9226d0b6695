"""Issue 27: run_code on a Ray cluster against the local pool, in one run.

    .venv/bin/python bench/bench_ray.py [--runs N] [--calls N]

Starts a `ray.cluster_utils.Cluster` (head + 2 worker nodes on this machine: "simulated" nodes)
and measures, for `launcher: ray` against the default local pool (`pool: process`):
  - trivial run: median wall time of `def run(ctx): return 1`
  - inner call: median per-call time of a script making N `tools.echo` calls
  - throughput: runs per second with 4 threads, with 1 and with 2 worker nodes taking scripts
"""

from __future__ import annotations

import argparse
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

import ray
from ray.cluster_utils import Cluster

from nexus_core import Nexus, ToolDef
from nexus_ray import launcher as remote
from nexus_tool_code_exec import engine_for

CE = "nexus.tool.code_exec"
TRIVIAL = "def run(ctx):\n    return 1\n"


def make(**settings: object) -> Nexus:
    echo = ToolDef(name="echo", handler=lambda a: a["text"],
                   input_schema={"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]})
    nx = Nexus(plugins=[CE], config={"plugins": {CE: {"timeout_seconds": 120, **settings}}})
    nx.add_tool(echo)
    return nx


def median_ms(nx: Nexus, script: str, runs: int) -> float:
    times = []
    for _ in range(runs + 1):
        began = time.perf_counter()
        result = nx.invoke("run_code", {"script": script})
        assert result.error is None, result.output
        times.append((time.perf_counter() - began) * 1000)
    return statistics.median(times[1:])


def throughput(nx: Nexus, runs: int) -> float:
    began = time.perf_counter()
    with ThreadPoolExecutor(4) as pool:
        for result in pool.map(lambda _: nx.invoke("run_code", {"script": TRIVIAL}), range(runs)):
            if result.error is not None:
                print("run failed:", result.output.splitlines()[0])
    return runs / (time.perf_counter() - began)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    calls = f"import tools\n\ndef run(ctx):\n    for _ in range({args.calls}):\n        tools.echo(text='x')\n"
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    for _ in range(2):
        cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes(timeout=120)
    ray.init(address=cluster.address, namespace=remote.NAMESPACE, log_to_driver=False)
    try:
        rows = []
        for name, settings in (("local pool", {}), ("ray", {"launcher": "ray"})):
            nx = make(**settings)
            trivial = median_ms(nx, TRIVIAL, args.runs)
            per_call = (median_ms(nx, calls, max(args.runs // 4, 3)) - trivial) / args.calls
            rows.append((name, trivial, per_call, throughput(nx, args.runs * 2)))
            if name == "ray":
                launcher = engine_for(nx).launcher()
                assert isinstance(launcher, remote.RemoteLauncher)
                launcher._nodes = launcher.nodes()[:1]
                rows.append(("ray, 1 node", float("nan"), float("nan"), throughput(nx, args.runs * 2)))
            nx.close()
        print(f"{'launcher':<14}{'trivial run ms':>16}{'per inner call ms':>20}{'runs/s (4 threads)':>20}")
        for name, trivial, per_call, rate in rows:
            print(f"{name:<14}{trivial:>16.2f}{per_call:>20.3f}{rate:>20.1f}")
    finally:
        for node in remote.worker_nodes(include_head=True):
            try:
                ray.kill(ray.get_actor(f"nexus-pool-{node}", namespace=remote.NAMESPACE))
            except ValueError:
                pass
        ray.shutdown()
        cluster.shutdown()


if __name__ == "__main__":
    main()
