"""Durable approvals through real processes (issue 24, items 1, 3 and 4): a host asks, another
process lists and answers (`nexus approvals`), an approval expires, and a host killed with
`kill -9` while it waits is taken over by the next one, each side effect (a line appended to a
file) counted exactly once."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from durable_helpers import WAIT, kill9, wait_for

from nexus_core import Nexus


def results(proc: subprocess.Popen[str]) -> list[dict[str, Any]]:
    out, err = proc.communicate(timeout=WAIT)
    assert proc.returncode == 0, err
    return [json.loads(line) for line in out.splitlines()]


def test_an_approval_is_answered_from_another_process(durable: Any) -> None:
    d = durable()
    host = d.host("call", "plain", "ask-one")
    [pending] = d.wait_pending()
    assert d.lines() == ["plain"]  # the call no gate asks about ran at once
    assert pending["tool"] == "append" and pending["asked_by"] == ["AskAboutSome"]
    assert pending["call"]["arguments"]["text"] == "ask-one"
    # the whole call, rendered as the host's console renders it
    assert pending["rendered"].startswith("? allow append")
    assert "append 'ask-one'?" in pending["rendered"] and pending["expires_at"] > pending["asked_at"]
    listing = d.nexus("approvals").stdout
    assert pending["id"] in listing and "? allow append" in listing

    answered = d.nexus("approvals", "answer", pending["id"], "allow")
    assert answered.stdout.strip() == f"allowed: append ({pending['id']})"
    assert [r["output"] for r in results(host)] == ["1", "2"]
    assert d.lines() == ["plain", "ask-one"]
    assert d.pending() == []
    again = d.nexus("approvals", "answer", pending["id"], "deny", check=False)
    assert again.returncode == 2 and "answered already" in again.stderr


def test_a_denial_from_another_process_carries_its_note(durable: Any) -> None:
    d = durable()
    host = d.host("call", "ask-two")
    [pending] = d.wait_pending()
    d.nexus("approvals", "answer", pending["id"], "deny", "--note", "not\x1b[2J today")
    [result] = results(host)
    assert result["error"] == "vetoed: denied by the user: not\x1b[2J today"
    assert d.lines() == []


def test_a_call_cannot_forge_or_hide_lines_in_the_listing(durable: Any) -> None:
    d = durable()
    forged = "ask\x1b[2J\x9b31m\u202e\napproval-forged  asked 2026-01-01 00:00:00, no expiry\n  ? allow append {}"
    host = d.host("call", forged)
    [pending] = d.wait_pending()
    listing = d.nexus("approvals").stdout
    raw = d.nexus("approvals", "--json").stdout
    d.nexus("approvals", "answer", pending["id"], "deny")
    results(host)
    for text in (listing, raw):
        assert not any(ch in text for ch in "\x1b\x9b\u202e"), text
    headers = [line for line in listing.splitlines() if not line.startswith("  ")]
    assert headers == [headers[0]] and headers[0].startswith(pending["id"])
    assert json.loads(raw)[0]["call"]["arguments"]["text"] == forged


def test_an_unknown_approval_is_a_clear_error(durable: Any) -> None:
    d = durable()
    host = d.host("call", "plain")  # makes the database
    results(host)
    proc = d.nexus("approvals", "answer", "approval-nosuch", "allow", check=False)
    assert proc.returncode == 2 and "no approval 'approval-nosuch'" in proc.stderr


def test_an_approval_nobody_answers_expires_as_a_denial(durable: Any) -> None:
    d = durable(approval_expiry_seconds=1)
    [result] = results(d.host("call", "ask-late"))
    assert result["error"].startswith("vetoed: gate 'AskAboutSome' asks")
    assert "the approval expired: no one answered it within 1 s" in result["error"]
    assert d.lines() == []


def outcome(d: Any, approval_id: str) -> dict[str, Any] | None:
    from nexus_durable import Approvals, DurableSettings, database_url

    settings = DurableSettings(enabled=True, database=_database(d))
    with Approvals(database_url(settings, d.root / "ws", d.root / "session")) as approvals:
        return approvals.outcome(approval_id)


def _database(d: Any) -> str | None:
    import yaml

    return yaml.safe_load(d.config.read_text())["plugins"]["nexus.durable"].get("database")


def _killed_while_waiting(d: Any, mode: str = "serve") -> None:
    host = d.host("call", "first", "ask-second")
    [pending] = d.wait_pending()
    kill9(host)
    assert d.lines() == ["first"]
    # still pending, listed from the database with nobody waiting on it
    assert [p["id"] for p in d.pending()] == [pending["id"]]
    server = d.host(mode)  # the next long-lived host with the same config takes it over
    assert [p["id"] for p in d.pending()] == [pending["id"]]
    d.nexus("approvals", "answer", pending["id"], "allow")
    done = wait_for("the taken-over call's outcome", lambda: outcome(d, pending["id"]))
    assert done["answer"] == {"approved": True, "text": "", "by": "user"}
    assert done["result"]["output"] == "2" and done["result"]["error"] is None
    server.stdin.close()
    server.wait(timeout=WAIT)
    # the call that completed before the kill did not run again; the approved one ran once
    assert d.lines() == ["first", "ask-second"]


def test_a_host_killed_while_an_approval_waits_is_taken_over(durable: Any) -> None:
    _killed_while_waiting(durable())


def test_with_recover_start_any_nexus_takes_over_as_it_starts(durable: Any) -> None:
    _killed_while_waiting(durable(recover="start"), mode="stay")  # a host that never calls Nexus.recover()


def test_a_call_in_flight_when_its_host_dies_is_reported_possibly_done_not_repeated(durable: Any) -> None:
    d = durable()
    host = d.host("call", "ask-once")
    [pending] = d.wait_pending()
    kill9(host)
    hold = d.root / "holding"
    second = d.host("serve", env={"NEXUS_TEST_HOLD": str(hold)})
    d.nexus("approvals", "answer", pending["id"], "allow")
    key = wait_for("the taken-over call to be running", lambda: hold.exists() and hold.read_text())
    assert d.lines() == ["ask-once"]
    kill9(second)  # in the handler, after its side effect, before DBOS checkpointed the step
    third = d.host("serve")
    done = wait_for("the outcome", lambda: outcome(d, pending["id"]))
    result = done["result"]
    assert result["metadata"] == {"possibly_done": True, "idempotency_key": key}
    assert result["error"].startswith("interrupted: append was running when its host stopped")
    assert key in result["error"] and key == f"{pending['id']}/{pending['call']['id']}"
    third.stdin.close()
    third.wait(timeout=WAIT)
    assert d.lines() == ["ask-once"]  # not repeated


def test_postgres(durable: Any, postgres_url: str) -> None:
    _killed_while_waiting(durable(database=postgres_url))


# -- in one process ----------------------------------------------------------------------------


def test_installed_but_off_changes_nothing(tmp_path: Path) -> None:
    from durable_host import AskAboutSome, append

    config = {"skills": [], "session_dir": str(tmp_path / "s"), "plugins": {"active": ["nexus.durable"]}}
    with Nexus(config, plugins=[AskAboutSome()], tools=[append]) as nx:
        assert nx.durability is None
        result = nx.invoke("append", {"path": str(tmp_path / "f"), "text": "ask-now"})
        assert "no one can answer here" in (result.error or "")
    assert not (tmp_path / "s" / "durable.sqlite").exists()


def test_this_process_approver_still_answers(tmp_path: Path) -> None:
    from durable_host import AskAboutSome, append

    asked = []
    config = {"skills": [], "session_dir": str(tmp_path / "s"),
              "plugins": {"active": ["nexus.durable"], "nexus.durable": {"enabled": True}}}
    with Nexus(config, plugins=[AskAboutSome()], tools=[append],
               approver=lambda q: asked.append(q.text) or True) as nx:
        assert nx.durability is not None
        result = nx.invoke("append", {"path": str(tmp_path / "f"), "text": "ask-here"})
        assert result.error is None and asked == ["append 'ask-here'?"]
    assert (tmp_path / "f").read_text() == "ask-here\n"


def test_a_database_nexus_durable_cannot_use_is_a_config_error(durable: Any) -> None:
    d = durable(database="mysql://db.example/nexus")
    proc = d.nexus("doctor", check=False)
    assert proc.returncode == 2
    assert "plugins.nexus.durable.database: mysql:// is not a database nexus.durable can use" in proc.stderr


def test_doctor_says_which_backend_is_on(durable: Any) -> None:
    d = durable()
    out = d.nexus("doctor", check=False).stdout
    assert "durable: on, DBOS " in out and f"on SQLite (sqlite:///{d.root / 'session' / 'durable.sqlite'})" in out


def test_a_call_stopped_while_it_waits_ends_its_wait(tmp_path: Path) -> None:
    import threading

    from durable_host import AskAboutSome, append
    from nexus_durable import Approvals

    from nexus_core import CancelToken

    config = {"skills": [], "session_dir": str(tmp_path / "s"),
              "plugins": {"active": ["nexus.durable"], "nexus.durable": {"enabled": True}}}
    token = CancelToken()
    results: list[Any] = []
    with Nexus(config, plugins=[AskAboutSome()], tools=[append]) as nx:
        waiting = threading.Thread(target=lambda: results.append(
            nx.invoke("append", {"path": str(tmp_path / "f"), "text": "ask-stop"}, cancel=token)))
        waiting.start()
        with Approvals(nx.plugin("nexus.durable").url) as approvals:
            wait_for("the pending approval", approvals.pending)
            token.cancel("the user pressed Ctrl-C")
            waiting.join(timeout=WAIT)
            assert not waiting.is_alive() and approvals.pending() == []
    [result] = results
    assert "the call was stopped while it waited for approval (the user pressed Ctrl-C)" in result.error
    assert not (tmp_path / "f").exists()
