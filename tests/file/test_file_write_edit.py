"""write and edit: parent folders, atomic replacement, byte counts, and edit's uniqueness rule."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from nexus_core import Nexus
from nexus_core.testing import assert_error, assert_ok


def leftovers(folder: Path) -> list[str]:
    """Temporary files a write might leave behind."""
    return [p.name for p in folder.rglob("*.tmp")]


def test_write_creates_parent_folders_and_reports_bytes(files: Nexus, nexus_workspace: Path) -> None:
    result = assert_ok(files.invoke("write", {"path": "a/b/c.txt", "content": "héllo\n"}),
                       "wrote 7 bytes to a/b/c.txt (new file)")
    assert result.output_structured == {"path": "a/b/c.txt", "bytes": 7, "created": True}
    assert (nexus_workspace / "a" / "b" / "c.txt").read_text(encoding="utf-8") == "héllo\n"


def test_write_replaces_a_file_whole_and_keeps_its_mode(files: Nexus, nexus_workspace: Path) -> None:
    target = nexus_workspace / "script.sh"
    target.write_text("old content that is longer\n")
    os.chmod(target, 0o750)
    result = assert_ok(files.invoke("write", {"path": "script.sh", "content": "new\n"}))
    assert result.output_structured["created"] is False
    assert "replaced its content" in result.output
    assert target.read_text() == "new\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o750
    assert leftovers(nexus_workspace) == []


def test_write_refuses_a_folder_and_a_file_used_as_a_folder(files: Nexus, nexus_workspace: Path) -> None:
    (nexus_workspace / "dir").mkdir()
    (nexus_workspace / "plain.txt").write_text("x")
    assert_error(files.invoke("write", {"path": "dir", "content": "x"}), "dir is a folder", kind="failure")
    assert_error(files.invoke("write", {"path": "plain.txt/inner.txt", "content": "x"}),
                 "plain.txt is a file, not a folder", kind="failure")
    assert (nexus_workspace / "plain.txt").read_text() == "x"


def test_edit_replaces_a_unique_string(files: Nexus, nexus_workspace: Path) -> None:
    (nexus_workspace / "app.py").write_text("def greet():\n    print('Hi')\n")
    result = assert_ok(files.invoke("edit", {"path": "app.py", "old_string": "print('Hi')",
                                             "new_string": "print('Hello')"}), "replaced 1 occurrence in app.py")
    assert result.output_structured == {"path": "app.py", "replacements": 1}
    assert (nexus_workspace / "app.py").read_text() == "def greet():\n    print('Hello')\n"


def test_edit_refuses_a_missing_string_and_changes_nothing(files: Nexus, nexus_workspace: Path) -> None:
    (nexus_workspace / "app.py").write_text("x = 1\n")
    assert_error(files.invoke("edit", {"path": "app.py", "old_string": "y = 1", "new_string": "y = 2"}),
                 "old_string was not found in app.py", kind="failure")
    assert (nexus_workspace / "app.py").read_text() == "x = 1\n"


def test_edit_refuses_an_ambiguous_string_naming_its_lines(files: Nexus, nexus_workspace: Path) -> None:
    (nexus_workspace / "a.txt").write_text("x = 1\ny = 2\nx = 1\n")
    assert_error(files.invoke("edit", {"path": "a.txt", "old_string": "x = 1", "new_string": "x = 3"}),
                 "old_string occurs 2 times in a.txt (lines 1, 3)", kind="failure")
    assert (nexus_workspace / "a.txt").read_text() == "x = 1\ny = 2\nx = 1\n"
    result = assert_ok(files.invoke("edit", {"path": "a.txt", "old_string": "x = 1", "new_string": "x = 3",
                                             "replace_all": True}), "replaced 2 occurrences in a.txt")
    assert result.output_structured["replacements"] == 2
    assert (nexus_workspace / "a.txt").read_text() == "x = 3\ny = 2\nx = 3\n"


def test_edit_refuses_no_op_empty_missing_and_binary(files: Nexus, nexus_workspace: Path) -> None:
    (nexus_workspace / "a.txt").write_text("abc\n")
    (nexus_workspace / "b.bin").write_bytes(b"ab\0c")
    assert_error(files.invoke("edit", {"path": "a.txt", "old_string": "abc", "new_string": "abc"}), "the same")
    assert_error(files.invoke("edit", {"path": "a.txt", "old_string": "", "new_string": "x"}),
                 "old_string", kind="invalid_arguments")
    assert_error(files.invoke("edit", {"path": "gone.txt", "old_string": "a", "new_string": "b"}),
                 "gone.txt: no such file")
    assert_error(files.invoke("edit", {"path": "b.bin", "old_string": "ab", "new_string": "x"}),
                 "b.bin is not a text file")
    assert (nexus_workspace / "b.bin").read_bytes() == b"ab\0c"


def test_edit_matches_newlines_in_a_crlf_file(files: Nexus, nexus_workspace: Path) -> None:
    (nexus_workspace / "win.txt").write_bytes(b"one\r\ntwo\r\nthree\r\n")
    assert_ok(files.invoke("edit", {"path": "win.txt", "old_string": "one\ntwo", "new_string": "1\n2"}))
    assert (nexus_workspace / "win.txt").read_bytes() == b"1\r\n2\r\nthree\r\n"
