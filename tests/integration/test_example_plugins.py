"""The example plugins in examples/, installed from wheels into a fresh venv as a user would, and
driven through that venv's real `nexus` console script.

One venv for the whole story (venv builds are the slow part): the tool plugin alone first, then
the gate plugin added beside it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
UNITS = REPO / "examples" / "nexus-rt-example-units"
GATE = REPO / "examples" / "nexus-rt-example-gate"


@pytest.mark.slow
def test_example_tool_and_gate_plugins_through_the_cli(fresh_venv, wheelhouse, tmp_path: Path) -> None:
    venv = fresh_venv("nexus-rt-core", UNITS)

    # The tool plugin alone: listed, callable, its argument errors and unknown tools explained.
    tools = venv.run("nexus", "tools", cwd=tmp_path)
    assert tools.returncode == 0, tools.stderr
    assert any(line.split()[:2] == ["convert", "nexus.example.units"] for line in tools.stdout.splitlines()), tools.stdout

    ok = venv.run("nexus", "call", "convert", '{"value": 3, "from_unit": "mi", "to_unit": "km"}', cwd=tmp_path)
    assert (ok.returncode, ok.stdout, ok.stderr) == (0, "3 mi = 4.82803 km\n", "")

    bad = venv.run("nexus", "call", "convert", '{"value": "ten", "from_unit": "mi", "to_unit": "km"}', cwd=tmp_path)
    assert bad.returncode == 1
    assert "invalid arguments for convert: value: expected number, got 'ten'" in bad.stderr
    assert bad.stdout == ""

    unit = venv.run("nexus", "call", "convert", '{"value": 1, "from_unit": "mi", "to_unit": "parsec"}', cwd=tmp_path)
    assert unit.returncode == 1
    assert "to_unit: expected one of" in unit.stderr and "got 'parsec'" in unit.stderr

    mixed = venv.run("nexus", "call", "convert", '{"value": 1, "from_unit": "kg", "to_unit": "km"}', cwd=tmp_path)
    assert mixed.returncode == 1
    assert "cannot convert kg to km" in mixed.stderr

    unknown = venv.run("nexus", "call", "no_such_tool", "{}", cwd=tmp_path)
    assert unknown.returncode == 1
    assert "unknown tool: 'no_such_tool'" in unknown.stderr

    # Add the gate. With no config it denies nothing; its config section sets the policy.
    venv.install(wheelhouse(GATE))
    plugins = venv.run("nexus", "plugins", cwd=tmp_path)
    assert "nexus.example.gate  [active]  nexus-rt-example-gate 0.1.0" in plugins.stdout, plugins.stdout
    assert venv.run("nexus", "call", "convert", '{"value": 3, "from_unit": "mi", "to_unit": "km"}',
                    cwd=tmp_path).returncode == 0

    policy = tmp_path / "metric.yaml"
    policy.write_text("plugins:\n  nexus.example.gate:\n    deny:\n      convert: {to_unit: [mi, yd]}\n")
    assert venv.run("nexus", "trust", str(policy), cwd=tmp_path).returncode == 0  # as the guide says
    vetoed = venv.run("nexus", "--config", str(policy), "call", "convert",
                      '{"value": 5, "from_unit": "km", "to_unit": "mi"}', cwd=tmp_path)
    assert vetoed.returncode == 1
    assert "vetoed: to_unit='mi' is denied for convert by nexus.example.gate" in vetoed.stderr
    allowed = venv.run("nexus", "--config", str(policy), "call", "convert",
                       '{"value": 5, "from_unit": "mi", "to_unit": "km"}', cwd=tmp_path)
    assert (allowed.returncode, allowed.stdout) == (0, "5 mi = 8.04672 km\n")

    # A misspelt key in the gate's section: exit 2, naming the key, its file and line.
    typo = tmp_path / "typo.yaml"
    typo.write_text("plugins:\n  nexus.example.gate:\n    denny: {}\n")
    wrong = venv.run("nexus", "--trust-config", "--config", str(typo), "call", "convert", "{}", cwd=tmp_path)
    assert wrong.returncode == 2
    assert f"{typo}:3: plugins.nexus.example.gate.denny: unknown key" in wrong.stderr
    assert wrong.stdout == ""

    # ... and in the core part of the config.
    core_typo = tmp_path / "core.yaml"
    core_typo.write_text("workspace: .\nworkspaces: [.]\n")
    wrong = venv.run("nexus", "--config", str(core_typo), "tools", cwd=tmp_path)
    assert wrong.returncode == 2
    assert f"{core_typo}:2: workspaces: unknown key" in wrong.stderr


@pytest.mark.parametrize(("example", "tests"), [(UNITS, 3), (GATE, 3)], ids=["units", "gate"])
def test_the_example_plugins_own_tests_pass_on_the_shipped_fixtures(example: Path, tests: int, tmp_path: Path) -> None:
    """A plugin author's tests are a few lines on nexus-rt-core's pytest11 fixtures: run them as the
    author would, in a pytest of their own."""
    env = {**os.environ, "PYTHONPATH": str(example / "src")}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(example),
         str(example / "tests")],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"{tests} passed" in proc.stdout


def test_the_demo_runs_on_the_installed_defaults() -> None:
    """`./scripts/demo` is what a newcomer runs first. With the repo's four packages installed (as
    scripts/setup does) every step must do real work: the gate refuses, the audit observer reports,
    errors explain themselves, and run_code's inner calls go through the host's gate."""
    proc = subprocess.run([sys.executable, str(REPO / "examples" / "demo.py")],
                          capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "skipped" not in out, out
    assert "| hello from Linux" in out
    assert "|      1\tbuy milk" in out
    assert "| vetoed: deleting files is not allowed in this demo" in out
    assert "| invalid arguments for read: file: unknown key; path: required, but missing" in out
    assert "[audit] fly: error (unknown_tool)" in out and "| unknown tool: 'fly'" in out
    assert "[audit] shell (inside call_" in out  # run_code's inner call, seen by the host's plugins
    assert "the host's gate said no: shell: vetoed" in out
    assert '--- result ---\n   | {"total_words": 9}' in out
