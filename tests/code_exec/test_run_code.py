"""run_code end to end: a real child process per script, real tools, real gates.

One test per rule of the brief's script contract: the result shape, rejections, runtime errors
with the script's line, vetoes and failures as exceptions the script can catch, typed results,
the Result fallback, the result's JSON rules and the call limit.
"""

from __future__ import annotations

import json
import textwrap
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from nexus_core import Nexus, ToolCall, ToolDef, ToolResult, Veto, failure, hookimpl
from nexus_core.testing import NexusFactory, assert_error, assert_ok
from nexus_tool_code_exec import engine_for

CE = "nexus.tool.code_exec"


class Recorder:
    """A gate that records every call it sees and vetoes the ones `veto` picks."""

    def __init__(self) -> None:
        self.calls: list[ToolCall] = []
        self.requests: list[Any] = []
        self.veto: Any = lambda call: None
        self._lock = threading.Lock()

    @hookimpl
    def nexus_before_tool_invoke(self, call: ToolCall, tool: ToolDef) -> Veto | None:
        with self._lock:
            self.calls.append(call)
        reason = self.veto(call)
        return Veto(reason) if reason else None

    @hookimpl
    def nexus_code_exec_request(self, request: Any) -> None:
        self.requests.append(request)

    def inner(self, name: str) -> list[ToolCall]:
        return [c for c in self.calls if c.name == name]


def echo(arguments: dict[str, Any]) -> str:
    return arguments["text"]


ECHO = ToolDef(name="echo", handler=echo, description="Echo the text back.",
               input_schema={"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"],
                             "additionalProperties": False})

STATS_SCHEMA = {
    "type": "object",
    "properties": {
        "count": {"type": "integer"},
        "names": {"type": "array", "items": {"type": "string"}},
        "mode": {"enum": ["fast", "slow"]},
        "owner": {"type": "object", "properties": {"login": {"type": "string"}}, "required": ["login"]},
        "note": {"type": ["string", "null"]},
    },
    "required": ["count", "names", "mode", "owner"],
}
STATS_VALUE = {"count": 2, "names": ["a", "b"], "mode": "fast", "owner": {"login": "ada"}}


def fixed_tool(name: str, result: Any, output_schema: dict[str, Any] | None = None) -> ToolDef:
    return ToolDef(name=name, handler=lambda arguments: result, output_schema=output_schema,
                   input_schema={"type": "object", "properties": {}})


#: run_code's timeout in these tests: generous, none of them is about the timeout (test_timeout.py
#: is), and a busy machine must not turn a run into "script timed out"
TIMEOUT = 60


def make(nexus_factory: NexusFactory, *tools: ToolDef, plugins: tuple[Any, ...] = (), **settings: Any) -> Nexus:
    return nexus_factory(plugins=[CE, *plugins], config={"plugins": {CE: {"timeout_seconds": TIMEOUT, **settings}}},
                         tools=tools)


def run(nx: Nexus, script: str, call_id: str | None = None) -> ToolResult:
    source = textwrap.dedent(script)
    if call_id is None:
        return nx.invoke("run_code", {"script": source})
    return nx.invoke(ToolCall(id=call_id, name="run_code", arguments={"script": source}))


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Nexus, Recorder]]:
    """One Nexus (and so one warm zygote) for the tests that need no settings of their own."""
    root = tmp_path_factory.mktemp("run_code")
    gate = Recorder()
    config = {"workspace": str(root), "session_dir": str(root / "sessions"), "skills": [],
              "plugins": {"active": [CE], CE: {"timeout_seconds": TIMEOUT}}}
    with Nexus.from_config(config, plugins=[gate], tools=[ECHO]) as nx:
        yield nx, gate


@pytest.fixture
def gate(shared: tuple[Nexus, Recorder]) -> Recorder:
    gate = shared[1]
    gate.calls.clear()
    gate.requests.clear()
    gate.veto = lambda call: None
    return gate


@pytest.fixture
def nx(shared: tuple[Nexus, Recorder], gate: Recorder) -> Iterator[Nexus]:
    nx = shared[0]
    before = {t.name for t in nx.tools()}
    yield nx
    for tool in nx.tools():  # tools a test added
        if tool.name not in before:
            nx.remove_tool(tool.name)


