"""Run records a script cannot touch through the file tools.

The default session folder lies outside the workspace (docs/configuration.md). A config can still
put it inside; then every file tool refuses every path in it, however it is named (plainly, with
`..`, absolutely, through a symlink, as a folder to list or search), and glob and grep leave it
out of their walks. A script that could reach it could rewrite its own `script.py` or
`calls.jsonl`, an earlier run's `result.json`, or pre-create the folder of a later run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from nexus_core import Nexus
from nexus_core.testing import NexusFactory, assert_error, assert_ok

pytestmark = pytest.mark.usefixtures("opener")  # every attempt against both ways of opening

RUN = ".nexus/sessions/plugins/nexus.tool.code_exec/call_0123456789abcdef01234567"


@pytest.fixture
def sessions(nexus_workspace: Path) -> Path:
    folder = nexus_workspace / ".nexus" / "sessions"
    run = nexus_workspace / RUN
    run.mkdir(parents=True)
    (run / "script.py").write_text("def run(ctx):\n    return 'recorded'\n")
    (run / "calls.jsonl").write_text('{"name": "write", "arguments": {"path": "x"}}\n')
    (run / "result.json").write_text('{"result": "recorded"}\n')
    (nexus_workspace / "notes.txt").write_text("recorded here too? no: an ordinary file\n")
    (nexus_workspace / "to_sessions").symlink_to(folder)  # a symlink inside that leads to the records
    (nexus_workspace / "to_script").symlink_to(run / "script.py")
    return folder


@pytest.fixture
def files(nexus_factory: NexusFactory, sessions: Path) -> Nexus:
    return nexus_factory(plugins=["nexus.tool.file"], config={"session_dir": str(sessions)})


def records(sessions: Path) -> dict[str, bytes]:
    return {str(p.relative_to(sessions)): p.read_bytes() for p in sorted(sessions.rglob("*")) if p.is_file()}


def names_of(sessions: Path) -> list[str]:
    return sorted(str(p.relative_to(sessions)) for p in sessions.rglob("*"))


def refused(files: Nexus, sessions: Path, tool: str, arguments: dict[str, Any]) -> None:
    before_bytes, before_names = records(sessions), names_of(sessions)
    result = assert_error(files.invoke(tool, arguments), kind="failure")
    assert "inside the session folder" in (result.error or ""), result.error
    assert "recorded" not in result.output
    assert records(sessions) == before_bytes and names_of(sessions) == before_names


def forms(nexus_workspace: Path, rel: str) -> list[str]:
    """Ways of naming `rel` (under the session folder) from the workspace."""
    return [rel, f"sub/../{rel}", str(nexus_workspace / rel), rel.replace(".nexus/sessions", "to_sessions", 1)]


@pytest.mark.parametrize("form", range(4))
def test_reading_a_record_is_refused(files: Nexus, sessions: Path, nexus_workspace: Path, form: int) -> None:
    path = forms(nexus_workspace, f"{RUN}/script.py")[form]
    refused(files, sessions, "read", {"path": path})
    refused(files, sessions, "grep", {"pattern": "recorded", "path": path})


def test_a_symlink_to_a_record_is_refused(files: Nexus, sessions: Path) -> None:
    refused(files, sessions, "read", {"path": "to_script"})
    refused(files, sessions, "write", {"path": "to_script", "content": "def run(ctx):\n    return 'forged'\n"})
    refused(files, sessions, "edit", {"path": "to_script", "old_string": "recorded", "new_string": "forged"})


@pytest.mark.parametrize("form", range(4))
def test_rewriting_a_record_is_refused(files: Nexus, sessions: Path, nexus_workspace: Path, form: int) -> None:
    script, result = forms(nexus_workspace, f"{RUN}/script.py")[form], forms(nexus_workspace, f"{RUN}/result.json")[form]
    refused(files, sessions, "write", {"path": script, "content": "def run(ctx):\n    return 'forged'\n"})
    refused(files, sessions, "edit", {"path": result, "old_string": "recorded", "new_string": "forged"})
    refused(files, sessions, "apply_patch", {"patch": f"*** Begin Patch\n*** Update File: {result}\n@@\n"
                                                      "-{\"result\": \"recorded\"}\n+{}\n*** End Patch"})
    refused(files, sessions, "apply_patch", {"patch": f"*** Begin Patch\n*** Delete File: {script}\n*** End Patch"})


def test_pre_creating_a_later_runs_folder_is_refused(files: Nexus, sessions: Path, nexus_workspace: Path) -> None:
    later = ".nexus/sessions/plugins/nexus.tool.code_exec/call_ffffffffffffffffffffffff"
    for path in forms(nexus_workspace, f"{later}/script.py"):
        refused(files, sessions, "write", {"path": path, "content": "blocker"})
        refused(files, sessions, "apply_patch", {"patch": f"*** Begin Patch\n*** Add File: {path}\n+x\n*** End Patch"})
    # nor a file where the folder would go, nor anything in the session folder itself
    refused(files, sessions, "write", {"path": later, "content": "blocker"})
    refused(files, sessions, "write", {"path": ".nexus/sessions/plugins", "content": "blocker"})


def test_moving_a_file_into_or_out_of_the_records_is_refused(files: Nexus, sessions: Path) -> None:
    into = ("*** Begin Patch\n*** Update File: notes.txt\n*** Move to: .nexus/sessions/x.txt\n@@\n"
            "-recorded here too? no: an ordinary file\n+moved\n*** End Patch")
    refused(files, sessions, "apply_patch", {"patch": into})
    out = (f"*** Begin Patch\n*** Update File: {RUN}/result.json\n*** Move to: stolen.json\n@@\n"
           "-{\"result\": \"recorded\"}\n+{}\n*** End Patch")
    refused(files, sessions, "apply_patch", {"patch": out})


@pytest.mark.parametrize("folder", [".nexus/sessions", ".nexus/sessions/plugins", "to_sessions"])
def test_listing_or_searching_the_records_is_refused(files: Nexus, sessions: Path, folder: str) -> None:
    refused(files, sessions, "list", {"path": folder})
    refused(files, sessions, "glob", {"pattern": "**/*", "path": folder})
    refused(files, sessions, "grep", {"pattern": "recorded", "path": folder})


def test_walks_from_the_root_leave_the_records_out(files: Nexus, sessions: Path) -> None:
    paths = assert_ok(files.invoke("glob", {"pattern": "**/*"})).output_structured["paths"]
    assert paths == ["notes.txt"]  # not the records, nor the symlinks that lead to them
    matches = assert_ok(files.invoke("grep", {"pattern": "recorded"})).output_structured["matches"]
    assert [m["path"] for m in matches] == ["notes.txt"]


def test_the_rest_of_the_workspace_works(files: Nexus, sessions: Path, nexus_workspace: Path) -> None:
    assert_ok(files.invoke("write", {"path": ".nexus/other.txt", "content": "fine\n"}))  # beside the records
    assert assert_ok(files.invoke("read", {"path": ".nexus/other.txt"})).output_structured["content"] == "fine\n"
    names = [e["name"] for e in assert_ok(files.invoke("list", {"path": ".nexus"})).output_structured["entries"]]
    assert names == ["other.txt", "sessions"]  # its name shows; what it holds does not


def test_by_default_the_records_are_not_in_the_workspace(nexus_workspace: Path) -> None:
    nx = Nexus.from_config({"workspace": str(nexus_workspace), "skills": [], "plugins": {"active": ["nexus.tool.file"]}})
    with nx:
        assert not nx.config.session_dir.resolve().is_relative_to(nexus_workspace.resolve())


def test_nexus_doctor_lists_the_protections(files: Nexus, sessions: Path, opener: str) -> None:
    lines = files.plugin("nexus.tool.file").nexus_doctor()
    way = "openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)" if opener == "openat2" else "O_NOFOLLOW"
    assert lines[0].startswith("opening paths: beneath the workspace,") and way in lines[0]
    assert lines[1].startswith("patterns: RE2 (google-re2 ") and "linear-time" in lines[1]
    assert lines[2] == f"session folder: {sessions} (inside the workspace: every path in it is refused)"
