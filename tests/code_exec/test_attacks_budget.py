"""Issue 11's attack suite, part 2: the host's budget for one run.

The child is capped (512 MiB of memory, its CPU seconds, its wall clock); what it makes the host
hold and do was not. A script that kept the workers busy and then sent 60 calls of 20 MB took the
host from 30 MB to 1.6 GB. Each attack here goes through the front door (a real script, forged
messages written straight onto its pipe), while `HostWatch` measures the host: the longest stall
of a heartbeat thread, the CPU time and the resident memory the run cost. The run must end with
an error that names the limit (or be held back and time out), and the range's check after every
test finds the host unharmed and nothing left behind.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

import pytest
from attack_helpers import CE, LIMIT, NAP_STILL_RUNNING, Range, stopped_calls
from host_watch import HostWatch
from nexus_core.testing import NexusFactory
from nexus_tool_code_exec.host.runner import MAX_CALLS_PAST_LIMIT, MAX_PENDING_CALL_BYTES

from nexus_core import native_tool
from nexus_tool_code_exec import engine_for

pytestmark = [pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox is Linux-only"),
              pytest.mark.usefixtures("unharmed")]

#: the runtime's channel, reached without a dunder; `forge` writes a message straight onto the pipe
REACH = """\
import json, tools, typing

sys = typing.sys
os = sys.modules["os"]
channel = sys.modules["_nexus_rt"]._channel


def forge(message):
    view = memoryview((json.dumps(message) + "\\n").encode())
    with channel._wlock:  # as the runtime writes: its own `where` message never lands inside this one
        while view:
            view = view[os.write(channel.wfd, view):]


"""


def watched(rng: Range, script: str, timeout: float | None = None, **bounds: float) -> tuple[str | None, HostWatch]:
    with HostWatch() as watch:
        result = rng.run(REACH + script, timeout=timeout)
    watch.assert_host_fine(**bounds)
    return result.error, watch


#: the issue's attack: every worker busy in a call that does not return, then 60 calls of 20 MB,
#: none of which the script waits for
BUSY_THEN_HUGE = """\
def run(ctx):
    for i in range(WORKERS):
        forge({"t": "call", "id": 1000 + i, "name": "nap", "args": {"s": 30}, "p": True})
    big = "x" * (20 << 20)
    for i in range(60):
        forge({"t": "call", "id": 2000 + i, "name": "echo", "args": {"text": big}, "p": True})
    return "sent"
"""


def test_huge_calls_behind_busy_workers_are_held_back(rng: Range) -> None:
    """With max_workers at this machine's CPUs, the in-flight bound holds the huge calls back
    in the child's pipe (it grew by 1.6 GB before): the run ends at its timeout."""
    workers = engine_for(rng.nx).settings.max_workers
    error, _ = watched(rng, BUSY_THEN_HUGE.replace("WORKERS", str(workers)), timeout=LIMIT, memory_mib=256,
                       cpu_seconds=10)
    # the end of the run stopped what it held: the naps, and the huge calls queued behind them
    calls = stopped_calls(error, f"script timed out after {LIMIT}s")
    assert calls.count(NAP_STILL_RUNNING) == workers, calls
    assert set(calls) <= {NAP_STILL_RUNNING, "echo (queued: never started)"}, calls
    assert rng.nap.entered.is_set()  # the workers were busy: the big calls waited behind them


def test_huge_calls_past_the_pending_bytes_cap_stop_the_run(nexus_factory: NexusFactory) -> None:
    """With many workers the in-flight bound alone would let 32 calls of 20 MB in: the cap on
    the bytes of pending calls stops the run first, with an error that names it."""
    release = threading.Event()

    def nap(arguments: dict[str, Any]) -> str:
        release.wait(float(arguments.get("s", 30)))
        return "woke"

    # a generous timeout: 60 calls of 20 MB take a busy machine well past 10 s (it failed so)
    nx = nexus_factory(plugins=[CE], config={"plugins": {CE: {"max_workers": 16, "timeout_seconds": 60}}},
                       tools=[native_tool("nap", "Sleeps.", {"type": "object", "properties": {"s": {"type": "number"}}}, nap),
                              native_tool("echo", "Echoes.", {"type": "object", "properties": {"text": {"type": "string"}}},
                                          lambda a: "ok")])
    try:
        with HostWatch() as watch:
            result = nx.invoke("run_code", {"script": REACH + BUSY_THEN_HUGE.replace("WORKERS", "16")})
        watch.assert_host_fine(memory_mib=(MAX_PENDING_CALL_BYTES >> 20) * 3, cpu_seconds=10)
    finally:
        release.set()
    assert result.error is not None and result.error.startswith(
        f"host limit exceeded: the script's calls waiting for an answer held more than "
        f"{MAX_PENDING_CALL_BYTES >> 20} MiB of arguments at once"), result.error


