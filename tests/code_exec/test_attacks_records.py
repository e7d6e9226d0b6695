"""Issue 11's attack suite, part 3: run records a script cannot touch or blind.

- The session folders run_code makes (and the folders above them it makes) are 0700, their files
  0600, under the default session_dir outside the workspace.
- A record that cannot be written (a read-only or full file system, a symlink where a folder
  should be) is an error of the run, in its result and in the log: never skipped in silence.
- calls.jsonl keeps every call's name, id, sizes and the SHA-256 of its arguments even after a
  few huge calls have spent the run's record budget: a write's path still shows, and the hash
  of what it wrote.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import logging
import os
import stat
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from host_watch import HostWatch
from nexus_core.testing import NexusFactory
from nexus_tool_code_exec.host.streaming import CUT_CHARS, RECORD_BUDGET

from nexus_core import Nexus

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox is Linux-only")

CE = "nexus.tool.code_exec"
LIBC = ctypes.CDLL(None, use_errno=True)
LIBC.mount.argtypes = [ctypes.c_char_p] * 3 + [ctypes.c_ulong, ctypes.c_char_p]


def records_of(nx: Nexus, call_id: str) -> Path:
    return Path(nx.config.session_dir) / "plugins" / CE / call_id


def calls_of(folder: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (folder / "calls.jsonl").read_text().splitlines()]


# -- who may read the records --------------------------------------------------------------------


def test_the_default_session_folders_and_files_are_the_users_alone(nexus_factory: NexusFactory,
                                                                    nexus_workspace: Path) -> None:
    nx = nexus_factory(plugins=[CE, "nexus.tool.file"])
    # the default: outside the workspace, below XDG_STATE_HOME (a temporary folder in the tests)
    nx.config.session_dir = None
    top = Path(nx.config.session_dir)
    assert nexus_workspace not in top.parents
    assert not top.exists()
    result = nx.invoke("run_code", {"script": "def run(ctx):\n    return 1\n"})
    assert result.output_structured == {"result": 1}, result.error
    run = records_of(nx, result.id)
    made = [run, run.parent, run.parent.parent, top]  # <call id>, the plugin's, plugins/, session_dir
    for folder in made:
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder
    for file in run.iterdir():
        assert stat.S_IMODE(file.stat().st_mode) == 0o600, file
    # the folder made ahead for the next run too
    pending = [p for p in run.parent.iterdir() if p.name.startswith(".pending-")]
    for folder in pending:
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700


# -- a record that cannot be written ---------------------------------------------------------------


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Any]:
    """mount(size, read_only) -> a fresh tmpfs folder, unmounted after the test (root only)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a file system for the test needs root")
    mounted: list[Path] = []

    def mount(size: str, read_only: bool = False) -> Path:
        where = tmp_path / f"fs{len(mounted)}"
        where.mkdir()
        flags = 1 if read_only else 0  # MS_RDONLY
        if LIBC.mount(b"tmpfs", os.fsencode(where), b"tmpfs", flags, f"size={size}".encode()) != 0:
            pytest.skip(f"cannot mount a tmpfs here: {os.strerror(ctypes.get_errno())}")
        mounted.append(where)
        return where

    yield mount
    for where in mounted:
        LIBC.umount2(os.fsencode(where), 2)  # MNT_DETACH


def run_with_sessions(nexus_factory: NexusFactory, sessions: Path, script: str,
                      caplog: pytest.LogCaptureFixture) -> Any:
    nx = nexus_factory(plugins=[CE], config={"session_dir": str(sessions)})
    with caplog.at_level(logging.ERROR, logger="nexus_tool_code_exec"), HostWatch() as watch:
        result = nx.invoke("run_code", {"script": script})
    watch.assert_host_fine()
    return result


def test_a_read_only_session_dir_is_an_error_of_the_run(nexus_factory: NexusFactory, tmpfs: Any,
                                                         caplog: pytest.LogCaptureFixture) -> None:
    sessions = tmpfs("1m", read_only=True)
    result = run_with_sessions(nexus_factory, sessions / "s", "def run(ctx):\n    return 42\n", caplog)
    assert result.error is not None and result.error.startswith("record failed: could not write the record"), result
    assert "Read-only file system" in result.error
    assert result.output_structured == {"result": 42}  # the run's own result is still there
    assert any("could not write the record" in r.getMessage() for r in caplog.records)


