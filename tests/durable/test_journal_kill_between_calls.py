"""A `kill -9` of run_code's host loses at most the call in flight: while the script computes
between calls (none in flight), every call it made has its end in journal.jsonl. (Issue 26 tried
keeping a sequential call's end for the next call's line, one write a call instead of two; it
saved no host CPU, since the host polls for the script's next message meanwhile, and was left
out; this holds whatever the journal's writes become.)

A real host process, killed with SIGKILL while its script computes."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from journal_helpers import host_config, lines, start_host, wait_for, write_host
from nexus_tool_code_exec.host.journal import JOURNAL_FILE, load
from test_journal_recovery import _kill


def _kinds(path: Path) -> list[tuple[str, int | None]]:
    return [(r["k"], r.get("n")) for r in map(json.loads, path.read_text().splitlines())]


SCRIPT = textwrap.dedent("""\
    import time, tools

    def run(ctx):
        tools.append(text="one")
        tools.append(text="two")
        time.sleep(3600)  # computing: no call in flight
        return "never"
    """)


def test_a_host_killed_while_its_script_computes_loses_no_call(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.txt"
    host, script = write_host(tmp_path), tmp_path / "script.py"
    script.write_text(SCRIPT)
    folder = tmp_path / "sessions" / "plugins" / "nexus.tool.code_exec" / "call_computes"
    first = start_host(host, host_config(tmp_path, ledger), "run", "call_computes", script)
    journal = folder / JOURNAL_FILE
    try:
        wait_for(lambda: lines(ledger) == ["one", "two"], "the script's two calls")
        # no call is in flight: the second call's end is written
        wait_for(lambda: journal.is_file() and ("done", 1) in _kinds(journal), "the second call's end in the journal")
    finally:
        _kill(first)
    entries = load(journal)
    assert [(e.name, e.result is not None) for e in entries] == [("append", True), ("append", True)]
