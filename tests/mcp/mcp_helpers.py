"""Helpers for nexus_mcp's tests: the servers' settings (the real ones from PyPI, installed into
the venv by `scripts/setup --dev`, and our own in servers/), the processes they run as, fake
installed plugins for the `nexus` command, and polling."""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from nexus_core import Nexus

HERE = Path(__file__).resolve().parent
SERVERS = HERE / "servers"
REPO = HERE.parents[1]
BIN = Path(sys.executable).parent
NEXUS_ENV = ("NEXUS_DISABLE_PLUGIN_AUTOLOAD", "NEXUS_BLOCK_PLUGINS", "NEXUS_TRACE_HOOKS", "NEXUS_CONFIG")


def venv_tool(name: str) -> str:
    """A console script of this venv (the MCP servers from PyPI are installed there by
    `scripts/setup --dev`)."""
    path = BIN / name
    if not path.exists():
        pytest.fail(f"{path} is missing: run ./scripts/setup --dev (the dev extra installs {name})")
    return str(path)


def time_server() -> dict[str, Any]:
    return {"command": venv_tool("mcp-server-time"), "args": ["--local-timezone", "UTC"]}


def git_server(repository: Path) -> dict[str, Any]:
    return {"command": venv_tool("mcp-server-git"), "args": ["--repository", str(repository)]}


def fixture_server(*args: str, **settings: Any) -> dict[str, Any]:
    return {"command": sys.executable, "args": [str(SERVERS / "fixture_server.py"), *args], **settings}


def dynamic_server(*args: str, **settings: Any) -> dict[str, Any]:
    return {"command": sys.executable, "args": [str(SERVERS / "dynamic_server.py"), *args], **settings}


def legacy_server(**settings: Any) -> dict[str, Any]:
    return {"command": sys.executable, "args": [str(SERVERS / "legacy_server.py")], **settings}


def mcp_config(tmp_path: Path, servers: dict[str, Any], *, active: list[str] | None = None,
               **plugins: Any) -> dict[str, Any]:
    workspace = tmp_path / "workspace"
    workspace.mkdir(exist_ok=True)
    return {
        "workspace": str(workspace),
        "session_dir": str(tmp_path / "session"),
        "skills": [],
        "plugins": {
            "active": active or ["nexus.mcp.client"],
            "nexus.mcp.client": {"servers": servers},
            **plugins,
        },
    }


def log_folder(nexus: Nexus) -> Path:
    return Path(nexus.config.session_dir) / "plugins" / "nexus.mcp.client"


# -- processes -------------------------------------------------------------------------------


def _stat(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2:].split()


def alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    stat = _stat(pid)
    return stat is not None and stat[0] != "Z"


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def supervisor(pid: int) -> bool:
    """Whether `pid` is the supervisor a stdio server runs under (nexus_mcp/_reaper.py)."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip() == "nexus-mcp-reap"
    except OSError:
        return False


def child_pids(marker: str, parent: int | None = None) -> list[int]:
    """Live MCP server processes that `parent` (this process) started, whose command line
    contains `marker`: its children, or the children of the supervisors it started (a stdio
    server runs under one: see nexus_mcp._reaper)."""
    parent = os.getpid() if parent is None else parent
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        stat = _stat(pid)
        if stat is None or stat[0] == "Z" or supervisor(pid):
            continue
        ppid = int(stat[1])
        if ppid != parent:
            parent_stat = _stat(ppid)
            if parent_stat is None or int(parent_stat[1]) != parent or not supervisor(ppid):
                continue
        if marker in _cmdline(pid):
            found.append(pid)
    return sorted(found)


def wait_for(predicate: Callable[[], Any], timeout: float = 30.0, what: str = "the condition") -> Any:
    """Poll until `predicate()` is truthy (returns its value), or fail naming `what`."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


# -- installed plugins without pip (for the `nexus` subprocess) --------------------------------


class FakePlugins:
    """A folder of fake distributions, each declaring a plugin in `nexus.plugins`; put it on
    PYTHONPATH and `nexus` finds them as it finds pip-installed ones."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.root.mkdir(parents=True, exist_ok=True)

    def add(self, plugin_id: str, module: str, source: str, attr: str | None = None) -> None:
        (self.root / f"{module}.py").write_text(textwrap.dedent(source), encoding="utf-8")
        info = self.root / f"{module}-0.1.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module.replace('_', '-')}\nVersion: 0.1\n")
        (info / "entry_points.txt").write_text(
            f"[nexus.plugins]\n{plugin_id} = {module}{':' + attr if attr else ''}\n")
        importlib.invalidate_caches()

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in NEXUS_ENV}
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(self.root), env.get("PYTHONPATH", "")) if p)
        env.update(extra)
        return env


def run_nexus(*args: str, cwd: Path, env: dict[str, str] | None = None, input: str | None = None,
              timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """The `nexus` command of this venv, as a user runs it, who trusts the config the test
    wrote (`--trust-config`)."""
    return subprocess.run([str(BIN / "nexus"), "--trust-config", *args], cwd=cwd, env=env, input=input, capture_output=True,
                          text=True, timeout=timeout, check=False)


class HttpServe:
    """`nexus mcp serve --http HOST:0` as a user runs it, until `stop()`: its URL, and the token
    it printed (or the one given in its environment)."""

    def __init__(self, config: Path, env: dict[str, str], *extra: str, host: str = "127.0.0.1") -> None:
        address = f"[{host}]:0" if ":" in host else f"{host}:0"
        self.process = subprocess.Popen([str(BIN / "nexus"), "--trust-config", "--config", str(config), "mcp", "serve",
                                         "--http", address, *extra], env=env, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True)
        assert self.process.stderr is not None
        self.stderr: list[str] = []
        self.token = env.get("NEXUS_MCP_TOKEN", "")
        self.url = ""
        for line in self.process.stderr:
            self.stderr.append(line)
            if found := re.search(r"over MCP at (http://\S+)", line):
                self.url = found.group(1)
            if found := re.match(r"^Authorization: Bearer (\S+)$", line):
                self.token = found.group(1)
            if self.url and line.startswith("nexus: protection: bound to"):
                break
        else:
            raise AssertionError(f"nexus mcp serve --http did not start:\n{''.join(self.stderr)}")
        self.port = int(self.url.rsplit(":", 1)[1].split("/")[0])

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def stop(self) -> tuple[str, str]:
        """SIGTERM: a clean stop, the Nexus closed. Returns (stdout, stderr)."""
        self.process.terminate()
        out, err = self.process.communicate(timeout=60)
        return out, "".join(self.stderr) + err
