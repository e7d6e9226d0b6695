"""run_code's contract with the model (issue 14): stubs that are the exact bindings, tools declared
once (exposure), past `max_listed_tools` the groups and the companion tool `run_code_api`, typed
results from type hints, nested arguments as dicts, and output a model reads easily.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import re
import sys
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypedDict

import attrs
import pytest
from nexus_tool_code_exec.child import runtime
from nexus_tool_code_exec.host.bindings import BindingsCache, generate
from nexus_tool_code_exec.host.engine import API_TOOL

from nexus_core import Nexus, ToolCall, ToolDef, Veto, hookimpl, native_tool, tool
from nexus_tool_code_exec import engine_for

CE = "nexus.tool.code_exec"


def default_nexus(workspace: Path, **code_exec: Any) -> Nexus:
    return Nexus.from_config({"workspace": str(workspace), "plugins": {
        "active": ["nexus.tool.file", "nexus.tool.shell", CE, "nexus.tool.todo"], CE: code_exec}})


def synthetic(n: int, prefix: str = "extra", plugin_group: str | None = None) -> list[ToolDef]:
    """`n` tools of a few shapes, as a large registry has them."""
    out = []
    for i in range(n):
        schema = {"type": "object", "properties": {
            "query": {"type": "string", "description": f"What to look for in collection {i}."},
            "limit": {"type": "integer", "minimum": 1, "maximum": 100, "default": 10},
            "filters": {"type": "array", "items": {"type": "object", "properties": {
                "field": {"type": "string"}, "value": {"type": "string"}}, "required": ["field"]}}},
            "required": ["query"]}
        output = {"type": "object", "properties": {"items": {"type": "array", "items": {"type": "string"}},
                                                   "total": {"type": "integer"}}, "required": ["items", "total"]}
        annotations = {"mcp_server": plugin_group} if plugin_group else {}
        out.append(ToolDef(name=f"{prefix}_{i}", handler=lambda a, i=i: {"items": [a["query"]], "total": i},
                           description=f"Search collection number {i} for records that match a query.",
                           input_schema=schema, output_schema=output, annotations=annotations))
    return out


# -- the stubs are the bindings -------------------------------------------------------------


def stub_signatures(stubs: str) -> dict[str, inspect.Signature]:
    """Each function of the stubs, with its signature as Python reads it (the stubs run as a
    module: they are Python; their annotations stay text)."""
    namespace: dict[str, Any] = {}
    exec(compile("from __future__ import annotations\n" + stubs, "stubs", "exec"), namespace)
    tree = ast.parse(stubs).body
    functions = [node.name for node in tree if isinstance(node, ast.FunctionDef)]
    # an alias is one line, `bash = shell`: the same function under another name
    functions += [node.targets[0].id for node in tree if isinstance(node, ast.Assign)
                  and isinstance(node.value, ast.Name) and node.value.id in functions]
    return {name: inspect.signature(namespace[name]) for name in functions}


@pytest.fixture
def compiled(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.setitem(sys.modules, "_nexus_rt", runtime)

    def make(tools: list[ToolDef]) -> tuple[Any, Any]:
        bindings = generate(tools)
        module = runtime.compile_bindings(bindings.source)
        monkeypatch.setitem(sys.modules, "tools", module)
        return module, bindings

    yield make


def test_each_stub_is_the_exact_keyword_signature_of_its_binding(tmp_path: Path, compiled: Any) -> None:
    """Every tool's stub names the Args class's fields, in its order, with their annotations and
    defaults (a schema's short literal default shown as it is): what the model reads is what the
    binding takes (500 extra tools too)."""
    with default_nexus(tmp_path) as nx:
        tools = [t for t in nx.tools() if t.name != "run_code"] + synthetic(500)
    module, bindings = compiled(tools)
    signatures = stub_signatures(bindings.stubs)
    assert set(signatures) == set(bindings.functions)
    # the signatures alone (a tool the model has a declaration of) are the same Python
    assert stub_signatures(bindings.listing([t.name for t in tools])) == signatures
    differences = []
    # the module's names, but the builtin types where a tool function (`list`) took the name
    types = {**vars(module), "list": list, "dict": dict, "str": str, "int": int, "float": float, "bool": bool}
    for fname, piece in bindings.pieces:
        args_cls = getattr(module, piece.args_class)
        hints = typing.get_type_hints(args_cls)
        expected = [(f.alias or f.name, hints[f.name], f.default is attrs.NOTHING) for f in attrs.fields(args_cls)]
        stub = signatures[fname]
        got = [(p.name, p.annotation, p.default is inspect.Parameter.empty) for p in stub.parameters.values()]
        if [(n, r) for n, _, r in expected] != [(n, r) for n, _, r in got]:
            differences.append(fname)
        assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in stub.parameters.values())
        # the same types: the stub's annotation, read in the real module, is the field's
        for p, f in zip(stub.parameters.values(), attrs.fields(args_cls), strict=True):
            shown = eval(p.annotation, types)
            if p.default is not inspect.Parameter.empty and p.default is not None:
                # the stub shows the tool's default (`limit: int = 500`); the binding takes None too
                # (the tool applies its default), and checks the value against the same type
                shown = shown | None
            if shown != hints[f.name]:
                differences.append(f"{fname}({p.name})")
        if eval(stub.return_annotation, types) != typing.get_type_hints(getattr(module, fname))["return"]:
            differences.append(f"{fname} ->")
        assert module._SIGNATURES[piece.tool.name].startswith(f"{fname}(")
    assert differences == []


def test_argument_docs_are_whole_with_their_defaults_and_constraints(tmp_path: Path) -> None:
    """Each fact once: a tool the model has a declaration of is listed by its signature and
    classes, its arguments described by that declaration; a tool it has none of (exposure
    "code") by its whole stub, its arguments' docs in full with their constraints."""
    with default_nexus(tmp_path) as nx:
        description = nx.tool("run_code").description
        declared = {s["function"]["name"]: s["function"] for s in nx.schemas("openai")}
    timeout = declared["shell"]["parameters"]["properties"]["timeout"]
    assert timeout["description"] == "Seconds before it and all it started are killed." and timeout["maximum"] == 600
    assert "def shell(*, command: str, workdir: str | None = None, timeout: float = 60) -> ShellResult: ...\n" \
        in description and "Seconds before it" not in description
    with Nexus.from_config({"workspace": str(tmp_path), "plugins": {"active": ["nexus.tool.shell", CE]},
                            "tools": {"shell": {"exposure": "code"}}}) as nx:
        code_only = nx.tool("run_code").description
        assert "shell" not in {s["function"]["name"] for s in nx.schemas("openai")}
    # not cut mid-word at 80 characters, as the stubs once did
    assert "…" not in code_only
    assert "timeout: Seconds before it and all it started are killed. At most 600, more than 0." in code_only
    # a default is shown once, in the signature; the default limits as numbers, not setting names
    assert "def read(*, path: str, offset: int = 1, limit: int = 2000) -> ReadResult: ...\n" in description
    assert "limit: int = 500" in description and "max_results" not in description and "read_lines" not in description
    # written for scripts: read's numbering is for direct calls; a script reads .content
    assert "cat -n" not in description and "the lines exactly as in the file (no line numbers)" in description
    # the context and the scratch folder are documented
    for words in ("ctx.call_id", "ctx.remaining()", "scratch folder"):
        assert words in description


# -- declare each tool once -----------------------------------------------------------------


def test_exposure_decides_bindings_and_schemas(tmp_path: Path) -> None:
    @tool(exposure="code")
    def lookup(key: str) -> str:
        """Look a key up (meant for scripts)."""
        return key.upper()

    direct = native_tool("direct_only", "only as a tool", {"type": "object"}, lambda a: "x", exposure="direct")
    with Nexus.from_config({"workspace": str(tmp_path), "plugins": {"active": [CE]},
                            "tools": {"shout": {"exposure": "code"}}}) as nx:
        nx.register(lookup)
        nx.register(direct)
        nx.register(native_tool("shout", "shout it", {"type": "object", "properties": {"t": {"type": "string"}}},
                                lambda a: a["t"] + "!"))
        engine = engine_for(nx)
        assert engine is not None
        assert set(engine.bindings().functions) == {"lookup", "shout"}  # not direct_only, not run_code
        description = nx.tool("run_code").description
        assert "def lookup(" in description and "def shout(" in description and "direct_only" not in description
        declared = {s["function"]["name"] for s in nx.schemas("openai")}
        assert declared == {"run_code", "direct_only"}  # code-only tools cost their stub alone
        result = nx.invoke("run_code", {"script": "import tools\n\ndef run(ctx):\n    return tools.lookup(key='k').output\n"})
        assert result.output == "K"
        result = nx.invoke("run_code", {"script": "import tools\n\ndef run(ctx):\n    return tools.direct_only()\n"})
        assert result.error == "script rejected: line 4: no tool 'direct_only' (the tools: lookup, shout)"


class ShellGate:
    """The gate docs/writing-a-gate.md shows: it asks about `shell` by the tool's name."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    @hookimpl
    def nexus_before_tool_invoke(self, call: ToolCall, tool: ToolDef) -> Veto | None:
        self.seen.append((call.name, tool.name))
        return Veto("no shell from scripts") if tool.name == "shell" else None


def test_an_alias_is_one_line_and_reaches_the_gates_as_its_tool(tmp_path: Path) -> None:
    """`bash` is an alias of `shell` (one ToolDef): the bindings show it as `bash = shell`, and a
    call through `tools.bash` is the shell's call, so a gate written for `shell` vetoes it."""
    gate = ShellGate()
    with default_nexus(tmp_path) as nx:
        nx.register(gate)
        shell = nx.tool("shell")
        assert shell is not None and "bash" in shell.aliases
        engine = engine_for(nx)
        assert engine is not None
        stub = engine.bindings().stub_of("shell")
        assert "\nbash = shell\n" in stub + "\n" and stub.count("def ") == 1
        assert engine.bindings().stub_of("bash") == "bash = shell"
        assert "\nbash = shell\n" in nx.tool("run_code").description
        script = ("import tools\n\ndef run(ctx):\n    try:\n        tools.bash(command='id')\n"
                  "    except tools.ToolVetoed as exc:\n        return [tools.bash is tools.shell, exc.reason]\n")
        result = nx.invoke("run_code", {"script": script})
        assert result.output_structured == {"result": [True, "no shell from scripts"]}, result.error
        assert ("shell", "shell") in gate.seen  # the call is the shell's, by its own name
        # a call forged by the alias's name reaches the same gate, as the same tool
        forged = ("import typing\n\ndef run(ctx):\n    channel = typing.sys.modules['_nexus_rt']._channel\n"
                  "    return channel.request({'t': 'call', 'name': 'bash', 'args': {'command': 'id'}})['result']\n")
        result = nx.invoke("run_code", {"script": forged})
        assert result.output_structured["result"]["error_kind"] == "vetoed", result
        assert ("bash", "shell") in gate.seen


# -- past max_listed_tools: groups and run_code_api -----------------------------------------


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Nexus]:
    """The default tools, 300 tools of one MCP server and 200 of the host."""
    with default_nexus(tmp_path_factory.mktemp("ws")) as nx:
        for t in synthetic(300, "github", plugin_group="github") + synthetic(200, "crm"):
            nx.add_tool(t)
        yield nx


