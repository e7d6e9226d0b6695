"""`nexus doctor` and the `nexus_doctor` hook: each plugin's lines under its name, `error:` lines
making the command exit 1, a raising hookimpl reported without silencing the others."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from conftest import FakePlugins, RunNexus

HEALTHY = """
    from nexus_core import hookimpl

    @hookimpl
    def nexus_doctor(nexus):
        return ["widget: ready", f"workspace seen: {nexus.config.workspace.name}"]
"""

BROKEN = """
    from nexus_core import hookimpl

    @hookimpl
    def nexus_doctor(nexus):
        return ["error: the widget socket is missing"]
"""

RAISING = """
    from nexus_core import hookimpl

    @hookimpl
    def nexus_doctor(nexus):
        raise OSError("probe crashed")
"""


def _run(run_nexus: RunNexus, fake_plugins: FakePlugins, tmp_path: Path, *ids: str):  # type: ignore[no-untyped-def]
    (tmp_path / "ws").mkdir(exist_ok=True)
    (tmp_path / "nexus.yaml").write_text(f"plugins:\n  active: [{', '.join(ids)}]\n", encoding="utf-8")
    return run_nexus("--workspace", str(tmp_path / "ws"), "doctor", env=fake_plugins.env(), cwd=tmp_path)


def test_nexus_doctor_prints_each_plugins_lines_under_its_name(run_nexus: RunNexus, fake_plugins: FakePlugins,
                                                               tmp_path: Path) -> None:
    fake_plugins.add("fake.healthy", HEALTHY)
    proc = _run(run_nexus, fake_plugins, tmp_path, "fake.healthy")
    assert proc.returncode == 0, proc.stderr
    assert "fake.healthy:\n  widget: ready\n  workspace seen: ws" in proc.stdout
    assert "Python 3." in proc.stdout


def test_nexus_doctor_error_line_exits_1_and_a_raising_plugin_does_not_hide_the_others(
        run_nexus: RunNexus, fake_plugins: FakePlugins, tmp_path: Path) -> None:
    fake_plugins.add("fake.broken", BROKEN)
    fake_plugins.add("fake.raising", RAISING)
    fake_plugins.add("fake.healthy", HEALTHY)
    proc = _run(run_nexus, fake_plugins, tmp_path, "fake.broken", "fake.raising", "fake.healthy")
    assert proc.returncode == 1
    assert "fake.broken:\n  error: the widget socket is missing" in proc.stdout
    assert "fake.raising:\n  error: its nexus_doctor raised OSError: probe crashed" in proc.stdout
    assert "widget: ready" in proc.stdout


def test_nexus_doctor_reports_a_plugin_that_failed_to_load(run_nexus: RunNexus, fake_plugins: FakePlugins,
                                                           tmp_path: Path) -> None:
    fake_plugins.add("fake.noimport", "raise ImportError('no widget library')\n")
    fake_plugins.add("fake.healthy", HEALTHY)
    proc = _run(run_nexus, fake_plugins, tmp_path, "fake.noimport", "fake.healthy")
    assert proc.returncode == 1
    assert "error: plugin fake.noimport failed (import): ImportError: no widget library" in proc.stdout
    assert "widget: ready" in proc.stdout
