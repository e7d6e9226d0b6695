"""Issue 24, item 3 for run_code with nexus.durable on: an inner call's approval is keyed by the
run (its journal's run id and the call's slot), so a host killed while it waits leaves one pending
approval, answerable from another process while no host runs, and the resumed run waits on that
approval (or takes its answer) instead of asking again.

Real processes: the host (journal_helpers.HOST) is killed with SIGKILL, the approval is answered by
`nexus approvals answer` in a process of its own, and the side effects are counted in a file."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import textwrap
from pathlib import Path
from typing import Any

from durable_helpers import NEXUS_CLI, WAIT
from journal_helpers import CE, finish, host_config, lines, start_host, wait_for, write_host

SCRIPT = textwrap.dedent("""\
    import tools

    def run(ctx):
        tools.append(text="one")
        tools.append(text="two")
        return "done"
    """)


def _kill(proc: subprocess.Popen[str]) -> None:
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=WAIT)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.communicate()


def _durable_config(tmp_path: Path, ledger: Path) -> tuple[dict[str, Any], Path]:
    config = host_config(tmp_path, ledger)
    database = tmp_path / "durable.sqlite"
    config["plugins"]["active"] = [CE, "nexus.durable"]
    config["plugins"]["nexus.durable"] = {"database": str(database)}
    return config, database


def _approvals(database: Path, *args: str) -> Any:
    proc = subprocess.run([str(NEXUS_CLI), "approvals", "--database", str(database), *args],
                          capture_output=True, text=True, timeout=WAIT, check=False)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout) if "--json" in args else proc.stdout


def test_an_inner_approval_pending_when_its_host_is_killed_is_not_asked_again(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.txt"
    host, script = write_host(tmp_path), tmp_path / "script.py"
    script.write_text(SCRIPT)
    config, database = _durable_config(tmp_path, ledger)
    asking = {"ask": ["two"], "answer_file": str(tmp_path / "never")}  # this host's approver never answers
    first = start_host(host, config, "run", "call_durable", script, asking)
    try:
        wait_for(lambda: "asked two" in lines(ledger), "the approval of the second call to be asked", WAIT)
        [pending] = wait_for(lambda: _approvals(database, "--json"), "the approval to be listed", WAIT)
    finally:
        _kill(first)
    assert pending["call"]["arguments"] == {"text": "two"} and pending["call"]["id"] == "call_durable:1"
    # answered while no host runs: the answer waits in the database
    _approvals(database, "answer", pending["id"], "allow")

    second = start_host(host, config, "resume", "call_durable", None, asking)
    out = finish(second, WAIT)
    assert out["error"] is None, out
    assert out["structured"]["result"] == "done"
    # asked once (by the first host), the completed call not run again, the approved one run once
    assert lines(ledger) == ["one", "asked two", "two"]
    assert out["metadata"]["journal_calls"] == 1
    assert _approvals(database, "--json") == []
    from nexus_durable import Approvals

    with Approvals(f"sqlite:///{database}") as approvals:
        outcome = approvals.outcome(pending["id"])
    assert outcome is not None and outcome["answer"]["approved"] is True


def test_an_inner_approval_answered_after_the_resume_starts_is_waited_on(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.txt"
    host, script = write_host(tmp_path), tmp_path / "script.py"
    script.write_text(SCRIPT)
    config, database = _durable_config(tmp_path, ledger)
    asking = {"ask": ["two"], "answer_file": str(tmp_path / "never")}
    first = start_host(host, config, "run", "call_wait", script, asking)
    try:
        [pending] = wait_for(lambda: _approvals(database, "--json"), "the approval to be listed", WAIT)
    finally:
        _kill(first)
    second = start_host(host, config, "resume", "call_wait", None, asking)
    try:
        # the resumed run reaches the call again and waits on the same approval: still one listed
        wait_for(lambda: (tmp_path / "sessions" / "plugins" / CE / "call_wait" / "journal.jsonl").is_file()
                 and "answered" not in lines(ledger) and _resumed_waits(tmp_path, "call_wait"),
                 "the resumed run to wait on the approval", WAIT)
        assert [p["id"] for p in _approvals(database, "--json")] == [pending["id"]]
        _approvals(database, "answer", pending["id"], "deny", "--note", "not today")
        out = finish(second, WAIT)
    finally:
        if second.poll() is None:
            _kill(second)
    assert out["error"] is not None and "not today" in out["error"], out
    assert lines(ledger) == ["one", "asked two"]  # denied: never ran; asked once only


def _resumed_waits(tmp_path: Path, call_id: str) -> bool:
    """Whether the resumed attempt reached the approval again (its journal says it asks)."""
    journal = tmp_path / "sessions" / "plugins" / CE / call_id / "journal.jsonl"
    records = [json.loads(line) for line in journal.read_text().splitlines() if line.strip()]
    return sum(1 for r in records if r.get("k") == "ask") >= 2


# -- item 2: a long-lived host resumes an interrupted run by itself ------------------------------

HELD = textwrap.dedent("""\
    import tools

    def run(ctx):
        tools.append(text="one")
        held = "ran"
        try:
            tools.hold(name="release")
        except tools.ToolFailed as e:
            held = e.reason
        tools.append(text="two")
        return {"held": held}
    """)


def _serve(host: Path, config: dict[str, Any], extra: dict[str, Any] | None = None) -> subprocess.Popen[str]:
    proc = start_host(host, config, "serve", "-", None, extra)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert json.loads(line) == {"ready": True}, (line, proc.stderr.read() if proc.stderr else "")
    return proc


def _stop(tmp_path: Path, proc: subprocess.Popen[str]) -> None:
    (tmp_path / "stop").write_text("")
    proc.communicate(timeout=WAIT)
    assert proc.returncode == 0


def _ended(folder: Path) -> Any:
    """The run's result once it ended (its journal gone, its result.json written), else None."""
    if (folder / "journal.jsonl").exists() or not (folder / "result.json").exists():
        return None
    return json.loads((folder / "result.json").read_text()) or True


