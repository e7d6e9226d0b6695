"""What every bench records beside its figures (the machine, the versions measured, the commit),
and the wait for a quiet machine. Imported by the bench scripts, which run as files (their
folder is on sys.path)."""

from __future__ import annotations

import os
import platform
import subprocess
import time
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def versions(dists: Iterable[str]) -> dict[str, str | None]:
    """Each distribution's installed version (None when it is not installed)."""
    out: dict[str, str | None] = {}
    for dist in dists:
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    return out


def git(*args: str) -> str:
    """`git ARGS` in the repository, its output stripped ("" when git cannot say)."""
    try:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10,
                              check=False).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def machine(dists: Iterable[str]) -> dict[str, Any]:
    return {"nproc": os.cpu_count(), "cpu_model": cpu_model(), "kernel": platform.release(),
            "python": platform.python_version(), "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            "versions": versions(dists), "git_commit": git("rev-parse", "--short", "HEAD")}


def wait_idle(limit: float, threshold: float = 0.5) -> float:
    """Wait up to `limit` seconds for the 1-minute load average to drop below `threshold`; the
    load at the end."""
    deadline = time.monotonic() + limit
    while os.getloadavg()[0] >= threshold and time.monotonic() < deadline:
        time.sleep(5)
    return os.getloadavg()[0]
