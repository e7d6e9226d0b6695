"""Fixtures shared by the run_code tests.

- `no_leaks`, `secret` and `searchable_secret`, for the tests that drive the sandbox in forked children directly
  (test_sandbox_*.py use `no_leaks` on every test).
- `rng` and `unharmed`, for the attacks through the front door (test_attacks_*.py): the shooting
  range of attack_helpers.py, one per module, and after every test the check that the host came
  out of it unharmed.

Helpers that are not fixtures: proc_helpers.py (processes, fds, waiting for a condition) and
attack_helpers.py (the range, the payloads, the expected refusals).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from attack_helpers import Range, open_range

from nexus_tool_code_exec import engine_for, sandbox


@pytest.fixture
def no_leaks() -> Iterator[None]:
    """After the test: the same open fds as before, and no child left (reaped or running)."""
    before = sorted(os.listdir("/proc/self/fd"))
    yield
    assert sorted(os.listdir("/proc/self/fd")) == before
    with pytest.raises(ChildProcessError):
        os.waitpid(-1, os.WNOHANG)


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    """A file outside any scratch folder, for a sandboxed child to try to read."""
    path = tmp_path / "secret.txt"
    path.write_text("hunter2")
    path.chmod(0o600)
    return path


@pytest.fixture
def searchable_secret() -> Iterator[Path]:
    """A 0600 root file in a folder every user may search (not below pytest's 0700 folder): what
    an unprivileged uid can still stat, but not read."""
    folder = Path(tempfile.mkdtemp(prefix="nexus-secret-", dir="/tmp"))
    folder.chmod(0o755)
    path = folder / "secret.txt"
    path.write_text("hunter2")
    path.chmod(0o600)
    yield path
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def rng(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Range]:
    """The module's attack range. Skips the module where a layer is missing: the attacks assert
    what each layer refuses (test_sandbox_layers.py covers the partial cases)."""
    with open_range(tmp_path_factory.mktemp("range")) as rng:
        engine = engine_for(rng.nx)
        assert engine is not None
        missing = set(sandbox.LAYERS) - set(engine.active_layers())
        if missing:
            pytest.skip(f"sandbox layers unavailable here: {sorted(missing)}")
        yield rng


@pytest.fixture
def unharmed(rng: Range) -> Iterator[None]:
    """The host unharmed after the test: see `Range.check_unharmed`."""
    before = rng.snapshot()
    yield
    rng.nap.reset()
    rng.check_unharmed(before)
