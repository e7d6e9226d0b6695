"""run_code's description as a model reads it (issue 23): within its token budget on the default
tool set, every fact of the contract said in it (in the groups form too), no direct declaration
contradicting it, and the scripts a model writes from it alone running as it says.

The scripts below were written from the description alone (the default set, as
`bench/bench_tokens.py` registers it), for three of the issue's task kinds: a multi-file edit
with glob, read and edit; a grep fan-out with parallel; webfetch handling ToolFailed. They run
through a real Nexus, with a real HTTP server on loopback for webfetch.
"""

from __future__ import annotations

import importlib.util
import re
import textwrap
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from nexus_core import Nexus, ToolCall, ToolDef, Veto, hookimpl
from nexus_core.testing import NexusFactory, assert_error, assert_ok
from nexus_tool_code_exec import DEFAULT_ALLOWED_PACKAGES, engine_for

CE = "nexus.tool.code_exec"
WEB = "nexus.tool.web"
#: the plugins of the default tool set, as bench/bench_tokens.py has them
DEFAULT_ACTIVE = ["nexus.tool.file", "nexus.tool.shell", WEB, CE, "nexus.skills", "nexus.tool.todo",
                  "nexus.tool.question"]
BENCH = Path(__file__).resolve().parents[2] / "bench" / "bench_tokens.py"


