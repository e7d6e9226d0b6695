"""Issue 6's attack suite, part 3: denial of service. Fork and thread bombs, memory, CPU and
wall-clock hogs, output floods, deep recursion, huge results, a script asleep inside a tool
call, file-size and open-file bombs, a storm of tool calls. Each must end with a clear error
(or a capped result) on time, the host's memory and the zygote unharmed, nothing left behind
(the range's autouse check, see attack_helpers.py), and the next script fine.
"""

from __future__ import annotations

import sys

import pytest
from attack_helpers import CE, LIMIT, NAP_STILL_RUNNING, Range, stopped_calls
from proc_helpers import rss_growth

from nexus_core.testing import NexusFactory
from nexus_tool_code_exec import engine_for

pytestmark = [pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox is Linux-only"),
              pytest.mark.usefixtures("unharmed")]


# -- processes and threads ----------------------------------------------------------------------


def test_fork_bomb(rng: Range) -> None:
    """os.fork (os reached through random) and libc's fork in a loop: every one refused, no
    process appears (the range counts them after the run)."""
    result = rng.run("""\
import random, typing

def run(ctx):
    os, ctypes = random._os, typing.sys.modules["ctypes"]
    libc = ctypes.CDLL(None)
    refused = 0
    for _ in range(2000):
        try:
            if os.fork() == 0:
                while True:
                    os.fork()
        except PermissionError:
            refused += 1
    libc_refused = sum(1 for _ in range(2000) if libc.fork() == -1)
    return [refused, libc_refused]
""")
    assert result.output_structured == {"result": [2000, 2000]}, result.error  # (not timed out: it ended by itself)


def test_thread_bomb(rng: Range) -> None:
    """threading reached through sys.modules (the AST check refuses the import): the run's own
    uid may have 64 tasks, so thread 64 fails and the script can tell."""
    result = rng.run("""\
import typing

def run(ctx):
    threading = typing.sys.modules["threading"]
    stop = threading.Event()
    started, error = 0, None
    try:
        for _ in range(10000):
            threading.Thread(target=stop.wait, daemon=True).start()
            started += 1
    except RuntimeError as exc:
        error = str(exc)
    stop.set()
    return [started, error]
""")
    started, error = result.output_structured["result"]
    assert error == "can't start new thread"
    assert 8 <= started < 64


# -- memory, CPU, wall clock -------------------------------------------------------------------

MEMORY_BOMBS = {
    "bytearray": "b = bytearray(8 << 30)",
    "string": "s = 'x' * (2 << 30)",
    "growing_list": "hoard = []\n    while True:\n        hoard.append(bytearray(1 << 20))",
    "catch_and_retry": ("hoard = []\n    for _ in range(3):\n        try:\n            while True:\n"
                        "                hoard.append(bytearray(8 << 20))\n        except MemoryError:\n"
                        "            print('caught, again')\n    hoard.append(bytearray(1 << 30))"),
}


@pytest.mark.parametrize("bomb", list(MEMORY_BOMBS), ids=list(MEMORY_BOMBS))
def test_memory_bomb(rng: Range, bomb: str) -> None:
    result, grew = rss_growth(
        lambda: rng.run(f"def run(ctx):\n    print('allocating')\n    {MEMORY_BOMBS[bomb]}\n"))
    assert result.error == "memory limit exceeded"  # at once: not at the timeout, which would say so
    assert (result.output_structured or {})["stdout"].startswith("allocating\n")
    assert grew < 64 << 20, f"the host grew by {grew >> 20} MiB"


LOOPS = {
    "busy": "while True:\n        pass",
    "sleep": "time.sleep(10 ** 6)",
    "parallel": "parallel.map(range(4), lambda i: [None for _ in iter(int, 1)])",
    # the runtime's end of the pipe is non-blocking (it polls): wait on it as the runtime does
    "wait_on_the_pipe": ("typing.sys.modules['select'].select([typing.sys.modules['_nexus_rt']._channel.rfd], [], [])\n"
                         "    random._os.read(typing.sys.modules['_nexus_rt']._channel.rfd, 1)"),
    "ignore_signals": ("signal = typing.sys.modules['signal']\n"
                       "    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGXCPU, signal.SIGALRM):\n"
                       "        signal.signal(sig, signal.SIG_IGN)\n"
                       "    while True:\n        pass"),
}


