"""Fixtures of the durable approval tests: a `Setup` per test (its config, its processes, closed
after it), and a throwaway Postgres cluster when its binaries are on this machine."""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from durable_helpers import WAIT, Setup


@pytest.fixture
def durable(tmp_path: Path) -> Iterator[Callable[..., Setup]]:
    made: list[Setup] = []

    def make(**settings: Any) -> Setup:
        setup = Setup(tmp_path / f"d{len(made)}", settings)
        made.append(setup)
        return setup

    yield make
    for setup in made:
        setup.close()


# -- Postgres ------------------------------------------------------------------------------------


def _pg_bin() -> Path | None:
    found = shutil.which("pg_ctl")
    if found:
        return Path(found).parent
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    return Path(candidates[-1]).parent if candidates else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A throwaway Postgres cluster on a unix socket (initdb, pg_ctl), its URL; skipped, saying
    why, where the binaries are not installed (Debian: apt-get install postgresql)."""
    bin_dir = _pg_bin()
    if bin_dir is None:
        pytest.skip("Postgres is not installed here (no pg_ctl on PATH or in /usr/lib/postgresql/*/bin)")
    run_as: list[str] = []
    if os.geteuid() == 0:  # initdb refuses to run as root
        if shutil.which("runuser") is None:
            pytest.skip("running as root and there is no runuser to start Postgres as another user")
        try:
            import pwd

            pwd.getpwnam("postgres")
        except KeyError:
            pytest.skip("running as root and there is no 'postgres' user to start Postgres as")
        run_as = ["runuser", "-u", "postgres", "--"]
    root = Path(tempfile.mkdtemp(prefix="nxpg", dir="/tmp"))  # short: a socket path is at most 107 bytes
    if run_as:
        shutil.chown(root, "postgres")
    data = root / "data"
    port = _free_port()
    subprocess.run([*run_as, str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust"],
                   check=True, capture_output=True, timeout=WAIT)
    subprocess.run([*run_as, str(bin_dir / "pg_ctl"), "-D", str(data), "-w", "-t", "120", "-l", str(root / "log"),
                    "-o", f"-k {root} -c listen_addresses='' -p {port}", "start"],
                   check=True, capture_output=True, timeout=WAIT + 30)
    try:
        yield f"postgresql://postgres@/postgres?host={root}&port={port}"
    finally:
        subprocess.run([*run_as, str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
                       capture_output=True, timeout=WAIT)
        shutil.rmtree(root, ignore_errors=True)
