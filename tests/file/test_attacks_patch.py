"""An apply_patch written to make the host compare lines for hours: a hunk of thousands of lines
that almost matches everywhere in a file of as many alike lines. Placing hunks is budgeted
(`MAX_COMPARISONS` line comparisons per patch); past it the patch is refused, naming the rule,
and nothing changes. The call is watched like the pattern attacks (tests/host_watch.py).
"""

from __future__ import annotations

from pathlib import Path

from host_watch import HostWatch

from nexus_core import Nexus
from nexus_core.testing import assert_error, assert_ok
from nexus_tool_file._patch import MAX_COMPARISONS


def test_a_hunk_that_almost_matches_everywhere_is_refused_within_the_budget(files: Nexus,
                                                                          nexus_workspace: Path) -> None:
    target = nexus_workspace / "same.txt"
    target.write_text("a\n" * 100_000)
    hunk = "\n".join(["@@"] + [" a"] * 3000 + ["-b", "+c"])  # every place fits until the last line
    patch = f"*** Begin Patch\n*** Update File: same.txt\n{hunk}\n*** End Patch"
    with HostWatch() as watch:
        result = files.invoke("apply_patch", {"patch": patch})
    watch.assert_host_fine(cpu_seconds=20)  # unbudgeted, this is 3 x 97,000 x 3,000 comparisons
    assert_error(result, f"same.txt: placing hunk 1 takes more than {MAX_COMPARISONS} line comparisons "
                         "(the comparison limit of one patch)", kind="failure")
    assert target.read_text() == "a\n" * 100_000


def test_an_ordinary_patch_on_a_large_file_is_well_within_it(files: Nexus, nexus_workspace: Path) -> None:
    target = nexus_workspace / "big.py"
    target.write_text("".join(f"line {i}\n" for i in range(100_000)))
    patch = ("*** Begin Patch\n*** Update File: big.py\n@@\n line 99997\n-line 99998\n+changed\n line 99999\n"
             "*** End Patch")
    assert_ok(files.invoke("apply_patch", {"patch": patch}))
    assert target.read_text().endswith("line 99997\nchanged\nline 99999\n")