def test_past_max_listed_tools_the_description_names_groups_with_counts(big: Nexus) -> None:
    description = big.tool("run_code").description
    assert "def " not in description.split("Example:")[1].split("\n\n", 2)[-1]  # no stub listed
    # a group's line names its likely first calls, then its shortest names (not the alphabet's first)
    assert "# - MCP server github: 300 tools (e.g. github_0, github_1, github_2, github_3, github_4, github_5, ...)" \
        in description
    assert "# - the host's own tools: 200 tools (e.g. crm_0, crm_1, crm_2, crm_3, crm_4, crm_5, ...)" in description
    assert "# - nexus.tool.file: 7 tools (list, read, edit, glob, grep, write, apply_patch)" in description
    # the contract is there without a stub: the error classes and Result
    for words in ("tools.ToolVetoed", "tools.ToolFailed", "tools.ToolError", "`.tool` and `.reason`", "tools.Result"):
        assert words in description
    assert f"call the\n# {API_TOOL} tool" in description
    assert len(description) < 6000  # ~1,500 tokens: bench/bench_tokens.py counts them


def test_run_code_api_returns_the_exact_stubs_of_what_matches(big: Nexus) -> None:
    api = big.tool(API_TOOL)
    assert api is not None and api.exposure == "direct" and api.plugin == CE
    assert API_TOOL in {s["function"]["name"] for s in big.schemas("openai")}
    engine = engine_for(big)
    assert engine is not None
    bindings = engine.bindings()
    by_name = big.invoke(API_TOOL, {"names": ["read", "github_7"]}).output
    assert by_name == bindings.stub_of("read") + "\n\n\n" + bindings.stub_of("github_7")
    assert "def read(*, path: str, offset: int = 1, limit: int = 2000) -> ReadResult:" in by_name
    assert "class ReadResult:" in by_name
    found = big.invoke(API_TOOL, {"query": "regular expression search file contents"}).output
    head, _, stubs = found.partition("\n\n")
    assert re.fullmatch(r"# \d+ tools matched, 12 shown; give limit= \(or a narrower query\) for more", head)
    assert stubs.startswith(bindings.stub_of("grep"))
    one = big.invoke(API_TOOL, {"query": "regular expression search file contents", "limit": 1}).output
    assert one.endswith("1 shown; give limit= (or a narrower query) for more\n\n" + bindings.stub_of("grep"))
    # the runtime's classes, which every stub names
    runtime_text = big.invoke(API_TOOL, {"names": ["Result", "ToolError"]}).output
    assert "class ToolError(Exception):" in runtime_text and "class Result:" in runtime_text
    assert big.invoke(API_TOOL, {"names": ["raed"]}).output == "# no tool or group 'raed'; did you mean 'read'?"
    # a group: its tools one line each, after how many matched; their stubs when asked for
    group = big.invoke(API_TOOL, {"names": ["nexus.tool.shell"]}).output
    assert group == ("# 2 tools matched, 2 shown\n\n# shell: Run a shell command in the workspace; a non-zero exit "
                     "code is no failure.\nbash = shell")
    stubs = big.invoke(API_TOOL, {"names": ["nexus.tool.shell"], "stubs": True}).output
    assert stubs == "# 2 tools matched, 2 shown\n\n" + bindings.stub_of("shell") + "\n\n\n" + bindings.stub_of("bash")
    # and what it returns runs
    script = "import tools\n\ndef run(ctx):\n    r = tools.github_7(query='q', filters=[{'field': 'a'}])\n    return r.total\n"
    assert big.invoke("run_code", {"script": script}).output == "7"


