"""Issue 24, items 2 and 3 for run_code: a host killed with `kill -9` in the middle of a script is
recovered by the next host with the same config (`CodeExec.resume`): the calls that completed
before the kill are answered from the journal and never run again, the one in flight is reported as
possibly done, the rest run once; a resumed script that makes other calls stops with a divergence.

Every host here is a real process (journal_helpers.HOST), killed with SIGKILL; the side effects are
counted in a file the tools append to."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from journal_helpers import finish, host_config, lines, start_host, wait_for, write_host

from nexus_tool_code_exec.host.journal import in_use

SCRIPT = textwrap.dedent("""\
    import tools

    def run(ctx):
        tools.append(text="one")
        tools.append(text="two")
        held = "ran"
        try:
            tools.hold(name="release")
        except tools.ToolFailed as e:
            held = e.reason
        tools.append(text="three")
        return {"held": held}
    """)


def _kill(proc: subprocess.Popen[str]) -> None:
    """kill -9 the host, then whatever of its session is left (its zygote dies with it)."""
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.communicate()


def test_a_host_killed_mid_script_is_resumed_and_no_completed_call_runs_again(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.txt"
    host, script = write_host(tmp_path), tmp_path / "script.py"
    script.write_text(SCRIPT)
    config = host_config(tmp_path, ledger)
    folder = tmp_path / "sessions" / "plugins" / "nexus.tool.code_exec" / "call_killed"
    first = start_host(host, config, "run", "call_killed", script)
    try:
        wait_for(lambda: "held release" in lines(ledger), "the script to be held in its third call")
        assert in_use(folder / "journal.jsonl")  # its host holds it: no other one takes the run over
    finally:
        _kill(first)
    assert lines(ledger) == ["one", "two", "held release"]
    assert (folder / "journal.jsonl").is_file() and not in_use(folder / "journal.jsonl")
    listed = subprocess.run([sys.executable, "-m", "nexus_core.cli", "runs", "--session-dir",
                             str(tmp_path / "sessions"), "--json"], capture_output=True, text=True, timeout=120)
    assert [(r["id"], r["status"]) for r in json.loads(listed.stdout)] == [("call_killed", "interrupted")]

    second = start_host(host, config, "resume", "call_killed")
    assert second.stdout is not None
    assert json.loads(second.stdout.readline()) == {"interrupted": ["call_killed"]}
    out = finish(second)
    # each side effect once: the two completed calls were answered from the journal, the one in
    # flight was not run again, the call after it ran once
    assert lines(ledger) == ["one", "two", "held release", "three"]
    assert out["error"] is None, out
    held = out["structured"]["result"]["held"]
    assert held.startswith("possibly done: hold was running when the run's host stopped"), held
    assert "call_killed:2" in held  # the idempotency key the tool was given (ctx.call_id)
    assert out["metadata"] == {"resumed": True, "journal_calls": 2, "suspensions": 0}
    assert not (folder / "journal.jsonl").exists()  # the run ended: its record is complete
    calls = [json.loads(line) for line in (folder / "calls.jsonl").read_text().splitlines()]
    assert [(c["name"], c.get("from_journal", False)) for c in calls] == [
        ("append", True), ("append", True), ("hold", True), ("append", False)]
    assert json.loads((folder / "result.json").read_text()) == {"held": held}


def test_a_host_killed_while_an_approval_waits_asks_again_and_runs_the_call_once(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.txt"
    host, script = write_host(tmp_path), tmp_path / "script.py"
    script.write_text(textwrap.dedent("""\
        import tools

        def run(ctx):
            tools.append(text="one")
            tools.append(text="two")
            return "done"
        """))
    config = host_config(tmp_path, ledger)
    answer = tmp_path / "answer"
    first = start_host(host, config, "run", "call_asked", script, {"ask": ["two"], "answer_file": str(answer)})
    try:
        wait_for(lambda: "asked two" in lines(ledger), "the approval of the second call to be asked")
    finally:
        _kill(first)
    answer.write_text("allow")
    second = start_host(host, config, "resume", "call_asked", None, {"ask": ["two"], "answer_file": str(answer)})
    out = finish(second)
    assert out["error"] is None, out
    # the call waiting for a person had not started: it is asked again and runs once; the
    # completed one is not run again
    assert lines(ledger) == ["one", "asked two", "asked two", "two"]
    assert out["metadata"]["journal_calls"] == 1


def test_a_resumed_script_that_makes_other_calls_stops_naming_both(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.txt"
    host, script = write_host(tmp_path), tmp_path / "script.py"
    script.write_text(SCRIPT)
    config = host_config(tmp_path, ledger)
    first = start_host(host, config, "run", "call_changed", script)
    try:
        wait_for(lambda: "held release" in lines(ledger), "the script to be held in its third call")
    finally:
        _kill(first)
    folder = tmp_path / "sessions" / "plugins" / "nexus.tool.code_exec" / "call_changed"
    # what a script whose calls depend on time or chance does: another call at the same place
    (folder / "script.py").write_text(SCRIPT.replace('text="two"', 'text="2"'))
    out = finish(start_host(host, config, "resume", "call_changed"))
    error = out["error"]
    assert error.startswith("journal diverged: the script's call 2 is append({\"text\":\"2\"})"), error
    assert 'but the journal holds append({"text":"two"}) there' in error, error
    assert lines(ledger) == ["one", "two", "held release"]  # nothing ran: not the changed call, not the rest


def test_a_host_killed_inside_a_parallel_call_resumes_each_of_its_calls_once(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.txt"
    host, script = write_host(tmp_path), tmp_path / "script.py"
    script.write_text(textwrap.dedent("""\
        import tools, parallel

        def one(x):
            if x == "c":
                try:
                    return tools.hold(name="release").output
                except tools.ToolFailed as e:
                    return e.reason[:13]
            return tools.append(text=x).output

        def run(ctx):
            got = parallel.map(["a", "b", "c", "d", "e"], one)
            tools.append(text="after")
            return got
        """))
    config = host_config(tmp_path, ledger, max_workers=4)
    first = start_host(host, config, "run", "call_parallel", script)
    try:
        # the calls of one parallel call race: wait until all but the held one have been made
        wait_for(lambda: sorted(lines(ledger)) == ["a", "b", "d", "e", "held release"], "the parallel calls")
    finally:
        _kill(first)
    out = finish(start_host(host, config, "resume", "call_parallel"))
    assert out["error"] is None, out
    assert out["structured"]["result"] == ["appended a", "appended b", "possibly done", "appended d", "appended e"]
    assert sorted(lines(ledger)) == ["a", "after", "b", "d", "e", "held release"]  # each once
    assert out["metadata"]["journal_calls"] == 4
