"""What an MCP tool costs next to a native one, measured side by side in one run.

    .venv/bin/python bench/bench_mcp.py [--quick] [--wait-idle 300]

Per call: `Nexus.invoke` of a no-op tool, sequentially, three ways: a native tool (a Python
function registered in the Nexus), the same tool on an MCP server over stdio, and over
streamable HTTP (bench/peers/mcp_bench_server.py, on the SDK's `MCPServer`; the client is
nexus.mcp.client). Beside them, the MCP SDK's own client calling the stdio and HTTP servers in a
loop on its event loop, no Nexus involved: the floor nexus.mcp.client stands on. All servers are
started before timing. Batches of calls are timed and interleaved (each round runs every peer
once, in a rotating order) so that noise from other processes falls on all of them alike; the
figure is the median of the batches.

Fan-out: a run_code script that calls a tool which waits 50 ms, 32 times: with `parallel.map`
(max_workers 8) against a plain loop, for the MCP tool over stdio and HTTP, and for a native tool
that sleeps 50 ms as the baseline. Every result is checked. Not a test: it asserts nothing about
time.

Writes bench/results/mcp-latest.json (all samples, machine, versions).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import _machine
from _machine import wait_idle

from nexus_core import Nexus, native_tool

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SERVER = HERE / "peers" / "mcp_bench_server.py"
RESULTS = HERE / "results" / "mcp-latest.json"

FANOUT_N, FANOUT_SLEEP, FANOUT_WORKERS = 32, 0.05, 8
SCHEMA = {"type": "object", "properties": {"x": {"type": "integer"}}}
PEERS = {"native": "", "mcp stdio": "stdio_", "mcp http": "http_"}  # peer -> tool name prefix


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_http_server() -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    process = subprocess.Popen([sys.executable, str(SERVER), "--http", str(port)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return process, f"http://127.0.0.1:{port}/mcp"
        except OSError:
            time.sleep(0.05)
    process.kill()
    raise RuntimeError("the HTTP bench server did not start")


def make_nexus(folder: Path, url: str) -> Nexus:
    def sleep50(arguments: dict[str, Any]) -> str:
        time.sleep(FANOUT_SLEEP)
        return str(arguments.get("x", 0))

    config = {
        "workspace": str(folder), "session_dir": str(folder / "session"), "skills": [],
        "plugins": {
            "active": ["nexus.mcp.client", "nexus.tool.code_exec"],
            "nexus.mcp.client": {"servers": {
                "stdio": {"command": sys.executable, "args": [str(SERVER)], "start": "eager"},
                "http": {"url": url, "start": "eager"},
            }},
            "nexus.tool.code_exec": {"max_workers": FANOUT_WORKERS, "persist_scripts": False},
        },
    }
    tools = [native_tool("noop", "Do nothing.", SCHEMA, run=lambda a: "ok"),
             native_tool("sleep50", "Wait 50 ms.", SCHEMA, run=sleep50)]
    return Nexus(config, tools=tools)


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def summary(samples: list[float]) -> dict[str, Any]:
    return {"n": len(samples), "p50": statistics.median(samples), "p10": percentile(samples, 0.1),
            "p90": percentile(samples, 0.9), "samples": samples}


def interleaved(peers: list[str], rounds: int, run: Callable[[str], float]) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {p: [] for p in peers}
    for i in range(rounds):
        for peer in peers[i % len(peers):] + peers[:i % len(peers)]:
            samples[peer].append(run(peer))
    return samples


class SdkClients:
    """The SDK's own clients of the two bench servers, open on an event loop of their own."""

    def __init__(self, url: str) -> None:
        from mcp import Client, StdioServerParameters
        from mcp.client.stdio import stdio_client
        from nexus_mcp._loop import LoopThread

        self.loop = LoopThread("bench-sdk")
        self.clients: dict[str, Any] = {}
        self._stop: Any = None

        async def open_both(ready: Any) -> None:
            import asyncio
            from contextlib import AsyncExitStack

            async with AsyncExitStack() as stack:
                with open(os.devnull, "w") as devnull:
                    params = StdioServerParameters(command=sys.executable, args=[str(SERVER)])
                    self.clients["sdk stdio"] = await stack.enter_async_context(
                        Client(stdio_client(params, errlog=devnull), cache=None))
                    self.clients["sdk http"] = await stack.enter_async_context(Client(url, cache=None))
                    self._stop = asyncio.Event()
                    ready.set_result(None)
                    await self._stop.wait()

        import concurrent.futures

        ready: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._task = self.loop.submit(open_both(ready))
        ready.result(60)

    def batch(self, peer: str, n: int) -> float:
        client = self.clients[peer]

        async def calls() -> float:
            start = time.perf_counter_ns()
            for _ in range(n):
                result = await client.call_tool("noop", {"x": 1})
            elapsed = time.perf_counter_ns() - start
            if result.content[0].text != "ok":
                raise AssertionError(f"{peer}: {result}")
            return elapsed / n / 1e3

        return self.loop.run(calls(), timeout=300)

    def close(self) -> None:
        if self._stop is not None:
            self.loop.loop().call_soon_threadsafe(self._stop.set)
            self._task.result(30)
        self.loop.stop()