def test_a_group_line_names_the_marked_tools_then_the_likely_first_calls(tmp_path: Path) -> None:
    """Issue 23: `crm: 404 tools (e.g. crm_archive_account, crm_archive_address, ...)` hid the four a
    task needed. A plugin's mark comes first, then names that read like a first call, then the
    shorter names; never the alphabet's first."""
    names = [f"crm_archive_{w}" for w in ("account", "address", "contact", "deal", "invoice", "lead", "note",
                                         "order", "quote")] + ["crm_find_customer", "crm_search", "crm_update_order"]
    tools = [ToolDef(name=n, handler=lambda a: "ok", description=f"{n} does it.",
                     annotations={"mcp_server": "crm", **({"featured": True} if n == "crm_update_order" else {})})
             for n in names]
    with default_nexus(tmp_path, max_listed_tools=12) as nx:
        for t in tools:
            nx.add_tool(t)
        description = nx.tool("run_code").description
        assert ("# - MCP server crm: 12 tools (e.g. crm_update_order, crm_search, crm_find_customer, crm_archive_deal, "
                "crm_archive_lead, crm_archive_note, ...)") in description
        listed = nx.invoke(API_TOOL, {"names": ["MCP server crm"], "limit": 3}).output
        assert listed == ("# 12 tools matched, 3 shown; give limit= (or a narrower query) for more\n\n"
                          "# crm_update_order: crm_update_order does it.\n# crm_search: crm_search does it.\n"
                          "# crm_find_customer: crm_find_customer does it.")


