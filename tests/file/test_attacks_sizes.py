"""Bounded host work (issue 21, item 6): no file tool builds, reads or holds more than its limits,
and each refusal names the limit and its config key before anything is built.

The issue's attack: `edit(replace_all=True)` of a 1 MiB file of `a` with a 4 KiB replacement
built a 4 GiB string in the host. It runs here in a child process under an address-space rlimit
of 1 GiB more than the child already uses, so a regression fails fast (MemoryError) instead of
taking the machine with it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from nexus_core import Nexus
from nexus_core.testing import NexusFactory, assert_error, assert_ok

LIMIT = 4096
KEY = "plugins.nexus.tool.file.max_file_bytes"


@pytest.fixture
def small(nexus_factory: NexusFactory) -> Nexus:
    return nexus_factory(plugins=["nexus.tool.file"],
                         config={"plugins": {"nexus.tool.file": {"max_file_bytes": LIMIT, "max_patch_bytes": 3 * LIMIT}}})


def test_the_4_gib_edit_is_refused_before_it_is_built(tmp_path: Path) -> None:
    script = textwrap.dedent(f"""
        import json, resource
        from pathlib import Path
        from nexus_core import Nexus

        workspace = Path({str(tmp_path)!r})
        (workspace / "a.txt").write_bytes(b"a" * (1 << 20))
        nx = Nexus.from_config({{"workspace": str(workspace), "skills": [],
                                "plugins": {{"active": ["nexus.tool.file"]}}}})
        used = int(next(l for l in open("/proc/self/status") if l.startswith("VmSize:")).split()[1]) * 1024
        resource.setrlimit(resource.RLIMIT_AS, (used + (1 << 30), used + (1 << 30)))
        result = nx.invoke("edit", {{"path": "a.txt", "old_string": "a", "new_string": "b" * 4096,
                                    "replace_all": True}})
        print(json.dumps({{"error": result.error, "kind": result.error_kind}}))
    """)
    if not sys.platform.startswith("linux"):
        pytest.skip("the address-space check reads /proc/self/status")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["kind"] == "failure", result  # "exception" would be a MemoryError: the string was being built
    assert result["error"] == (
        f"replacing 1048576 occurrences of old_string would make a.txt 4294967296 bytes, more than "
        f"max_file_bytes=16777216 ({KEY}), the largest file the file tools read whole or write; nothing was "
        "changed. Work on a smaller file (grep finds lines in a large one), or a person can raise the limit")
    assert (tmp_path / "a.txt").read_bytes() == b"a" * (1 << 20)


def test_oversize_files_are_refused_by_read_edit_and_apply_patch(small: Nexus, nexus_workspace: Path) -> None:
    big = nexus_workspace / "big.txt"
    big.write_text("x\n" * (LIMIT // 2 + 1))  # LIMIT + 2 bytes
    message = f"big.txt is {LIMIT + 2} bytes, more than max_file_bytes={LIMIT} ({KEY})"
    assert_error(small.invoke("read", {"path": "big.txt", "limit": 1}), message, kind="failure")
    assert_error(small.invoke("edit", {"path": "big.txt", "old_string": "x\nx", "new_string": "y"}), message)
    assert_error(small.invoke("apply_patch", {"patch": "*** Begin Patch\n*** Update File: big.txt\n@@\n-x\n+y\n"
                                                       "*** End Patch"}), message)
    assert_error(small.invoke("apply_patch", {"patch": "*** Begin Patch\n*** Delete File: big.txt\n*** End Patch"}),
                 message)  # its content is kept to undo with: it must fit too
    assert big.read_text() == "x\n" * (LIMIT // 2 + 1)
    big.write_text("x\n" * (LIMIT // 2))  # exactly at the limit: fine
    assert assert_ok(small.invoke("read", {"path": "big.txt", "limit": 1})).output_structured["total_lines"] == LIMIT // 2


def test_results_over_the_limit_are_refused(small: Nexus, nexus_workspace: Path) -> None:
    (nexus_workspace / "f.txt").write_text("a\n" * 100 + "end\n")
    # edit: the size is worked out first, whether it grows by many replacements or one big one
    assert_error(small.invoke("edit", {"path": "f.txt", "old_string": "a", "new_string": "b" * 100,
                                       "replace_all": True}),
                 f"replacing 100 occurrences of old_string would make f.txt 10104 bytes, more than "
                 f"max_file_bytes={LIMIT} ({KEY})")
    assert_error(small.invoke("edit", {"path": "f.txt", "old_string": "end", "new_string": "é" * LIMIT}),
                 "replacing 1 occurrence of old_string would make f.txt")
    assert_error(small.invoke("edit", {"path": "f.txt", "old_string": "end", "new_string": "b" * (LIMIT + 1)}),
                 "replacing old_string would make f.txt at least")
    # write
    assert_error(small.invoke("write", {"path": "g.txt", "content": "x" * (LIMIT + 1)}),
                 f"writing the content would make g.txt at least {LIMIT + 1} bytes")
    assert_error(small.invoke("write", {"path": "g.txt", "content": "é" * (LIMIT // 2 + 1)}),
                 f"writing the content would make g.txt {LIMIT + 2} bytes")
    # apply_patch: an added file, and a file a hunk makes too large
    added = "".join(f"+{'x' * 99}\n" for _ in range(LIMIT // 100 + 1))
    assert_error(small.invoke("apply_patch", {"patch": f"*** Begin Patch\n*** Add File: h.txt\n{added}*** End Patch"}),
                 "Add File would make h.txt")
    grown = "".join(f"+{'y' * 99}\n" for _ in range(40))
    assert_error(small.invoke("apply_patch", {"patch": f"*** Begin Patch\n*** Update File: f.txt\n@@\n a\n{grown}"
                                                       "*** End Patch"}),
                 "the patch would make f.txt at least")
    assert (nexus_workspace / "f.txt").read_text() == "a\n" * 100 + "end\n"
    assert not (nexus_workspace / "g.txt").exists() and not (nexus_workspace / "h.txt").exists()


def test_one_patch_holds_at_most_max_patch_bytes(small: Nexus, nexus_workspace: Path) -> None:
    for name in "abcd":
        (nexus_workspace / f"{name}.txt").write_text("z\n" * (LIMIT // 2 - 10))  # each within max_file_bytes
    sections = "".join(f"*** Update File: {name}.txt\n@@\n-z\n+w\n" for name in "abcd")
    result = assert_error(small.invoke("apply_patch", {"patch": f"*** Begin Patch\n{sections}*** End Patch"}))
    assert result.error == (f"the patch would hold more than max_patch_bytes={3 * LIMIT} "
                            "(plugins.nexus.tool.file.max_patch_bytes) of files read and written, the most one "
                            "apply_patch holds; nothing was changed. Split it into smaller patches")
    assert all((nexus_workspace / f"{n}.txt").read_text().startswith("z\n") for n in "abcd")
    assert_ok(small.invoke("apply_patch", {"patch": "*** Begin Patch\n*** Update File: a.txt\n@@\n-z\n+w\n"
                                                    "*** End Patch"}))


def test_list_holds_only_what_it_returns(small: Nexus, nexus_workspace: Path) -> None:
    folder = nexus_workspace / "many"
    folder.mkdir()
    for i in range(300):
        (folder / f"f{i:03}").write_text("x")
    (folder / "out").symlink_to("/etc")  # not shown, nor counted
    result = assert_ok(small.invoke("list", {"path": "many", "limit": 5}))
    assert [e["name"] for e in result.output_structured["entries"]] == ["f000", "f001", "f002", "f003", "f004"]
    assert result.output_structured["entries"][0] == {"name": "f000", "type": "file", "size": 1}
    assert result.output.endswith("[first 5 of 300 entries]")


def test_nexus_doctor_names_the_size_limits(small: Nexus) -> None:
    line = next(line for line in small.plugin("nexus.tool.file").nexus_doctor() if line.startswith("file sizes:"))
    assert line == (f"file sizes: read, edit and apply_patch take files of at most max_file_bytes={LIMIT}, write, "
                    f"edit and apply_patch make none larger; one apply_patch holds at most max_patch_bytes={3 * LIMIT}")
