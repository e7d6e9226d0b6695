"""The client side of the official MCP conformance suite (the server side: conformance_helpers.py).

Running the official MCP conformance suite (@modelcontextprotocol/conformance, which needs
Node 22: `npx -p node@22`), for the server's scenarios and the client's. Skips, saying why, only
when npx cannot be found."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

CONFORMANCE = "@modelcontextprotocol/conformance@0.1.16"
#: the first run downloads Node 22 and the suite
TIMEOUT_SECONDS = 600


def conformance_command() -> list[str]:
    npx = shutil.which("npx")
    if npx is None:
        pytest.skip("npx (Node.js) is not on PATH: the MCP conformance suite runs with `npx -p node@22`")
    return [npx, "-y", "-p", "node@22", "-p", CONFORMANCE, "conformance"]


def run_conformance(args: list[str], output: Path, timeout: float = TIMEOUT_SECONDS) -> tuple[
        subprocess.CompletedProcess[str], list[dict[str, Any]]]:
    """Run `conformance <args> -o <output>`; its process and the checks it wrote (every
    checks.json under `output`)."""
    output.mkdir(parents=True, exist_ok=True)
    process = subprocess.run([*conformance_command(), *args, "-o", str(output)], capture_output=True, text=True,
                             timeout=timeout, check=False)
    checks: list[dict[str, Any]] = []
    for path in sorted(output.rglob("checks.json")):
        checks.extend(json.loads(path.read_text(encoding="utf-8")))
    return process, checks


def failed(checks: list[dict[str, Any]]) -> list[str]:
    """The checks that did not pass (FAILURE or WARNING), one line each."""
    return [f"{c.get('id')}: {c.get('status')}: {c.get('errorMessage') or c.get('description')}"
            for c in checks if c.get("status") in ("FAILURE", "WARNING")]