def test_the_companion_tool_comes_and_goes_with_the_groups(tmp_path: Path) -> None:
    with default_nexus(tmp_path, max_listed_tools=12) as nx:
        assert nx.tool(API_TOOL) is None  # 10 tools: every stub is listed
        extra = synthetic(5)
        for t in extra:
            nx.add_tool(t)
        assert nx.tool(API_TOOL) is not None and "def read(" not in nx.tool("run_code").description
        for t in extra:
            nx.remove_tool(t.name)
        assert nx.tool(API_TOOL) is None and "def read(" in nx.tool("run_code").description


def test_pieces_are_made_once_per_tool() -> None:
    cache = BindingsCache()
    tools = synthetic(20)
    first = cache.assemble(tools)
    again = cache.assemble(tools)
    assert [p for _, p in first.pieces] == [p for _, p in again.pieces]  # the same objects
    clash = ToolDef(name="Extra0Args", handler=lambda a: "")
    both = cache.assemble([*tools, clash])
    assert "Extra0Args" in both.functions.values() and both.functions["Extra0Args_2"] == "Extra0Args"


# -- typed results from type hints ----------------------------------------------------------


class Point(TypedDict):
    x: int
    y: int


@dataclasses.dataclass
class Box:
    width: int
    height: int = 1


@attrs.define
class Forecast:
    high: float
    low: float


