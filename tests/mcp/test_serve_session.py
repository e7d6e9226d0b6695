"""What `nexus mcp serve` does for a client while a call runs, and beyond tools: progress (a
tool's `ctx.progress`, run_code's output), the Nexus's log records after `logging/setLevel`,
`notifications/cancelled` stopping the call, a gate's `Ask` and the `question` tool put to the
client's user by elicitation (and the refusal when it cannot be), skills' files and runs'
records as resources (and what a client may not read through them), and the HTTP transport's
priming event, `retry:` and resumption. The MCP SDK's own client, in process (the server's
handlers are the same on every transport) and over real HTTP."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import mcp_types as types
import pytest
from mcp import Client, MCPError
from mcp_helpers import BIN, HttpServe
from nexus_mcp._calls import MAX_PENDING_LOGS, CallChannel, visible
from nexus_mcp._event_store import BoundedEventStore

from nexus_core import Ask, Nexus, hookimpl, native_tool
from nexus_mcp import NexusMcpServer

pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")

SKILL = """---
name: haiku
description: Write a haiku about the task.
---
Count the syllables: five, seven, five.
"""


def steps(arguments: dict[str, Any], ctx: Any) -> str:
    """Three steps, each reported, each logged; the third log record carries an ESC sequence."""
    log = logging.getLogger("nexus_test_steps")
    for i in range(3):
        ctx.progress(i * 50, 100, f"step {i}")
        log.info("step %d%s", i, " \x1b[2J" if i == 2 else "")
    log.debug("a detail")
    return "done"


def sleepy(arguments: dict[str, Any], ctx: Any) -> str:
    started.set()
    ctx.cancel.wait(120)
    return f"stopped: {ctx.cancel.reason}"


started = threading.Event()


class AskAboutDanger:
    """A gate that asks before `danger` runs."""

    @hookimpl
    def nexus_before_tool_invoke(self, call: Any, tool: Any) -> Any:
        if call.name == "danger":
            return Ask("Really run danger?")
        return None


class Results:
    def __init__(self) -> None:
        self.seen: list[Any] = []

    @hookimpl
    def nexus_tool_result(self, call: Any, result: Any) -> None:
        self.seen.append(result)


@pytest.fixture
def nexus(tmp_path: Path) -> Iterator[Nexus]:
    skill = tmp_path / "skills" / "haiku"
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text(SKILL)
    (skill / "syllables.txt").write_text("five seven five\n")
    (tmp_path / "outside.txt").write_text("not a skill's")
    (skill / "escape.txt").symlink_to(tmp_path / "outside.txt")
    (skill / "alias.txt").symlink_to(skill / "syllables.txt")  # a link inside the folder is one of its files
    config = {"workspace": str(tmp_path), "session_dir": str(tmp_path / "session"),
              "skills": [str(tmp_path / "skills")],
              "plugins": {"active": ["nexus.tool.code_exec", "nexus.skills", "nexus.tool.question"]}}
    tools = [native_tool("steps", "Three steps.", {"type": "object"}, run=steps, ctx=True),
             native_tool("sleepy", "Wait until cancelled.", {"type": "object"}, run=sleepy, ctx=True),
             native_tool("danger", "Something a gate asks about.",
                         {"type": "object", "properties": {"what": {"type": "string"}}},
                         run=lambda a: f"ran {a.get('what')}")]
    with Nexus(config, tools=tools) as nx:
        nx.register(AskAboutDanger(), name="test.ask")
        yield nx


@pytest.fixture
def server(nexus: Nexus) -> Iterator[NexusMcpServer]:
    served = NexusMcpServer(nexus)
    served._logs.attach()  # what serve_stdio and serve_http do
    yield served
    served.close()


def run(fn: Any) -> Any:
    return anyio.run(fn)


# -- progress -------------------------------------------------------------------------------------


def test_a_tools_progress_reaches_the_client_before_its_result(server: NexusMcpServer) -> None:
    async def check() -> None:
        async with Client(server.server, cache=None, mode="legacy") as client:
            reports: list[tuple[float, float | None, str | None]] = []

            async def on_progress(done: float, total: float | None, message: str | None) -> None:
                reports.append((done, total, message))

            result = await client.call_tool("steps", {}, progress_callback=on_progress)
            assert result.content[0].text == "done"  # type: ignore[union-attr]
            # every report in order, before the result (the server drains them first)
            assert [r[0] for r in reports] == sorted(r[0] for r in reports) and reports[-1] == (100, 100, "step 2")
            assert reports[0] == (0, 100, "step 0")

    run(check)


def test_run_codes_output_is_progress(server: NexusMcpServer) -> None:
    script = "def run(ctx):\n    for i in range(3):\n        print(f'line {i}', flush=True)\n    return 7\n"

    async def check() -> None:
        async with Client(server.server, cache=None, mode="legacy") as client:
            messages: list[str | None] = []
            done: list[float] = []

            async def on_progress(progress: float, total: float | None, message: str | None) -> None:
                done.append(progress)
                messages.append(message)

            result = await client.call_tool("run_code", {"script": script}, progress_callback=on_progress)
            assert not result.is_error, result
            assert [m for m in messages if m] == ["line 0", "line 1", "line 2"]
            assert done == sorted(done) and len(set(done)) == len(done)  # growing, as the spec asks

    run(check)


# -- logging --------------------------------------------------------------------------------------


def test_log_records_go_to_a_client_that_asked_from_its_level_on(server: NexusMcpServer) -> None:
    before = logging.root.level

    async def check() -> None:
        records: list[types.LoggingMessageNotificationParams] = []

        async def on_log(params: types.LoggingMessageNotificationParams) -> None:
            records.append(params)

        async with Client(server.server, cache=None, mode="legacy", logging_callback=on_log) as client:
            await client.call_tool("steps", {})
            assert records == []  # nothing until the client asks
            await client.set_logging_level("info")
            await client.call_tool("steps", {})
            assert [(r.level, r.logger) for r in records] == [("info", "nexus_test_steps")] * 3  # not the debug one
            assert [r.data for r in records][:2] == ["step 0", "step 1"]
            assert records[2].data == "step 2 \\x1b[2J"  # the escape is shown, not obeyed
            records.clear()
            await client.set_logging_level("debug")
            await client.call_tool("steps", {})
            assert [r.data for r in records][-1] == "a detail"

        async with Client(server.server, cache=None, mode="legacy", logging_callback=on_log) as other:
            records.clear()
            await other.call_tool("steps", {})
            assert records == []  # the level was the other client's

    run(check)
    server.close()
    assert logging.root.level == before  # lowered while a client wanted more; as it was once the server stops


def test_a_client_that_does_not_read_loses_records_not_memory() -> None:
    async def check() -> None:
        channel = CallChannel(asyncio.get_running_loop(), wants_progress=False, log_level=logging.INFO)
        for i in range(MAX_PENDING_LOGS + 50):
            channel.put_log(logging.LogRecord("nexus_x", logging.INFO, __file__, 1, "record %d", (i,), None))
        sent: list[tuple[str, Any]] = []

        class Session:
            async def send_notification(self, notification: Any, related_request_id: Any) -> None:
                assert related_request_id == 1  # on the call's own stream
                sent.append((notification.params.level, notification.params.data))

        channel.close()
        await channel.pump(Session(), 1)
        assert len(sent) == MAX_PENDING_LOGS + 1
        assert sent[-1] == ("warning", "50 log records of this call were dropped: the client took them too slowly")

    run(check)
    assert visible("a" * 5000).endswith("... [1000 more characters]")
    assert visible("\u202eevil\x07") == "\\u202eevil\\x07"


# -- cancellation ---------------------------------------------------------------------------------


def test_notifications_cancelled_cancels_the_calls_token(nexus: Nexus, server: NexusMcpServer) -> None:
    results = Results()
    nexus.register(results, name="test.results")
    started.clear()

    async def check() -> None:
        async with Client(server.server, cache=None, mode="legacy") as client:
            async with anyio.create_task_group() as group:
                group.start_soon(client.call_tool, "sleepy", {})
                await anyio.to_thread.run_sync(started.wait, 60)
                group.cancel_scope.cancel()  # the SDK client sends notifications/cancelled
            for _ in range(1200):
                if results.seen:
                    break
                await anyio.sleep(0.05)

    run(check)
    assert [r.output for r in results.seen] == ["stopped: the MCP client cancelled the request"]


# -- elicitation ----------------------------------------------------------------------------------


def test_an_ask_is_put_to_the_clients_user(server: NexusMcpServer) -> None:
    asked: list[types.ElicitRequestParams] = []
    replies = [types.ElicitResult(action="accept", content={"approve": True}),
               types.ElicitResult(action="accept", content={"approve": False, "reason": "not today"}),
               types.ElicitResult(action="decline")]

    async def on_elicit(ctx: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params)
        return replies.pop(0)

    async def check() -> None:
        async with Client(server.server, cache=None, mode="legacy", elicitation_callback=on_elicit) as client:
            approved = await client.call_tool("danger", {"what": "x\x1b]0;owned\x07"})
            assert approved.content[0].text == "ran x\x1b]0;owned\x07"  # type: ignore[union-attr]
            denied = await client.call_tool("danger", {"what": "y"})
            assert denied.is_error and denied.content[0].text == "vetoed: denied by the user: not today"  # type: ignore[union-attr]
            declined = await client.call_tool("danger", {"what": "z"})
            assert declined.is_error and declined.content[0].text == "vetoed: denied by the user"  # type: ignore[union-attr]

    run(check)
    message = asked[0].message  # type: ignore[union-attr]
    assert message.startswith("Really run danger?\n") and "Asked by: test.ask" in message and "Tool: danger" in message
    assert '"what": "x\\u001b]0;owned\\u0007"' in message  # the arguments, as JSON: no control reaches a terminal
    assert "\x1b" not in message and "\x07" not in message


def test_the_question_tool_is_answered_by_the_clients_user(server: NexusMcpServer) -> None:
    async def on_elicit(ctx: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        assert params.message == "Which colour?"  # type: ignore[union-attr]
        assert "red; blue" in params.requested_schema["properties"]["answer"]["description"]  # type: ignore[union-attr]
        return types.ElicitResult(action="accept", content={"answer": "blue"})

    async def check() -> None:
        async with Client(server.server, cache=None, mode="legacy", elicitation_callback=on_elicit) as client:
            answered = await client.call_tool("question", {"question": "Which colour?", "options": ["red", "blue"]})
            assert answered.structured_content["answer"] == "blue"  # type: ignore[index]

    run(check)


def test_a_run_code_scripts_inner_call_is_asked_about_too(server: NexusMcpServer) -> None:
    """The inner call runs on a thread of run_code's host, not the server's: the question still
    reaches the client that made the run_code call, naming the script's call."""
    asked: list[str] = []

    async def on_elicit(ctx: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"approve": True})

    script = "import tools\n\ndef run(ctx):\n    return tools.danger(what='inner')\n"

    async def check() -> None:
        async with Client(server.server, cache=None, mode="legacy", elicitation_callback=on_elicit) as client:
            result = await client.call_tool("run_code", {"script": script})
            assert not result.is_error, result
            assert "ran inner" in json.dumps(result.structured_content)

    run(check)
    assert len(asked) == 1 and "Tool: danger" in asked[0] and "Made by: line 4 of the run_code script of call" in asked[0]


