"""host/session.py: session folders made ahead (`FolderMaker`: a hidden `.pending-<hex>` folder with the
four files open, made on a helper thread), a run's folder (`SessionFiles`: renamed from the one
made ahead, or made on the spot, then written by `finish`), the UTF-8 writers `write_text` and
`write_fd`; and, through a real Nexus, the folders run_code leaves in
`<session_dir>/plugins/nexus.tool.code_exec/<call id>/`.
"""

from __future__ import annotations

import json
import logging
import os
import re
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from nexus_core import ToolCall, ToolDef
from nexus_core.testing import NexusFactory, assert_ok
from nexus_tool_code_exec import engine_for
from nexus_tool_code_exec.host.session import FILES, PENDING_PREFIX, FolderMaker, SessionFiles, write_fd, write_text
from proc_helpers import open_fds, wait_until

CE = "nexus.tool.code_exec"
SCRIPT = "def run(ctx):\n    return 1\n"


@pytest.fixture(autouse=True)
def no_fd_leaks(request: pytest.FixtureRequest) -> Iterator[None]:
    """The unit tests leave no fd open (a Nexus's own fds are its fixture's business)."""
    if "nexus_factory" in request.fixturenames:
        yield
        return
    before = open_fds()
    yield
    assert open_fds() == before


@pytest.fixture
def parent(tmp_path: Path) -> Path:
    return tmp_path / "sessions" / "plugins" / CE  # not made yet


@pytest.fixture
def maker(parent: Path) -> Iterator[FolderMaker]:
    m = FolderMaker(parent)
    yield m
    m.close()


def ready(maker: FolderMaker) -> set[int]:
    """Wait for the maker's folder; its fds."""
    assert wait_until(lambda: bool(maker.held_fds())), "the helper thread made no folder"
    return maker.held_fds()


def pending(parent: Path) -> list[Path]:
    return sorted(p for p in parent.iterdir() if p.name.startswith(PENDING_PREFIX)) if parent.exists() else []


def names(path: Path) -> list[str]:
    return sorted(p.name for p in path.iterdir())


def target(fd: int) -> str:
    return os.readlink(f"/proc/self/fd/{fd}")


def target_or_none(fd: int) -> str:
    """What `fd` is open on, or "" if it is closed."""
    try:
        return target(fd)
    except OSError:
        return ""


def fds_but_folders_made_ahead() -> set[str]:
    """This process's open fds, but the files of folders made ahead (and fds closed while this
    looks)."""
    return {fd for fd in open_fds() if (path := target_or_none(int(fd))) and f"/{PENDING_PREFIX}" not in path}


# -- FolderMaker ----------------------------------------------------------------------------


def test_make_next_makes_a_hidden_pending_folder_with_the_files_open(maker: FolderMaker, parent: Path) -> None:
    assert not parent.exists()
    assert maker.held_fds() == set()
    maker.make_next()
    fds = ready(maker)

    [folder] = list(parent.iterdir())  # the parent was made too
    assert re.fullmatch(re.escape(PENDING_PREFIX) + "[0-9a-f]+", folder.name)
    assert names(folder) == sorted(FILES) == ["calls.jsonl", "result.json", "script.py", "stdout.txt"]
    assert all(folder.joinpath(name).stat().st_size == 0 for name in FILES)
    assert len(fds) == len(FILES)
    assert sorted(target(fd) for fd in fds) == sorted(str(folder / name) for name in FILES)


def test_make_next_while_a_folder_is_ready_makes_no_second_one(maker: FolderMaker, parent: Path) -> None:
    maker.make_next()
    fds = ready(maker)
    first = pending(parent)
    maker.make_next()
    maker.make_next()
    time.sleep(0.02)  # time enough for the helper thread to make one, were it asked
    assert pending(parent) == first and len(first) == 1
    assert maker.held_fds() == fds


def test_close_removes_an_unused_folder_and_closes_its_files(maker: FolderMaker, parent: Path) -> None:
    maker.make_next()
    ready(maker)
    count = len(open_fds())
    maker.close()
    assert maker.held_fds() == set()
    assert list(parent.iterdir()) == []
    assert len(open_fds()) == count - len(FILES)

    maker.make_next()  # after close: nothing
    time.sleep(0.02)
    assert list(parent.iterdir()) == []
    assert maker.held_fds() == set()


