"""What run_code's contract costs a model, and the host: tokens of the tool declarations (the
default tool set, then 10, 100 and 500 extra tools), the time to register the extra tools, and the
static check's cost per script. Measured against its peers in the same run: the direct schemas of
the same tools (what a model pays without run_code), and the parse and compile of each script
(what the host does for a run anyway).

    .venv/bin/python bench/bench_tokens.py [--repeat 3] [--json FILE]

Tokenizer: tiktoken's `o200k_base` (GPT-4o and later), the only one used. tiktoken downloads its
ranks on first use; where that cannot be done (no network), they are rebuilt from the copy the
`quicktok-v1` package ships and written where tiktoken looks for its cache, and tiktoken itself
checks them against its published SHA-256, so the counts are tiktoken's either way. Both packages
are in the root pyproject's `bench` extra. Not a test: it asserts nothing.

Extra tools are shaped like an MCP server's (2-4 arguments, a description of a sentence or two,
an output schema for half), spread over 10 MCP servers of 1, 2, 4, ... tools each.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import platform
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from nexus_core import Nexus, ToolDef

CE = "nexus.tool.code_exec"
DEFAULT_ACTIVE = ["nexus.tool.file", "nexus.tool.shell", "nexus.tool.web", CE, "nexus.skills", "nexus.tool.todo",
                  "nexus.tool.question"]
#: what run_code's declaration on the default tool set may cost (issue 23)
RUN_CODE_BUDGET = 1800
O200K_URL = "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken"
O200K_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"


# -- the tokenizer --------------------------------------------------------------------------


def o200k() -> Any:
    """tiktoken's o200k_base, its ranks downloaded by tiktoken or rebuilt from quicktok-v1's copy."""
    import tiktoken

    try:
        return tiktoken.get_encoding("o200k_base")
    except Exception as exc:
        offline = exc
    try:
        import quicktok  # type: ignore[import-not-found]
    except ImportError:
        sys.exit(f"tiktoken cannot fetch o200k_base ({offline}) and quicktok-v1 is not installed: "
                 "pip install '.[bench]' from the repository root")
    vocab = Path(quicktok.__file__).parent / "data" / "o200k.vocab"
    data = vocab.read_bytes()
    ranks: list[tuple[int, bytes]] = []
    pos = 4  # a u32 count, then per token: u16 length, the bytes, u32 rank
    while pos < len(data):
        (length,) = struct.unpack_from("<H", data, pos)
        token = data[pos + 2:pos + 2 + length]
        (rank,) = struct.unpack_from("<I", data, pos + 2 + length)
        ranks.append((rank, token))
        pos += 6 + length
    text = "".join(f"{base64.b64encode(t).decode()} {r}\n" for r, t in sorted(ranks)).encode()
    if hashlib.sha256(text).hexdigest() != O200K_SHA256:
        sys.exit("the o200k ranks rebuilt from quicktok-v1 are not tiktoken's o200k_base (SHA-256 differs)")
    cache = Path(os.environ.get("TIKTOKEN_CACHE_DIR") or Path(tempfile.gettempdir()) / "nexus-bench-tiktoken")
    cache.mkdir(parents=True, exist_ok=True)
    (cache / hashlib.sha1(O200K_URL.encode()).hexdigest()).write_bytes(text)
    os.environ["TIKTOKEN_CACHE_DIR"] = str(cache)
    return tiktoken.get_encoding("o200k_base")  # tiktoken checks the SHA-256 again


# -- tools ----------------------------------------------------------------------------------


def extra_tools(n: int, exposure: str = "both") -> list[ToolDef]:
    """`n` tools like an MCP server's, over 10 servers."""
    out = []
    for i in range(n):
        server = f"server{i % 10}"
        props: dict[str, Any] = {
            "id": {"type": "string", "description": f"The identifier of the {server} record to work on."},
            "fields": {"type": "array", "items": {"type": "string"},
                       "description": "Which fields to return (default: all of them)."},
        }
        if i % 2:
            props["limit"] = {"type": "integer", "minimum": 1, "maximum": 100, "default": 20,
                              "description": "The most records to return."}
        if i % 3 == 0:
            props["mode"] = {"enum": ["fast", "exact"], "description": "How hard to look."}
        output = None
        if i % 2 == 0:
            output = {"type": "object", "properties": {
                "records": {"type": "array", "items": {"type": "object", "properties": {
                    "id": {"type": "string"}, "title": {"type": "string"}}, "required": ["id", "title"]}},
                "next_page": {"type": ["string", "null"], "description": "pass it to get the next page"}},
                "required": ["records", "next_page"]}
        out.append(ToolDef(
            name=f"{server}_operation_{i}", handler=lambda a: {"records": [], "next_page": None},
            description=(f"Run operation {i} of {server} on a record: looks the record up by id and returns "
                         "the fields asked for. Fails when the record does not exist."),
            input_schema={"type": "object", "properties": props, "required": ["id"]},
            output_schema=output, annotations={"mcp_server": server}, exposure=exposure,  # type: ignore[arg-type]
        ))
    return out