# -- the result -----------------------------------------------------------------------------


def test_echo_round_trip(nx: Nexus, gate: Recorder) -> None:
    result = assert_ok(run(nx, """\
        import tools

        def run(ctx):
            r = tools.echo(text="hello")
            print("echoed", r.output)
            return {"echo": r.output, "is_result": isinstance(r, tools.Result)}
        """))
    expected = {"stdout": "echoed hello\n", "result": {"echo": "hello", "is_result": True}}
    assert result.output_structured == expected
    # what the model reads: the printed text as it is, then the result (issue 14.8)
    assert result.output == 'echoed hello\n--- result ---\n{"echo": "hello", "is_result": true}'
    assert [c.arguments for c in gate.inner("echo")] == [{"text": "hello"}]


def test_an_args_object_and_keywords_make_the_same_call(nx: Nexus, gate: Recorder) -> None:
    assert_ok(run(nx, """\
        import tools

        def run(ctx):
            tools.echo(tools.EchoArgs(text="a"))
            tools.echo(text="b")
        """))
    assert [c.arguments for c in gate.inner("echo")] == [{"text": "a"}, {"text": "b"}]


def test_empty_keys_are_left_out_of_the_result(nx: Nexus) -> None:
    result = assert_ok(run(nx, "def run(ctx):\n    return None\n"))
    assert result.output_structured == {} and result.output == "(the script printed nothing and returned None)"
    result = assert_ok(run(nx, "def run(ctx):\n    print('only output')\n"))
    assert result.output_structured == {"stdout": "only output\n"} and result.output == "only output\n"
    result = assert_ok(run(nx, "def run(ctx):\n    return [1, 'two', None, {'x': 1.5}]\n"))
    assert result.output_structured == {"result": [1, "two", None, {"x": 1.5}]}


def test_a_falsy_result_is_kept(nx: Nexus) -> None:
    for value in ("0", "False", "''", "[]"):
        result = assert_ok(run(nx, f"def run(ctx):\n    return {value}\n"))
        assert "result" in result.output_structured, value


def test_ctx_carries_the_call_id_and_the_time_left(nx: Nexus) -> None:
    result = assert_ok(run(nx, """\
        def run(ctx):
            return {"id": ctx.call_id, "left": ctx.remaining(), "limit": ctx.timeout_seconds}
        """, call_id="call_ctx"))
    value = result.output_structured["result"]
    assert value["id"] == "call_ctx" and value["limit"] == TIMEOUT
    assert 0 < value["left"] <= TIMEOUT


def test_inner_calls_carry_the_run_code_call_as_parent(nx: Nexus, gate: Recorder) -> None:
    assert_ok(run(nx, """\
        import tools

        def run(ctx):
            for word in ("a", "b", "c"):
                tools.echo(text=word)
        """, call_id="call_outer"))
    inner = gate.inner("echo")
    assert len(inner) == 3
    assert {c.parent_call_id for c in inner} == {"call_outer"}
    assert len({c.id for c in inner}) == 3 and "call_outer" not in {c.id for c in inner}


# -- rejected before anything runs ----------------------------------------------------------


def test_thread_import_is_rejected_and_nothing_runs(nx: Nexus, gate: Recorder) -> None:
    result = assert_error(run(nx, """\
        import tools
        import threading

        def run(ctx):
            tools.echo(text="never")
        """), kind="failure")
    assert result.error.startswith("script rejected: line 2: import of 'threading' is not allowed")
    assert gate.inner("echo") == [] and gate.requests == []


def test_os_import_is_rejected(nx: Nexus) -> None:
    result = assert_error(run(nx, "import os\n\ndef run(ctx):\n    return os.listdir('/')\n"))
    assert result.error.startswith("script rejected: line 1: import of 'os' is not allowed")


def test_every_violation_is_reported_at_once_with_its_line(nx: Nexus) -> None:
    result = assert_error(run(nx, """\
        import os
        import subprocess

        def run(ctx, extra):
            return eval("1")
        """))
    assert result.error.startswith("script rejected: ")
    for fragment in ("line 1: import of 'os'", "line 2: import of 'subprocess'",
                     "line 4: run must take exactly one parameter", "line 5: 'eval' is not allowed"):
        assert fragment in result.error


