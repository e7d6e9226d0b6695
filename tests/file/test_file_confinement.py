"""No file tool reads, writes or lists anything outside the workspace, however the path is named:
`..`, an absolute path, a symlinked folder, or a symlink as the last component."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from nexus_core import Nexus
from nexus_core.testing import assert_error, assert_ok

SECRET = "top secret\n"

pytestmark = pytest.mark.usefixtures("opener")  # every attempt against both ways of opening


@pytest.fixture
def outside(nexus_workspace: Path) -> Path:
    """A folder beside the workspace holding a secret, and symlinks in the workspace leading to it."""
    folder = nexus_workspace.parent / "outside"
    folder.mkdir()
    (folder / "secret.txt").write_text(SECRET)
    (nexus_workspace / "inside.txt").write_text("inside\n")
    (nexus_workspace / "link_dir").symlink_to(folder)
    (nexus_workspace / "link_file").symlink_to(folder / "secret.txt")
    (nexus_workspace / "dangling_out").symlink_to(folder / "new.txt")
    return folder


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir()}


def existing_forms(outside: Path) -> dict[str, str]:
    """Ways of naming the existing outside file from inside the workspace."""
    return {
        "dotdot": "../outside/secret.txt",
        "absolute": str(outside / "secret.txt"),
        "symlinked folder": "link_dir/secret.txt",
        "symlink": "link_file",
    }


def new_forms(outside: Path) -> dict[str, str]:
    """Ways of naming a file that does not exist yet, outside."""
    return {
        "dotdot": "../outside/new.txt",
        "absolute": str(outside / "new.txt"),
        "symlinked folder": "link_dir/new.txt",
        "dangling symlink": "dangling_out",
    }


FORMS = ["dotdot", "absolute", "symlinked folder", "symlink"]
NEW_FORMS = ["dotdot", "absolute", "symlinked folder", "dangling symlink"]


def refused(files: Nexus, tool: str, arguments: dict[str, Any], named: str, outside: Path) -> None:
    before = snapshot(outside)
    result = assert_error(files.invoke(tool, arguments), kind="failure")
    assert named in (result.error or ""), f"the error should name {named!r}: {result.error}"
    assert "outside the workspace" in (result.error or "")
    assert "top secret" not in result.output
    assert snapshot(outside) == before, f"{tool} changed files outside the workspace"


@pytest.mark.parametrize("form", FORMS)
def test_read_refuses(files: Nexus, outside: Path, form: str) -> None:
    path = existing_forms(outside)[form]
    refused(files, "read", {"path": path}, path, outside)


@pytest.mark.parametrize("form", FORMS)
def test_edit_refuses(files: Nexus, outside: Path, form: str) -> None:
    path = existing_forms(outside)[form]
    refused(files, "edit", {"path": path, "old_string": "top", "new_string": "pwned"}, path, outside)


@pytest.mark.parametrize("form", FORMS)
def test_write_over_an_outside_file_refuses(files: Nexus, outside: Path, form: str) -> None:
    path = existing_forms(outside)[form]
    refused(files, "write", {"path": path, "content": "pwned"}, path, outside)


@pytest.mark.parametrize("form", NEW_FORMS)
def test_write_of_a_new_outside_file_refuses(files: Nexus, outside: Path, form: str) -> None:
    path = new_forms(outside)[form]
    refused(files, "write", {"path": path, "content": "pwned"}, path, outside)
    assert not (outside / "new.txt").exists()


@pytest.mark.parametrize("form", ["dotdot", "absolute", "symlinked folder"])
def test_folder_tools_refuse_an_outside_folder(files: Nexus, outside: Path, form: str) -> None:
    folder = {"dotdot": "../outside", "absolute": str(outside), "symlinked folder": "link_dir"}[form]
    refused(files, "list", {"path": folder}, folder, outside)
    refused(files, "glob", {"pattern": "*", "path": folder}, folder, outside)
    refused(files, "grep", {"pattern": "secret", "path": folder}, folder, outside)


@pytest.mark.parametrize("form", FORMS)
def test_grep_refuses_an_outside_file(files: Nexus, outside: Path, form: str) -> None:
    path = existing_forms(outside)[form]
    refused(files, "grep", {"pattern": "secret", "path": path}, path, outside)


def patch(*sections: str) -> str:
    return "\n".join(["*** Begin Patch", *sections, "*** End Patch"])


@pytest.mark.parametrize("form", FORMS)
def test_apply_patch_refuses_update_and_delete_outside(files: Nexus, outside: Path, form: str) -> None:
    path = existing_forms(outside)[form]
    update = patch(f"*** Update File: {path}", "@@", "-top secret", "+pwned")
    refused(files, "apply_patch", {"patch": update}, path, outside)
    refused(files, "apply_patch", {"patch": patch(f"*** Delete File: {path}")}, path, outside)


@pytest.mark.parametrize("form", NEW_FORMS)
def test_apply_patch_refuses_add_and_move_outside(files: Nexus, outside: Path, nexus_workspace: Path, form: str) -> None:
    path = new_forms(outside)[form]
    refused(files, "apply_patch", {"patch": patch(f"*** Add File: {path}", "+pwned")}, path, outside)
    move = patch("*** Update File: inside.txt", f"*** Move to: {path}", "@@", "-inside", "+moved")
    refused(files, "apply_patch", {"patch": move}, path, outside)
    assert (nexus_workspace / "inside.txt").read_text() == "inside\n"


def test_a_refused_file_anywhere_in_a_patch_stops_all_of_it(files: Nexus, outside: Path, nexus_workspace: Path) -> None:
    both = patch("*** Add File: fine.txt", "+fine", "*** Update File: inside.txt", "@@", "-inside", "+changed",
                 "*** Delete File: ../outside/secret.txt")
    refused(files, "apply_patch", {"patch": both}, "../outside/secret.txt", outside)
    assert not (nexus_workspace / "fine.txt").exists()
    assert (nexus_workspace / "inside.txt").read_text() == "inside\n"


def test_walks_do_not_follow_symlinks_out(files: Nexus, outside: Path, nexus_workspace: Path) -> None:
    (nexus_workspace / "link_inside").symlink_to(nexus_workspace / "inside.txt")
    paths = assert_ok(files.invoke("glob", {"pattern": "**/*"})).output_structured["paths"]
    assert paths == ["inside.txt", "link_inside"]
    grep = assert_ok(files.invoke("grep", {"pattern": "secret|inside"})).output_structured["matches"]
    assert [m["path"] for m in grep] == ["inside.txt", "link_inside"]
    names = [e["name"] for e in assert_ok(files.invoke("list", {})).output_structured["entries"]]
    assert names == ["inside.txt", "link_inside"]  # no name of what lies outside


def test_symlinks_that_stay_inside_work(files: Nexus, nexus_workspace: Path) -> None:
    (nexus_workspace / "real").mkdir()
    (nexus_workspace / "real" / "a.txt").write_text("a\n")
    (nexus_workspace / "alias").symlink_to(nexus_workspace / "real")
    (nexus_workspace / "a_link").symlink_to(nexus_workspace / "real" / "a.txt")
    result = assert_ok(files.invoke("read", {"path": "alias/a.txt"}))
    assert result.output_structured["path"] == "real/a.txt"  # results name the file actually read
    assert_ok(files.invoke("write", {"path": "a_link", "content": "b\n"}))
    assert (nexus_workspace / "a_link").is_symlink()  # the target was replaced, not the link
    assert (nexus_workspace / "real" / "a.txt").read_text() == "b\n"


def test_absolute_paths_inside_the_workspace_are_fine(files: Nexus, nexus_workspace: Path) -> None:
    (nexus_workspace / "a.txt").write_text("hello\n")
    result = assert_ok(files.invoke("read", {"path": str(nexus_workspace / "a.txt")}))
    assert result.output_structured["path"] == "a.txt"


def test_dotdot_that_comes_back_inside_is_fine(files: Nexus, nexus_workspace: Path) -> None:
    (nexus_workspace / "sub").mkdir()
    (nexus_workspace / "a.txt").write_text("hello\n")
    assert_ok(files.invoke("read", {"path": "sub/../a.txt"}))
    name = nexus_workspace.name
    assert_ok(files.invoke("read", {"path": f"../{name}/a.txt"}))
