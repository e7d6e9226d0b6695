"""Helpers for the journal and replay tests (tests/durable/test_journal_*.py, test_replay*.py): the
tools whose effects a test counts, and a host process a test can kill.

- `append` appends its `text` as a line to the file named by NEXUS_TEST_LEDGER (a side effect
  counted by reading the file back: each line is one run of the tool);
- `hold` appends `held <name>` to the same file, then waits until the file `<name>` exists beside it
  (a call a test keeps in flight, then kills the host in);
- `HOST` is the source of a host process: `python host.py run|resume CONFIG.json CALL_ID SCRIPT`
  builds a Nexus from the config with both tools (and an approver that waits for a file, when
  asked to), runs or resumes the call, and prints the result as JSON; `serve CONFIG.json -` is a
  long-lived host (`Nexus.recover()`) that stays until a file `stop` is made beside the ledger
  (then closes its Nexus, and lives on `linger` seconds more).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nexus_core import ToolDef

CE = "nexus.tool.code_exec"


def make_tools(ledger: Path) -> list[ToolDef]:
    def append(arguments: dict[str, Any]) -> str:
        with open(ledger, "a", encoding="utf-8") as f:
            f.write(arguments["text"] + "\n")
        return "appended " + arguments["text"]

    def hold(arguments: dict[str, Any]) -> str:
        with open(ledger, "a", encoding="utf-8") as f:
            f.write(f"held {arguments['name']}\n")
        release = ledger.parent / arguments["name"]
        while not release.exists():
            time.sleep(0.05)
        return "released " + arguments["name"]

    text = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}
    name = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
    return [ToolDef(name="append", handler=append, description="Append a line.", input_schema=text),
            ToolDef(name="hold", handler=hold, description="Wait for a file.", input_schema=name)]


def lines(ledger: Path) -> list[str]:
    return ledger.read_text(encoding="utf-8").splitlines() if ledger.exists() else []


def wait_for(condition: Callable[[], Any], what: str, timeout: float = 60.0) -> Any:
    """Wait (generously: the machine is busy) until `condition()` is true; fail naming `what`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


HOST = '''
import json, sys, time
from pathlib import Path
sys.path.insert(0, {helpers!r})
from journal_helpers import make_tools
from nexus_core import Ask, Nexus, hookimpl
from nexus_tool_code_exec import engine_for

mode, config_path, call_id = sys.argv[1], sys.argv[2], sys.argv[3]
config = json.loads(Path(config_path).read_text())
ledger = Path(config.pop("ledger"))
asks = config.pop("ask", [])
answer_file = config.pop("answer_file", None)
linger = config.pop("linger", 0)


class AsksAbout:
    @hookimpl
    def nexus_before_tool_invoke(self, call, tool):
        return Ask("Go ahead?") if tool.name == "append" and call.arguments.get("text") in asks else None


def approver(question):
    with open(ledger, "a") as f:
        f.write("asked " + question.call.arguments["text"] + "\\n")
    while answer_file is None or not Path(answer_file).exists():
        time.sleep(0.05)
    return Path(answer_file).read_text().strip() == "allow"


nx = Nexus.from_config(config, tools=make_tools(ledger), approver=approver)
nx.register(AsksAbout())
with nx:
    if mode == "serve":  # a long-lived host: it takes over what killed hosts left, until told to stop
        nx.recover()
        print(json.dumps({{"ready": True}}), flush=True)
        while not (ledger.parent / "stop").exists():
            time.sleep(0.05)
    elif mode == "run":
        from nexus_core import ToolCall
        script = Path(sys.argv[4]).read_text()
        result = nx.invoke(ToolCall(id=call_id, name="run_code", arguments={{"script": script}}))
    else:
        engine = engine_for(nx)
        print(json.dumps({{"interrupted": engine.interrupted_runs()}}), flush=True)
        result = engine.resume(call_id)
if mode == "serve":
    time.sleep(linger)  # what goes on in this process after nx.close() (an embedder that lives on)
    raise SystemExit(0)
print(json.dumps({{"error": result.error, "output": result.output, "metadata": result.metadata,
                      "structured": result.output_structured}}), flush=True)
'''


def write_host(folder: Path) -> Path:
    path = folder / "host.py"
    path.write_text(HOST.format(helpers=str(Path(__file__).resolve().parent)))
    return path


def host_config(tmp_path: Path, ledger: Path, **settings: Any) -> dict[str, Any]:
    return {"workspace": str(tmp_path), "session_dir": str(tmp_path / "sessions"), "skills": [],
            "ledger": str(ledger),
            "plugins": {"active": [CE], CE: {"timeout_seconds": 120, **settings}}}


def start_host(host: Path, config: dict[str, Any], mode: str, call_id: str, script: Path | None = None,
               extra: dict[str, Any] | None = None) -> subprocess.Popen[str]:
    path = host.parent / f"config-{mode}-{time.monotonic_ns()}.json"
    path.write_text(json.dumps({**config, **(extra or {})}))
    args = [sys.executable, str(host), mode, str(path), call_id] + ([str(script)] if script else [])
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"}, start_new_session=True)


def finish(proc: subprocess.Popen[str], timeout: float = 120.0) -> dict[str, Any]:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err
    return json.loads(out.strip().splitlines()[-1])