def test_close_of_a_maker_never_asked_makes_nothing(parent: Path) -> None:
    FolderMaker(parent).close()
    assert not parent.exists()


def test_a_folder_given_back_when_one_is_ready_is_discarded(maker: FolderMaker, parent: Path) -> None:
    maker.make_next()
    ready(maker)
    [first] = pending(parent)
    taken = maker.take()
    assert taken is not None and maker.held_fds() == set()
    maker.make_next()
    fds = ready(maker)
    maker.give_back(taken)
    assert not first.exists()
    assert maker.held_fds() == fds and len(pending(parent)) == 1


def test_a_maker_whose_parent_cannot_be_made_makes_nothing(tmp_path: Path) -> None:
    blocker = tmp_path / "a file"
    blocker.write_text("not a folder")
    maker = FolderMaker(blocker / "plugins")
    try:
        maker.make_next()
        time.sleep(0.02)
        assert maker.held_fds() == set()
    finally:
        maker.close()


# -- SessionFiles ---------------------------------------------------------------------------


def test_open_renames_the_folder_made_ahead_and_finish_asks_for_the_next(maker: FolderMaker, parent: Path) -> None:
    maker.make_next()
    fds = ready(maker)
    [ahead] = pending(parent)
    path = parent / "call_1"

    files = SessionFiles(path, maker)
    files.open(SCRIPT)
    assert not ahead.exists()
    assert names(path) == sorted(FILES)
    assert path.joinpath("script.py").read_text() == SCRIPT
    assert sorted(target(fd) for fd in fds) == sorted(str(path / name) for name in FILES)  # the same files
    time.sleep(0.05)
    assert pending(parent) == []  # nothing is made while the run goes on

    # finish asks for the next folder, which the helper thread makes (and opens the files of)
    # at once, while this thread counts: its files are told apart by their folder
    count = len(fds_but_folders_made_ahead())
    assert files.finish("out\n", '{"a": 1}', None, ['{"n": 1}\n', '{"n": 2}\n'])
    assert len(fds_but_folders_made_ahead()) == count - len(FILES)
    assert not any(target_or_none(fd).startswith(f"{path}/") for fd in fds)  # the run's files are closed
    next_fds = ready(maker)  # the next one, made once the run is over
    [after] = pending(parent)
    assert after != ahead
    assert sorted(target(fd) for fd in next_fds) == sorted(str(after / name) for name in FILES)
    assert names(path) == sorted(FILES)
    assert path.joinpath("script.py").read_text() == SCRIPT
    assert path.joinpath("stdout.txt").read_text() == "out\n"
    assert path.joinpath("result.json").read_text() == '{"a": 1}'
    assert path.joinpath("calls.jsonl").read_text() == '{"n": 1}\n{"n": 2}\n'


def test_finish_closes_the_files(tmp_path: Path) -> None:
    path = tmp_path / "call_1"
    count = len(open_fds())
    files = SessionFiles(path, None)
    files.open(SCRIPT)
    assert len(open_fds()) == count + len(FILES)
    assert files.finish("", None, None, [])
    assert len(open_fds()) == count
    assert path.joinpath("result.json").read_text() == "null"  # no result: null
    assert path.joinpath("calls.jsonl").read_text() == ""
    assert not files.finish("", None, None, [])  # once only


def test_finish_with_an_error_writes_error_txt_and_no_result(maker: FolderMaker, parent: Path) -> None:
    maker.make_next()
    ready(maker)
    path = parent / "call_err"
    files = SessionFiles(path, maker)
    files.open(SCRIPT)
    assert files.finish("partial\n", None, "runtime error: boom", ['{"n": 1}\n'])
    assert names(path) == ["calls.jsonl", "error.txt", "script.py", "stdout.txt"]
    assert path.joinpath("error.txt").read_text() == "runtime error: boom\n"
    assert path.joinpath("stdout.txt").read_text() == "partial\n"
    assert path.joinpath("calls.jsonl").read_text() == '{"n": 1}\n'


