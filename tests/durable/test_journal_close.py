"""Issue 24: a long-lived host closed cleanly (not killed) while it runs a run it took over leaves
that run resumable, as a kill does: its child ends, its journal and its pending approval stay, and
the next long-lived host goes on with it. Whichever order the two plugins (nexus.durable and
nexus.tool.code_exec) shut down in, the approval is not refused as the engine stops.

Real processes: the first host (journal_helpers.HOST) is killed while an inner call waits on an
approval, a long-lived host takes the run over and is closed (`nx.close()`, as `nexus chat`'s exit
and `nexus mcp serve`'s SIGTERM do), a third one takes it over again, and the approval is answered
by `nexus approvals answer` from a process of its own; side effects are counted in a file. The
closed host lives on (as an embedder may): the journal must be let go by the close itself, not by
the process's exit. (test_journal_close_serve.py: the same through `nexus mcp serve` and SIGTERM.)"""

from __future__ import annotations

from pathlib import Path

import pytest
from durable_helpers import WAIT
from journal_helpers import CE, lines, start_host, wait_for, write_host
from test_journal_durable import (SCRIPT, _approvals, _durable_config, _ended, _kill, _resumed_waits, _serve,
                                  _stop)

from nexus_tool_code_exec.host.journal import in_use


@pytest.mark.parametrize("order", ["code_exec first", "durable first"])
def test_a_run_taken_over_by_a_host_that_closes_is_left_to_the_next_host(tmp_path: Path, order: str) -> None:
    ledger = tmp_path / "ledger.txt"
    host, script = write_host(tmp_path), tmp_path / "script.py"
    script.write_text(SCRIPT)
    config, database = _durable_config(tmp_path, ledger)
    # the last started shuts down first: the order of `active` decides which plugin closes first
    config["plugins"]["active"] = [CE, "nexus.durable"] if order == "durable first" else ["nexus.durable", CE]
    asking = {"ask": ["two"], "answer_file": str(tmp_path / "never")}
    folder = tmp_path / "sessions" / "plugins" / CE / "call_close"
    first = start_host(host, config, "run", "call_close", script, asking)
    try:
        [pending] = wait_for(lambda: _approvals(database, "--json"), "the approval to be listed", WAIT)
    finally:
        _kill(first)

    # it lives on after its Nexus closed (as an embedder may): the close itself leaves the run
    second = _serve(host, config, {**asking, "linger": 10 * WAIT})
    try:
        wait_for(lambda: _resumed_waits(tmp_path, "call_close"), "the taken-over run to wait on the approval", WAIT)
        (tmp_path / "stop").write_text("")  # a clean close, not a kill
        # once closed, while the process lives on: the journal let go, the approval not answered
        wait_for(lambda: not in_use(folder / "journal.jsonl"), "the closed host to let the journal go", WAIT)
        assert second.poll() is None
    finally:
        _kill(second)
    # the run is suspended, not ended: its journal stays, no result is recorded, and the approval
    # still waits, unanswered (not refused as the host closed)
    assert (folder / "journal.jsonl").is_file() and not (folder / "error.txt").exists()
    assert not (folder / "result.json").exists() or (folder / "result.json").read_text() == ""
    assert [p["id"] for p in _approvals(database, "--json")] == [pending["id"]]
    from nexus_durable import Approvals

    with Approvals(f"sqlite:///{database}") as approvals:
        assert approvals.outcome(pending["id"]) is None

    (tmp_path / "stop").unlink()
    third = _serve(host, config, asking)
    try:
        wait_for(lambda: _resumed_waits(tmp_path, "call_close") and
                 sum(1 for line in (folder / "journal.jsonl").read_text().splitlines() if '"k":"ask"' in line) >= 3,
                 "the third host to wait on the approval", WAIT)
        _approvals(database, "answer", pending["id"], "allow")
        assert wait_for(lambda: _ended(folder), "the resumed run to end", WAIT) == "done"
    finally:
        _stop(tmp_path, third)
    assert lines(ledger) == ["one", "asked two", "two"]  # each effect once, asked once
    with Approvals(f"sqlite:///{database}") as approvals:
        outcome = approvals.outcome(pending["id"])
    assert outcome is not None and outcome["answer"]["approved"] is True
