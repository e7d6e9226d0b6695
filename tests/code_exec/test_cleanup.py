"""Issue 11's attack suite, part 4: what a run leaves on disk goes, whatever the script made.

A 3000-deep folder chain defeated shutil.rmtree (RecursionError, past `ignore_errors`): the scratch
folder, the zygote's whole run folder on close() and a session folder made ahead (with its four
open files) stayed behind. `remove_tree` is tried here on every tree a script can make: deep
chains (past PATH_MAX too), many files, folders and files chmod'ed to 0000 (by root, and by their
unprivileged owner), symlinks out of the tree (never followed); then through run_code itself, with
the host watched, and after `close()`: no folder and no fd left.
"""

from __future__ import annotations

import os
import resource
import stat
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from host_watch import HostWatch
from nexus_core.testing import NexusFactory
from nexus_tool_code_exec.launchers import cleanup
from nexus_tool_code_exec.launchers.cleanup import janitor, remove_tree
from nexus_tool_code_exec.host.session import PENDING_PREFIX, FolderMaker
from nexus_tool_code_exec.launchers.zygote import ZygoteLauncher
from proc_helpers import open_fds, wait_until

from nexus_tool_code_exec import engine_for

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox is Linux-only")

CE = "nexus.tool.code_exec"
DEPTH = 3000


@pytest.fixture(autouse=True)
def _no_deep_chain_left(tmp_path: Path) -> Any:
    """Whatever a test here leaves in its tmp_path (it failed half-way, say) is removed with the
    remover under test: a 3000-deep chain left for pytest would crash its clean-up of old temp
    folders (shutil.rmtree's RecursionError) in every later session on the machine."""
    yield
    for child in list(tmp_path.iterdir()) if tmp_path.exists() else []:
        remove_tree(child)


def deep_chain(top: Path, depth: int = DEPTH) -> None:
    """top/d/d/.../d/leaf, `depth` folders deep (built by fd: the path is past PATH_MAX)."""
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(depth):
            os.mkdir("d", dir_fd=fd)
            inner = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = inner
        os.close(os.open("leaf", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=fd))
    finally:
        os.close(fd)


def every_kind_of_tree(top: Path, outside: Path) -> None:
    """What a script can leave: a deep chain, many files, 0000 folders and files, links out."""
    deep_chain(top)
    (top / "many").mkdir()
    for i in range(5000):
        (top / "many" / f"f{i}").touch()
    inner = top / "locked" / "inner"
    inner.mkdir(parents=True)
    (inner / "f").write_text("x")
    (inner / "f").chmod(0)
    inner.chmod(0)
    (top / "locked").chmod(0)
    (top / "readonly").mkdir()
    (top / "readonly" / "kept").touch()
    (top / "readonly").chmod(0o500)
    (top / "out").symlink_to(outside)
    (top / "out_file").symlink_to(outside / "keep.txt")


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "keep.txt").write_text("keep me")
    return folder


def in_child(fn: Callable[[], Any], uid: int | None = None, nofile: int = 64) -> int:
    """Run fn in a forked child with a low open-file limit and recursion limit (and as `uid`);
    its exit status: 0 when fn returned an empty list of problems."""
    pid = os.fork()
    if pid == 0:
        code = 3
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))
            sys.setrecursionlimit(200)  # no recursion to speak of
            if uid is not None:
                os.setgroups([])
                os.setresgid(uid, uid, uid)
                os.setresuid(uid, uid, uid)
            code = 0 if fn() == [] else 1
        finally:
            os._exit(code)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def test_remove_tree_takes_every_kind_of_tree(tmp_path: Path, outside: Path) -> None:
    top = tmp_path / "scratch"
    top.mkdir()
    every_kind_of_tree(top, outside)
    with HostWatch() as watch:
        status = in_child(lambda: remove_tree(top))
    watch.assert_host_fine(max_gap=2.0)
    assert status == 0
    assert not os.path.lexists(top)
    assert sorted(os.listdir(outside)) == ["keep.txt"] and (outside / "keep.txt").read_text() == "keep me"


def test_remove_tree_as_the_unprivileged_owner_of_0000_folders(tmp_path: Path, outside: Path) -> None:
    """A host that is not root removes what its child (its own uid) chmod'ed away from it."""
    if os.geteuid() != 0:
        pytest.skip("needs root to become another user")
    uid = 2_000_000_000 - 7
    top = Path(tempfile.mkdtemp(prefix="nexus-cleanup-", dir="/tmp"))
    os.chown(top, uid, uid)

    def build_then_remove() -> list[str]:
        every_kind_of_tree(top, outside)
        return remove_tree(top)

    assert in_child(build_then_remove, uid=uid) == 0
    assert not os.path.lexists(top)
    assert (outside / "keep.txt").read_text() == "keep me"