@pytest.mark.parametrize("loop", list(LOOPS), ids=list(LOOPS))
def test_a_script_that_never_ends_is_stopped_at_the_timeout(rng: Range, loop: str) -> None:
    result = rng.run(f"import parallel, random, time, typing\n\ndef run(ctx):\n"
                     f"    print('forever')\n    {LOOPS[loop]}\n", timeout=LIMIT)
    assert result.error == f"script timed out after {LIMIT}s"
    assert result.output_structured == {"stdout": "forever\n"}
    # and the process is gone, its group with it: `unharmed` checks that after every test


@pytest.mark.parametrize("ignore_sigxcpu", [
    False,
    True,  # killed by SIGKILL at the hard limit: the zygote's rusage says it was the CPU limit
], ids=["plain", "sigxcpu_ignored"])
def test_the_cpu_limit_is_its_own_clear_error(nexus_factory: NexusFactory, ignore_sigxcpu: bool) -> None:
    """cpu_seconds below the wall clock: two busy threads use it up first."""
    # the wall clock far past what the CPU limit needs, even on a loaded machine: the run must
    # end by the CPU limit, and a timeout would say "script timed out" instead
    nx = nexus_factory(plugins=[CE], config={"plugins": {CE: {"timeout_seconds": 20, "cpu_seconds": 1}}})
    engine = engine_for(nx)
    assert engine is not None and "rlimits" in engine.active_layers()
    ignore = "signal.signal(signal.SIGXCPU, signal.SIG_IGN)" if ignore_sigxcpu else "pass"
    result = nx.invoke("run_code", {"script": f"""\
import parallel, typing

def spin(i):
    while True:
        i += 1

def run(ctx):
    signal = typing.sys.modules["signal"]
    {ignore}
    parallel.map(range(2), spin)
"""})
    assert result.error == "CPU time limit exceeded"


# -- output and results -------------------------------------------------------------------------

FLOODS = {
    "print_loop": "for _ in range(20000):\n        print('x' * 999)",
    "one_huge_write": "typing.sys.stdout.write('y' * (50 << 20))",
    "stderr": "for _ in range(20000):\n        typing.sys.stderr.write('e' * 999 + '\\n')",
    "forged_out": ("typing.sys.modules['_nexus_rt']._channel.send("
                   "{'t': 'out', 's': 'stdout', 'd': 'z' * (20 << 20)})"),
}


@pytest.mark.parametrize("flood", list(FLOODS), ids=list(FLOODS))
def test_an_output_flood_is_capped(rng: Range, flood: str) -> None:
    """max_output_bytes (64 KiB here) caps what is kept and what the stdout hook sees, and the
    result says so; the run itself succeeds."""
    result, grew = rss_growth(
        lambda: rng.run(f"import typing\n\ndef run(ctx):\n    {FLOODS[flood]}\n    return 'flooded'\n"))
    body = result.output_structured
    assert body["result"] == "flooded" and body["stdout_truncated"] is True, result.error
    assert 0 < len(body["stdout"].encode()) <= 65536
    assert sum(len(c.data.encode()) for c in rng.watch.chunks) <= 65536
    assert grew < 128 << 20, f"the host grew by {grew >> 20} MiB"


def test_deep_recursion(rng: Range) -> None:
    result = rng.run("def run(ctx):\n    def down(n):\n        return down(n + 1)\n    return down(0)\n")
    assert result.error == "runtime error: line 3: RecursionError: maximum recursion depth exceeded"