def per_call(nx: Nexus, sdk: SdkClients, rounds: int, batch: int) -> dict[str, dict[str, Any]]:
    """Microseconds per sequential call of the no-op tool, per peer."""
    def run(peer: str) -> float:
        if peer in sdk.clients:
            return sdk.batch(peer, batch)
        name = PEERS[peer] + "noop"
        start = time.perf_counter_ns()
        for _ in range(batch):
            result = nx.invoke(name, {"x": 1})
        elapsed = time.perf_counter_ns() - start
        if result.output != "ok":
            raise AssertionError(f"{name}: {result.error or result.output!r}")
        return elapsed / batch / 1e3

    peers = [*PEERS, *sdk.clients]
    for peer in peers:  # warm-up: connections open, validators compiled
        run(peer)
    return {p: summary(s) for p, s in interleaved(peers, rounds, run).items()}


def fanout(nx: Nexus, rounds: int) -> dict[str, dict[str, Any]]:
    """Milliseconds for a run_code script making 32 calls of a 50 ms tool, in parallel and in a
    loop, per peer."""
    expected = [str(i) for i in range(FANOUT_N)]
    scripts = {
        "parallel": "import tools, parallel\n\ndef run(ctx):\n"
                    f"    return parallel.map(range({FANOUT_N}), lambda i: tools.TOOL(x=i).output)\n",
        "sequential": "import tools\n\ndef run(ctx):\n"
                      f"    return [tools.TOOL(x=i).output for i in range({FANOUT_N})]\n",
    }
    kinds = [f"{peer} {how}" for peer in PEERS for how in scripts]

    def run(kind: str) -> float:
        peer, how = kind.rsplit(" ", 1)
        script = scripts[how].replace("TOOL", PEERS[peer] + "sleep50")
        start = time.perf_counter_ns()
        result = nx.invoke("run_code", {"script": script})
        elapsed = time.perf_counter_ns() - start
        if result.is_error or result.output_structured["result"] != expected:
            raise AssertionError(f"{kind}: {result.error or result.output[:200]}")
        return elapsed / 1e6

    for kind in kinds:
        run(kind)
    return {k: summary(s) for k, s in interleaved(kinds, rounds, run).items()}


def machine() -> dict[str, Any]:
    return _machine.machine(("mcp", "anyio", "httpx2", "uvicorn", "pluggy", "jsonschema"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (a smoke run, not for the docs)")
    parser.add_argument("--wait-idle", type=float, default=0, metavar="SECONDS",
                        help="first wait up to this long for the 1-minute load to drop below 0.5")
    parser.add_argument("--out", type=Path, default=RESULTS)
    opts = parser.parse_args()
    rounds, batch, fan_rounds = (10, 50, 3) if opts.quick else (60, 100, 12)

    load_before = wait_idle(opts.wait_idle) if opts.wait_idle else os.getloadavg()[0]
    info = machine()
    print(f"{info['cpu_model']}, nproc {info['nproc']}, Linux {info['kernel']}, Python {info['python']}, "
          f"mcp {info['versions']['mcp']}, {info['date']}; 1-min load {load_before:.2f}")
    http, url = start_http_server()
    sdk = None
    try:
        sdk = SdkClients(url)
        with tempfile.TemporaryDirectory() as tmp, make_nexus(Path(tmp), url) as nx:
            calls = per_call(nx, sdk, rounds, batch)
            fan = fanout(nx, fan_rounds)
    finally:
        if sdk is not None:
            sdk.close()
        http.kill()
        http.wait()
    load_after = os.getloadavg()[0]

    native = calls["native"]["p50"]
    print(f"\nper call of a no-op tool, sequential ({rounds} batches of {batch}); native and mcp: Nexus.invoke, "
          "sdk: the SDK's client alone")
    print(f"{'peer':12}{'p50 us':>10}{'p10':>10}{'p90':>10}{'added us':>10}{'x native':>10}{'x sdk':>8}")
    for peer, s in calls.items():
        sdk_peer = peer.replace("mcp", "sdk")
        vs_sdk = f"{s['p50'] / calls[sdk_peer]['p50']:.2f}" if peer.startswith("mcp") else ""
        print(f"{peer:12}{s['p50']:>10.1f}{s['p10']:>10.1f}{s['p90']:>10.1f}{s['p50'] - native:>10.1f}"
              f"{s['p50'] / native:>10.1f}{vs_sdk:>8}")
    print(f"\nrun_code, {FANOUT_N} calls of a {FANOUT_SLEEP * 1e3:.0f} ms tool ({fan_rounds} rounds; "
          f"parallel.map with max_workers {FANOUT_WORKERS}):")
    print(f"{'peer':12}{'parallel ms':>13}{'sequential ms':>15}{'speed-up':>10}{'vs native parallel':>20}")
    native_parallel = fan["native parallel"]["p50"]
    for peer in PEERS:
        par, seq = fan[f"{peer} parallel"]["p50"], fan[f"{peer} sequential"]["p50"]
        print(f"{peer:12}{par:>13.0f}{seq:>15.0f}{seq / par:>9.1f}x{par / native_parallel:>19.2f}x")
    print(f"\n1-min load: {load_before:.2f} before, {load_after:.2f} after")

    report = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]), "quick": opts.quick, "machine": info,
        "load_1min": {"before": load_before, "after": load_after},
        "per_call_us": {"rounds": rounds, "batch": batch, "results": calls},
        "fanout_ms": {"n": FANOUT_N, "sleep_s": FANOUT_SLEEP, "max_workers": FANOUT_WORKERS, "results": fan},
    }
    opts.out.parent.mkdir(parents=True, exist_ok=True)
    tmp_out = opts.out.with_suffix(".json.tmp")
    tmp_out.write_text(json.dumps(report, indent=1) + "\n")
    tmp_out.replace(opts.out)
    print(f"wrote {opts.out.relative_to(ROOT) if opts.out.is_relative_to(ROOT) else opts.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