def test_syntax_error_is_a_rejection_with_its_line(nx: Nexus) -> None:
    result = assert_error(run(nx, "def run(ctx):\n    return (1,\n"))
    assert result.error.startswith("script rejected: line 2: syntax error: ")


@pytest.mark.parametrize("script", ["def main(ctx):\n    return 1\n", "run = lambda ctx: 1\n"])
def test_missing_run_is_rejected(nx: Nexus, script: str) -> None:
    assert_error(run(nx, script), "script rejected: line 1: the script must define a top-level function `def run(ctx):`")


@pytest.mark.parametrize("signature", ["def run():", "def run(a, b):", "def run(*args):"])
def test_run_with_the_wrong_arity_is_rejected(nx: Nexus, signature: str) -> None:
    assert_error(run(nx, f"{signature}\n    return 1\n"),
                 "script rejected: line 1: run must take exactly one parameter: `def run(ctx):`")


# -- runtime errors -------------------------------------------------------------------------


def test_runtime_error_names_the_scripts_line_and_the_exception(nx: Nexus) -> None:
    result = assert_error(run(nx, """\
        def run(ctx):
            values = [1, 2, 0]
            total = 0
            for v in values:
                total += 10 / v
            return total
        """))
    assert result.error == "runtime error: line 5: ZeroDivisionError: division by zero"
    for internal in ("_child", "Traceback", "File ", "exec("):
        assert internal not in result.output


def test_runtime_error_in_a_helper_names_the_innermost_script_line(nx: Nexus) -> None:
    result = assert_error(run(nx, """\
        def parse(text):
            return int(text)

        def run(ctx):
            return parse("twelve")
        """))
    assert result.error == "runtime error: line 2: ValueError: invalid literal for int() with base 10: 'twelve'"


def test_run_raising_is_a_runtime_error(nx: Nexus) -> None:
    result = assert_error(run(nx, """\
        class Oops(Exception):
            pass

        def run(ctx):
            raise Oops("the plan failed")
        """))
    assert result.error == "runtime error: line 5: Oops: the plan failed"


def test_an_error_at_module_level_names_its_line(nx: Nexus) -> None:
    result = assert_error(run(nx, "import json\nCONFIG = json.loads('{bad')\n\ndef run(ctx):\n    return CONFIG\n"))
    assert result.error.startswith("runtime error: line 2: JSONDecodeError: ")


@pytest.mark.parametrize(("statement", "error"), [("raise SystemExit(3)", "runtime error: line 2: SystemExit: 3"),
                                                  ("raise KeyboardInterrupt", "runtime error: line 2: KeyboardInterrupt"),
                                                  ("raise MemoryError", "memory limit exceeded")])
def test_base_exceptions_from_the_script_are_reported_not_fatal(nx: Nexus, statement: str, error: str) -> None:
    assert_error(run(nx, f"def run(ctx):\n    {statement}\n"), error)
    assert_ok(run(nx, "def run(ctx):\n    return 1\n"))


def test_output_before_a_runtime_error_is_kept(nx: Nexus) -> None:
    result = assert_error(run(nx, "def run(ctx):\n    print('step 1 done')\n    raise ValueError('step 2')\n"))
    assert result.error == "runtime error: line 3: ValueError: step 2"
    assert result.output == "runtime error: line 3: ValueError: step 2\n--- stdout ---\nstep 1 done\n"
    assert result.output_structured == {"stdout": "step 1 done\n"}


# -- vetoes and failures --------------------------------------------------------------------


def test_a_veto_is_ToolVetoed_which_the_script_can_catch_and_go_on(nx: Nexus, gate: Recorder) -> None:
    gate.veto = lambda call: "secrets stay here" if call.arguments.get("text") == "secret" else None
    result = assert_ok(run(nx, """\
        import tools

        def run(ctx):
            try:
                tools.echo(text="secret")
            except tools.ToolVetoed as exc:
                print("vetoed:", exc.tool, exc.reason, isinstance(exc, tools.ToolError))
            return tools.echo(text="public").output
        """))
    assert result.output_structured["result"] == "public"
    assert result.output_structured["stdout"] == "vetoed: echo secrets stay here True\n"  # .reason: the reason alone
    assert [c.arguments["text"] for c in gate.inner("echo")] == ["secret", "public"]


