"""Session persistence: with `persist_scripts`, each run_code call leaves
`<session_dir>/plugins/nexus.tool.code_exec/<call id>/` with script.py, stdout.txt, result.json
or error.txt, and calls.jsonl (one line per inner call, with its result), however it ended.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from nexus_core import Nexus, ToolCall, ToolDef, Veto, hookimpl
from nexus_core.testing import NexusFactory, assert_error, assert_ok

CE = "nexus.tool.code_exec"


class Gate:
    def __init__(self) -> None:
        self.ids: dict[str, str] = {}  # call id -> text

    @hookimpl
    def nexus_before_tool_invoke(self, call: ToolCall, tool: ToolDef) -> Veto | None:
        if call.name == "echo":
            self.ids[call.id] = call.arguments.get("text")
            if call.arguments.get("text") == "secret":
                return Veto("secrets stay here")
        return None


ECHO = ToolDef(name="echo", handler=lambda arguments: arguments["text"],
               input_schema={"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]})


@pytest.fixture
def gate() -> Gate:
    return Gate()


@pytest.fixture
def sessions(tmp_path: Path) -> Path:
    return tmp_path / "sessions"


def make(nexus_factory: NexusFactory, gate: Gate, sessions: Path, **settings: Any) -> Nexus:
    # a generous timeout: only the test about the timeout gives a short one
    return nexus_factory(plugins=[CE, gate], tools=[ECHO], config={
        "session_dir": str(sessions), "plugins": {CE: {"timeout_seconds": 60, **settings}}})


@pytest.fixture
def nx(nexus_factory: NexusFactory, gate: Gate, sessions: Path) -> Nexus:
    return make(nexus_factory, gate, sessions)


def run(nx: Nexus, script: str, call_id: str) -> Any:
    return nx.invoke(ToolCall(id=call_id, name="run_code", arguments={"script": script}))


def folder(sessions: Path, call_id: str) -> Path:
    return sessions / "plugins" / "nexus.tool.code_exec" / call_id


def files(path: Path) -> list[str]:
    return sorted(p.name for p in path.iterdir())


def calls_of(path: Path) -> list[dict[str, Any]]:
    lines = (path / "calls.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines]


SCRIPT = textwrap.dedent("""\
    import tools

    def run(ctx):
        print("héllo ✓")
        a = tools.echo(text="one").output
        try:
            tools.echo(text="secret")
        except tools.ToolVetoed:
            print("vetoed")
        b = tools.echo(tools.EchoArgs(text="two")).output
        return {"got": [a, b]}
    """)


def test_artifacts_are_persisted(nx: Nexus, sessions: Path, gate: Gate) -> None:
    assert_ok(run(nx, SCRIPT, "call_ok"))
    path = folder(sessions, "call_ok")
    assert files(path) == ["calls.jsonl", "result.json", "script.py", "stdout.txt"]
    assert path.joinpath("script.py").read_text(encoding="utf-8") == SCRIPT
    assert path.joinpath("stdout.txt").read_text(encoding="utf-8") == "héllo ✓\nvetoed\n"
    assert json.loads(path.joinpath("result.json").read_text(encoding="utf-8")) == {"got": ["one", "two"]}

    calls = calls_of(path)
    assert [c["name"] for c in calls] == ["echo", "echo", "echo"]
    assert [c["arguments"] for c in calls] == [{"text": "one"}, {"text": "secret"}, {"text": "two"}]
    assert [c["id"] for c in calls] == list(gate.ids)  # the ids the gates saw
    assert calls[0]["result"]["output"] == "one" and calls[0]["result"]["error"] is None
    assert calls[1]["result"]["error_kind"] == "vetoed" and "secrets stay here" in calls[1]["result"]["error"]
    assert calls[2]["result"]["output"] == "two"


def test_artifacts_are_persisted_on_a_runtime_failure(nx: Nexus, sessions: Path) -> None:
    script = "import tools\n\ndef run(ctx):\n    tools.echo(text='x')\n    print('about to fail')\n    raise RuntimeError('no luck')\n"
    assert_error(run(nx, script, "call_fail"))
    path = folder(sessions, "call_fail")
    assert files(path) == ["calls.jsonl", "error.txt", "script.py", "stdout.txt"]
    assert path.joinpath("error.txt").read_text() == "runtime error: line 6: RuntimeError: no luck\n"
    assert path.joinpath("stdout.txt").read_text() == "about to fail\n"
    assert len(calls_of(path)) == 1


def test_artifacts_are_persisted_for_a_rejected_script(nx: Nexus, sessions: Path) -> None:
    script = "import os\n\ndef run(ctx):\n    return os.getcwd()\n"
    assert_error(run(nx, script, "call_rejected"), "script rejected:")
    path = folder(sessions, "call_rejected")
    assert path.joinpath("script.py").read_text() == script
    assert path.joinpath("error.txt").read_text().startswith("script rejected: line 1: import of 'os'")
    assert not path.joinpath("result.json").exists()
    assert calls_of(path) == []


def test_artifacts_are_persisted_after_a_timeout(nexus_factory: NexusFactory, gate: Gate, sessions: Path) -> None:
    nx = make(nexus_factory, gate, sessions, timeout_seconds=1)
    script = "import tools\n\ndef run(ctx):\n    tools.echo(text='before')\n    print('spinning')\n    while True:\n        pass\n"
    result = assert_error(run(nx, script, "call_slow"), "script timed out after")
    path = folder(sessions, "call_slow")
    assert path.joinpath("error.txt").read_text().startswith("script timed out after")
    assert path.joinpath("error.txt").read_text() == result.error + "\n"
    assert path.joinpath("stdout.txt").read_text() == "spinning\n"
    assert [c["arguments"] for c in calls_of(path)] == [{"text": "before"}]


def test_a_null_result_is_persisted_as_null(nx: Nexus, sessions: Path) -> None:
    assert_ok(run(nx, "def run(ctx):\n    pass\n", "call_none"))
    assert folder(sessions, "call_none").joinpath("result.json").read_text() == "null"


def test_each_call_has_its_own_folder(nx: Nexus, sessions: Path) -> None:
    for i in range(3):
        assert_ok(run(nx, f"def run(ctx):\n    return {i}\n", f"call_{i}"))
    for i in range(3):
        assert folder(sessions, f"call_{i}").joinpath("result.json").read_text() == str(i)


def test_nothing_is_persisted_without_persist_scripts(nexus_factory: NexusFactory, gate: Gate, sessions: Path) -> None:
    nx = make(nexus_factory, gate, sessions, persist_scripts=False)
    assert_ok(run(nx, SCRIPT, "call_quiet"))
    assert_error(run(nx, "import os\ndef run(ctx):\n    return 1\n", "call_quiet_rejected"))
    assert not sessions.exists() or list(sessions.rglob("*")) == []


@pytest.mark.parametrize("bad_id", ["ABSOLUTE", "../../../escaped"])
def test_a_call_id_cannot_put_the_artifacts_outside_the_session_dir(
        nx: Nexus, sessions: Path, tmp_path: Path, bad_id: str) -> None:
    call_id = str(tmp_path / "outside") if bad_id == "ABSOLUTE" else bad_id
    run(nx, "def run(ctx):\n    return 1\n", call_id)
    written = [p for p in tmp_path.rglob("script.py")]
    assert written, "the run left no script.py at all"
    assert all(sessions.resolve() in p.resolve().parents for p in written), f"written outside: {written}"
