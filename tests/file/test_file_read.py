"""read: numbered lines, offset and limit, the size cap, and refusals of what is not text."""

from __future__ import annotations

from pathlib import Path

import pytest

from nexus_core import Nexus
from nexus_core.testing import NexusFactory, assert_error, assert_ok


def test_numbered_lines_and_structured_output(files: Nexus, nexus_workspace: Path) -> None:
    (nexus_workspace / "a.txt").write_text("first\nsecond\n")
    result = assert_ok(files.invoke("read", {"path": "a.txt"}), "     1\tfirst\n     2\tsecond")
    assert result.output_structured == {"path": "a.txt", "content": "first\nsecond\n", "start_line": 1,
                                        "lines": 2, "total_lines": 2, "truncated": False}


def test_offset_and_limit_read_a_window_and_say_how_to_go_on(files: Nexus, nexus_workspace: Path) -> None:
    (nexus_workspace / "n.txt").write_text("".join(f"line {i}\n" for i in range(1, 11)))
    result = assert_ok(files.invoke("read", {"path": "n.txt", "offset": 4, "limit": 3}))
    assert result.output == "     4\tline 4\n     5\tline 5\n     6\tline 6\n[lines 4-6 of 10; read on with offset=7]"
    assert result.output_structured["content"] == "line 4\nline 5\nline 6\n"
    assert (result.output_structured["start_line"], result.output_structured["truncated"]) == (4, True)
    last = assert_ok(files.invoke("read", {"path": "n.txt", "offset": 9}))
    assert last.output_structured["lines"] == 2 and last.output_structured["truncated"] is False


def test_default_line_count_comes_from_config(nexus_factory: NexusFactory, nexus_workspace: Path) -> None:
    (nexus_workspace / "n.txt").write_text("x\n" * 50)
    nx = nexus_factory(plugins=["nexus.tool.file"], config={"plugins": {"nexus.tool.file": {"read_lines": 20}}})
    result = assert_ok(nx.invoke("read", {"path": "n.txt"}))
    assert result.output_structured["lines"] == 20 and result.output_structured["truncated"] is True


def test_size_cap_stops_at_a_line_boundary(nexus_factory: NexusFactory, nexus_workspace: Path) -> None:
    (nexus_workspace / "big.txt").write_text("".join(f"{i:049d}\n" for i in range(100)))  # 50 bytes a line
    nx = nexus_factory(plugins=["nexus.tool.file"], config={"plugins": {"nexus.tool.file": {"max_read_bytes": 1024}}})
    result = assert_ok(nx.invoke("read", {"path": "big.txt"}))
    out = result.output_structured
    assert (out["lines"], out["total_lines"], out["truncated"]) == (20, 100, True)
    assert "stopped at max_read_bytes=1024; read on with offset=21" in result.output
    more = assert_ok(nx.invoke("read", {"path": "big.txt", "offset": 21})).output_structured
    assert more["content"].startswith(f"{20:049d}\n")


def test_a_single_line_longer_than_the_cap_shows_its_start(nexus_factory: NexusFactory, nexus_workspace: Path) -> None:
    (nexus_workspace / "min.js").write_text("x" * 5000 + "\nnext\n")
    nx = nexus_factory(plugins=["nexus.tool.file"], config={"plugins": {"nexus.tool.file": {"max_read_bytes": 1024}}})
    result = assert_ok(nx.invoke("read", {"path": "min.js"}))
    assert result.output_structured["content"] == "x" * 1024
    assert result.output_structured["truncated"] is True
    assert "line 1 is longer than max_read_bytes=1024" in result.output


def test_binary_files_are_refused_with_a_clear_message(files: Nexus, nexus_workspace: Path) -> None:
    (nexus_workspace / "img.png").write_bytes(b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR")
    assert_error(files.invoke("read", {"path": "img.png"}),
                 "img.png is not a text file (it contains NUL bytes)", kind="failure")
    (nexus_workspace / "latin1.txt").write_bytes("caf\xe9\n".encode("latin-1"))
    assert_error(files.invoke("read", {"path": "latin1.txt"}), "latin1.txt is not a text file (invalid UTF-8 on line 1")


def test_missing_files_and_folders_are_explained(files: Nexus, nexus_workspace: Path) -> None:
    (nexus_workspace / "sub").mkdir()
    assert_error(files.invoke("read", {"path": "nope.txt"}), "nope.txt: no such file", kind="failure")
    assert_error(files.invoke("read", {"path": "sub"}), "sub is a folder; use list", kind="failure")


def test_empty_file_and_offset_past_the_end(files: Nexus, nexus_workspace: Path) -> None:
    (nexus_workspace / "empty.txt").write_text("")
    (nexus_workspace / "three.txt").write_text("a\nb\nc")  # no newline at the end: still 3 lines
    assert_ok(files.invoke("read", {"path": "empty.txt"}), "[empty file]")
    result = assert_ok(files.invoke("read", {"path": "three.txt", "offset": 9}))
    assert result.output == "[three.txt has 3 lines; offset 9 is past the end]"
    assert result.output_structured["lines"] == 0 and result.output_structured["total_lines"] == 3


def test_crlf_is_kept_in_content_and_hidden_in_the_numbered_view(files: Nexus, nexus_workspace: Path) -> None:
    (nexus_workspace / "win.txt").write_bytes(b"one\r\ntwo\r\n")
    result = assert_ok(files.invoke("read", {"path": "win.txt"}), "     1\tone\n     2\ttwo")
    assert result.output_structured["content"] == "one\r\ntwo\r\n"


@pytest.mark.parametrize("arguments, problem", [
    ({}, "path"),
    ({"path": "a.txt", "offset": 0}, "offset"),
    ({"path": "a.txt", "lines": 5}, "lines: unknown key"),
])
def test_arguments_are_checked_against_a_strict_schema(files: Nexus, arguments: dict, problem: str) -> None:
    assert_error(files.invoke("read", arguments), problem, kind="invalid_arguments")


def test_one_module_serves_nexus_instances_with_different_workspaces(nexus_factory: NexusFactory, tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    for folder in (first, second):
        folder.mkdir()
        (folder / "who.txt").write_text(folder.name)
    a = nexus_factory(plugins=["nexus.tool.file"], config={"workspace": str(first)})
    b = nexus_factory(plugins=["nexus.tool.file"], config={"workspace": str(second)})
    assert assert_ok(a.invoke("read", {"path": "who.txt"})).output_structured["content"] == "first"
    assert assert_ok(b.invoke("read", {"path": "who.txt"})).output_structured["content"] == "second"