def test_an_uncaught_veto_names_the_scripts_line(nx: Nexus, gate: Recorder) -> None:
    gate.veto = lambda call: "no echo today" if call.name == "echo" else None
    result = assert_error(run(nx, "import tools\n\ndef run(ctx):\n    tools.echo(text='x')\n"))
    assert result.error == "runtime error: line 4: ToolVetoed: echo: vetoed: no echo today"


def test_a_tool_that_raises_is_ToolFailed(nx: Nexus) -> None:
    def broken(arguments: dict[str, Any]) -> str:
        raise RuntimeError("disk on fire")

    nx.add_tool(ToolDef(name="broken", handler=broken))
    result = assert_ok(run(nx, """\
        import tools

        def run(ctx):
            try:
                tools.broken()
            except tools.ToolVetoed:
                return "wrong exception"
            except tools.ToolFailed as exc:
                return {"tool": exc.tool, "reason": exc.reason, "base": isinstance(exc, tools.ToolError)}
        """))
    value = result.output_structured["result"]
    assert value["tool"] == "broken" and value["base"] is True
    assert "disk on fire" in value["reason"]


def test_a_failure_value_is_ToolFailed(nx: Nexus) -> None:
    nx.add_tool(fixed_tool("picky", failure("amount must be positive")))
    result = assert_error(run(nx, "import tools\n\ndef run(ctx):\n    tools.picky()\n"))
    assert result.error == "runtime error: line 4: ToolFailed: picky: amount must be positive"


def test_invalid_arguments_are_ToolFailed(nx: Nexus) -> None:
    result = assert_error(run(nx, "import tools\n\ndef run(ctx):\n    tools.echo(text=5)\n"))
    assert result.error.startswith("runtime error: line 4: ToolFailed: echo: invalid arguments for echo")


def test_an_unknown_keyword_is_rejected_before_the_run(nx: Nexus, gate: Recorder) -> None:
    """Checked against the bindings before anything runs (issue 14.2); a keyword the check cannot
    see (`**kwargs`) is a TypeError at the call, with the same words."""
    result = assert_error(run(nx, "import tools\n\ndef run(ctx):\n    tools.echo(txt='x')\n"))
    assert result.error == ("script rejected: line 4: tools.echo() has no argument 'txt'; did you mean 'text'? "
                            "It is echo(*, text: str) -> Result")
    result = assert_error(run(nx, "import tools\n\ndef run(ctx):\n    kw = {'txt': 'x'}\n    tools.echo(**kw)\n"))
    assert result.error == ("runtime error: line 5: TypeError: tools.echo() has no argument 'txt'; did you mean "
                            "'text'? It is echo(*, text: str) -> Result")
    assert gate.inner("echo") == []


def test_an_args_object_and_keywords_together_are_refused(nx: Nexus) -> None:
    result = assert_error(run(nx, "import tools\n\ndef run(ctx):\n    tools.echo(tools.EchoArgs(text='a'), text='b')\n"))
    assert result.error == ("script rejected: line 4: tools.echo() takes an EchoArgs or keywords, not both: "
                            "it is echo(*, text: str) -> Result")
    result = assert_error(run(nx, "import tools\n\ndef run(ctx):\n    echo = tools.echo\n"
                                  "    echo(tools.EchoArgs(text='a'), text='b')\n"))
    assert result.error == ("runtime error: line 5: TypeError: tools.echo() takes an EchoArgs or keywords, not "
                            "both: it is echo(*, text: str) -> Result")


# -- run_code cannot reach itself -----------------------------------------------------------


def test_run_code_is_not_among_the_tools_a_script_sees(nx: Nexus, gate: Recorder) -> None:
    engine = engine_for(nx)
    assert engine is not None
    assert "run_code" not in engine.bindings().functions.values()
    description = nx.tool("run_code").description
    assert "def echo(" in description and "def run_code(" not in description
    result = assert_error(run(nx, "import tools\n\ndef run(ctx):\n    return tools.run_code(script='x')\n"))
    assert result.error == "script rejected: line 4: no tool 'run_code' (the tools: echo)"
    result = assert_error(run(nx, "import tools\n\ndef run(ctx):\n    return getattr(tools, 'run_code')(script='x')\n"))
    assert result.error == "runtime error: line 4: AttributeError: module 'tools' has no attribute 'run_code'"
    assert [c.name for c in gate.calls] == ["run_code", "run_code"]  # only the outer calls