def test_remove_tree_unlinks_a_symlink_given_as_the_top(tmp_path: Path, outside: Path) -> None:
    link = tmp_path / "link"
    link.symlink_to(outside)
    assert remove_tree(link) == []
    assert not os.path.lexists(link) and (outside / "keep.txt").exists()


def test_remove_tree_does_not_leave_the_tree_when_it_moves_under_it(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A folder moved out from under the walk ends it there, with a problem, not outside."""
    top = tmp_path / "top"
    (top / "a" / "b").mkdir(parents=True)
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("keep")
    real_clear = cleanup._clear

    def clear_and_move(fd: int, problems: list[str], where: str) -> list[str]:
        found = real_clear(fd, problems, where)
        if where.endswith("/b") and (top / "a").exists():  # inside b: move its parent elsewhere
            os.rename(top / "a", victim / "a")
        return found

    monkeypatch.setattr(cleanup, "_clear", clear_and_move)
    problems = remove_tree(top)
    assert any("moved while it was being removed" in p for p in problems), problems
    assert (victim / "keep.txt").read_text() == "keep"


# -- through run_code ------------------------------------------------------------------------------

MAKE_EVERYTHING = """\
import typing

def run(ctx):
    os = typing.sys.modules["os"]
    top = os.getcwd()
    for _ in range({depth}):
        os.mkdir("d")
        os.chdir("d")
    open("leaf", "w").write("x")
    os.chdir(top)
    os.mkdir("many")
    for i in range(5000):
        open("many/f%d" % i, "w").close()
    os.makedirs("locked/inner")
    open("locked/inner/f", "w").write("x")
    os.chmod("locked/inner/f", 0)
    os.chmod("locked/inner", 0)
    os.chmod("locked", 0)
    os.symlink({outside!r}, "out")
    os.symlink({outside!r} + "/keep.txt", "out_file")
    return top
"""


def test_a_scripts_trees_go_with_its_scratch_folder_and_close_leaves_nothing(
        nexus_factory: NexusFactory, outside: Path) -> None:
    fds_before = open_fds()
    nx = nexus_factory(plugins=[CE], config={"plugins": {CE: {"timeout_seconds": 30}}})
    engine = engine_for(nx)
    assert engine is not None
    with HostWatch() as watch:
        result = nx.invoke("run_code", {"script": MAKE_EVERYTHING.format(depth=DEPTH, outside=str(outside))})
    watch.assert_host_fine(cpu_seconds=10)
    assert result.error is None, result.error
    scratch = result.output_structured["result"]
    assert wait_until(lambda: not os.path.lexists(scratch), within=20), f"{scratch} is still there"
    assert (outside / "keep.txt").read_text() == "keep me"
    # a second run leaves its tree behind, and close() comes right after it
    result = nx.invoke("run_code", {"script": MAKE_EVERYTHING.format(depth=DEPTH, outside=str(outside))})
    assert result.error is None, result.error
    launcher = engine.launcher()
    roots = [launcher._zygote.scratch_root] if isinstance(launcher, ZygoteLauncher) and launcher._zygote else []
    sessions = Path(nx.config.session_dir) / "plugins" / CE
    nx.close()
    for folder in [result.output_structured["result"], *roots]:
        assert not os.path.lexists(folder), f"{folder} was left behind"
    assert not [p for p in sessions.iterdir() if p.name.startswith(PENDING_PREFIX)]
    assert wait_until(lambda: open_fds() == fds_before), sorted(open_fds() - fds_before)
    assert (outside / "keep.txt").read_text() == "keep me"


def test_a_session_folder_made_ahead_goes_on_close_whatever_is_in_it(tmp_path: Path) -> None:
    """The folder made for the next run, with its four files open: filled with a deep chain (as a
    script could when the session folder was inside the workspace), then closed."""
    parent = tmp_path / "sessions"
    fds_before = open_fds()
    maker = FolderMaker(parent)
    maker.make_next()
    assert wait_until(lambda: len(maker.held_fds()) == 4)
    (pending,) = [p for p in parent.iterdir() if p.name.startswith(PENDING_PREFIX)]
    deep_chain(pending)
    (pending / "x").mkdir()
    (pending / "x").chmod(0)
    maker.close()
    assert list(parent.iterdir()) == []
    assert open_fds() == fds_before


def test_the_janitor_drains(tmp_path: Path) -> None:
    for i in range(5):
        folder = tmp_path / f"t{i}"
        folder.mkdir()
        deep_chain(folder, 200)
        janitor.remove(folder)
    assert janitor.drain(30)
    assert list(tmp_path.iterdir()) == []
    assert stat.S_ISDIR(tmp_path.stat().st_mode)
