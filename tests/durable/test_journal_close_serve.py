"""Issue 24: `nexus mcp serve`, stopped with SIGTERM (a clean close: how service managers and
`docker stop` end it) while it runs a run_code run it took over from a killed host, leaves that run
to the next host as a kill would: its journal is kept and let go, its approval stays pending, not
refused. Restarted, the server takes the run over again; the approval is answered with `nexus
approvals answer` from a process of its own, and the run completes, each side effect once.

Real processes throughout: `nexus call run_code` (killed with SIGKILL while an inner call waits),
`nexus mcp serve` over stdio twice, `nexus approvals`; the tool and its gate come from a plugin
installed as a distribution on PYTHONPATH, and its effects are counted in a file."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import yaml
from durable_helpers import NEXUS_CLI, WAIT
from journal_helpers import CE, lines, wait_for
from test_journal_durable import SCRIPT, _approvals, _ended

from nexus_tool_code_exec.host.journal import in_use

PLUGIN = '''
import os

from nexus_core import Ask, ToolDef, hookimpl


def append(arguments):
    with open(os.environ["NEXUS_TEST_LEDGER"], "a", encoding="utf-8") as f:
        f.write(arguments["text"] + "\\n")
    return "appended " + arguments["text"]


@hookimpl
def nexus_register_tools(register):
    register(ToolDef(name="append", handler=append, description="Append a line.",
                     input_schema={"type": "object", "properties": {"text": {"type": "string"}},
                                   "required": ["text"]}))


@hookimpl
def nexus_before_tool_invoke(call, tool):
    return Ask("Go ahead?") if tool.name == "append" and call.arguments.get("text") == "two" else None
'''


def _world(tmp_path: Path) -> tuple[Path, Path, dict[str, str]]:
    """The config, the durable database and the environment of every process of the test."""
    dist = tmp_path / "dist"
    dist.mkdir()
    (dist / "nexus_test_ledger.py").write_text(PLUGIN, encoding="utf-8")
    info = dist / "nexus_test_ledger-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: nexus-test-ledger\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[nexus.plugins]\ntest.ledger = nexus_test_ledger\n")
    database = tmp_path / "durable.sqlite"
    (tmp_path / "ws").mkdir()
    config = tmp_path / "nexus.yaml"
    config.write_text(yaml.safe_dump({
        "workspace": str(tmp_path / "ws"), "session_dir": str(tmp_path / "sessions"), "skills": [],
        "plugins": {"active": ["test.ledger", CE, "nexus.durable"], CE: {"timeout_seconds": 120},
                    "nexus.durable": {"database": str(database)}}}), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEXUS_")}
    env.update(PYTHONPATH=os.pathsep.join(p for p in (str(dist), os.environ.get("PYTHONPATH", "")) if p),
               NEXUS_TEST_LEDGER=str(tmp_path / "ledger.txt"), PYTHONUNBUFFERED="1")
    return config, database, env


def _nexus(config: Path, env: dict[str, str], tmp_path: Path, *args: str) -> subprocess.Popen[str]:
    err = open(tmp_path / f"stderr-{args[0]}-{len(list(tmp_path.glob('stderr-*')))}.txt", "w")
    try:
        return subprocess.Popen([str(NEXUS_CLI), "--trust-config", "--config", str(config), *args],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True, env=env,
                                start_new_session=True)
    finally:
        err.close()


def _asks(journal: Path) -> int:
    """How many times a person was asked about a call of the run (each attempt asks once)."""
    try:
        records = [json.loads(line) for line in journal.read_text().splitlines() if line.strip()]
    except FileNotFoundError:
        return 0
    return sum(1 for r in records if r.get("k") == "ask")


def _terminate(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=WAIT)
    assert proc.returncode == 0, proc.returncode


def test_sigterm_of_mcp_serve_leaves_a_taken_over_run_to_the_next_server(tmp_path: Path) -> None:
    config, database, env = _world(tmp_path)
    ledger = tmp_path / "ledger.txt"
    runs = tmp_path / "sessions" / "plugins" / CE
    first = _nexus(config, env, tmp_path, "call", "run_code", json.dumps({"script": SCRIPT}))
    try:
        [pending] = wait_for(lambda: _approvals(database, "--json"), "the approval to be listed", WAIT)
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.communicate(timeout=WAIT)
    [folder] = [p for p in runs.iterdir() if (p / "journal.jsonl").is_file()]
    journal = folder / "journal.jsonl"
    assert lines(ledger) == ["one"] and _asks(journal) == 1

    server = _nexus(config, env, tmp_path, "mcp", "serve")  # stdio: its stdin stays open, no client speaks
    try:
        wait_for(lambda: _asks(journal) >= 2, "the server to take the run over and wait on the approval", WAIT)
    finally:
        _terminate(server)
    # left as a kill leaves it: the journal kept (and let go), no result, the approval still pending
    assert journal.is_file() and not in_use(journal) and not (folder / "error.txt").exists()
    assert not (folder / "result.json").exists() or (folder / "result.json").read_text() == ""
    assert [p["id"] for p in _approvals(database, "--json")] == [pending["id"]]
    from nexus_durable import Approvals

    with Approvals(f"sqlite:///{database}") as approvals:
        assert approvals.outcome(pending["id"]) is None

    again = _nexus(config, env, tmp_path, "mcp", "serve")
    try:
        wait_for(lambda: _asks(journal) >= 3, "the restarted server to wait on the approval", WAIT)
        _approvals(database, "answer", pending["id"], "allow")
        result: Any = wait_for(lambda: _ended(folder), "the run to end", WAIT)
    finally:
        _terminate(again)
    assert result == "done"
    assert lines(ledger) == ["one", "two"]  # each effect once
    calls = [json.loads(line) for line in (folder / "calls.jsonl").read_text().splitlines()]
    assert [(c["name"], c.get("from_journal", False)) for c in calls] == [("append", True), ("append", False)]