# -- typed results --------------------------------------------------------------------------


def test_a_tool_with_an_output_schema_returns_its_Result_class(nx: Nexus) -> None:
    structured = ToolResult(id="", name="", output="2 names (human text)", output_structured=STATS_VALUE)
    nx.add_tool(fixed_tool("stats", structured, STATS_SCHEMA))
    result = assert_ok(run(nx, """\
        import tools

        def run(ctx):
            r = tools.stats()
            assert isinstance(r, tools.StatsResult) and isinstance(r.owner, tools.StatsResultOwner)
            return {"count": r.count + 1, "names": r.names + ["c"], "mode": r.mode,
                    "login": r.owner.login, "note": r.note}
        """))
    assert result.output_structured["result"] == {"count": 3, "names": ["a", "b", "c"], "mode": "fast",
                                                   "login": "ada", "note": None}


def test_a_typed_result_is_built_from_json_in_output_when_there_is_no_structured_output(nx: Nexus) -> None:
    text_only = ToolResult(id="", name="", output=json.dumps(STATS_VALUE))
    nx.add_tool(fixed_tool("stats", text_only, STATS_SCHEMA))
    result = assert_ok(run(nx, "import tools\n\ndef run(ctx):\n    r = tools.stats()\n    return [r.count, r.owner.login]\n"))
    assert result.output_structured["result"] == [2, "ada"]


def test_structured_output_wins_over_the_text(nx: Nexus) -> None:
    both = ToolResult(id="", name="", output='{"count": 99}', output_structured=STATS_VALUE)
    nx.add_tool(fixed_tool("stats", both, STATS_SCHEMA))
    result = assert_ok(run(nx, "import tools\n\ndef run(ctx):\n    return tools.stats().count\n"))
    assert result.output_structured["result"] == 2


def test_output_that_does_not_match_the_schema_is_ToolFailed(nx: Nexus) -> None:
    wrong = ToolResult(id="", name="", output="", output_structured={**STATS_VALUE, "count": "many"})
    nx.add_tool(fixed_tool("stats", wrong, STATS_SCHEMA))
    result = assert_error(run(nx, "import tools\n\ndef run(ctx):\n    return tools.stats()\n"))
    # the tool's fault, not the script's: said so, with what it returned, and that it may have acted
    assert result.error.startswith("runtime error: line 4: ToolFailed: stats: the tool misbehaved: its result does "
                                   "not match its own output schema (")
    assert "its effect may have happened. It returned: {" in result.error and '"count": "many"' in result.error


def test_output_that_is_not_json_is_ToolFailed(nx: Nexus) -> None:
    nx.add_tool(fixed_tool("stats", "just some prose", STATS_SCHEMA))
    result = assert_error(run(nx, "import tools\n\ndef run(ctx):\n    return tools.stats()\n"))
    assert result.error == ("runtime error: line 4: ToolFailed: stats: the tool misbehaved: its result is not the JSON "
                            "its output schema promises; the call itself was not wrong, and its effect may have "
                            "happened. It returned: just some prose")


def test_a_tool_without_output_schema_returns_Result(nx: Nexus) -> None:
    plain = ToolResult(id="", name="", output='{"looks": "like json"}', output_file="/tmp/report.txt",
                       output_structured={"ignored": True})
    nx.add_tool(fixed_tool("report", plain))
    result = assert_ok(run(nx, """\
        import tools

        def run(ctx):
            r = tools.report()
            return {"output": r.output, "file": r.output_file, "error": r.error,
                    "is_result": isinstance(r, tools.Result)}
        """))
    assert result.output_structured["result"] == {"output": '{"looks": "like json"}',
                                                   "file": "/tmp/report.txt", "error": None, "is_result": True}


