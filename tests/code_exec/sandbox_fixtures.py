"""Fixtures of the tests that drive sandbox.enter() in forked children directly: no fd or child
left behind by a test, and a secret file outside the scratch folder to try to read. Imported by
those test modules (an imported autouse fixture is active in the module that imports it)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def no_leaks() -> Iterator[None]:
    """After each test: the same open fds as before, and no child left (reaped or running)."""
    before = sorted(os.listdir("/proc/self/fd"))
    yield
    assert sorted(os.listdir("/proc/self/fd")) == before
    with pytest.raises(ChildProcessError):
        os.waitpid(-1, os.WNOHANG)


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    path = tmp_path / "secret.txt"
    path.write_text("hunter2")
    path.chmod(0o600)
    return path
