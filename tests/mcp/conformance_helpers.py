"""The official MCP conformance suite (@modelcontextprotocol/conformance) as the tests run it:
through `npx`, with Node 22 fetched by npx itself (`-p node@22`: the suite needs it, the
machine may have an older Node), and its results read from the files it writes (`-o DIR`:
one `checks.json` per scenario), not from its coloured console output.

Tests that use it are marked `conformance`; they skip, saying why, only when `npx` is missing.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

#: the suite's version the tests pin (its scenarios change between versions)
SUITE = "@modelcontextprotocol/conformance@0.1.16"
#: the Node it needs (its dependencies declare node >= 22)
NODE = "node@22"
#: one scenario takes seconds; the whole suite, npx fetching it the first time, minutes
TIMEOUT_SECONDS = 900


def npx() -> str:
    """The `npx` on PATH, or skip the test saying how to get it."""
    found = shutil.which("npx")
    if found is None:
        pytest.skip("npx is not installed (Node.js brings it; any version: npx fetches node@22 for the suite)")
    return found


def run_suite(*args: str, output: Path, cwd: Path, timeout: float = TIMEOUT_SECONDS) -> subprocess.CompletedProcess[str]:
    """`conformance ARGS... -o OUTPUT` under Node 22; the results are in `output`."""
    env = {**os.environ, "npm_config_yes": "true", "npm_config_update_notifier": "false",
           "npm_config_fund": "false", "npm_config_audit": "false"}
    return subprocess.run([npx(), "-y", "-p", NODE, "-p", SUITE, "conformance", *args, "-o", str(output)],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)


#: the folder a run writes per scenario: `<server|client>-<scenario>-<ISO time, : and . as ->`
_RESULT_FOLDER = re.compile(r"^(?:server|client)-(?P<scenario>.+)-\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d-\d{3}Z$")


def scenario_checks(output: Path) -> dict[str, list[dict[str, Any]]]:
    """Each scenario's checks, from the `checks.json` files a run left in `output`."""
    found: dict[str, list[dict[str, Any]]] = {}
    for path in sorted(output.rglob("checks.json")):
        relative = path.parent.relative_to(output).as_posix()  # an auth/... scenario is a subfolder
        match = _RESULT_FOLDER.match(relative)
        if match is not None:
            found[match.group("scenario")] = json.loads(path.read_text(encoding="utf-8"))
    return found


def failures(checks: list[dict[str, Any]]) -> list[str]:
    """The failed checks of one scenario, each as `name: message`."""
    return [f"{c.get('name')}: {c.get('errorMessage') or c.get('description')}"
            for c in checks if c.get("status") == "FAILURE"]
