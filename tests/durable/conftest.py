"""Fixtures of the durable tests: a config with nexus.durable on, host processes (`host.py`), the
`nexus` command line, and a throwaway Postgres cluster when its binaries are on this machine."""

from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

HERE = Path(__file__).resolve().parent
HOST = HERE / "host.py"
NEXUS_CLI = Path(sys.executable).parent / "nexus"
#: generous: the machine running the tests is often busy (every wait is for an event, not a time)
WAIT = 120.0


def wait_for(what: str, check: Callable[[], Any], timeout: float = WAIT) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what} after {timeout:g} s")
        time.sleep(0.1)


class Setup:
    """One test's durable world: its config file, its output file, and the processes it started."""

    def __init__(self, root: Path, settings: dict[str, Any]) -> None:
        self.root = root
        (root / "ws").mkdir(parents=True)
        self.out = root / "ws" / "out.txt"
        self.config = root / "nexus.yaml"
        self.config.write_text(yaml.safe_dump({
            "workspace": str(root / "ws"), "session_dir": str(root / "session"), "skills": [],
            "plugins": {"active": ["nexus.durable"], "nexus.durable": {"enabled": True, **settings}},
        }), encoding="utf-8")
        self.procs: list[subprocess.Popen[str]] = []

    def host(self, mode: str, *texts: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
        proc = subprocess.Popen([sys.executable, str(HOST), str(self.config), mode, *texts],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env={**os.environ, "NEXUS_TEST_OUT": str(self.out), **(env or {})})
        self.procs.append(proc)
        if mode == "serve":
            assert proc.stdout is not None
            line = proc.stdout.readline()
            assert line.strip() == "ready", f"the host did not start: {line!r} {proc.stderr.read() if proc.stderr else ''}"
        return proc

    def nexus(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([str(NEXUS_CLI), "--config", str(self.config), "--trust-config", *args],
                              capture_output=True, text=True, timeout=WAIT)
        if check:
            assert proc.returncode == 0, f"nexus {' '.join(args)} exited {proc.returncode}: {proc.stderr}"
        return proc

    def pending(self) -> list[dict[str, Any]]:
        listed: list[dict[str, Any]] = json.loads(self.nexus("approvals", "--json").stdout)
        return listed

    def wait_pending(self, count: int = 1) -> list[dict[str, Any]]:
        def listed() -> list[dict[str, Any]] | None:
            pending = self.pending()
            return pending if len(pending) == count else None

        found: list[dict[str, Any]] = wait_for(f"{count} pending approval(s)", listed)
        return found

    def lines(self) -> list[str]:
        return self.out.read_text(encoding="utf-8").splitlines() if self.out.exists() else []

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=WAIT)
            for stream in (proc.stdin, proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()


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


def kill9(proc: subprocess.Popen[str]) -> None:
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=WAIT)


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
