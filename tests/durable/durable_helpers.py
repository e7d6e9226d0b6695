"""Helpers of the durable approval tests: a config with nexus.durable on, host processes
(`durable_host.py`), the `nexus` command line, waiting for events. A module of its own, with a
name no other test folder uses, so the suite's conftest modules cannot shadow it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
HOST = HERE / "durable_host.py"
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
        if mode in ("serve", "stay"):
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


def kill9(proc: subprocess.Popen[str]) -> None:
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=WAIT)