def test_deep_recursion_in_c_past_a_raised_limit(rng: Range) -> None:
    """sys.setrecursionlimit (sys reached through typing) and a repr nested 100 000 deep: the C
    stack overflows and the process dies of SIGSEGV, which run_code reports as the memory limit
    (the stack is memory; the message does not say which)."""
    result = rng.run("""\
import typing

def run(ctx):
    typing.sys.setrecursionlimit(10 ** 7)
    nested = []
    for _ in range(100000):
        nested = [nested]
    return len(repr(nested))
""")
    assert result.error == "memory limit exceeded"


RESULTS = {
    "string": ("'x' * (5 << 20)", 5 * (1 << 20) + 2),
    "list": ("[0] * (4 << 20)", 3 * (4 << 20) + 2 - 2),
    "dict": ("{str(i): i for i in range(300000)}", None),
}


@pytest.mark.parametrize("value", list(RESULTS), ids=list(RESULTS))
def test_a_huge_return_value_is_a_clear_error(rng: Range, value: str) -> None:
    result, grew = rss_growth(lambda: rng.run(f"def run(ctx):\n    return {RESULTS[value][0]}\n"))
    assert result.error is not None and result.error.startswith(
        "result is not JSON-serializable: the result is too large: "), result.error
    assert result.error.endswith(" bytes (the limit is 1048576)")
    size = RESULTS[value][1]
    if size is not None:
        assert result.error == f"result is not JSON-serializable: the result is too large: {size} bytes " \
                               f"(the limit is 1048576)"
    assert grew < 32 << 20, f"the host grew by {grew >> 20} MiB"


# -- tools, files -------------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["one_call", "parallel"])
def test_a_script_asleep_in_a_tool_call_still_times_out_on_time(rng: Range, how: str) -> None:
    """The tool sleeps far past the limit: the run ends at the limit anyway, while the tool still
    sleeps (its call finishes in the background, unused)."""
    call = {"one_call": "tools.nap(s=600)", "parallel": "parallel.map(range(4), lambda i: tools.nap(s=600))"}[how]
    result = rng.run(f"import parallel, tools\n\ndef run(ctx):\n    print('calling')\n    {call}\n", timeout=LIMIT)
    assert rng.nap.entered.is_set()
    assert not rng.nap.returned.is_set(), "run_code waited for the tool call"
    # the run's end waited STOP_GRACE for the calls it cancelled, and says they slept on
    assert set(stopped_calls(result.error, f"script timed out after {LIMIT}s")) == {NAP_STILL_RUNNING}
    assert result.output_structured == {"stdout": "calling\n"}


def test_file_size_and_open_file_bombs(rng: Range) -> None:
    """In its own scratch folder a script may write, but one file stops at file_size_mb (16 MiB)
    and it may hold 64 files open."""
    result = rng.run("""\
def run(ctx):
    found = {}
    try:
        with open("big.bin", "wb") as f:
            for _ in range(64):
                f.write(b"z" * (1 << 20))
    except OSError as exc:
        found["big"] = str(exc)
    held = []
    try:
        for _ in range(1000):
            held.append(open("/dev/null"))
    except OSError as exc:
        found["open"] = [len(held), str(exc)]
    for f in held:
        f.close()
    return found
""")
    found = result.output_structured["result"]
    assert found["big"] == "[Errno 27] File too large"
    opened, error = found["open"]
    assert error == "[Errno 24] Too many open files: '/dev/null'" and 50 <= opened < 64


def test_a_storm_of_tool_calls_stops_at_max_tool_calls(rng: Range) -> None:
    result = rng.run("""\
import tools

def run(ctx):
    made = 0
    try:
        for _ in range(1100):
            tools.echo(text="again")
            made += 1
    except tools.ToolError as exc:
        return [made, str(exc)]
""")
    made, error = result.output_structured["result"]
    assert made == 1000
    assert error == "echo: tool call limit reached: a script may make at most 1000 calls"


def test_the_same_nexus_still_runs_an_ordinary_script_after_the_attacks(rng: Range) -> None:
    result = rng.run("import parallel\n\ndef run(ctx):\n    return parallel.map([1, 2, 3], lambda x: x * x)\n")
    assert result.output_structured == {"result": [1, 4, 9]}