def test_a_long_lived_host_resumes_a_run_once_its_pending_approval_is_answered(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.txt"
    host, script = write_host(tmp_path), tmp_path / "script.py"
    script.write_text(SCRIPT)
    config, database = _durable_config(tmp_path, ledger)
    asking = {"ask": ["two"], "answer_file": str(tmp_path / "never")}
    folder = tmp_path / "sessions" / "plugins" / CE / "call_auto"
    first = start_host(host, config, "run", "call_auto", script, asking)
    try:
        [pending] = wait_for(lambda: _approvals(database, "--json"), "the approval to be listed", WAIT)
    finally:
        _kill(first)
    # a short-lived program on the same config (it runs a run of its own) takes nothing over
    other = tmp_path / "other.py"
    other.write_text("import tools\n\ndef run(ctx):\n    return tools.append(text='other').output\n")
    assert finish(start_host(host, config, "run", "call_other", other, asking), WAIT)["error"] is None
    assert (folder / "journal.jsonl").is_file() and lines(ledger) == ["one", "asked two", "other"]

    server = _serve(host, config, asking)
    try:
        # it resumed the run, which waits on the same approval: still listed once, not asked again
        wait_for(lambda: _resumed_waits(tmp_path, "call_auto"), "the resumed run to wait on the approval", WAIT)
        assert [p["id"] for p in _approvals(database, "--json")] == [pending["id"]]
        _approvals(database, "answer", pending["id"], "allow")
        assert wait_for(lambda: _ended(folder), "the resumed run to end", WAIT) == "done"
    finally:
        _stop(tmp_path, server)
    assert lines(ledger) == ["one", "asked two", "other", "two"]  # each effect once, asked once
    calls = [json.loads(line) for line in (folder / "calls.jsonl").read_text().splitlines()]
    assert [(c["name"], c.get("from_journal", False)) for c in calls] == [("append", True), ("append", False)]
    from nexus_durable import Approvals

    with Approvals(f"sqlite:///{database}") as approvals:
        outcome = approvals.outcome(pending["id"])
    assert outcome is not None and outcome["answer"]["approved"] is True


def test_a_long_lived_host_resumes_a_run_that_waited_on_nobody_at_its_start(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.txt"
    host, script = write_host(tmp_path), tmp_path / "script.py"
    script.write_text(HELD)
    config, _ = _durable_config(tmp_path, ledger)
    folder = tmp_path / "sessions" / "plugins" / CE / "call_held"
    first = start_host(host, config, "run", "call_held", script)
    try:
        wait_for(lambda: "held release" in lines(ledger), "the script to be held in its second call", WAIT)
    finally:
        _kill(first)
    server = _serve(host, config)
    try:
        result = wait_for(lambda: _ended(folder), "the resumed run to end", WAIT)
    finally:
        _stop(tmp_path, server)
    assert result["held"].startswith("possibly done: hold was running when the run's host stopped"), result
    assert lines(ledger) == ["one", "held release", "two"]  # the one in flight not run again



def test_two_long_lived_hosts_starting_at_once_finish_an_interrupted_run_once(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.txt"
    host, script = write_host(tmp_path), tmp_path / "script.py"
    script.write_text(HELD)
    config, _ = _durable_config(tmp_path, ledger)
    folder = tmp_path / "sessions" / "plugins" / CE / "call_twice"
    first = start_host(host, config, "run", "call_twice", script)
    try:
        wait_for(lambda: "held release" in lines(ledger), "the script to be held in its second call", WAIT)
    finally:
        _kill(first)
    servers = [start_host(host, config, "serve", "-") for _ in range(2)]  # both recover at once
    try:
        for server in servers:
            assert server.stdout is not None and json.loads(server.stdout.readline()) == {"ready": True}
        result = wait_for(lambda: _ended(folder), "the resumed run to end", WAIT)
    finally:
        (tmp_path / "stop").write_text("")
        for server in servers:
            server.communicate(timeout=WAIT)
    assert result["held"].startswith("possibly done"), result
    assert lines(ledger) == ["one", "held release", "two"]  # one host finished it; nothing ran twice
    assert json.loads((folder / "result.json").read_text()) == result  # and its record is that host's
