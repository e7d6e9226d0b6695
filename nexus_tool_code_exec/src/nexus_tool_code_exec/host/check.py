"""The static check of a run_code script, before anything runs (runs in the host).

It exists to give the model early, clear errors, not to contain it: the sandbox (sandbox/) is
the boundary. Every violation is reported at once, each with its line.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable

from ..protocol import SCRIPT_FILENAME

#: modules that start threads or processes; refused with `reject_threads` even if allowed
THREAD_MODULES = frozenset({"threading", "_thread", "multiprocessing", "concurrent", "asyncio", "subprocess"})

#: builtins that run code from strings or hand out namespaces; the sandbox would contain them,
#: but a script that needs them is not what run_code is for
FORBIDDEN_NAMES = frozenset(
    {"exec", "eval", "compile", "__import__", "breakpoint", "globals", "locals", "vars", "input",
     "__builtins__", "__loader__", "__spec__"}
)

#: the modules run_code gives every script (besides `skills.<name>` of the active skills)
PROVIDED_MODULES = ("tools", "parallel")

#: compiler directives, not modules that reach anything: a model writes
#: `from __future__ import annotations` out of habit, and refusing it costs a retry for nothing
ALWAYS_ALLOWED = frozenset({"__future__"})


class ScriptRejected(Exception):
    """The script broke the contract. `problems` are `line N: what is wrong` texts."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("script rejected: " + "; ".join(problems))


def skill_module_name(skill: str) -> str:
    """The module a skill's helpers import as: `skills.<name>`, with `-` and other
    non-identifier characters as `_`."""
    out = "".join(c if c.isalnum() or c == "_" else "_" for c in skill)
    return ("_" + out) if out[:1].isdigit() else out


def check_script(
    source: str,
    allowed_packages: Iterable[str],
    active_skills: Iterable[str] = (),
    reject_threads: bool = True,
) -> ast.Module:
    """Parse and check `source`; return its AST or raise ScriptRejected with every problem."""
    try:
        tree = ast.parse(source, filename=SCRIPT_FILENAME)
    except SyntaxError as exc:
        raise ScriptRejected([f"line {exc.lineno or 1}: syntax error: {exc.msg}"]) from None
    except (RecursionError, MemoryError):
        # the parser gives up on deep nesting with these, not a SyntaxError; without this the
        # model would get a bare "MemoryError" from the tool instead of a rejection
        raise ScriptRejected(["line 1: the script is too deeply nested to parse"]) from None

    allowed = set(allowed_packages)
    if reject_threads:
        allowed -= THREAD_MODULES
    skills = {skill_module_name(s) for s in active_skills}
    problems: list[tuple[int, str]] = []

    def check_module(name: str, line: int) -> None:
        top, _, rest = name.partition(".")
        if top in ALWAYS_ALLOWED:
            return
        if top in PROVIDED_MODULES:
            if rest:
                problems.append((line, f"'{name}' does not exist: import {top} itself"))
            return
        if top == "skills":
            sub = rest.partition(".")[0]
            if not sub:
                problems.append((line, "import a skill's helpers as skills.<name>"))
            elif sub not in skills:
                active = ", ".join(sorted(skills)) or "none"
                problems.append((line, f"skill {sub!r} is not active (active skills: {active})"))
            return
        if reject_threads and top in THREAD_MODULES:
            problems.append((line, f"import of {name!r} is not allowed: scripts may not start threads or "
                                   "processes (use parallel.map)"))
        elif top not in allowed:
            problems.append((line, f"import of {name!r} is not allowed (allowed: "
                                   f"{', '.join(sorted(allowed | set(PROVIDED_MODULES)))}, skills.<active skill>)"))

    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Import):
            for alias in node.names:
                check_module(alias.name, line)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                problems.append((line, "relative imports are not allowed"))
            elif node.module == "skills":
                for alias in node.names:
                    check_module(f"skills.{alias.name}", line)
            else:
                check_module(node.module or "", line)
        elif isinstance(node, ast.Attribute) and node.attr.startswith("__") and node.attr.endswith("__"):
            problems.append((line, f"dunder attribute {node.attr!r} is not allowed"))
        elif isinstance(node, ast.Name) and node.id in FORBIDDEN_NAMES:
            problems.append((line, f"{node.id!r} is not allowed"))

    runs = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == "run"]
    if not runs:
        problems.append((1, "the script must define a top-level function `def run(ctx):`"))
    for fn in runs:
        if isinstance(fn, ast.AsyncFunctionDef):
            problems.append((fn.lineno, "run must be a plain `def`, not `async def`"))
        a = fn.args
        positional = a.posonlyargs + a.args
        if len(positional) != 1 or a.vararg or a.kwarg or a.kwonlyargs or a.defaults:
            problems.append((fn.lineno, "run must take exactly one parameter: `def run(ctx):`"))

    if problems:
        unique = sorted(set(problems))
        raise ScriptRejected([f"line {line}: {text}" for line, text in unique])
    return tree