def test_a_flood_of_parallel_calls_is_held_back_not_queued(rng: Range) -> None:
    """Thousands of parallel calls to a tool that does not return, none waited for: the host
    takes at most 2 x max_workers of them and stops reading the child until one is answered, so
    the rest wait in the child's own pipe (and memory); the run ends at its timeout."""
    error, _ = watched(rng, """\
def run(ctx):
    for i in range(20000):
        forge({"t": "call", "id": i + 1, "name": "nap", "args": {"s": 30, "pad": "y" * 1000}, "p": True})
    return "sent"
""", timeout=LIMIT, memory_mib=64)
    naps = [c for c in rng.watch.invoked if c.name == "nap"]
    assert 0 < len(naps) <= 2 * engine_for(rng.nx).settings.max_workers, len(naps)
    calls = stopped_calls(error, f"script timed out after {LIMIT}s")
    assert calls.count(NAP_STILL_RUNNING) == len(naps), calls  # the rest were refused, never started
    assert set(calls) <= {NAP_STILL_RUNNING, "nap (queued: never started)"}, calls


def test_calls_past_the_limit_are_refused_then_the_run_is_stopped(rng: Range) -> None:
    """Past max_tool_calls each call is refused through Nexus.refuse (gates and observers see
    it); MAX_CALLS_PAST_LIMIT of those, and the run is stopped with an error naming the limit."""
    error, _ = watched(rng, """\
def run(ctx):
    refused = 0
    for _ in range(100000):
        try:
            tools.echo(text="again")
        except tools.ToolError:
            refused += 1
    return refused
""", cpu_seconds=20)
    assert error == (f"tool call limit exceeded: the script went on calling after its limit of 1000 calls "
                     f"({MAX_CALLS_PAST_LIMIT} more were refused); it was stopped")
    seen = [r for r in rng.watch.results if r.error and "tool call limit reached" in r.error]
    assert len(seen) == MAX_CALLS_PAST_LIMIT  # each refusal went through the observers


def test_forged_output_past_the_cap_stops_the_run(rng: Range) -> None:
    """The runtime stops sending output at max_output_bytes; a forged stream of 20 MB pieces is
    read up to one piece past the cap (dropped), then the run is stopped."""
    error, _ = watched(rng, """\
def run(ctx):
    piece = "z" * (20 << 20)
    for _ in range(50):
        forge({"t": "out", "s": "stdout", "d": piece})
    return "flooded"
""", memory_mib=256, cpu_seconds=10)
    assert error == ("runtime error: the script's process broke the protocol (more output than "
                     "max_output_bytes (65536) allows) and was stopped")
    assert sum(len(c.data) for c in rng.watch.chunks) <= 65536


def test_forged_empty_output_messages_are_bounded_too(rng: Range) -> None:
    error, _ = watched(rng, """\
def run(ctx):
    line = (json.dumps({"t": "out", "s": "stdout", "d": ""}) + "\\n").encode() * 10000
    for _ in range(100):
        os.write(channel.wfd, line)
    return "flooded"
""", cpu_seconds=10)
    assert error == ("runtime error: the script's process broke the protocol (more output than "
                     "max_output_bytes (65536) allows) and was stopped")


def test_a_tool_that_hangs_does_not_hold_run_code_past_its_timeout(rng: Range) -> None:
    """A sequential call to a tool that does not return: run_code answers at its timeout (the
    tool's thread is left to it: Python cannot stop a thread, docs/run-code.md says what bounds
    them), and the next run is fine."""
    with HostWatch() as watch:
        result = rng.run("import tools\n\ndef run(ctx):\n    tools.nap(s=30)\n    return 'woke'\n", timeout=LIMIT)
    watch.assert_host_fine()
    assert stopped_calls(result.error, f"script timed out after {LIMIT}s") == [NAP_STILL_RUNNING]
    assert not rng.nap.returned.is_set()  # answered while the tool still slept
    assert rng.run("def run(ctx):\n    return 2\n").output_structured == {"result": 2}
