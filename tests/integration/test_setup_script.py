"""scripts/setup on a machine it has not seen: it checks the Python before making .venv, rebuilds a
.venv an unsupported Python made, installs the dev tools only when asked, and does not run pip
again when nothing changed. Run on a copy of the script beside a one-module package, so the
installs are small."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

TINY_PYPROJECT = """\
[build-system]
requires = ["hatchling>=1.20"]
build-backend = "hatchling.build"

[project]
name = "nexus-rt-tiny"
version = "0.1.0"
requires-python = ">=3.11"

[tool.hatch.build.targets.wheel]
packages = ["src/nexus_tiny"]
"""

ROOT_PYPROJECT = """\
[build-system]
requires = ["hatchling>=1.20"]
build-backend = "hatchling.build"

[project]
name = "nexus-rt-dev"
version = "0"
requires-python = ">=3.11"

[project.optional-dependencies]
dev = []

[tool.hatch.build.targets.wheel]
bypass-selection = true
"""


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "scripts").mkdir(parents=True)
    shutil.copy2(REPO / "scripts" / "setup", root / "scripts" / "setup")
    (root / "pyproject.toml").write_text(ROOT_PYPROJECT, encoding="utf-8")
    package = root / "nexus_tiny"
    (package / "src" / "nexus_tiny").mkdir(parents=True)
    (package / "pyproject.toml").write_text(TINY_PYPROJECT, encoding="utf-8")
    (package / "src" / "nexus_tiny" / "__init__.py").write_text("VALUE = 42\n", encoding="utf-8")
    return root


def fake_python(folder: Path, name: str = "python") -> Path:
    """An executable that answers every version check with 'too old'."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text("#!/bin/sh\nexit 1\n", encoding="utf-8")
    path.chmod(0o755)
    return path


def setup(repo: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    # a Python 3.11+ on PATH, as a new machine has; no venv of the caller's leaks in
    path = f"{Path(sys.base_prefix) / 'bin'}{os.pathsep}/usr/bin{os.pathsep}/bin"
    environment = {"PATH": path, "HOME": os.environ.get("HOME", "/root"), **env}
    for key in ("PIP_FIND_LINKS", "PIP_CERT", "PIP_DEFAULT_TIMEOUT", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL"):
        if key in os.environ:
            environment[key] = os.environ[key]
    return subprocess.run(["bash", "scripts/setup", *args], cwd=repo, env=environment, capture_output=True,
                          text=True, timeout=600)


def test_an_unsupported_python_is_refused_before_any_venv_is_made(repo: Path) -> None:
    old = fake_python(repo / "old")
    proc = setup(repo, PYTHON=str(old))
    assert proc.returncode != 0
    assert f"PYTHON={old} is not Python 3.11 or newer" in proc.stderr
    assert not (repo / ".venv").exists()


@pytest.mark.slow
def test_a_venv_made_by_an_unsupported_python_is_rebuilt_and_a_second_run_does_nothing(repo: Path) -> None:
    fake_python(repo / ".venv" / "bin")  # what a venv of an old, or since removed, Python looks like
    first = setup(repo)
    assert first.returncode == 0, first.stderr
    assert "making it again" in first.stderr
    python = repo / ".venv" / "bin" / "python"
    check = subprocess.run([str(python), "-c", "import sys, nexus_tiny; print(sys.version_info >= (3, 11), "
                            "nexus_tiny.VALUE)"], capture_output=True, text=True, check=True)
    assert check.stdout == "True 42\n"
    # the demo's setup installs the packages only: the root (dev) project is not installed
    shown = subprocess.run([str(python), "-m", "pip", "show", "nexus-rt-dev"], capture_output=True, text=True)
    assert shown.returncode != 0

    log = repo / "pip.log"
    again = setup(repo, PIP_LOG=str(log))
    assert again.returncode == 0, again.stderr
    assert not log.exists(), "pip ran although nothing had changed"

    dev = setup(repo, "--dev", PIP_LOG=str(log))
    assert dev.returncode == 0, dev.stderr
    assert log.exists()  # --dev asks for more: pip runs once
    assert subprocess.run([str(python), "-m", "pip", "show", "nexus-rt-dev"], capture_output=True).returncode == 0
    log.unlink()
    assert setup(repo, "--dev", PIP_LOG=str(log)).returncode == 0 and not log.exists()
    assert setup(repo, PIP_LOG=str(log)).returncode == 0 and not log.exists()  # a dev install serves the demo