def test_open_without_a_maker_makes_the_folder(tmp_path: Path) -> None:
    path = tmp_path / "sessions" / "call_1"
    files = SessionFiles(path, None)
    files.open(SCRIPT)
    assert names(path) == sorted(FILES)
    assert path.joinpath("script.py").read_text() == SCRIPT
    assert files.finish("x", "2", None, [])
    assert path.joinpath("result.json").read_text() == "2"
    assert [p.name for p in path.parent.iterdir()] == ["call_1"]


def test_open_with_no_folder_ready_makes_it_and_finish_asks_for_the_next(maker: FolderMaker, parent: Path) -> None:
    path = parent / "call_1"
    files = SessionFiles(path, maker)
    files.open(SCRIPT)  # nothing asked for yet, so nothing ready
    assert names(path) == sorted(FILES)
    assert path.joinpath("script.py").read_text() == SCRIPT
    assert files.finish("out", "3", None, [])
    assert path.joinpath("result.json").read_text() == "3"
    ready(maker)
    assert len(pending(parent)) == 1


def test_an_existing_call_folder_is_written_over_and_the_folder_ahead_kept(
        maker: FolderMaker, parent: Path) -> None:
    path = parent / "call_again"
    path.mkdir(parents=True)
    old = {"script.py": "old script, longer than the new one\n" * 3, "stdout.txt": "old output\n" * 10,
           "result.json": "[1, 2, 3, 4, 5, 6, 7, 8, 9]", "calls.jsonl": '{"old": 1}\n{"old": 2}\n'}
    for name, text in old.items():
        path.joinpath(name).write_text(text)
    maker.make_next()
    fds = ready(maker)
    [ahead] = pending(parent)

    files = SessionFiles(path, maker)
    files.open(SCRIPT)
    assert ahead.exists() and names(ahead) == sorted(FILES)  # the rename failed; the folder is given back
    assert maker.held_fds() == fds
    assert pending(parent) == [ahead]

    assert files.finish("new\n", "7", None, ['{"new": 1}\n'])
    assert names(path) == sorted(FILES)
    assert path.joinpath("script.py").read_text() == SCRIPT
    assert path.joinpath("stdout.txt").read_text() == "new\n"
    assert path.joinpath("result.json").read_text() == "7"
    assert path.joinpath("calls.jsonl").read_text() == '{"new": 1}\n'
    assert all(ahead.joinpath(name).stat().st_size == 0 for name in FILES)  # untouched, for the next run


def test_a_success_in_a_folder_an_earlier_failure_left_keeps_only_its_own_outcome(tmp_path: Path) -> None:
    path = tmp_path / "call_again"
    failed = SessionFiles(path, None)
    failed.open("def run(ctx):\n    return 1 / 0\n")
    assert failed.finish("", None, "runtime error: line 2: ZeroDivisionError: division by zero", [])
    assert (path / "error.txt").exists() and not (path / "result.json").exists()
    again = SessionFiles(path, None)  # the same call id, run again, succeeds
    again.open("def run(ctx):\n    return 1\n")
    assert again.finish("", "1", None, [])
    assert names(path) == ["calls.jsonl", "result.json", "script.py", "stdout.txt"]
    assert (path / "result.json").read_text() == "1"


def test_folders_made_ahead_by_a_process_that_died_are_swept_old_ones_only(parent: Path) -> None:
    parent.mkdir(parents=True)
    old, young = parent / (PENDING_PREFIX + "0123456789ab"), parent / (PENDING_PREFIX + "ba9876543210")
    for folder in (old, young):
        folder.mkdir()
        (folder / "script.py").write_text("")
    long_ago = time.time() - 2 * 3600
    os.utime(old, (long_ago, long_ago))
    m = FolderMaker(parent)
    try:
        m.make_next()
        ready(m)
        assert not old.exists()  # a dead process's, an hour and more ago
        assert young.exists()  # may be another live process's, about to be renamed
        assert len(pending(parent)) == 2  # the young one and the one just made
    finally:
        m.close()
    assert pending(parent) == [young]