def test_a_full_session_dir_is_an_error_of_the_run(nexus_factory: NexusFactory, tmpfs: Any,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    sessions = tmpfs("32k")
    script = "def run(ctx):\n    print('x' * 60000)\n    return 'printed'\n"
    result = run_with_sessions(nexus_factory, sessions, script, caplog)
    assert result.error is not None and result.error.startswith("record failed:"), result
    assert "No space left on device" in result.error
    assert result.output_structured["result"] == "printed"
    assert any("No space left on device" in r.getMessage() for r in caplog.records)


def test_a_failed_run_whose_record_fails_says_both(nexus_factory: NexusFactory, tmpfs: Any,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    sessions = tmpfs("1m", read_only=True)
    result = run_with_sessions(nexus_factory, sessions, "def run(ctx):\n    return 1 / 0\n", caplog)
    assert result.error is not None
    first, second = result.error.split("\n", 1)
    assert first == "runtime error: line 2: ZeroDivisionError: division by zero"
    assert second.startswith("(and record failed: could not write the record")


def test_a_symlink_where_a_run_folder_goes_is_not_followed(nexus_factory: NexusFactory, tmp_path: Path,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    """Someone pre-made the folder of a coming call id as a symlink to elsewhere: the record is
    not written through it (and the run says so)."""
    sessions = tmp_path / "sessions"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    nx = nexus_factory(plugins=[CE], config={"session_dir": str(sessions)})
    folder = records_of(nx, "call_predicted")
    folder.parent.mkdir(parents=True)
    folder.symlink_to(elsewhere)
    with caplog.at_level(logging.ERROR, logger="nexus_tool_code_exec"):
        from nexus_core import ToolCall

        result = nx.invoke(ToolCall(id="call_predicted", name="run_code",
                                    arguments={"script": "def run(ctx):\n    return 1\n"}))
    assert list(elsewhere.iterdir()) == []
    assert result.error is not None and result.error.startswith("record failed:"), result


# -- the ledger cannot be blinded --------------------------------------------------------------


def test_huge_calls_cannot_blind_the_ledger_to_a_later_write(nexus_factory: NexusFactory,
                                                             nexus_workspace: Path) -> None:
    """Three writes of 7 MiB spend most of the run's 16 MiB record budget; a later write too big
    for what is left is cut, but its path shows, with the SHA-256 of exactly what it wrote; a
    small one after it still fits and is kept whole."""
    nx = nexus_factory(plugins=[CE, "nexus.tool.file"])
    payload = "the payload that was written " * (100 << 10)  # ~3 MiB: more than the budget has left
    huge = 7 << 20
    script = f"""\
import tools

def run(ctx):
    big = "b" * {huge}
    for _ in range(3):
        tools.write(path="big.txt", content=big)
    tools.write(path="notes/evil.txt", content="the payload that was written " * (100 << 10))
    tools.write(path="notes/small.txt", content="small")
    return "done"
"""
    with HostWatch() as watch:
        result = nx.invoke("run_code", {"script": script})
    watch.assert_host_fine(memory_mib=256)
    assert result.output_structured == {"result": "done"}, result.error
    lines = calls_of(records_of(nx, result.id))
    assert [line["name"] for line in lines] == ["write"] * 5
    assert 3 * huge > RECORD_BUDGET - len(payload)
    for line in lines:
        assert line["id"].startswith("call_") and line["arguments_bytes"] > 0 and line["output_chars"] >= 0
        if not line.get("cut"):  # kept whole: the hash is of what the line shows
            assert hashlib.sha256(canonical(line["arguments"])).hexdigest() == line["arguments_sha256"]
    evil, small = lines[-2], lines[-1]
    assert evil.get("cut") is True  # the budget is spent for it: its content is cut, but
    assert evil["arguments"]["path"] == "notes/evil.txt"  # its path shows,
    full = {"content": payload, "path": "notes/evil.txt"}
    assert evil["arguments_sha256"] == hashlib.sha256(canonical(full)).hexdigest()  # and what it wrote,
    assert evil["arguments_bytes"] == len(canonical(full))  # and how much
    assert evil["arguments"]["content"] == payload[:CUT_CHARS] + f"... ({len(payload)} characters)"
    assert (nexus_workspace / "notes" / "evil.txt").read_text() == payload
    assert small.get("cut") is None and small["arguments"] == {"path": "notes/small.txt", "content": "small"}


def canonical(arguments: dict[str, Any]) -> bytes:
    """The arguments as the ledger hashes them (docs/run-code.md): compact JSON, keys sorted, UTF-8."""
    return json.dumps(arguments, ensure_ascii=False, sort_keys=True, separators=(",", ":")).encode()
