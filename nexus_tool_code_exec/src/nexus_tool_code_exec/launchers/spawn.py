"""The spawn launcher (runs in the host): one fresh `python -I` per script, ~30-50 ms a start,
where a zygote cannot run (or `launcher: spawn` asks for it). Works everywhere."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

from .. import protocol
from .base import CHILD_ENV, Child, Launcher
from .cleanup import janitor


class SpawnLauncher(Launcher):
    """One fresh interpreter per script, isolated by `policy` as it starts."""

    def __init__(self, policy: protocol.ChildPolicy, python: str | None = None) -> None:
        self.python = python or sys.executable
        self.policy = policy

    def launch(self) -> Child:
        scratch = tempfile.mkdtemp(prefix="nexus-run-")
        policy: protocol.ChildPolicy = {**self.policy, "scratch": scratch}
        proc = subprocess.Popen(
            [self.python, "-I", "-m", "nexus_tool_code_exec.child", json.dumps(policy)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            env=CHILD_ENV,
            cwd=scratch,
            close_fds=True,
        )
        assert proc.stdin is not None and proc.stdout is not None
        rfd, wfd = os.dup(proc.stdout.fileno()), os.dup(proc.stdin.fileno())
        proc.stdout.close()
        proc.stdin.close()

        def wait(timeout: float) -> int | None:
            try:
                return proc.wait(timeout)
            except subprocess.TimeoutExpired:
                return None

        return Child(proc.pid, rfd, wfd, scratch=scratch, waiter=wait)

    def close(self) -> None:
        janitor.drain()  # nothing else is kept between runs: the last scratch folders go
