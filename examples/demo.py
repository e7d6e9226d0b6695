"""The demo `./scripts/demo` runs: a Nexus on the built-in defaults, doing real work.

It adds two plugins of its own — an audit observer that reports every call and a gate that
refuses deleting files — and calls the installed tools through the one gated path, in a
temporary workspace. A tool that is not installed is skipped with a note.
"""

from __future__ import annotations

import json
import tempfile
import textwrap

from nexus_core import Nexus, Veto, hookimpl


class Audit:
    """An observer: sees the final result of every call, inner calls of run_code included."""

    @hookimpl
    def nexus_tool_result(self, call, result):
        status = f"error ({result.error_kind})" if result.is_error else "ok"
        inner = f" (inside {call.parent_call_id[:13]}...)" if call.parent_call_id else ""
        print(f"    [audit] {call.name}{inner}: {status}")


class NoDeletes:
    """A gate: refuses shell commands that delete files."""

    @hookimpl
    def nexus_before_tool_invoke(self, call, tool):
        command = str(call.arguments.get("command", ""))
        if tool.name == "shell" and ("rm " in command or "unlink " in command):  # also `bash`: one identity
            return Veto("deleting files is not allowed in this demo")


def step(nx: Nexus, title: str, tool: str, arguments: dict, *, skip_if_missing: bool = True) -> object:
    print(f"\n== {title}\n   {tool} {json.dumps(arguments)[:100]}")
    if skip_if_missing and nx.tool(tool) is None:
        print(f"   (skipped: no {tool!r} tool is installed)")
        return None
    result = nx.invoke(tool, arguments)
    print(textwrap.indent(result.output.rstrip() or "(no output)", "   | "))
    return result


SCRIPT = '''\
import tools, parallel

def run(ctx):
    paths = ["notes/todo.txt", "notes/ideas.txt"]
    texts = parallel.map(paths, lambda p: tools.read(path=p).content)   # two reads at once
    words = {p: len(t.split()) for p, t in zip(paths, texts)}
    print("words per file:", words)
    try:
        tools.shell(command="rm -rf notes")
    except tools.ToolVetoed as refused:
        print("the host's gate said no:", refused)
    return {"total_words": sum(words.values())}
'''

with tempfile.TemporaryDirectory() as ws, tempfile.TemporaryDirectory() as sessions:
    config = {"workspace": ws, "session_dir": sessions}  # run records outside the workspace, as by default
    with Nexus.from_config(config, plugins=[Audit(), NoDeletes()]) as nx:
        active = [p.name for p in nx.plugins() if p.status == "active" and p.distribution]
        print("installed plugins:", ", ".join(active))
        print("tools:", ", ".join(t.name for t in nx.tools()) or "(none)")
        print("workspace:", ws)

        step(nx, "Run a shell command", "shell", {"command": "echo hello from $(uname -s)"})
        step(nx, "Write a file", "write", {"path": "notes/todo.txt", "content": "buy milk\ncall ann\n"})
        step(nx, "And another", "write", {"path": "notes/ideas.txt", "content": "a plugin for the weather\n"})
        step(nx, "Find them", "glob", {"pattern": "**/*.txt"})
        step(nx, "Read one back", "read", {"path": "notes/todo.txt"})
        step(nx, "A call the gate refuses", "shell", {"command": "rm -rf notes"})
        step(nx, "Arguments that do not match the schema", "read", {"file": "notes/todo.txt"})
        step(nx, "A tool that does not exist", "fly", {"to": "the moon"}, skip_if_missing=False)
        if nx.tool("run_code"):
            print(f"\n== One script, many tool calls: run_code runs this in a sandbox\n{textwrap.indent(SCRIPT, '   : ')}")
        step(nx, "run_code's result (its stdout, then run's return value)", "run_code", {"script": SCRIPT})
        print("\nOpenAI-format schemas for these tools:", len(nx.schemas("openai")), "declarations")
