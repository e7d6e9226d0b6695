"""`nexus runs` and `nexus runs show ID` on real runs: run_code scripts run through a Nexus (the
sandbox, the gates, the session records), then read back by the `nexus` command as a subprocess.
The records' text is untrusted: what a script printed or a tool returned reaches the terminal
escaped."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from nexus_core import Nexus, Rewrite, ToolCall, ToolDef, Veto, hookimpl, native_tool

CE = "nexus.tool.code_exec"


class NoSecrets:
    NEXUS_PLUGIN_ID = "acme.no-secrets"

    @hookimpl
    def nexus_before_tool_invoke(self, call: ToolCall, tool: ToolDef) -> Veto | None:
        return Veto("secrets stay home") if call.arguments.get("key") == "secret" else None


def lookup() -> ToolDef:
    return native_tool("lookup", "Look a key up.", {"type": "object", "properties": {"key": {"type": "string"}}},
                       lambda a: f"value of {a.get('key')}\x1b]52;c;cHduZWQ=\x07")


SCRIPT = textwrap.dedent("""\
    import tools, parallel

    def run(ctx):
        print("start \\x1b[2J cleared?")
        first = tools.lookup(key="a").output
        many = parallel.map(["b", "c", "d"], lambda k: tools.lookup(key=k).output)
        try:
            tools.lookup(key="secret")
        except tools.ToolVetoed:
            print("refused: vetoed")
        return {"first": first[:10], "many": len(many)}
    """)


@pytest.fixture(scope="module")
def sessions(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    root = tmp_path_factory.mktemp("runs")
    config = {"workspace": str(root), "session_dir": str(root / "sessions"), "skills": [],
              "plugins": {"active": [CE], CE: {"timeout_seconds": 60, "max_workers": 3}}}
    with Nexus.from_config(config, plugins=[NoSecrets()], tools=[lookup()]) as nx:
        ok = nx.invoke("run_code", {"script": SCRIPT})
        assert not ok.is_error, ok.error
        failed = nx.invoke("run_code", {"script": "def run(ctx):\n    raise ValueError('no \\x1b[31mluck')\n"})
        assert failed.is_error
    return root / "sessions", [ok.id, failed.id]


def nexus(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NEXUS_", "OTEL_"))}
    return subprocess.run([sys.executable, "-m", "nexus_core", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


def test_runs_lists_the_runs_latest_first(sessions: tuple[Path, list[str]], tmp_path: Path) -> None:
    folder, (ok_id, failed_id) = sessions
    listing = nexus(tmp_path, "runs", "--session-dir", str(folder))
    assert listing.returncode == 0, listing.stderr
    header, first, second = listing.stdout.splitlines()
    assert header.split() == ["ID", "STARTED", "STATUS", "DURATION", "CALLS", "VETOES"]
    assert first.startswith(failed_id) and " error " in first
    assert second.startswith(ok_id) and second.split()[-2:] == ["5", "1"]  # 5 inner calls, 1 vetoed

    as_json = json.loads(nexus(tmp_path, "runs", "--session-dir", str(folder), "--json").stdout)
    assert [r["id"] for r in as_json] == [failed_id, ok_id]
    ok: dict[str, Any] = as_json[1]
    assert ok["status"] == "ok" and ok["tool_calls"] == 5 and ok["vetoes"] == 1
    assert ok["duration_seconds"] > 0 and ok["started"].endswith("Z")
    assert as_json[0]["status"] == "error" and "ValueError" in as_json[0]["error"]


def test_runs_show_draws_the_calls_in_order_parallel_ones_grouped(sessions: tuple[Path, list[str]],
                                                                  tmp_path: Path) -> None:
    folder, (ok_id, _) = sessions
    shown = nexus(tmp_path, "runs", "--session-dir", str(folder), "show", ok_id[:12])
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0].startswith(f"run_code {ok_id}  ok") and "5 calls, 1 vetoed" in lines[0]
    tree = "\n".join(lines[1:])
    assert lines[1].startswith('├─ lookup {"key": "a"}  ok')
    assert lines[2] == "├─ parallel (3 calls)"
    assert sorted(line.split('"')[3] for line in lines[3:6]) == ["b", "c", "d"]
    assert all(line.startswith(("│  ├─ lookup", "│  └─ lookup")) for line in lines[3:6])
    assert lines[6].startswith('├─ lookup {"key": "secret"}  vetoed') and "secrets stay home" in lines[6]
    assert "├─ stdout" in tree and "refused: vetoed" in tree
    assert '└─ result {"first": "value of a", "many": 3}' in tree
    # nothing from a record acts on the terminal: the script's ESC and the tool's OSC 52 show as text
    assert "\x1b" not in shown.stdout and "\x07" not in shown.stdout
    assert "start \\x1b[2J cleared?" in tree and "\\x1b]52;c;cHduZWQ=\\x07" in tree


def test_runs_show_json_has_every_call_with_its_timing_and_group(sessions: tuple[Path, list[str]],
                                                                 tmp_path: Path) -> None:
    folder, (ok_id, failed_id) = sessions
    run = json.loads(nexus(tmp_path, "runs", "--session-dir", str(folder), "show", ok_id, "--json").stdout)
    assert run["script"] == SCRIPT and run["result"] == {"first": "value of a", "many": 3}
    assert "start \x1b[2J cleared?" in run["stdout"]  # JSON keeps the text as it was, escaped by JSON
    calls = run["calls"]
    assert [c["arguments"]["key"] for c in calls][0] == "a" and calls[-1]["arguments"]["key"] == "secret"
    assert [c["outcome"] for c in calls] == ["ok", "ok", "ok", "ok", "vetoed"]
    assert calls[0]["parallel"] == 0 and calls[-1]["parallel"] == 0
    assert len({c["parallel"] for c in calls[1:4]}) == 1 and calls[1]["parallel"] >= 1
    assert all(c["duration"] >= 0 and c["started_at"] > 0 for c in calls)
    starts = [c["started_at"] for c in calls]
    assert starts == sorted(starts)

    failed = nexus(tmp_path, "runs", "--session-dir", str(folder), "show", failed_id)
    assert failed.returncode == 0 and "└─ error" in failed.stdout and "\x1b" not in failed.stdout
    assert "\\x1b[31mluck" in failed.stdout


class Redirect:
    """Rewrites a lookup of key "old" to key "new"."""

    NEXUS_PLUGIN_ID = "acme.redirect"

    @hookimpl
    def nexus_before_tool_invoke(self, call: ToolCall, tool: ToolDef) -> Rewrite | None:
        return Rewrite({"key": "new"}) if call.arguments.get("key") == "old" else None


def test_runs_show_names_the_gate_that_rewrote_a_call(tmp_path: Path) -> None:
    config = {"workspace": str(tmp_path), "session_dir": str(tmp_path / "sessions"), "skills": [],
              "plugins": {"active": [CE], CE: {"timeout_seconds": 60}}}
    script = "import tools\n\ndef run(ctx):\n    return [tools.lookup(key=k).output[:12] for k in ('old', 'kept')]\n"
    with Nexus.from_config(config, plugins=[Redirect()], tools=[lookup()]) as nx:
        run = nx.invoke("run_code", {"script": script})
    assert run.output_structured["result"] == ["value of new", "value of kep"]
    shown = nexus(tmp_path, "runs", "--session-dir", str(tmp_path / "sessions"), "show", run.id)
    assert shown.returncode == 0, shown.stderr
    rewritten, kept = shown.stdout.splitlines()[1:3]
    # the script's arguments, and who changed them before the call ran (its result shows what ran)
    assert rewritten.startswith('├─ lookup {"key": "old"}  ok, rewritten by acme.redirect  ')
    assert "→ value of new" in rewritten
    assert kept.startswith('├─ lookup {"key": "kept"}  ok  ') and "rewritten" not in kept
    as_json = json.loads(nexus(tmp_path, "runs", "--session-dir", str(tmp_path / "sessions"), "show", run.id,
                               "--json").stdout)
    assert [c["rewritten_by"] for c in as_json["calls"]] == [["acme.redirect"], []]


def test_runs_show_of_an_unknown_id_names_the_recent_ones(sessions: tuple[Path, list[str]], tmp_path: Path) -> None:
    folder, (ok_id, _) = sessions
    shown = nexus(tmp_path, "runs", "--session-dir", str(folder), "show", "call_nope")
    assert shown.returncode == 2
    assert "no run_code run 'call_nope'" in shown.stderr and ok_id in shown.stderr


def test_runs_of_an_empty_folder_says_so(tmp_path: Path) -> None:
    listing = nexus(tmp_path, "runs", "--session-dir", str(tmp_path / "nothing"))
    assert listing.returncode == 0 and listing.stdout == ""
    assert "no run_code runs recorded here" in listing.stderr
