"""The scripts a model writes when it gets run_code wrong, each with the exact error it gets back.

Issue 14 measured 51 plausible wrong scripts against run_code's errors (25 clear, 16 adequate, 8
poor, 2 wrong). This corpus keeps every such script with the answer it must get: caught before
the run with the line and the fix (`script rejected: ...`), or, where only running can tell, a
runtime error that names what was wrong and how to do it right. A few are not mistakes any more
(a script in markdown fences runs; nested arguments given as dicts are sent as they are).

Each case runs through run_code itself, with the default tools (file, shell, todo), a gate that
refuses `rm`, and a workspace holding notes.md.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import pytest

from nexus_core import Nexus, ToolCall, Veto, hookimpl
from nexus_tool_code_exec import DEFAULT_ALLOWED_PACKAGES, engine_for

ALLOWED = ", ".join(sorted({*DEFAULT_ALLOWED_PACKAGES, "tools", "parallel"}))


class Case(NamedTuple):
    id: str
    script: str
    #: the error (or, for a script that now runs, the output) the model reads; for a timeout, the
    #: first line of what it reads, which names the running line
    expected: str
    #: run_code's timeout for this case; the others get a generous one (PATIENCE), so that none
    #: of their verdicts depends on the machine being idle
    timeout: float | None = None


#: the timeout of every case that is not about the timeout
PATIENCE = 60


class NoRm:
    @hookimpl
    def nexus_before_tool_invoke(self, call: ToolCall, tool: object) -> Veto | None:
        if call.name == "shell" and "rm " in str(call.arguments.get("command", "")):
            return Veto("rm is not allowed here")
        return None


def _nexus(tmp_path_factory: pytest.TempPathFactory, timeout: float) -> Iterator[Nexus]:
    workspace = tmp_path_factory.mktemp("workspace")
    (workspace / "notes.md").write_text("# notes\nfirst\n")
    config = {"workspace": str(workspace), "session_dir": str(tmp_path_factory.mktemp("sessions")),
              "plugins": {"active": ["nexus.tool.file", "nexus.tool.shell", "nexus.tool.code_exec", "nexus.tool.todo"],
                          "nexus.tool.code_exec": {"timeout_seconds": timeout}}}
    with Nexus.from_config(config) as nexus:
        nexus.register(NoRm())
        yield nexus


@pytest.fixture(scope="module")
def nx(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Nexus]:
    yield from _nexus(tmp_path_factory, PATIENCE)


@pytest.fixture(scope="module")
def impatient_nx(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Nexus]:
    """For the cases about the timeout: 2 s, so that they do not wait long for it."""
    yield from _nexus(tmp_path_factory, 2)


CASES = [
    Case('misspelt-tool', "import tools\n\ndef run(ctx):\n    return tools.raed(path='notes.md').content\n",
         "script rejected: line 4: no tool 'raed'; did you mean 'read'?"),
    Case('misspelt-tool-no-match', "import tools\n\ndef run(ctx):\n    return tools.fetch_url(url='https://example.com')\n",
         "script rejected: line 4: no tool 'fetch_url' (the tools: apply_patch, bash, edit, glob, grep, list, read, shell, todowrite, write)"),
    Case('unknown-keyword', "import tools\n\ndef run(ctx):\n    return tools.read(file='notes.md').content\n",
         "script rejected: line 4: tools.read() has no argument 'file'; did you mean 'path'? It is read(*, path: str, offset: int = 1, limit: int = 2000) -> ReadResult"),
    Case('unknown-keyword-far', "import tools\n\ndef run(ctx):\n    return tools.read(path='notes.md', encoding='utf-8').content\n",
         "script rejected: line 4: tools.read() has no argument 'encoding': it is read(*, path: str, offset: int = 1, limit: int = 2000) -> ReadResult"),
    Case('missing-required', "import tools\n\ndef run(ctx):\n    return tools.write(path='out.txt')\n",
         "script rejected: line 4: tools.write() is missing its required argument 'content': it is write(*, path: str, content: str) -> WriteResult"),
    Case('positional-argument', "import tools\n\ndef run(ctx):\n    return tools.read('notes.md').content\n",
         'script rejected: line 4: tools.read() takes keyword arguments, not a positional value: it is read(*, path: str, offset: int = 1, limit: int = 2000) -> ReadResult'),
    Case('two-positionals', "import tools\n\ndef run(ctx):\n    tools.write('out.txt', 'hello')\n",
         'script rejected: line 4: tools.write() takes keyword arguments, not positional ones: it is write(*, path: str, content: str) -> WriteResult'),
    Case('args-and-keywords', "import tools\n\ndef run(ctx):\n    tools.read(tools.ReadArgs(path='a'), limit=3)\n",
         'script rejected: line 4: tools.read() takes a ReadArgs or keywords, not both: it is read(*, path: str, offset: int = 1, limit: int = 2000) -> ReadResult'),
    Case('wrong-args-class', "import tools\n\ndef run(ctx):\n    tools.read(tools.GlobArgs(pattern='*'))\n",
         'script rejected: line 4: tools.read() takes a ReadArgs, not a GlobArgs: it is read(*, path: str, offset: int = 1, limit: int = 2000) -> ReadResult'),
    Case('args-class-unknown-field', "import tools\n\ndef run(ctx):\n    return tools.read(tools.ReadArgs(filename='a')).content\n",
         "script rejected: line 4: tools.ReadArgs() has no argument 'filename'; did you mean 'path'? It is ReadArgs(*, path: str, offset: int = 1, limit: int = 2000)"),
    Case('result-field-guess', "import tools\n\ndef run(ctx):\n    r = tools.read(path='notes.md')\n    return r.text\n",
         "script rejected: line 5: tools.read() returns a ReadResult, which has no attribute 'text'; did you mean .content? (its fields: path, content, start_line, lines, total_lines, truncated)"),
    Case('result-field-chained', "import tools\n\ndef run(ctx):\n    return tools.glob(pattern='*.md').files\n",
         "script rejected: line 4: tools.glob() returns a GlobResult, which has no attribute 'files' (its fields: paths, truncated)"),
    Case('result-as-dict', "import tools\n\ndef run(ctx):\n    r = tools.read(path='notes.md')\n    return r['content']\n",
         "script rejected: line 5: tools.read() returns a ReadResult, an object, not a dict: write .content, not ['content']"),
    Case('result-get', "import tools\n\ndef run(ctx):\n    r = tools.shell(command='ls')\n    return r.get('stdout')\n",
         'script rejected: line 5: tools.shell() returns a ShellResult, an object, not a dict: read its fields as attributes (.stdout, .stderr, .exit_code, .timed_out, .stdout_truncated, .stderr_truncated, .killed)'),
    Case('plain-result-field', 'import tools\n\ndef run(ctx):\n    r = tools.todowrite(todos=[])\n    return r.content\n',
         "script rejected: line 5: tools.todowrite() returns a TodowriteResult, which has no attribute 'content' (its fields: todos)"),
    Case('map-swapped', "import tools, parallel\n\ndef run(ctx):\n    paths = ['a.md', 'b.md']\n    return parallel.map(lambda p: tools.read(path=p).content, paths)\n",
         'script rejected: line 5: parallel.map takes the items first, then the function: parallel.map(items, fn)'),
    Case('map-swapped-def', "import tools, parallel\n\ndef read_one(p):\n    return tools.read(path=p).content\n\ndef run(ctx):\n    return parallel.map(read_one, ['a.md'])\n",
         'script rejected: line 7: parallel.map takes the items first, then the function: parallel.map(items, fn)'),
    Case('map-called', "import tools, parallel\n\ndef run(ctx):\n    return parallel.map(['a.md'], tools.read(path='a.md'))\n",
         'script rejected: line 4: parallel.map takes a function, not the result of a call: parallel.map(items, fn), e.g. parallel.map(paths, lambda p: tools.read(path=p))'),
    Case('all-list', 'import tools, parallel\n\ndef run(ctx):\n    return parallel.all([lambda: 1, lambda: 2])\n',
         'script rejected: line 4: parallel.all takes the functions themselves as arguments, not a list: parallel.all(f, g) (or parallel.all(*fns))'),
    Case('all-results', "import tools, parallel\n\ndef run(ctx):\n    return parallel.all(tools.read(path='a'), tools.read(path='b'))\n",
         'script rejected: line 4: parallel.all takes functions, not their results: wrap each call in a lambda, parallel.all(lambda: tools.a(...), lambda: tools.b(...))'),
    Case('gather', 'import tools, parallel\n\ndef run(ctx):\n    return parallel.gather(lambda: 1)\n',
         "script rejected: line 4: parallel has no 'gather': use parallel.all(f, g, ...) to run functions at once, or parallel.map(items, fn) / parallel.for_each(items, fn) for one function over many items"),
    Case('starmap', 'import tools, parallel\n\ndef run(ctx):\n    return parallel.starmap(pow, [(2, 3)])\n',
         "script rejected: line 4: parallel has no 'starmap'; did you mean parallel.map?"),
    Case('map-one-arg', 'import parallel\n\ndef run(ctx):\n    return parallel.map([1, 2])\n',
         'script rejected: line 4: parallel.map takes two arguments, the items and then the function: parallel.map(items, fn)'),
    Case('import-os', "import os\n\ndef run(ctx):\n    return os.listdir('.')\n",
         "script rejected: line 1: import of 'os' is not allowed (allowed: {allowed}, skills.<active skill>); the workspace's files are reached with tools.read, tools.write, tools.list and tools.glob; path strings are joined and split with posixpath (join, basename, splitext)"),
    Case('import-pathlib', "from pathlib import Path\n\ndef run(ctx):\n    return Path('notes.md').read_text()\n",
         "script rejected: line 1: import of 'pathlib' is not allowed (allowed: {allowed}, skills.<active skill>); the workspace's files are reached with tools.read, tools.write, tools.list and tools.glob; path strings are joined and split with posixpath (join, basename, splitext)"),
    Case('import-subprocess', "import subprocess\n\ndef run(ctx):\n    return subprocess.run(['ls'], capture_output=True).stdout\n",
         "script rejected: line 1: import of 'subprocess' is not allowed: scripts may not start threads or processes (run commands with tools.shell(command=...))"),
    Case('import-asyncio', 'import asyncio\nimport tools\n\nasync def main():\n    return 1\n\ndef run(ctx):\n    return asyncio.run(main())\n',
         "script rejected: line 1: import of 'asyncio' is not allowed: scripts may not start threads or processes (tool calls are plain calls that block: fan out with parallel.map(items, fn) or parallel.all(f, g)); line 4: async def main: a script runs no event loop; tool calls are plain calls that block (fan out with parallel.map(items, fn))"),
    Case('import-threading', 'import threading\n\ndef run(ctx):\n    t = threading.Thread(target=print)\n    t.start()\n',
         "script rejected: line 1: import of 'threading' is not allowed: scripts may not start threads or processes (use parallel.map)"),
    Case('import-concurrent', 'from concurrent.futures import ThreadPoolExecutor\n\ndef run(ctx):\n    return 1\n',
         "script rejected: line 1: import of 'concurrent.futures' is not allowed: scripts may not start threads or processes (use parallel.map)"),
    Case('import-requests', "import requests\n\ndef run(ctx):\n    return requests.get('https://example.com').text\n",
         "script rejected: line 1: import of 'requests' is not allowed (allowed: {allowed}, skills.<active skill>); a script has no network: fetch pages with a tool (tools.webfetch, where there is one)"),
    Case('import-sys', "import sys\n\ndef run(ctx):\n    print('x', file=sys.stderr)\n",
         "script rejected: line 1: import of 'sys' is not allowed (allowed: {allowed}, skills.<active skill>); print() writes to the output; ctx.remaining() gives the seconds left"),
    Case('async-run', 'import tools\n\nasync def run(ctx):\n    return 1\n',
         'script rejected: line 3: run must be a plain `def`, not `async def`'),
    Case('async-helper', "import tools, parallel\n\nasync def fetch(p):\n    return tools.read(path=p)\n\ndef run(ctx):\n    return parallel.map(['a'], fetch)\n",
         'script rejected: line 3: async def fetch: a script runs no event loop; tool calls are plain calls that block (fan out with parallel.map(items, fn))'),
    Case('await-top-level', 'import tools\n\ndef run(ctx):\n    return 1\n\nawait run(None)\n',
         "script rejected: line 6: syntax error: 'await' outside function; tool calls are plain calls that block: drop the `await`"),
    Case('await-in-def', "import tools\n\ndef run(ctx):\n    r = await tools.read(path='a')\n    return r.content\n",
         "script rejected: line 4: syntax error: 'await' outside async function; tool calls are plain calls that block: drop the `await`"),
    Case('return-at-top', "import tools\n\nresult = tools.glob(pattern='*')\nreturn result\n",
         "script rejected: line 1: the script must define a top-level function `def run(ctx):`; line 4: syntax error: 'return' outside function"),
    Case('break-outside-loop', 'def run(ctx):\n    if True:\n        break\n    return 1\n',
         "script rejected: line 3: syntax error: 'break' outside loop"),
    Case('no-run', "import tools\n\nfiles = tools.glob(pattern='*').paths\nprint(files)\n",
         'script rejected: line 1: the script must define a top-level function `def run(ctx):`'),
    Case('main-not-run', 'import tools\n\ndef main():\n    return 1\n',
         'script rejected: line 1: the script must define a top-level function `def run(ctx):` (it defines `main`: the one to call must be `run`)'),
    Case('run-no-ctx', 'def run():\n    return 1\n',
         'script rejected: line 1: run must take exactly one parameter: `def run(ctx):`'),
    Case('run-yields', 'def run(ctx):\n    for i in range(3):\n        yield i\n',
         'script rejected: line 3: run must return its result, not yield it (collect the values in a list and return the list)'),
    Case('markdown-fenced', "```python\nimport tools\n\ndef run(ctx):\n    return len(tools.glob(pattern='*').paths)\n```\n",
         '1'),
    Case('markdown-with-prose', 'Here is the script:\n```python\ndef run(ctx):\n    return 1\n```\n',
         'script rejected: line 2: the script holds markdown (a ``` fence): send only the Python code, without the fences or any text around it'),
    Case('tools-not-imported', "def run(ctx):\n    return tools.read(path='notes.md').content\n",
         'script rejected: line 2: `tools` is used but not imported: add `import tools` at the top'),
    Case('parallel-not-imported', "import tools\n\ndef run(ctx):\n    return parallel.map(['a'], lambda p: p)\n",
         'script rejected: line 4: `parallel` is used but not imported: add `import parallel` at the top'),
    Case('misspelt-name', "import tools\n\ndef run(ctx):\n    paths = tools.glob(pattern='*').paths\n    return len(path)\n",
         "script rejected: line 5: name 'path' is not defined; did you mean 'paths'?"),
    Case('misspelt-module', "import tools\n\ndef run(ctx):\n    return tool.glob(pattern='*').paths\n",
         "script rejected: line 4: name 'tool' is not defined; did you mean 'tools'?"),
    Case('syntax-error', 'def run(ctx):\n    return [1, 2\n',
         "script rejected: line 2: syntax error: '[' was never closed"),
    Case('eval', "def run(ctx):\n    return eval('1 + 1')\n",
         "script rejected: line 2: 'eval' is not allowed"),
    Case('dunder', 'def run(ctx):\n    return ().__class__.__bases__\n',
         "script rejected: line 2: dunder attribute '__bases__' is not allowed; line 2: dunder attribute '__class__' is not allowed: use type(x) or isinstance(x, C)"),
    Case('tools-submodule', 'from tools.read import ReadArgs\n\ndef run(ctx):\n    return 1\n',
         "script rejected: line 1: 'tools.read' does not exist: import tools itself"),
    Case('from-tools-unknown', "from tools import raed\n\ndef run(ctx):\n    return raed(path='a')\n",
         "script rejected: line 1: no tool 'raed'; did you mean 'read'?"),
    Case('open-workspace-file', "def run(ctx):\n    with open('notes.md') as f:\n        return f.read()\n",
         "runtime error: line 2: FileNotFoundError: 'notes.md' is not in this run's scratch folder (the working folder, empty at the start): read the workspace's files with tools.read(path='notes.md')"),
    Case('nested-dicts', "import tools\n\ndef run(ctx):\n    tools.todowrite(todos=[{'content': 'read the notes', 'status': 'pending'}])\n    return 'ok'\n",
         'ok'),
    Case('nested-dicts-bad-status', "import tools\n\ndef run(ctx):\n    tools.todowrite(todos=[{'content': 'x', 'status': 'todo'}])\n",
         "runtime error: line 4: ToolFailed: todowrite: invalid arguments for todowrite: todos[0].status: expected one of 'pending', 'in_progress', 'completed', 'cancelled', got 'todo'"),
    Case('file-missing-tool', "import tools\n\ndef run(ctx):\n    return tools.read(path='missing.md').content\n",
         'runtime error: line 4: ToolFailed: read: missing.md: no such file'),
    Case('returns-set', "import tools\n\ndef run(ctx):\n    return {'names': {p for p in tools.glob(pattern='*').paths}}\n",
         "result is not JSON-serializable: result['names'] is a set: return a list, e.g. sorted(...) or list(...)"),
    Case('returns-datetime', "import datetime\n\ndef run(ctx):\n    return {'when': datetime.datetime(2024, 1, 2, 3, 4)}\n",
         "result is not JSON-serializable: result['when'] is a datetime: return text, e.g. .isoformat()"),
    Case('returns-nan', "def run(ctx):\n    return {'ratio': float('nan')}\n",
         "result is not JSON-serializable: result['ratio'] is NaN: JSON has no NaN or infinity; return None (or a string) in its place"),
    Case('returns-result-object', "import tools\n\ndef run(ctx):\n    return tools.read(path='notes.md')\n",
         '{"path": "notes.md", "content": "# notes\\nfirst\\n", "start_line": 1, "lines": 2, "total_lines": 2, "truncated": false}'),
    Case('dynamic-attr', "import tools\n\ndef run(ctx):\n    r = tools.read(path='notes.md')\n    name = 'text'\n    return getattr(r, name)\n",
         "runtime error: line 6: AttributeError: ReadResult has no attribute 'text' (its fields: path, content, start_line, lines, total_lines, truncated)"),
    Case('loop-result-attr', "import tools\n\ndef run(ctx):\n    out = []\n    for m in tools.grep(pattern='x').matches:\n        out.append(m.lineno)\n    return out\n",
         '[]'),
    Case('runtime-name-error', 'import tools\n\ndef run(ctx):\n    total = 0\n    for x in [1]:\n        totl = total + x\n    return totl + undefined_var if False else total\n',
         "script rejected: line 7: name 'undefined_var' is not defined"),
    Case('timeout-loop', 'def run(ctx):\n    n = 0\n    while True:\n        n += 1\n',
         'script timed out after 2s (at line 3: while True:)', timeout=2),
    Case('vetoed-shell', "import tools\n\ndef run(ctx):\n    return tools.shell(command='rm -rf /').stdout\n",
         'runtime error: line 4: ToolVetoed: shell: vetoed: rm is not allowed here'),
    Case('index-error', "import tools\n\ndef run(ctx):\n    return tools.glob(pattern='*.nothing').paths[0]\n",
         'runtime error: line 4: IndexError: list index out of range'),
    Case('key-error', "def run(ctx):\n    d = {'a': 1}\n    return d['b']\n",
         "runtime error: line 3: KeyError: 'b'"),
    # issue 23's task sets: what the models wrote, and what they get now
    Case('type-name-of-error', "import tools\n\ndef run(ctx):\n    try:\n        tools.shell(command='rm x')\n    except tools.ToolError as e:\n        return type(e).__name__\n",
         "script rejected: line 7: dunder attribute '__name__' is not allowed: to tell tool errors apart, catch the class (`except tools.ToolVetoed`) or test isinstance(e, tools.ToolFailed), and read e.tool and e.reason"),
    Case('veto-reason-alone', "import tools\n\ndef run(ctx):\n    try:\n        tools.shell(command='rm x')\n    except tools.ToolVetoed as e:\n        return 'vetoed: ' + e.reason + ' (' + e.tool + ')'\n",
         'vetoed: rm is not allowed here (shell)'),
    Case('stringio-csv', "import csv, io, tools\n\ndef run(ctx):\n    text = 'a,b\\n1,2\\n'\n    return [row for row in csv.reader(io.StringIO(text))]\n",
         '[["a", "b"], ["1", "2"]]'),
    Case('ast-docstring', "import ast\n\ndef run(ctx):\n    return ast.get_docstring(ast.parse('\"\"\"The module.\"\"\"\\nx = 1\\n'))\n",
         'The module.'),
    Case('shlex-quote', "import shlex, tools\n\ndef run(ctx):\n    return tools.shell(command='echo ' + shlex.quote('a b; c')).stdout\n",
         'a b; c\n'),
    Case('todowrite-typed', "import tools\n\ndef run(ctx):\n    r = tools.todowrite(todos=[{'content': 'read', 'status': 'in_progress'}])\n    return [(t.content, t.status) for t in r.todos]\n",
         '[["read", "in_progress"]]'),
    Case('string-result-as-is', "def run(ctx):\n    return '3.11'\n", '3.11'),
    Case('str-int-concat', "import tools\n\ndef run(ctx):\n    r = tools.read(path='notes.md')\n    return 'lines: ' + r.lines\n",
         'runtime error: line 5: TypeError: can only concatenate str (not "int") to str'),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_a_wrong_script_gets_an_answer_that_says_what_to_do(nx: Nexus, case: Case,
                                                           request: pytest.FixtureRequest) -> None:
    if case.timeout is not None:
        nx = request.getfixturevalue("impatient_nx")
        assert engine_for(nx).settings.timeout_seconds == case.timeout
    result = nx.invoke("run_code", {"script": case.script})
    expected = case.expected.replace("{allowed}", ALLOWED)
    if result.is_error:
        assert result.output.split("\n--- stdout ---")[0] == expected
        assert result.output.startswith(result.error or "")  # the error, and in the output maybe its line
    else:
        assert result.output == expected


def test_the_corpus_is_what_the_issue_measured_and_more() -> None:
    assert len(CASES) >= 51 and len({c.id for c in CASES}) == len(CASES)
    rejected = [c for c in CASES if c.expected.startswith("script rejected:")]
    assert len(rejected) >= 40  # most mistakes are caught before anything runs


@pytest.mark.parametrize("script", [
    "import tools\n\ndef run(ctx):\n    return 1\n\nawait run(None)\n",
    "def run(ctx):\n    return 1\nreturn 2\n",
    "def run(ctx):\n    if ctx:\n        continue\n    return 1\n",
], ids=["await", "return", "continue"])
def test_a_script_the_compiler_refuses_is_rejected_and_persisted_also_when_its_child_was_woken(
        nx: Nexus, script: str) -> None:
    """The host's check compiles the script: `return`, `await`, `continue` out of place are
    `script rejected: line N`, the rejection is persisted like any other, and a child woken early
    (which compiles the source itself while the host checks it) changes nothing."""
    from nexus_tool_code_exec import engine_for

    engine = engine_for(nx)
    assert engine is not None
    assert nx.invoke("run_code", {"script": "def run(ctx):\n    return 0\n"}).output == "0"  # the zygote is up
    time.sleep(0.3)  # its spares too: a lone run now takes one early and wakes it with the source
    call = ToolCall(name="run_code", arguments={"script": script})
    result = nx.invoke(call)
    assert result.is_error and result.error is not None
    assert result.error.startswith("script rejected: line ") and "syntax error: " in result.error
    folder = Path(nx.config.session_dir) / "plugins" / "nexus.tool.code_exec" / call.id
    assert (folder / "error.txt").read_text().startswith("script rejected: line ")
    assert (folder / "script.py").read_text() == script