def test_typed_results_of_the_real_file_tools(nexus_factory: NexusFactory, nexus_workspace: Any) -> None:
    (nexus_workspace / "notes.txt").write_text("one\ntwo\n")
    nx = nexus_factory(plugins=[CE, "nexus.tool.file"], config={"plugins": {CE: {"timeout_seconds": TIMEOUT}}})
    result = assert_ok(run(nx, """\
        import tools

        def run(ctx):
            found = tools.glob(pattern="*.txt")
            text = tools.read(tools.ReadArgs(path=found.paths[0]))
            listing = tools.list()
            return {"paths": found.paths, "content": text.content, "lines": text.total_lines,
                    "entries": [(e.name, e.type) for e in listing.entries]}
        """))
    assert result.output_structured["result"] == {"paths": ["notes.txt"], "content": "one\ntwo\n", "lines": 2,
                                                   "entries": [["notes.txt", "file"]]}


# -- the result's JSON ----------------------------------------------------------------------


@pytest.mark.parametrize(("value", "detail"), [
    ("{1, 2}", "result is a set: return a list, e.g. sorted(...) or list(...)"),
    ("float('nan')", "result is NaN: JSON has no NaN or infinity; return None (or a string) in its place"),
    ("object()", "result is an object: return its data as a dict, a list or a string"),
    ("{'when': [1, datetime.date(2024, 1, 2)]}", "result['when'][1] is a date: return text, e.g. .isoformat()"),
])
def test_a_result_that_is_not_json_serializable(nx: Nexus, value: str, detail: str) -> None:
    result = assert_error(run(nx, f"import datetime\ndef run(ctx):\n    print('computed')\n    return {value}\n"))
    # where in the result, and the fix (issue 14.3)
    assert result.error == f"result is not JSON-serializable: {detail}"
    assert result.output_structured == {"stdout": "computed\n"}


def test_a_result_past_max_result_bytes_is_refused(nexus_factory: NexusFactory) -> None:
    nx = make(nexus_factory, max_result_bytes=100)
    result = assert_error(run(nx, "def run(ctx):\n    return 'x' * 200\n"))
    assert result.error.startswith("result is not JSON-serializable: the result is too large: 202 bytes")
    assert_ok(run(nx, "def run(ctx):\n    return 'x' * 90\n"))


def test_a_typed_result_returned_as_is_becomes_json(nx: Nexus) -> None:
    structured = ToolResult(id="", name="", output="", output_structured=STATS_VALUE)
    nx.add_tool(fixed_tool("stats", structured, STATS_SCHEMA))
    result = assert_ok(run(nx, "import tools\n\ndef run(ctx):\n    return tools.stats()\n"))
    assert result.output_structured["result"] == STATS_VALUE


# -- limits ---------------------------------------------------------------------------------


def test_max_tool_calls(nexus_factory: NexusFactory) -> None:
    gate = Recorder()
    nx = make(nexus_factory, ECHO, plugins=(gate,), max_tool_calls=3)
    result = assert_ok(run(nx, """\
        import tools

        def run(ctx):
            done, refused = 0, []
            for i in range(5):
                try:
                    tools.echo(text=str(i))
                    done += 1
                except tools.ToolFailed as exc:
                    refused.append(exc.reason)
            return {"done": done, "refused": refused}
        """))
    value = result.output_structured["result"]
    assert value["done"] == 3
    assert value["refused"] == ["tool call limit reached: a script may make at most 3 calls"] * 2
    assert len(gate.inner("echo")) == 3

    class Audit:
        def __init__(self) -> None:
            self.results: list[ToolResult] = []

        @hookimpl
        def nexus_tool_result(self, call: ToolCall, result: ToolResult) -> None:
            if call.parent_call_id is not None:
                self.results.append(result)

    audit = Audit()
    nx.register(audit)
    run(nx, "import tools\n\ndef run(ctx):\n    for i in range(5):\n        try:\n"
            "            tools.echo(text=str(i))\n        except tools.ToolFailed:\n            pass\n")
    # the refusals past the limit take the result observers too, like every result
    assert [r.error for r in audit.results] == [None] * 3 + [
        "tool call limit reached: a script may make at most 3 calls"] * 2