def nexus(workspace: str, code_only: tuple[str, ...] = ()) -> Nexus:
    """The default tool set; the tools named in `code_only` declared `exposure: code`."""
    return Nexus.from_config({"workspace": workspace, "skills": [], "plugins": {"active": DEFAULT_ACTIVE},
                              "tools": {name: {"exposure": "code"} for name in code_only}})


def tokens_of(enc: Any, value: Any) -> int:
    return len(enc.encode(value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)))


def declarations(enc: Any, nx: Nexus) -> dict[str, int]:
    """Tokens of the OpenAI-format declarations: all of them, run_code's, run_code_api's."""
    schemas = nx.schemas("openai")
    by_name = {s["function"]["name"]: tokens_of(enc, s) for s in schemas}
    return {"total": sum(by_name.values()), "run_code": by_name.get("run_code", 0),
            "run_code_api": by_name.get("run_code_api", 0), "declared": len(schemas)}


# -- measurements ---------------------------------------------------------------------------


def measure_tokens(enc: Any, workspace: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with nexus(workspace) as nx:
        out["default"] = {**declarations(enc, nx), "tools": len(nx.tools())}
        bound = [t.name for t in nx.tools() if t.exposure == "both"]
    # the same tools met only in scripts: run_code's description then carries their whole stubs
    with nexus(workspace, code_only=tuple(bound)) as nx:
        out["default_code_only"] = {**declarations(enc, nx), "tools": len(nx.tools())}
    for n in (10, 100, 500):
        row: dict[str, Any] = {}
        for exposure in ("both", "code"):
            with nexus(workspace) as nx:
                for t in extra_tools(n, exposure):
                    nx.add_tool(t)
                row[exposure] = declarations(enc, nx)
                if exposure == "both":
                    api = nx.invoke("run_code_api", {"query": "server3 record operation"}) \
                        if nx.tool("run_code_api") else None
                    row["api_answer"] = tokens_of(enc, api.output) if api is not None else 0
        out[f"extra_{n}"] = row
    return out


def measure_registration(workspace: str, repeat: int) -> dict[str, Any]:
    """Seconds (wall and this process's CPU) to register N extra tools one by one, each
    announced to run_code (its pieces and description follow), median of `repeat`."""
    out: dict[str, Any] = {}
    for n in (10, 100, 500):
        walls, cpus = [], []
        for _ in range(repeat):
            tools = extra_tools(n)
            with nexus(workspace) as nx:
                wall, cpu = time.perf_counter(), time.process_time()
                for t in tools:
                    nx.add_tool(t)
                cpus.append(time.process_time() - cpu)
                walls.append(time.perf_counter() - wall)
        out[str(n)] = {"wall_s": statistics.median(walls), "cpu_s": statistics.median(cpus)}
    return out


def measure_check(workspace: str, repeat: int) -> dict[str, Any]:
    """The static check (parse, rules, compile, calls against the bindings) per script, in the
    host, against what the host did before it (parse and compile, which it still needs):
    microseconds of CPU, median per script, for a trivial script, a realistic one and the corpus
    of wrong scripts."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "code_exec"))
    import ast

    from test_model_mistakes import CASES  # the corpus of wrong scripts

    from nexus_tool_code_exec import DEFAULT_ALLOWED_PACKAGES, engine_for
    from nexus_tool_code_exec.host.check import ScriptRejected, check_and_compile, unfence

    realistic = (
        "import tools, parallel\n\ndef run(ctx):\n    paths = tools.glob(pattern='**/*.md').paths\n"
        "    texts = parallel.map(paths, lambda p: tools.read(path=p).content)\n"
        "    counts = {p: len(t.splitlines()) for p, t in zip(paths, texts)}\n"
        "    for p, c in sorted(counts.items()):\n        print(p, c)\n    return {'files': len(paths)}\n")
    sets = {"trivial": ["def run(ctx):\n    return 1\n"], "realistic": [realistic],
            "corpus": [unfence(c.script) for c in CASES]}
    with nexus(workspace) as nx:
        engine = engine_for(nx)
        assert engine is not None
        api = engine.bindings()

        def checked(source: str) -> None:
            try:
                check_and_compile(source, DEFAULT_ALLOWED_PACKAGES, api=api)
            except ScriptRejected:
                pass

        def parsed(source: str) -> None:
            try:
                compile(ast.parse(source), "script.py", "exec", dont_inherit=True)
            except SyntaxError:
                pass

        result: dict[str, Any] = {}
        for label, scripts in sets.items():
            for name, fn in (("check", checked), ("parse_compile", parsed)):
                per: list[float] = []
                rounds = max(1, 400 // len(scripts))
                for _ in range(repeat * 5):
                    began = time.process_time_ns()
                    for _ in range(rounds):
                        for script in scripts:
                            fn(script)
                    per.append((time.process_time_ns() - began) / rounds / len(scripts) / 1000)
                result[f"{label}_{name}_us"] = statistics.median(per)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    opts = parser.parse_args()
    enc = o200k()
    workspace = tempfile.mkdtemp(prefix="nexus-bench-")
    tokens = measure_tokens(enc, workspace)
    registration = measure_registration(workspace, opts.repeat)
    check = measure_check(workspace, opts.repeat)

    print(f"# run_code's contract: Python {platform.python_version()}, {platform.machine()}, "
          f"{os.cpu_count()} CPUs; tokenizer tiktoken o200k_base")
    d = tokens["default"]
    print(f"\ndefault tool set ({d['tools']} tools, {d['declared']} declared to the model):")
    print(f"  all declarations   {d['total']:>7,} tokens")
    print(f"  run_code alone     {d['run_code']:>7,} tokens ({d['run_code'] / d['total']:.0%}; issue 23's budget: "
          f"{RUN_CODE_BUDGET:,})")
    c = tokens["default_code_only"]
    print(f"  the same tools code-only: all declarations {c['total']:,} tokens, run_code {c['run_code']:,} "
          f"(its stubs whole: no declaration of theirs says it)")
    print("\nextra tools        run_code  run_code_api  all declarations  all, extras code-only  api answer")
    for n in (10, 100, 500):
        row = tokens[f"extra_{n}"]
        both, code = row["both"], row["code"]
        print(f"  +{n:<4}          {both['run_code']:>8,}  {both['run_code_api']:>12,}  {both['total']:>16,}"
              f"  {code['total']:>21,}  {row['api_answer']:>10,}")
    print("  (all declarations: what a model reads of the tools each turn; with the extra tools declared "
          "\n   code-only they cost their stubs alone, which past max_listed_tools run_code_api gives on demand)")
    print("\nregistering N extra tools, one by one (median of "
          f"{opts.repeat}):")
    for n, row in registration.items():
        print(f"  {n:>4} tools        {row['wall_s'] * 1000:>8.1f} ms wall  {row['cpu_s'] * 1000:>8.1f} ms CPU  "
              f"({row['cpu_s'] / int(n) * 1e6:,.0f} us CPU a tool)")
    print("\nstatic check, per script, in the host (us of CPU; parse + compile: what the host did anyway):")
    for label in ("trivial", "realistic", "corpus"):
        ours, base = check[f"{label}_check_us"], check[f"{label}_parse_compile_us"]
        print(f"  {label:<10} check {ours:>7.1f}   parse + compile {base:>7.1f}   (+{ours - base:.1f} us, {ours / base:.2f}x)")
    if opts.json:
        opts.json.write_text(json.dumps({"tokenizer": "tiktoken o200k_base", "tokens": tokens,
                                         "registration": registration, "check": check}, indent=2))


if __name__ == "__main__":
    main()