@pytest.mark.parametrize("with_maker", [False, True])
def test_a_folder_that_cannot_be_made_is_logged_and_finish_says_so(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, with_maker: bool) -> None:
    blocker = tmp_path / "a file"
    blocker.write_text("not a folder")
    parent = blocker / "plugins"
    maker = FolderMaker(parent) if with_maker else None
    try:
        files = SessionFiles(parent / "call_1", maker)
        with caplog.at_level(logging.ERROR, logger="nexus_tool_code_exec"):
            files.open(SCRIPT)
        assert any("could not persist" in r.getMessage() for r in caplog.records)
        assert not files.finish("out", "1", None, [])
    finally:
        if maker is not None:
            maker.close()
    assert blocker.read_text() == "not a folder"


# -- writing text ---------------------------------------------------------------------------


def test_text_utf8_cannot_encode_is_written_with_a_replacement(tmp_path: Path) -> None:
    write_text(tmp_path / "a.txt", "a\ud800b é")
    assert (tmp_path / "a.txt").read_bytes() == "a?b é".encode()

    fd = os.open(tmp_path / "b.txt", os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        write_fd(fd, "\udcff✓")
    finally:
        os.close(fd)
    assert (tmp_path / "b.txt").read_bytes() == "?✓".encode()

    files = SessionFiles(tmp_path / "call_1", None)
    files.open("# \ud800\n")
    assert files.finish("out \ud800\n", '"\ud800"', None, ["\ud800\n"])
    folder = tmp_path / "call_1"
    assert folder.joinpath("script.py").read_text() == "# ?\n"
    assert folder.joinpath("stdout.txt").read_text() == "out ?\n"
    assert folder.joinpath("result.json").read_text() == '"?"'
    assert folder.joinpath("calls.jsonl").read_text() == "?\n"


def test_write_text_replaces_what_was_there(tmp_path: Path) -> None:
    path = tmp_path / "a.txt"
    path.write_text("a much longer old text")
    write_text(path, "new")
    assert path.read_text() == "new"


# -- through a Nexus ------------------------------------------------------------------------


def held_pending_files(fds: set[int]) -> int:
    """How many of `fds` are files of a folder made ahead."""
    count = 0
    for fd in fds:
        try:
            count += f"/{PENDING_PREFIX}" in target(fd)
        except OSError:  # a spare child's pipe end, closed meanwhile
            pass
    return count


ECHO = ToolDef(name="echo", handler=lambda arguments: arguments["text"],
               input_schema={"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]})

CALLING = textwrap.dedent("""\
    import tools

    def run(ctx):
        print("hi")
        return [tools.echo(text="a").output, tools.echo(text="b").output]
    """)


def test_run_code_leaves_complete_folders_and_no_pending_one_after_close(
        nexus_factory: NexusFactory, tmp_path: Path) -> None:
    sessions = tmp_path / "sessions"
    nx = nexus_factory(plugins=[CE], tools=[ECHO], config={
        "session_dir": str(sessions), "plugins": {CE: {"timeout_seconds": 60}}})
    parent = sessions / "plugins" / CE

    assert_ok(nx.invoke(ToolCall(id="call_one", name="run_code", arguments={"script": CALLING})))
    one = parent / "call_one"
    assert names(one) == sorted(FILES)
    assert one.joinpath("script.py").read_text() == CALLING
    assert one.joinpath("stdout.txt").read_text() == "hi\n"
    assert json.loads(one.joinpath("result.json").read_text()) == ["a", "b"]
    calls = [json.loads(line) for line in one.joinpath("calls.jsonl").read_text().splitlines()]
    assert [c["arguments"] for c in calls] == [{"text": "a"}, {"text": "b"}]

    engine = engine_for(nx)
    assert engine is not None
    assert wait_until(lambda: held_pending_files(engine.held_fds()) == len(FILES))  # the next run's folder, made ahead
    [ahead] = pending(parent)
    assert names(ahead) == sorted(FILES)

    assert_ok(nx.invoke(ToolCall(id="call_two", name="run_code", arguments={"script": SCRIPT})))
    two = parent / "call_two"
    assert names(two) == sorted(FILES)
    assert two.joinpath("script.py").read_text() == SCRIPT
    assert two.joinpath("result.json").read_text() == "1"
    assert two.joinpath("calls.jsonl").read_text() == ""
    assert not ahead.exists()  # it became call_two's (no other run could take it)

    nx.close()
    assert pending(parent) == []
    assert sorted(p.name for p in parent.iterdir()) == ["call_one", "call_two"]
