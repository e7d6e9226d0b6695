"""Issue 21's attack suite, item 6 (run_code's part): every message a script's process sends counts
against its run's host budget. The host reads and parses each message in Python, under its GIL;
before this, `where` messages were neither counted nor capped (1.6 M of them in 6 s), and calls
were bounded in number and in what waited at once, not in the bytes they made the host read.

Now each run may send `max_child_messages` messages of any kind (its final one aside) and
`max_child_bytes` bytes; past either, the run ends with `host limit exceeded: ...` naming the cap.
This module's range sets both low, and each attack floods one kind of message: `where` written
raw on the pipe and made by the runtime's own timer, output, calls answered and refused, and a
mix. A script within the caps runs as before.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest
from attack_helpers import Range, open_range
from host_watch import HostWatch

from nexus_core import Nexus
from nexus_tool_code_exec import engine_for, sandbox

pytestmark = [pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox is Linux-only"),
              pytest.mark.usefixtures("unharmed")]

MESSAGES = 5000
BYTES = 8 << 20
TOO_MANY = (f"host limit exceeded: the script's process sent more than {MESSAGES} messages (max_child_messages), "
            "the most the host reads for one run; it was stopped")


def too_many_bytes(error: str | None) -> bool:
    return error is not None and error.startswith(
        f"host limit exceeded: the script's process sent more than {BYTES} bytes (max_child_bytes) in ") and \
        error.endswith(" messages, the most the host reads for one run; it was stopped")


@pytest.fixture(scope="module")
def rng(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Range]:
    with open_range(tmp_path_factory.mktemp("range"), timeout_seconds=20, max_child_messages=MESSAGES,
                    max_child_bytes=BYTES) as rng:
        engine = engine_for(rng.nx)
        assert engine is not None
        missing = set(sandbox.LAYERS) - set(engine.active_layers())
        if missing:
            pytest.skip(f"sandbox layers unavailable here: {sorted(missing)}")
        yield rng


#: the pipe's fd, reached without a dunder; `flood(line)` writes it until the host stops the run
REACH = """\
import json, tools, typing

sys = typing.sys
os = sys.modules["os"]
channel = sys.modules["_nexus_rt"]._channel


def flood(message, times=10 ** 9, batch=100):
    data = ((json.dumps(message) + "\\n") * batch).encode()
    for _ in range(times // batch):
        view = memoryview(data)
        while view:
            view = view[os.write(channel.wfd, view):]
    return "sent"


"""


def attack(rng: Range, script: str) -> str | None:
    with HostWatch() as watch:
        result = rng.run(REACH + script)
    watch.assert_host_fine(cpu_seconds=15)
    return result.error


def test_where_written_raw_on_the_pipe(rng: Range) -> None:
    assert attack(rng, "def run(ctx):\n    return flood({'t': 'where', 'line': 1})\n") == TOO_MANY


def test_where_made_by_the_runtimes_own_timer(rng: Range) -> None:
    """The runtime sends `where` from its SIGALRM handler, near the deadline; a script that sets
    the timer firing every 0.5 ms makes it send one per tick, through the runtime's own code."""
    error = attack(rng, """\
def run(ctx):
    signal = sys.modules["signal"]
    signal.setitimer(signal.ITIMER_REAL, 5e-4, 5e-4)
    while True:
        pass
""")
    assert error == TOO_MANY


@pytest.mark.parametrize("message", [
    {"t": "out", "s": "stdout", "d": ""},
    {"t": "out", "s": "stderr", "d": "x"},
], ids=["empty-output", "output"])
def test_output_messages(rng: Range, message: dict[str, str]) -> None:
    assert attack(rng, f"def run(ctx):\n    return flood({message!r})\n") == TOO_MANY


def test_printing_many_short_lines(rng: Range) -> None:
    """Output the runtime sends itself counts too: one message per line while the head fills."""
    error = attack(rng, "def run(ctx):\n    for i in range(20000):\n        print(i % 10)\n    return 'printed'\n")
    assert error == TOO_MANY


def test_calls_that_are_answered(rng: Range) -> None:
    """Calls within max_tool_calls, each answered at once: the bytes of their arguments count."""
    error = attack(rng, "def run(ctx):\n"
                        "    big = 'x' * (100 << 10)\n"
                        "    for i in range(500):\n"
                        "        tools.echo(text=big)\n"
                        "    return 'echoed'\n")
    assert too_many_bytes(error), error


def test_calls_to_tools_that_do_not_exist(rng: Range) -> None:
    error = attack(rng, "def run(ctx):\n"
                        "    big = 'x' * (200 << 10)\n"
                        "    for i in range(500):\n"
                        "        channel.request({'t': 'call', 'name': 'no_such_tool', 'args': {'a': big}})\n"
                        "    return 'refused'\n")
    assert too_many_bytes(error), error


def test_output_in_big_pieces(rng: Range) -> None:
    """Output the host drops past max_output_bytes is read all the same: its bytes count."""
    error = attack(rng, "def run(ctx):\n    return flood({'t': 'out', 's': 'stdout', 'd': 'y' * (64 << 10)}, batch=4)\n")
    assert too_many_bytes(error), error


def test_a_script_within_the_caps_runs_as_before(rng: Range) -> None:
    result = rng.run("import tools\n\ndef run(ctx):\n"
                     "    for i in range(200):\n        print('line', i)\n        tools.echo(text=str(i))\n"
                     "    return 'fine'\n")
    assert result.output_structured is not None and result.output_structured.get("result") == "fine", result.error


def test_the_caps_are_settings_and_doctor_names_them(tmp_path_factory: pytest.TempPathFactory) -> None:
    with Nexus.from_config({"workspace": str(tmp_path_factory.mktemp("ws")), "skills": [],
                            "plugins": {"active": ["nexus.tool.code_exec"]}}) as nx:
        engine = engine_for(nx)
        assert engine is not None
        assert (engine.settings.max_child_messages, engine.settings.max_child_bytes) == (250_000, 256 << 20)
        line = next(line for line in engine.budget_lines() if line.startswith("host budget per run"))
        assert "250000 messages (max_child_messages) and 256 MiB (max_child_bytes) from the script's process" in line
