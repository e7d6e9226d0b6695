"""apply_patch: the `*** Begin Patch` format, applied to every file or to none."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from nexus_core import Nexus
from nexus_core.testing import assert_error, assert_ok


def patch(*lines: str) -> dict[str, str]:
    return {"patch": "\n".join(["*** Begin Patch", *lines, "*** End Patch"])}


def snapshot(folder: Path) -> dict[str, bytes | None]:
    """Every file and folder below `folder`: folders as None, files as their bytes."""
    return {p.relative_to(folder).as_posix(): (None if p.is_dir() else p.read_bytes()) for p in folder.rglob("*")}


@pytest.fixture
def project(nexus_workspace: Path) -> Path:
    (nexus_workspace / "src").mkdir()
    (nexus_workspace / "src" / "app.py").write_text(
        "import sys\n\n\ndef greet():\n    print('Hi')\n\n\ndef main():\n    greet()\n    return 0\n")
    (nexus_workspace / "notes.txt").write_text("one\ntwo\nthree\n")
    (nexus_workspace / "old.txt").write_text("obsolete\n")
    return nexus_workspace


def test_a_second_hunk_that_does_not_apply_leaves_every_file_as_it_was(files: Nexus, project: Path) -> None:
    before = snapshot(project)
    result = files.invoke("apply_patch", patch(
        "*** Add File: new/dir/added.txt",
        "+fresh",
        "*** Update File: notes.txt",
        "@@",
        " one",
        "-two",
        "+TWO",
        "*** Update File: src/app.py",
        "@@ def greet():",
        "-    print('Hi')",
        "+    print('Hello')",
        "@@ def main():",
        "-    greet()",
        "-    return 1",  # the file says `return 0`
        "+    return greet()",
        "*** Delete File: old.txt",
    ))
    assert_error(result, "src/app.py: hunk 2 does not apply: these lines were not found after line 8",
                 kind="failure")
    assert "    return 1" in (result.error or "")
    assert snapshot(project) == before  # nothing added, updated, deleted, and no folders made


def test_add_update_move_and_delete_in_one_patch(files: Nexus, project: Path) -> None:
    os.chmod(project / "src" / "app.py", 0o755)
    result = assert_ok(files.invoke("apply_patch", patch(
        "*** Add File: docs/hello.txt",
        "+Hello",
        "+world",
        "*** Update File: src/app.py",
        "*** Move to: src/main.py",
        "@@ def greet():",
        "-    print('Hi')",
        "+    print('Hello')",
        "*** Delete File: old.txt",
    )))
    assert result.output == "applied the patch: 3 files changed\nA docs/hello.txt\nM src/app.py -> src/main.py\nD old.txt"
    assert result.output_structured == {"changes": [
        {"action": "add", "path": "docs/hello.txt", "moved_to": None},
        {"action": "update", "path": "src/app.py", "moved_to": "src/main.py"},
        {"action": "delete", "path": "old.txt", "moved_to": None},
    ]}
    assert (project / "docs" / "hello.txt").read_text() == "Hello\nworld\n"
    assert not (project / "src" / "app.py").exists() and not (project / "old.txt").exists()
    moved = project / "src" / "main.py"
    assert "    print('Hello')\n" in moved.read_text()
    assert stat.S_IMODE(moved.stat().st_mode) == 0o755  # a moved file keeps its mode
    assert [p.name for p in project.rglob("*.tmp")] == []


def test_context_lines_and_several_hunks_in_order(files: Nexus, project: Path) -> None:
    assert_ok(files.invoke("apply_patch", patch(
        "*** Update File: src/app.py",
        "@@",
        " import sys",
        "+import os",
        " ",
        "@@ def main():",
        "     greet()",
        "-    return 0",
        "+    return 1",
    )))
    text = (project / "src" / "app.py").read_text()
    assert text.startswith("import sys\nimport os\n\n")
    assert text.endswith("    greet()\n    return 1\n")


def test_trailing_whitespace_differences_are_forgiven(files: Nexus, project: Path) -> None:
    (project / "ws.txt").write_text("alpha   \nbeta\t\n")
    assert_ok(files.invoke("apply_patch", patch("*** Update File: ws.txt", "@@", " alpha", "-beta", "+BETA")))
    assert (project / "ws.txt").read_text() == "alpha   \nBETA\n"


def test_first_hunk_may_omit_its_at_at_line_and_end_of_file_anchors_at_the_end(files: Nexus, project: Path) -> None:
    (project / "rep.txt").write_text("x\ny\nx\n")
    assert_ok(files.invoke("apply_patch", patch("*** Update File: rep.txt", "-x", "+z", "*** End of File")))
    assert (project / "rep.txt").read_text() == "x\ny\nz\n"  # the last x, not the first


def test_additions_after_an_anchor_or_at_the_end(files: Nexus, project: Path) -> None:
    assert_ok(files.invoke("apply_patch", patch("*** Update File: notes.txt", "@@ one", "+one and a half",
                                                "@@", "+four")))
    assert (project / "notes.txt").read_text() == "one\none and a half\ntwo\nthree\nfour\n"


def test_crlf_files_keep_their_line_ends_and_a_missing_final_newline_stays_missing(files: Nexus, project: Path) -> None:
    (project / "win.txt").write_bytes(b"a\r\nb\r\n")
    (project / "bare.txt").write_bytes(b"a\nb")
    assert_ok(files.invoke("apply_patch", patch("*** Update File: win.txt", "@@", "-b", "+B",
                                                "*** Update File: bare.txt", "@@", "-b", "+B")))
    assert (project / "win.txt").read_bytes() == b"a\r\nB\r\n"
    assert (project / "bare.txt").read_bytes() == b"a\nB"


@pytest.mark.parametrize("arguments, message", [
    ({"patch": "*** Update File: a\n*** End Patch"}, "a patch must start with the line '*** Begin Patch'"),
    ({"patch": "*** Begin Patch\n*** Delete File: old.txt"}, "a patch must end with the line '*** End Patch'"),
    (patch(), "the patch has no file sections"),
    (patch("*** Rename File: a"), "patch line 2: expected '*** Add File: '"),
    (patch("*** Update File: notes.txt"), "patch line 2: Update File notes.txt has no hunks"),
    (patch("*** Update File: notes.txt", "@@", "-one", "@@"), "hunk 2 of notes.txt has no lines"),
    (patch("*** Update File: notes.txt", "@@", "-one", "oops"), "patch line 5: expected a hunk starting with '@@'"),
    (patch("*** Update File: nope.txt", "@@", "-a"), "Update File nope.txt: no such file"),
    (patch("*** Add File: notes.txt", "+x"), "Add File notes.txt: it already exists"),
    (patch("*** Delete File: nope.txt"), "Delete File nope.txt: no such file"),
    (patch("*** Update File: notes.txt", "*** Move to: old.txt", "@@", "-one", "+1"), "Move to old.txt: it already exists"),
    (patch("*** Delete File: notes.txt", "*** Delete File: notes.txt"), "notes.txt appears twice in the patch"),
    (patch("*** Update File: notes.txt", "@@ nowhere", "-one"), "hunk 1 does not apply: its @@ line 'nowhere' was not found"),
    (patch("*** Delete File: src"), "src is a folder, not a file"),
])
def test_bad_patches_are_explained_and_change_nothing(files: Nexus, project: Path, arguments: dict, message: str) -> None:
    before = snapshot(project)
    assert_error(files.invoke("apply_patch", arguments), message, kind="failure")
    assert snapshot(project) == before


def test_a_file_that_cannot_be_staged_undoes_what_was_staged(files: Nexus, project: Path) -> None:
    before = snapshot(project)
    result = files.invoke("apply_patch", patch("*** Add File: fresh/a.txt", "+a",
                                               "*** Add File: notes.txt/b.txt", "+b"))
    assert_error(result, "notes.txt is a file, not a folder; nothing was changed", kind="failure")
    assert snapshot(project) == before  # no temporary file, no `fresh/` folder


def test_a_commit_that_fails_midway_is_undone(project: Path) -> None:
    # Plan-time checks leave the commit little to fail on, so drive the commit step itself:
    # a plan whose delete fails after its writes have landed.
    from nexus_tool_file._patch import Plan, PatchError, commit
    from nexus_tool_file._paths import Workspace

    the_plan = Plan(  # files named relative to the workspace root
        writes={"notes.txt": (b"changed\n", None), "added.txt": (b"new\n", None)},
        deletes=["vanished.txt"],
        originals={"notes.txt": (project / "notes.txt").read_bytes(), "added.txt": None,
                   "vanished.txt": b"was here\n"},
    )
    before = snapshot(project)
    with pytest.raises(PatchError, match="vanished.txt: No such file or directory; every change was undone"):
        commit(Workspace.at(project), the_plan)
    assert snapshot(project) == before