def test_cancelling_a_call_that_waits_for_the_user_ends_the_wait(nexus: Nexus, server: NexusMcpServer) -> None:
    results = Results()
    nexus.register(results, name="test.results")
    asking = threading.Event()

    async def on_elicit(ctx: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asking.set()
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    async def check() -> None:
        async with Client(server.server, cache=None, mode="legacy", elicitation_callback=on_elicit) as client:
            async with anyio.create_task_group() as group:
                group.start_soon(client.call_tool, "danger", {"what": "x"})
                await anyio.to_thread.run_sync(asking.wait, 60)
                group.cancel_scope.cancel()
            for _ in range(1200):
                if results.seen:
                    break
                await anyio.sleep(0.05)

    run(check)
    [result] = results.seen
    assert result.vetoed and "the call was cancelled (the MCP client cancelled the request)" in result.error


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_a_client_that_cannot_be_asked_gets_what_the_operator_can_change(mode: str, server: NexusMcpServer) -> None:
    async def check() -> None:
        async with Client(server.server, cache=None, mode=mode) as client:  # type: ignore[arg-type]
            refused = await client.call_tool("danger", {"what": "x"})
            text = refused.content[0].text  # type: ignore[union-attr]
            assert refused.is_error and text.startswith("vetoed: gate 'test.ask' asks 'Really run danger?', and the "
                                                        "MCP client does not declare elicitation (it cannot ask its user); no one can approve the call here")
            assert "plugins.test.ask" in text and "plugins.active" in text and "approver" not in text
            pending = await client.call_tool("question", {"question": "Which colour?"})
            assert pending.structured_content["status"] == "pending"  # type: ignore[index]

    run(check)


# -- resources ------------------------------------------------------------------------------------


def test_skills_files_are_resources(server: NexusMcpServer) -> None:
    async def check() -> None:
        async with Client(server.server, cache=None, mode="legacy") as client:
            uris = {str(r.uri) for r in (await client.list_resources()).resources}
            assert uris == {"skill://haiku/SKILL.md", "skill://haiku/syllables.txt", "skill://haiku/alias.txt"}
            assert (await client.read_resource("skill://haiku/alias.txt")).contents[0].text == "five seven five\n"  # type: ignore[union-attr]
            read = await client.read_resource("skill://haiku/syllables.txt")
            assert read.contents[0].text == "five seven five\n"  # type: ignore[union-attr]
            assert "five, seven, five" in (await client.read_resource("skill://haiku/SKILL.md")).contents[0].text  # type: ignore[union-attr]
            for uri in ("skill://haiku/escape.txt", "skill://haiku/../outside.txt", "skill://haiku/..%2Foutside.txt",
                        "skill://haiku/%2E%2E/outside.txt", "skill://nope/SKILL.md", "file:///etc/passwd",
                        "skill://haiku//etc/passwd"):
                with pytest.raises(MCPError, match="resource not found"):
                    await client.read_resource(uri)

    run(check)


def test_a_runs_record_is_readable_by_the_client_that_made_it_alone(server: NexusMcpServer, tmp_path: Path) -> None:
    script = "def run(ctx):\n    print('hello from the run')\n    return {'n': 1}\n"

    async def check() -> None:
        async with Client(server.server, cache=None, mode="legacy") as client, \
                Client(server.server, cache=None, mode="legacy") as other:
            await client.call_tool("run_code", {"script": script})
            runs = [str(r.uri) for r in (await client.list_resources()).resources if str(r.uri).startswith("nexus-run:")]
            call_id = runs[0].split("/")[2]
            assert set(runs) >= {f"nexus-run://{call_id}/script.py", f"nexus-run://{call_id}/stdout.txt",
                                 f"nexus-run://{call_id}/result.json"}
            assert (await client.read_resource(f"nexus-run://{call_id}/script.py")).contents[0].text == script  # type: ignore[union-attr]
            stdout = (await client.read_resource(f"nexus-run://{call_id}/stdout.txt")).contents[0].text  # type: ignore[union-attr]
            assert stdout == "hello from the run\n"
            # another client sees no run of this one's, and cannot read it by its id
            assert not [r for r in (await other.list_resources()).resources if str(r.uri).startswith("nexus-run:")]
            with pytest.raises(MCPError, match="no run_code run of that call id"):
                await other.read_resource(f"nexus-run://{call_id}/script.py")
            # nor can the client itself reach past the record's files
            folder = next((tmp_path / "session").rglob(f"{call_id}"))
            (folder / "stdout.txt").unlink()
            (folder / "stdout.txt").symlink_to(tmp_path / "outside.txt")
            for uri in (f"nexus-run://{call_id}/stdout.txt", f"nexus-run://{call_id}/../{call_id}/script.py",
                        f"nexus-run://{call_id}/%2E%2E%2Foutside.txt", "nexus-run://someone-elses/script.py"):
                with pytest.raises(MCPError, match="resource not found"):
                    await client.read_resource(uri)
            # nor through the record's folder made a link to another folder since
            elsewhere = tmp_path / "elsewhere"
            elsewhere.mkdir()
            (elsewhere / "script.py").write_text("someone else's")
            folder.rename(tmp_path / "moved")
            folder.symlink_to(elsewhere, target_is_directory=True)
            with pytest.raises(MCPError, match="resource not found"):
                await client.read_resource(f"nexus-run://{call_id}/script.py")

    run(check)


# -- HTTP: the priming event, retry:, resumption ----------------------------------------------


def test_http_streams_start_with_a_priming_event_and_retry(tmp_path: Path) -> None:
    config = tmp_path / "nexus.yaml"
    config.write_text(json.dumps({"workspace": str(tmp_path), "session_dir": str(tmp_path / "s"),
                                  "plugins": {"active": ["nexus.tool.question"]}}))
    server = HttpServe(config, {k: v for k, v in os.environ.items() if not k.startswith("NEXUS_")})
    try:
        headers = {**server.headers, "Accept": "application/json, text/event-stream",
                   "Content-Type": "application/json"}
        with httpx.Client(timeout=60) as http:
            init = http.post(server.url, headers=headers, json={
                "jsonrpc": "2.0", "id": 1, "method": "initialize",
                "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                           "clientInfo": {"name": "raw", "version": "1"}}})
            session = init.headers["mcp-session-id"]
            headers.update({"Mcp-Session-Id": session, "Mcp-Protocol-Version": "2025-11-25"})
            http.post(server.url, headers=headers, json={"jsonrpc": "2.0", "method": "notifications/initialized"})
            listed = http.post(server.url, headers=headers, json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
        events = [e for e in listed.text.replace("\r\n", "\n").split("\n\n") if e.strip()]
        first = dict(line.split(": ", 1) if ": " in line else (line.rstrip(":"), "") for line in events[0].split("\n"))
        assert first.get("id") and first.get("retry") == "1000" and first.get("data", "") == ""
        assert '"tools"' in events[-1]
    finally:
        server.stop()


def test_the_event_store_replays_what_was_missed_and_stays_bounded() -> None:
    async def check() -> None:
        store = BoundedEventStore(max_events=10, per_stream=4)
        message = types.JSONRPCNotification(jsonrpc="2.0", method="notifications/progress", params={"progress": 1})
        priming = await store.store_event("s1", None)
        ids = [await store.store_event("s1", message) for _ in range(3)]
        replayed: list[str | None] = []

        async def send(event: Any) -> None:
            replayed.append(event.event_id)

        assert await store.replay_events_after(priming, send) == "s1" and replayed == ids
        assert await store.replay_events_after("not-an-id", send) is None
        for i in range(30):
            await store.store_event(f"other{i}", message)
        assert store.count <= 10
        assert await store.replay_events_after(ids[0], send) is None  # forgotten, not kept forever

    run(check)


# -- the MCP Inspector's command line -------------------------------------------------------------

#: the Inspector version test_serve.py uses
INSPECTOR = "@modelcontextprotocol/inspector@0.17.1"


def test_the_mcp_inspector_cli_reads_resources_and_sets_the_log_level(tmp_path: Path) -> None:
    npx = shutil.which("npx")
    if npx is None:
        pytest.skip("npx is not installed (Node.js 20 brings it): the MCP Inspector CLI cannot run")
    skill = tmp_path / "skills" / "haiku"
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text(SKILL)
    config = tmp_path / "nexus.yaml"
    config.write_text(json.dumps({"workspace": str(tmp_path), "session_dir": str(tmp_path / "s"),
                                  "skills": [str(tmp_path / "skills")], "plugins": {"active": ["nexus.skills"]}}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEXUS_")}
    command = ["-e", f"NEXUS_CONFIG={config}", str(BIN / "nexus"), "--trust-config", "mcp", "serve"]

    def inspect(*args: str) -> Any:
        proc = subprocess.run([npx, "-y", INSPECTOR, "--cli", *command, *args], env=env, cwd=tmp_path,
                              capture_output=True, text=True, timeout=600, check=False)
        assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr}"
        return json.loads(proc.stdout)

    listed = inspect("--method", "resources/list")
    assert [r["uri"] for r in listed["resources"]] == ["skill://haiku/SKILL.md"]
    read = inspect("--method", "resources/read", "--uri", "skill://haiku/SKILL.md")
    assert "five, seven, five" in read["contents"][0]["text"]
    assert inspect("--method", "logging/setLevel", "--log-level", "debug") == {}


BACKGROUND = '''
import logging
import threading

from nexus_core import hookimpl, tool


@tool
def background() -> str:
    """Log from a thread of its own (outside any call's context), and from the call."""
    thread = threading.Thread(target=lambda: logging.getLogger("nexus_test_background").warning("from a thread"))
    thread.start()
    thread.join()
    logging.getLogger("nexus_test_background").warning("from the call")
    return "ok"


@hookimpl
def nexus_register_tools(register):
    register(background)
'''


def test_over_stdio_records_made_outside_any_call_reach_the_client(tmp_path: Path) -> None:
    """stdio's one client is the operator's: it gets the Nexus's records made outside its calls
    too (over HTTP those go to no client: test_log_records_go_to_a_client_that_asked... checks a
    second client gets none of the first's)."""
    from mcp import StdioServerParameters
    from mcp.client.stdio import stdio_client
    from mcp_helpers import FakePlugins

    fakes = FakePlugins(tmp_path / "site")
    fakes.add("test.background", "nexus_test_background", BACKGROUND)
    config = tmp_path / "nexus.yaml"
    config.write_text(json.dumps({"workspace": str(tmp_path), "session_dir": str(tmp_path / "s"),
                                  "plugins": {"active": ["test.background"]}}))
    params = StdioServerParameters(command=str(BIN / "nexus"), args=["--trust-config", "--config", str(config), "mcp", "serve"],
                                   env={"PYTHONPATH": fakes.env()["PYTHONPATH"]}, cwd=tmp_path)
    records: list[Any] = []

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        records.append(params.data)

    async def check(err: Any) -> None:
        async with Client(stdio_client(params, errlog=err), cache=None, mode="legacy",
                          logging_callback=on_log) as client:
            await client.set_logging_level("warning")
            assert (await client.call_tool("background", {})).content[0].text == "ok"  # type: ignore[union-attr]
            for _ in range(600):  # the thread's record comes on the connection's own stream
                if "from a thread" in records:
                    break
                await anyio.sleep(0.05)

    with open(tmp_path / "stderr.txt", "w") as err:
        anyio.run(check, err)
    assert sorted(records) == ["from a thread", "from the call"]
    assert "from a thread" in (tmp_path / "stderr.txt").read_text()  # and the server's stderr still has it
