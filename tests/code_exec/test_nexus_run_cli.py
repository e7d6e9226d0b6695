"""`nexus run SCRIPT.py` and `nexus doctor`, as real subprocesses of the `nexus` command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

LAYERS = ("rlimits", "net", "fs", "seccomp")


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("NEXUS_")}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "ws").mkdir()
    for name in ("a.txt", "b.txt"):
        (tmp_path / "ws" / name).write_text("one\ntwo\n", encoding="utf-8")
    (tmp_path / "nexus.yaml").write_text(
        "workspace: ws\nsession_dir: sessions\nskills: []\n"
        "plugins:\n  active: [nexus.tool.code_exec, nexus.tool.file]\n"
        "  nexus.tool.code_exec:\n    timeout_seconds: 10\n",
        encoding="utf-8",
    )
    return tmp_path


def _nexus(project: Path, *args: str) -> subprocess.Popen[str]:
    """`nexus ARGS` in the project, its nexus.yaml trusted as the person who wrote it would."""
    return subprocess.Popen([sys.executable, "-m", "nexus_core.cli", "--trust-config", *args], cwd=project, env=_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_nexus_run_streams_output_live_and_prints_the_result_json_last(project: Path) -> None:
    """The script prints its first line, then waits for the test to create go.flag, which the
    test does only once it has read that line: so it arrives while the script still runs (if
    it came only at the end, the script would wait for go.flag until its timeout)."""
    (project / "script.py").write_text(
        "import tools, time\n"
        "def run(ctx):\n"
        "    print('first', flush=True)\n"
        "    while not tools.glob(pattern='go.flag').paths:\n"
        "        time.sleep(0.02)\n"
        "    print('second')\n"
        "    return {'files': sorted(tools.glob(pattern='*.txt').paths)}\n",
        encoding="utf-8",
    )
    proc = _nexus(project, "run", "script.py")
    assert proc.stdout is not None
    first = proc.stdout.readline()
    (project / "ws" / "go.flag").write_text("", encoding="utf-8")
    rest, err = proc.communicate(timeout=60)
    assert first == "first\n"
    assert proc.returncode == 0, err
    lines = rest.splitlines()
    assert lines[0] == "second"
    assert json.loads("\n".join(lines[1:])) == {"files": ["a.txt", "b.txt"]}


def test_nexus_run_of_a_failing_script_exits_1_with_the_scripts_line(project: Path) -> None:
    (project / "bad.py").write_text("def run(ctx):\n    print('before')\n    return {}['missing']\n",
                                    encoding="utf-8")
    proc = _nexus(project, "run", "bad.py")
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1
    assert out == "before\n"
    assert "error: runtime error: line 3: KeyError" in err


def test_nexus_run_of_a_rejected_script_exits_1_and_of_a_missing_file_exits_2(project: Path) -> None:
    (project / "os.py").write_text("import os\ndef run(ctx):\n    return 1\n", encoding="utf-8")
    proc = _nexus(project, "run", "os.py")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1
    assert "script rejected: line 1: import of 'os' is not allowed" in err
    proc = _nexus(project, "run", "nope.py")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert "cannot read nope.py" in err


def test_nexus_doctor_shows_every_sandbox_layer_active_here_and_what_a_run_costs(project: Path) -> None:
    proc = _nexus(project, "doctor")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, out + err
    assert "nexus.tool.code_exec:" in out
    for layer in LAYERS:
        assert f"layer {layer:<8} active:" in out, out
    assert "launcher: warm zygote" in out
    assert "a trivial run costs" in out
    # issue 11's protections: no capability left, the new refusals, the host's budget, the records
    assert "layer uid      active: uid/gid 2000000000+pid, no groups, no capabilities;" in out or os.geteuid() != 0, out
    assert "inotify/fanotify and mount listings refused (EPERM), xattrs unsupported (EOPNOTSUPP)" in out, out
    assert "host budget per run: " in out and "MiB of pending call messages" in out, out
    assert "skill helpers: regular files of the skill's folder only (no symlinks)" in out, out
    assert "folders 0700 and files 0600; calls.jsonl keeps every call's size and SHA-256" in out, out


def test_nexus_doctor_exits_1_when_a_required_layer_is_missing(project: Path) -> None:
    config = project / "nexus.yaml"
    config.write_text(config.read_text() + "    require: [seccomp]\n", encoding="utf-8")
    env = _env() | {"NEXUS_SANDBOX_DISABLE": "seccomp"}
    proc = subprocess.run([sys.executable, "-m", "nexus_core.cli", "--trust-config", "doctor"], cwd=project, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stdout
    assert "error: required layer seccomp" in proc.stdout


def test_nexus_run_timeout_overrides_the_configs(project: Path) -> None:
    (project / "slow.py").write_text("import time\ndef run(ctx):\n    time.sleep(30)\n", encoding="utf-8")
    proc = _nexus(project, "run", "slow.py", "--timeout", "0.5")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1
    assert "error: script timed out after 0.5s" in err  # the config says 10
    proc = _nexus(project, "run", "slow.py", "--timeout", "0")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and "--timeout" in err


def test_nexus_run_into_a_closed_pipe_ends_quietly(project: Path) -> None:
    (project / "chatty.py").write_text("def run(ctx):\n    for i in range(20000):\n        print(i)\n"
                                       "    return 'done'\n", encoding="utf-8")
    proc = _nexus(project, "run", "chatty.py")
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=60) == 1
    assert "Traceback" not in err and "BrokenPipe" not in err and "error" not in err, err


def test_nexus_plugins_shows_run_code_as_one_plugin(project: Path) -> None:
    proc = _nexus(project, "plugins")
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "nexus.tool.code_exec  [active]  nexus-rt-tool-code-exec" in out
    assert "    tools: run_code\n" in out
    assert ".engine" not in out and "(registered by the host)" not in out


def test_run_codes_description_follows_tools_added_and_removed(tmp_path: Path) -> None:
    from nexus_core import Nexus, native_tool

    config = {"workspace": str(tmp_path), "skills": [], "plugins": {"active": ["nexus.tool.code_exec"]}}
    with Nexus(config) as nx:
        nx.add_tool(native_tool("zebra_count", "Count zebras.", {"type": "object"}, lambda a: "3"))
        assert "zebra_count" in nx.tool("run_code").description
        nx.remove_tool("zebra_count")
        assert "zebra_count" not in nx.tool("run_code").description