def bench() -> Any:
    spec = importlib.util.spec_from_file_location("bench_tokens", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Site:
    """An HTTP server on loopback: `/notes` is a page, `/missing` a 404, `/forbidden` a page
    the gate below refuses to fetch."""

    def __init__(self) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                status, body = (404, b"no such page") if self.path == "/missing" else (200, b"release 2.4 is out\n")
                self.send_response(status)
                self.send_header("Content-Type", "text/plain; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}{path}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)


@pytest.fixture
def site() -> Iterator[Site]:
    server = Site()
    yield server
    server.close()


class Gate:
    @hookimpl
    def nexus_before_tool_invoke(self, call: ToolCall, tool: ToolDef) -> Veto | None:
        return Veto("not this site") if "forbidden" in str(call.arguments.get("url", "")) else None


def default_set(factory: NexusFactory, *extra: Any, **code_exec: Any) -> Nexus:
    return factory(plugins=[*DEFAULT_ACTIVE, *extra], config={"plugins": {
        CE: {"timeout_seconds": 60, **code_exec},
        WEB: {"allow_hosts": ["127.0.0.1"], "allow_ports": None}}})


def run(nx: Nexus, script: str) -> Any:
    return nx.invoke("run_code", {"script": textwrap.dedent(script)})


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="utf-8")


# -- the budget -----------------------------------------------------------------------------


def test_the_description_on_the_default_set_is_within_its_budget(tmp_path: Path) -> None:
    """At most 1,800 tokens (o200k), counted as the bench counts them: the whole declaration."""
    pytest.importorskip("tiktoken", reason="tiktoken (the dev extra) counts the tokens")
    tokens = bench()
    with tokens.nexus(str(tmp_path)) as nx:
        counted = tokens.declarations(tokens.o200k(), nx)
    assert counted["run_code"] <= tokens.RUN_CODE_BUDGET == 1800


# -- every fact said, once --------------------------------------------------------------------


def test_the_description_says_each_fact_of_the_contract(nexus_factory: NexusFactory, tmp_path: Path) -> None:
    """The facts issue 23 found unsaid, each in the words the runtime keeps to, from the
    settings in force (not the defaults written down)."""
    skills = tmp_path / "skills"
    write(skills, {"csv-tools/SKILL.md": "---\nname: csv-tools\ndescription: CSV helpers.\n---\nUse them.\n",
                   "csv-tools/rows.py": "def count(text):\n    return len(text.splitlines())\n"})
    nx = nexus_factory(plugins=DEFAULT_ACTIVE, config={"skills": [str(skills)], "plugins": {
        CE: {"max_workers": 3, "max_text_bytes": 40000, "timeout_seconds": 45, "max_tool_calls": 200}}})
    from nexus_core.skills import activate_skill

    activate_skill(nx, "csv-tools")
    description = nx.tool("run_code").description
    for fact in (
        "at most 40000 bytes (UTF-8)",  # the cap, and what it counts: what you get, printed text and result
        "a `--- result ---` line and run's return value (a string as it is, else JSON)",
        "with at most 3 of the calls running at once, however many items",  # concurrency, not arguments
        "`tools.ToolVetoed`", "`tools.ToolFailed`", "`tools.ToolError` with `.tool` and `.reason` (str)",
        "`tools.Result`: `.output` (str), `.output_file` (str | None: a file it returned), `.error` (always None: "
        "errors raise)",
        "any other error (what a direct call returns as one) `tools.ToolFailed`",
        "sockets (tools run on the host, webfetch too)",
        "`__dunder__` attributes (tell errors apart by class, `e.tool`, `e.reason`)",
        "Skill helpers: skills.csv_tools.",
        "Limits: 45s, 200 tool calls.",
        "the arguments its own declaration describes",
        # default limits as numbers
        "def glob(*, pattern: str, path: str = '.', limit: int = 500) -> GlobResult: ...",
        "def read(*, path: str, offset: int = 1, limit: int = 2000) -> ReadResult: ...",
    ):
        assert fact in description, fact
    allowed = re.search(r"- Other imports: ([^.]*)\.", description)
    assert allowed is not None and allowed.group(1).split(" ") == list(DEFAULT_ALLOWED_PACKAGES)
    # settings a model cannot see are not named
    for setting in ("max_results", "read_lines", "max_workers", "max_text_bytes"):
        assert setting not in description


def test_the_groups_form_keeps_the_whole_contract(nexus_factory: NexusFactory) -> None:
    nx = default_set(nexus_factory, max_listed_tools=5)
    grouped = nx.tool("run_code").description
    assert "def read(" not in grouped and "run_code_api" in grouped
    with_stubs = default_set(nexus_factory).tool("run_code").description
    # the contract is the same text in both forms, up to the example
    contract = with_stubs.split("\nExample:\n")[0]
    assert grouped.split("\nExample:\n")[0] == contract
    for words in ("tools.ToolVetoed", "tools.ToolFailed", "`.tool` and `.reason`", "tools.Result", "`.error`",
                  "webfetch too", "`__dunder__`", "running at once"):
        assert words in contract


def test_no_direct_declaration_promises_its_text_form_to_scripts(nexus_factory: NexusFactory) -> None:
    """Where a tool's direct call returns text, its declaration says so of a direct call: a
    script gets the result class its stub shows."""
    nx = default_set(nexus_factory)
    text_forms = ("cat -n", "path:line:text", "one per line", "one line per item", "'pending:'", "end with `/`")
    found = 0
    for schema in nx.schemas("openai"):
        for sentence in re.split(r"(?<=\.)\s", schema["function"]["description"]):
            if any(form in sentence for form in text_forms):
                found += 1
                assert "called directly" in sentence.lower(), (schema["function"]["name"], sentence)
    assert found == len(text_forms)


def test_a_tool_declared_directly_is_listed_by_its_signature_and_classes(nexus_factory: NexusFactory) -> None:
    """Each fact once: its declaration describes it and its arguments; the description gives the
    Python signature and the result classes, and run_code_api the whole stub."""
    nx = default_set(nexus_factory)
    engine = engine_for(nx)
    assert engine is not None
    description = nx.tool("run_code").description
    bindings = engine.bindings()
    declared = {s["function"]["name"]: s["function"] for s in nx.schemas("openai")}
    for fname, piece in bindings.pieces:
        assert piece.brief_stub in description
        assert piece.stub != piece.brief_stub
        # what the brief stub leaves out is said by the tool's declaration
        for name in (piece.tool.input_schema.get("properties") or {}):
            assert name in declared[piece.tool.name]["parameters"]["properties"]
    assert "Seconds before it and all it started are killed" not in description


# -- the description's claims, run -------------------------------------------------------------


def test_the_descriptions_example_runs_as_written(nexus_factory: NexusFactory, nexus_workspace: Path) -> None:
    write(nexus_workspace, {"README.md": "# title\n\ntext\n", "docs/a.md": "one\n", "src/x.py": "x = 1\n"})
    nx = default_set(nexus_factory)
    example = nx.tool("run_code").description.split("\nExample:\n")[1].split("\n\n\n")[0]
    result = assert_ok(run(nx, example))
    assert result.output_structured == {"result": {"files": 2, "lines": 4}}
    assert result.output == '{"files": 2, "lines": 4}'  # anything but a string, as JSON


def test_a_multi_file_edit_written_from_the_description(nexus_factory: NexusFactory, nexus_workspace: Path) -> None:
    write(nexus_workspace, {
        "app/main.py": "from app.util import load_config\n\nconfig = load_config('a.toml')\n",
        "app/util.py": "def load_config(path):\n    return {}\n",
        "app/other.py": "print('nothing to change')\n",
        "notes.md": "load_config is not code here\n",
    })
    nx = default_set(nexus_factory)
    result = assert_ok(run(nx, """\
        import tools

        def run(ctx):
            changed = {}
            for path in tools.glob(pattern="**/*.py").paths:
                text = tools.read(path=path).content
                if "load_config" not in text:
                    continue
                r = tools.edit(path=path, old_string="load_config", new_string="read_settings", replace_all=True)
                changed[r.path] = r.replacements
            try:
                tools.edit(path="app/other.py", old_string="load_config", new_string="x")
            except tools.ToolFailed as e:
                print("not there:", e.tool)
            return changed
        """))
    assert result.output_structured == {"stdout": "not there: edit\n",
                                        "result": {"app/main.py": 2, "app/util.py": 1}}
    assert result.output == 'not there: edit\n--- result ---\n{"app/main.py": 2, "app/util.py": 1}'
    assert (nexus_workspace / "app/main.py").read_text().count("read_settings") == 2
    assert "load_config" in (nexus_workspace / "notes.md").read_text()


def test_a_grep_fan_out_written_from_the_description(nexus_factory: NexusFactory, nexus_workspace: Path) -> None:
    write(nexus_workspace, {"a.py": "# TODO: split\nx = 1  # FIXME\n", "b/c.py": "y = 2\n# TODO later\n",
                            "d.txt": "TODO not python\n"})
    nx = default_set(nexus_factory, max_workers=2)
    result = assert_ok(run(nx, """\
        import tools, parallel

        def run(ctx):
            words = ["TODO", "FIXME", "XXX", "HACK"]
            found = parallel.map(words, lambda w: tools.grep(pattern=w, include="*.py"))
            report = {}
            for word, r in zip(words, found):
                report[word] = [f"{m.path}:{m.line}" for m in r.matches]
            return report
        """))
    assert result.output_structured["result"] == {"TODO": ["a.py:1", "b/c.py:2"], "FIXME": ["a.py:2"], "XXX": [],
                                                  "HACK": []}


def test_a_webfetch_written_from_the_description(nexus_factory: NexusFactory, site: Site) -> None:
    nx = default_set(nexus_factory, Gate())
    urls = [site.url("/notes"), site.url("/missing"), site.url("/forbidden")]
    result = assert_ok(run(nx, f"""\
        import tools

        def run(ctx):
            out = []
            for url in {urls!r}:
                try:
                    page = tools.webfetch(url=url, format="text")
                    out.append([page.status, page.content.strip()])
                except tools.ToolVetoed as e:
                    out.append(["vetoed", e.tool, e.reason])
                except tools.ToolFailed as e:
                    out.append(["failed", e.tool, " ".join(e.reason.split()[:2])])
            return out
        """))
    assert result.output_structured["result"] == [
        [200, "release 2.4 is out"], ["failed", "webfetch", "HTTP 404"], ["vetoed", "webfetch", "not this site"]]


def test_what_the_contract_says_of_results_errors_and_rules_holds(nexus_factory: NexusFactory) -> None:
    """`Result` of a tool without an output schema, a string result shown as it is, dunder
    attributes refused with the allowed way named, and `parallel`'s bound on running calls."""
    running, most = [0], [0]
    lock = threading.Lock()
    release = threading.Event()

    def slow(arguments: dict[str, Any]) -> str:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
            if running[0] == 2:
                release.set()
        release.wait(30)  # the first waits for a second to run beside it: the bound is reached
        with lock:
            running[0] -= 1
        return f"done {arguments['n']}"

    tool = ToolDef(name="slow", handler=slow, description="Works on n.",
                   input_schema={"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]})
    nx = default_set(nexus_factory, max_workers=2)
    nx.add_tool(tool)
    result = assert_ok(run(nx, """\
        import tools, parallel

        def run(ctx):
            rs = parallel.map(list(range(6)), lambda n: tools.slow(n=n))
            print([r.error for r in rs], rs[0].output_file)
            return rs[-1].output
        """))
    assert result.output == "[None, None, None, None, None, None] None\n--- result ---\ndone 5"
    assert most[0] == 2
    refused = assert_error(run(nx, """\
        import tools

        def run(ctx):
            try:
                tools.read(path="missing.txt")
            except tools.ToolError as e:
                return type(e).__name__
        """))
    assert refused.error.startswith("script rejected: line 7: dunder attribute '__name__' is not allowed")
    assert "e.tool" in refused.error and "e.reason" in refused.error


def test_the_bench_counts_what_this_file_checks(tmp_path: Path) -> None:
    """The bench's default set is this file's: the same plugins, so its figure is the one
    the budget test holds."""
    assert bench().DEFAULT_ACTIVE == DEFAULT_ACTIVE


def test_the_docs_show_the_description_as_a_model_reads_it(nexus_factory: NexusFactory) -> None:
    """docs/run-code.md's copy of the description on the default set: its contract word for
    word, and each stub it shows as the description has it."""
    docs = (Path(__file__).resolve().parents[2] / "docs" / "run-code.md").read_text(encoding="utf-8")
    shown = docs.split("On the default tool\nset it reads")[1].split("```\n", 1)[1].split("\n```\n", 1)[0]
    # the default settings, on a machine of 2 CPUs (max_workers is the CPU count)
    description = nexus_factory(plugins=DEFAULT_ACTIVE, config={"plugins": {CE: {"max_workers": 2}}}).tool(
        "run_code").description
    contract, _, stubs = shown.partition("\n\n\ndef ")
    assert description.startswith(contract + "\n\n\ndef ")
    for stub in ("def " + stubs).removesuffix("\n\n...").split("\n\n\n"):
        assert "\n\n\n" + stub + "\n" in description, stub
