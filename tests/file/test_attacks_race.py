"""A concurrent symlink swap must never let a file tool read, list or write outside the workspace.

An attacker process (a real second process, running in parallel with the tools) swaps, as fast
as it can and atomically (`renameat2(RENAME_EXCHANGE)`), a folder of the workspace with a symlink
that leads out, and a file in it with a symlink to an outside secret. Meanwhile thousands of
tool calls go through `Nexus.invoke`. With a check-then-open (realpath, then open) some reads
landed outside (68 of 3000 before this design; this attacker gets 9 of 3000 past a bare realpath
check on the test VM); opening beneath the workspace in one step leaves none. Each test also
counts the calls that met a swapped-in symlink, so it is known to have raced a moving target. Both ways of opening are attacked: the kernel's openat2(RESOLVE_BENEATH), and
the O_NOFOLLOW walk used where openat2 is missing.
"""

from __future__ import annotations

import ctypes
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nexus_core import Nexus
from nexus_core.testing import NexusFactory

SECRET = "SECRET-OUTSIDE"
# The most calls a test makes while waiting for enough of them to meet a symlink.
MAX_CALLS = 40_000

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="renameat2 is Linux-only")

# Swaps box <-> .box_link (a symlink out) and box/target.txt <-> box/.target_link (a symlink to the
# outside secret), atomically, until the stop file appears; prints how many swaps it made.
ATTACKER = textwrap.dedent("""
    import ctypes, os, sys
    workspace, stop = sys.argv[1], sys.argv[2]
    libc = ctypes.CDLL(None, use_errno=True)
    AT_FDCWD, RENAME_EXCHANGE = -100, 2
    def exchange(a, b):
        if libc.renameat2(AT_FDCWD, a.encode(), AT_FDCWD, b.encode(), RENAME_EXCHANGE) != 0:
            raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()), a)
    os.chdir(workspace)
    swaps = 0
    print("ready", flush=True)
    while not os.path.exists(stop):
        exchange("box", ".box_link")
        exchange("box", ".box_link")
        exchange("box/target.txt", "box/.target_link")
        exchange("box/target.txt", "box/.target_link")
        swaps += 4
    print(swaps, flush=True)
""")


def _has_renameat2() -> bool:
    return hasattr(ctypes.CDLL(None), "renameat2")


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


class Arena:
    def __init__(self, nx: Nexus, workspace: Path, outside: Path) -> None:
        self.nx, self.workspace, self.outside = nx, workspace, outside

    @property
    def outside_state(self) -> dict[str, bytes]:
        return snapshot(self.outside)


@pytest.fixture
def arena(nexus_factory: NexusFactory, nexus_workspace: Path, tmp_path: Path, opener: str) -> Iterator[Arena]:
    if not _has_renameat2():
        pytest.skip("libc has no renameat2")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "target.txt").write_text(f"{SECRET}\n")
    (outside / "only-outside.txt").write_text(f"{SECRET}\n")
    box = nexus_workspace / "box"
    box.mkdir()
    (box / "target.txt").write_text("inside\n")
    (box / ".target_link").symlink_to(outside / "target.txt")  # absolute
    (nexus_workspace / ".box_link").symlink_to("../outside")  # relative, climbing out
    nx = nexus_factory(plugins=["nexus.tool.file"])
    yield Arena(nx, nexus_workspace, outside)


@pytest.fixture
def attacker(arena: Arena, tmp_path: Path) -> Iterator[dict[str, Any]]:
    """The swapping process, started and ready; yields a dict that gets `swaps` when it stops."""
    stop = tmp_path / "stop"
    proc = subprocess.Popen([sys.executable, "-c", ATTACKER, str(arena.workspace), str(stop)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    report: dict[str, Any] = {}
    try:
        yield report
    finally:
        stop.touch()
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, f"the attacker failed: {err}"
        report["swaps"] = int(out.strip())


def everything_said(result: Any) -> str:
    return f"{result.output}\n{result.error}\n{result.output_structured}"


def test_thousands_of_reads_never_see_outside(arena: Arena, attacker: dict[str, Any]) -> None:
    nx = arena.nx
    refused = 0
    i = 0
    # At least 3000 calls, and on until 100 of them met a swapped-in symlink: how many meet one in a
    # given number of calls depends on how the two processes are scheduled, which a busy machine changes.
    while i < 3000 or (refused <= 100 and i < MAX_CALLS):
        i += 1
        tool, arguments = [
            ("read", {"path": "box/target.txt"}),
            ("grep", {"pattern": "SECRET|inside", "path": "box"}),
            ("grep", {"pattern": "SECRET|inside", "path": "box/target.txt"}),
            ("list", {"path": "box"}),
            ("glob", {"pattern": "**/*", "path": "box"}),
            ("edit", {"path": "box/target.txt", "old_string": "never there", "new_string": "x"}),
        ][i % 6]
        result = nx.invoke(tool, arguments)
        said = everything_said(result)
        assert SECRET not in said, f"{tool} {arguments} leaked the outside secret: {said}"
        assert "only-outside" not in said, f"{tool} {arguments} named a file outside: {said}"
        refused += "outside the workspace" in said
    time.sleep(0.01)  # let the attacker finish a last swap pair before it is stopped
    # the attack was real: calls met the swapped-in symlinks
    assert refused > 100, f"only {refused} calls met a symlink: the attacker did not overlap the calls"


def test_thousands_of_writes_never_land_outside(arena: Arena, attacker: dict[str, Any]) -> None:
    nx = arena.nx
    before = arena.outside_state
    refused = 0
    i = 0
    while i < 2000 or (refused <= 50 and i < MAX_CALLS):
        i += 1
        tool, arguments = [
            ("write", {"path": "box/target.txt", "content": f"pwned {i}\n"}),
            ("write", {"path": f"box/new-{i}.txt", "content": "pwned\n"}),
            ("write", {"path": f"box/sub-{i}/deeper/new.txt", "content": "pwned\n"}),
            ("edit", {"path": "box/target.txt", "old_string": "pwned", "new_string": "pwned"}),
            ("apply_patch", {"patch": f"*** Begin Patch\n*** Add File: box/patched-{i}.txt\n+pwned\n"
                                      "*** Update File: box/target.txt\n@@\n-pwned\n+pwned again\n*** End Patch"}),
        ][i % 5]
        result = nx.invoke(tool, arguments)
        refused += "outside the workspace" in everything_said(result)
        assert arena.outside_state == before, f"{tool} {arguments} changed a file outside: {result}"
    assert refused > 50, f"only {refused} calls met a symlink: the attacker did not overlap the calls"
