"""Issue 24, item 6: `nexus replay CALL_ID` (and `replay()` from Python) re-runs a recorded run_code
call with every inner call answered from its record (no tool runs: the files the run wrote are not
written again), and says whether it produced the same result and the same calls; a changed script
(`--script`) that makes another call, or returns another result, is reported as different.

The run is recorded by `nexus run` and replayed by `nexus replay`, each a real `nexus` process, with
the file tools of nexus.tool.file doing real writes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SCRIPT = textwrap.dedent("""\
    import tools, parallel

    def run(ctx):
        tools.write(path="a.txt", content="alpha")
        sizes = parallel.map(["b.txt", "c.txt"], lambda p: tools.write(path=p, content=p * 2))
        text = tools.read(path="a.txt").content
        print("read", len(text), "characters")
        return {"text": text, "written": len(sizes)}
    """)


def _nexus(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEXUS_")}
    return subprocess.run([sys.executable, "-m", "nexus_core.cli", "--trust-config", *args], cwd=project, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture
def recorded(tmp_path: Path) -> tuple[Path, str]:
    """A project whose run of SCRIPT was recorded by `nexus run`; its call id. The files the run
    wrote are removed afterwards, so a replay that ran a tool would show."""
    (tmp_path / "ws").mkdir()
    (tmp_path / "nexus.yaml").write_text(
        "workspace: ws\nsession_dir: sessions\nskills: []\n"
        "plugins:\n  active: [nexus.tool.code_exec, nexus.tool.file]\n"
        "  nexus.tool.code_exec:\n    timeout_seconds: 60\n    max_workers: 2\n", encoding="utf-8")
    (tmp_path / "script.py").write_text(SCRIPT)
    ran = _nexus(tmp_path, "run", "script.py")
    assert ran.returncode == 0, ran.stderr
    listed = _nexus(tmp_path, "runs", "--json")
    [run] = json.loads(listed.stdout)
    for name in ("a.txt", "b.txt", "c.txt"):
        (tmp_path / "ws" / name).unlink()
    return tmp_path, run["id"]


def test_a_replay_of_a_recorded_run_gives_the_same_result_and_calls_and_runs_no_tool(
        recorded: tuple[Path, str]) -> None:
    project, call_id = recorded
    replayed = _nexus(project, "replay", call_id)
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert replayed.stdout.startswith(f"replay of run_code {call_id}: the same result and the same calls "
                                      "(4 of 4 recorded calls answered from the record, no tool run)"), replayed.stdout
    assert not any((project / "ws" / name).exists() for name in ("a.txt", "b.txt", "c.txt"))  # nothing written

    report = json.loads(_nexus(project, "replay", call_id[:12], "--json").stdout)  # the start of the id will do
    assert report["same"] is True and report["result"] == {"text": "alpha", "written": 2}
    assert report["stdout"] == "read 5 characters\n"


def test_a_changed_script_that_makes_another_call_is_reported_with_both_calls(recorded: tuple[Path, str]) -> None:
    project, call_id = recorded
    (project / "changed.py").write_text(SCRIPT.replace('content="alpha"', 'content="beta"'))
    replayed = _nexus(project, "replay", call_id, "--script", "changed.py")
    assert replayed.returncode == 1, replayed.stderr
    assert "a different result and different calls" in replayed.stdout, replayed.stdout
    assert ('the script\'s call 1 is write({"content":"beta","path":"a.txt"}), but the record holds '
            'write({"content":"alpha","path":"a.txt"}) there') in replayed.stdout, replayed.stdout
    assert not (project / "ws" / "a.txt").exists()  # the changed call did not run either


def test_a_changed_script_with_the_same_calls_and_another_result_is_reported(recorded: tuple[Path, str]) -> None:
    project, call_id = recorded
    (project / "changed.py").write_text(SCRIPT.replace('"written": len(sizes)', '"written": len(sizes) + 1'))
    report = json.loads(_nexus(project, "replay", call_id, "--script", "changed.py", "--json").stdout)
    assert report["same_calls"] is True and report["same_result"] is False
    assert report["differences"] == ['the result differs: recorded {"text": "alpha", "written": 2}, '
                                     'replayed {"text": "alpha", "written": 3}']


def test_replay_from_python_and_of_an_unknown_call(recorded: tuple[Path, str]) -> None:
    from nexus_core import Nexus
    from nexus_tool_code_exec import ReplayError, replay

    project, call_id = recorded
    config = {"workspace": str(project / "ws"), "session_dir": str(project / "sessions"), "skills": [],
              "plugins": {"active": ["nexus.tool.code_exec", "nexus.tool.file"]}}
    with Nexus.from_config(config) as nx:
        report = replay(nx, call_id)
        assert report.same and report.replayed == 4
        # a script that stops short of the recorded calls: the result is the same, the calls are not
        fewer = replay(nx, call_id, script=SCRIPT.replace('tools.read(path="a.txt").content', '"alpha"'))
        assert fewer.same_result and not fewer.same_calls
        assert fewer.differences[0].startswith("the script ended after 2 calls, but the record holds 1 more "
                                               '(the next: read({"path":"a.txt"}))'), fewer.differences
        with pytest.raises(ReplayError, match="no recorded run_code call 'call_nope'"):
            replay(nx, "call_nope")
    missing = _nexus(project, "replay", "call_nope")
    assert missing.returncode == 2 and "no recorded run_code call 'call_nope'" in missing.stderr