def test_the_host_runs_scripts_concurrently(nx: Nexus) -> None:
    results: list[ToolResult] = []
    script = "import tools\n\ndef run(ctx):\n    return [tools.echo(text=str(i)).output for i in range(20)]\n"
    threads = [threading.Thread(target=lambda: results.append(run(nx, script))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(results) == 4
    for result in results:
        assert assert_ok(result).output_structured["result"] == [str(i) for i in range(20)]


def test_many_runs_in_a_row_stay_healthy(nx: Nexus) -> None:
    for i in range(15):
        if i % 3 == 0:
            assert_error(run(nx, "def run(ctx):\n    raise ValueError('x')\n"))
        else:
            assert assert_ok(run(nx, f"def run(ctx):\n    return {i}\n")).output_structured["result"] == i


@pytest.mark.parametrize("body", ["x = bytearray(1024 ** 3)", "blocks = []\n    while True:\n        blocks.append([0] * 100000)"],
                         ids=["one-big-block", "growing"])
def test_a_script_past_memory_mb_reads_memory_limit_exceeded(nexus_factory: NexusFactory, body: str) -> None:
    nx = make(nexus_factory, memory_mb=128)
    engine = engine_for(nx)
    if "rlimits" not in engine.active_layers():
        pytest.skip(f"the rlimits layer is not active here: {engine.layer_statuses()['rlimits'].detail}")
    result = assert_error(run(nx, f"def run(ctx):\n    print('allocating')\n    {body}\n"))
    assert result.error == "memory limit exceeded"
    assert result.output_structured == {"stdout": "allocating\n"}
    assert_ok(run(nx, "def run(ctx):\n    return 1\n"))


def test_a_future_import_applies_to_the_script(nx: Nexus) -> None:
    result = assert_ok(run(nx, """\
        from __future__ import annotations

        def run(ctx) -> NotDefinedAnywhere:
            value: AlsoUndefined = 3
            return value
        """))
    assert result.output_structured["result"] == 3


def test_output_and_result_within_generous_limits_come_through_whole(nexus_factory: NexusFactory) -> None:
    """Limits past the 32 MiB protocol line: a 33 MB print and a 33 MB result are within
    max_output_bytes and max_result_bytes, so they are not 'protocol violations'."""
    size = 33 * 1024 * 1024
    nx = make(nexus_factory, max_result_bytes=2 * size, max_output_bytes=2 * size)
    result = assert_ok(run(nx, f"def run(ctx):\n    print('y' * {size})\n    return 'x' * {size}\n"))
    body = result.output_structured
    assert len(body["stdout"]) == size + 1 and "stdout_truncated" not in body and body["stdout"] == "y" * size + "\n"
    assert body["result"] == "x" * size


@pytest.mark.parametrize(("arg", "got"), [("tools.Result(output='x')", "Result"), ("'hello'", "str"), ("42", "int")])
def test_a_wrong_args_object_is_a_TypeError_naming_the_expected_class(nx: Nexus, gate: Recorder, arg: str, got: str) -> None:
    """Passed through a name, the check cannot tell: the call says what it takes."""
    result = assert_error(run(nx, f"import tools\n\ndef run(ctx):\n    value = {arg}\n    tools.echo(value)\n"))
    article = "an" if got == "int" else "a"
    assert result.error == (f"runtime error: line 5: TypeError: tools.echo() takes keyword arguments (or an "
                            f"EchoArgs), not {article} {got}: it is echo(*, text: str) -> Result")
    assert gate.inner("echo") == []


@pytest.mark.parametrize("arg", ["'hello'", "42"])
def test_a_positional_value_is_rejected_before_the_run(nx: Nexus, gate: Recorder, arg: str) -> None:
    result = assert_error(run(nx, f"import tools\n\ndef run(ctx):\n    tools.echo({arg})\n"))
    assert result.error == ("script rejected: line 4: tools.echo() takes keyword arguments, not a positional value: "
                            "it is echo(*, text: str) -> Result")
    assert gate.inner("echo") == []


def test_a_plain_dict_is_sent_as_the_arguments(nx: Nexus, gate: Recorder) -> None:
    assert_ok(run(nx, "import tools\n\ndef run(ctx):\n    return tools.echo({'text': 'raw'}).output\n"))
    assert [c.arguments for c in gate.inner("echo")] == [{"text": "raw"}]