def test_type_hints_give_typed_results_in_scripts(tmp_path: Path) -> None:
    @tool
    def count_words(text: str) -> int:
        """Count the words."""
        return len(text.split())

    @tool
    def split_words(text: str) -> list[str]:
        return text.split()

    @tool
    def origin() -> Point:
        return {"x": 0, "y": 0}

    @tool
    def grow(box: Box) -> Box:
        return Box(box.width * 2, box.height * 2)

    @tool
    def forecast(city: str) -> Forecast:
        return Forecast(20.5, 11.0)

    @tool
    def is_empty(text: str) -> bool:
        return not text

    with Nexus.from_config({"workspace": str(tmp_path), "plugins": {"active": [CE]}}) as nx:
        for fn in (count_words, split_words, origin, grow, forecast, is_empty):
            nx.register(fn)
        description = nx.tool("run_code").description
        for stub in ("def count_words(*, text: str) -> CountWordsResult:", "CountWordsResult = int",
                     "SplitWordsResult = list[str]", "class OriginResult:", "class GrowArgsBox:",
                     # a result of an argument's shape is that argument's class
                     "def grow(*, box: GrowArgsBox) -> GrowArgsBox:", "class ForecastResult:", "IsEmptyResult = bool"):
            assert stub in description
        script = """\
import tools

def run(ctx):
    n = tools.count_words(text="one two three")
    words = tools.split_words(text="a b")
    o = tools.origin()
    box = tools.grow(box={"width": 2})
    f = tools.forecast(city="Bern")
    empty = tools.is_empty(text="")
    return {"n": n + 1, "n_is_int": isinstance(n, int), "words": words, "x": o.x, "box": [box.width, box.height],
            "high": f.high, "empty": empty, "empty_is_bool": isinstance(empty, bool)}
"""
        result = nx.invoke("run_code", {"script": script})
        assert result.output_structured == {"result": {
            "n": 4, "n_is_int": True, "words": ["a", "b"], "x": 0, "box": [4, 2], "high": 20.5, "empty": True,
            "empty_is_bool": True}}, result.output


# -- what the model reads -------------------------------------------------------------------


def test_long_output_keeps_its_head_and_tail(tmp_path: Path) -> None:
    with default_nexus(tmp_path, max_output_bytes=2000) as nx:
        script = "def run(ctx):\n    for i in range(1000):\n        print('row', i)\n    print('the end')\n    return 'done'\n"
        result = nx.invoke("run_code", {"script": script})
    stdout = result.output_structured["stdout"]
    assert stdout.startswith("row 0\nrow 1\n") and stdout.endswith("row 999\nthe end\n")
    head, _, tail = stdout.partition("[... ")
    dropped_text, _, rest = tail.partition(" bytes dropped ...]\n")
    total = sum(len(f"row {i}\n") for i in range(1000)) + len("the end\n")
    # every byte is kept or counted (the head may end with a newline the marker line added)
    assert total <= int(dropped_text) + len(head) + len(rest) <= total + 1
    assert result.output_structured["stdout_truncated"] is True and len(stdout.encode()) <= 2000
    assert result.output == stdout + "--- result ---\ndone"  # plain text, not JSON on one line


def test_what_a_model_reads_is_capped_by_max_text_bytes(tmp_path: Path) -> None:
    with default_nexus(tmp_path, max_text_bytes=1000) as nx:
        result = nx.invoke("run_code", {"script": "def run(ctx):\n    return ['item %d' % i for i in range(500)]\n"})
    assert len(result.output.encode()) <= 1000 and " bytes dropped ...]\n" in result.output
    assert result.output.startswith('["item 0", "item 1"') and result.output.endswith('"item 499"]')
    assert len(result.output_structured["result"]) == 500  # programs get all of it
