"""The static check of a run_code script, before anything runs (runs in the host).

It exists to give the model early, clear errors, not to contain it: the sandbox (sandbox/) is
the boundary. Every violation is reported at once, each with its line: the contract's rules
(imports, `def run(ctx)`, no threads), everything the compiler refuses (`return` or `await`
outside a function, ...), and, given the bindings, the calls a script makes of `tools` and
`parallel` (a tool that does not exist, an argument it does not take, a result field it does not
have), each with the fix.
"""

from __future__ import annotations

import ast
import builtins
import difflib
import re
import types
from collections.abc import Iterable
from typing import TYPE_CHECKING

import attrs

from ..protocol import SCRIPT_FILENAME

if TYPE_CHECKING:
    from .bindings import Bindings, FunctionApi

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



# -- markdown fences ------------------------------------------------------------------------

_FENCED = re.compile(r"\A\s*(```|~~~)[ \t]*[\w+.-]*[ \t]*\r?\n(?P<code>.*?)\r?\n?[ \t]*\1[ \t]*\s*\Z", re.DOTALL)
_FENCE_LINE = re.compile(r"^\s*(```|~~~)", re.MULTILINE)


def unfence(source: str) -> str:
    """The code of a script sent as one markdown block (```python ... ```), else the script."""
    if "```" not in source and "~~~" not in source:
        return source
    match = _FENCED.match(source)
    return match.group("code") + "\n" if match else source


# -- what a model reaches for that a script does not have -----------------------------------

#: for a module a script may not import: the tools (any one of them bound) that do its job, and
#: what to say about them
_MODULE_HINTS: dict[str, tuple[tuple[str, ...], str]] = {
    "os": (("read", "write", "list", "glob"), "the workspace's files are reached with tools.read, tools.write, "
                                              "tools.list and tools.glob"),
    "pathlib": (("read", "write", "list", "glob"), "the workspace's files are reached with tools.read, "
                                                   "tools.write, tools.list and tools.glob"),
    "io": ((), "for CSV text, csv.reader(text.splitlines()); text is split with .splitlines(); the workspace's "
               "files are read and written with the tools"),
    "shutil": (("write", "shell"), "copy and move files with tools.write or tools.shell"),
    "glob": (("glob",), "find files with tools.glob(pattern=...)"),
    "tempfile": ((), "the working folder is already a scratch folder of this run"),
    "sys": ((), "print() writes to the output; ctx.remaining() gives the seconds left"),
}
for _module in ("requests", "urllib", "urllib3", "http", "httpx", "aiohttp", "socket", "ssl"):
    _MODULE_HINTS[_module] = ((), "a script has no network: fetch pages with a tool (tools.webfetch, where "
                                  "there is one)")
_THREAD_HINTS = {
    "subprocess": (("shell",), "run commands with tools.shell(command=...)"),
    "asyncio": ((), "tool calls are plain calls that block: fan out with parallel.map(items, fn) or "
                    "parallel.all(f, g)"),
}
#: for a dunder attribute a script reaches for, the allowed way to the same end
_DUNDER_HINTS = {
    "__name__": "to tell tool errors apart, catch the class (`except tools.ToolVetoed`) or test isinstance(e, "
                "tools.ToolFailed), and read e.tool and e.reason",
    "__class__": "use type(x) or isinstance(x, C)",
    "__dict__": "a tools result's fields are in its stub: read them as attributes",
    "__doc__": "the tools' docstrings are in run_code's description (or run_code_api's answer)",
}
PARALLEL_FUNCTIONS = ("map", "for_each", "all")
#: the names a script has without binding them
BUILTIN_NAMES = frozenset(dir(builtins)) | {"__name__", "__file__", "__doc__", "__annotations__"}
#: builtins no script means when it misspells a name
_RARE_BUILTINS = frozenset(n for n in BUILTIN_NAMES if n.startswith("_") or n[:1].isupper())
_COLLECTIONS = (ast.List, ast.Tuple, ast.ListComp, ast.Set, ast.SetComp, ast.Dict, ast.DictComp, ast.GeneratorExp)


#: a keyword a model reaches for -> the names tools usually give it
_SYNONYMS: dict[str, tuple[str, ...]] = {
    "file": ("path",), "filename": ("path",), "filepath": ("path",), "file_path": ("path",), "dir": ("path",),
    "folder": ("path",), "directory": ("path",), "text": ("content",), "data": ("content",), "body": ("content",),
    "contents": ("content",), "cmd": ("command",), "query": ("pattern",), "regex": ("pattern",),
    "glob": ("pattern",), "max": ("limit",), "count": ("limit",), "start": ("offset",), "old": ("old_string",),
    "new": ("new_string",), "link": ("url",), "uri": ("url",),
}
_DICT_METHODS = frozenset({"get", "keys", "items", "values"})
#: the runtime's names in `tools` that no script means when it misspells a tool
RUNTIME_PRIVATE = frozenset({"attrs", "Any", "Literal", "_call", "_Record", "_SIGNATURES"})


def _a(noun: str) -> str:
    """`a ReadResult`, `an EchoArgs`."""
    return ("an " if noun[:1].lower() in "aeiou" else "a ") + noun


def _hint(module: str, table: dict[str, tuple[tuple[str, ...], str]], api: Bindings | None) -> str:
    entry = table.get(module)
    if entry is None:
        return ""
    tools, text = entry
    if tools and (api is None or not any(t in api.functions for t in tools)):
        return ""
    return text


def check_script(
    source: str,
    allowed_packages: Iterable[str],
    active_skills: Iterable[str] = (),
    reject_threads: bool = True,
    api: Bindings | None = None,
) -> ast.Module:
    """Parse, check and compile `source`; return its AST or raise ScriptRejected with every
    problem. With `api` (the bindings the script will get), its calls of `tools` and `parallel`
    are checked against them too."""
    return check_and_compile(source, allowed_packages, active_skills, reject_threads, api)[0]


def check_and_compile(
    source: str,
    allowed_packages: Iterable[str],
    active_skills: Iterable[str] = (),
    reject_threads: bool = True,
    api: Bindings | None = None,
) -> tuple[ast.Module, types.CodeType]:
    """`check_script`, and the code object the host compiled (the compile is part of the
    check: `return` or `await` outside a function are errors only the compiler finds)."""
    try:
        tree = ast.parse(source, filename=SCRIPT_FILENAME)
    except SyntaxError as exc:
        line = exc.lineno or 1
        fence = _FENCE_LINE.search(source)
        if fence is not None:
            at = source.count("\n", 0, fence.start()) + 1
            raise ScriptRejected([f"line {at}: the script holds markdown (a ``` fence): send only the Python "
                                  "code, without the fences or any text around it"]) from None
        raise ScriptRejected([f"line {line}: syntax error: {exc.msg}"]) from None
    except (RecursionError, MemoryError):
        # the parser gives up on deep nesting with these, not a SyntaxError; without this the
        # model would get a bare "MemoryError" from the tool instead of a rejection
        raise ScriptRejected(["line 1: the script is too deeply nested to parse"]) from None

    problems = _Checker(tree, allowed_packages, active_skills, reject_threads, api).run()
    code = None
    try:
        code = compile(tree, SCRIPT_FILENAME, "exec", dont_inherit=True)
    except SyntaxError as exc:
        hint = "; tool calls are plain calls that block: drop the `await`" if "'await' outside" in exc.msg else ""
        problems.append((exc.lineno or 1, f"syntax error: {exc.msg}{hint}"))
    except (RecursionError, MemoryError):
        problems.append((1, "the script is too deeply nested to compile"))
    if problems or code is None:
        unique = sorted(set(problems))
        raise ScriptRejected([f"line {line}: {text}" for line, text in unique])
    return tree, code


class _Checker:
    """One pass over the tree for the contract's rules, then the calls of `tools` and `parallel`."""

    def __init__(self, tree: ast.Module, allowed_packages: Iterable[str], active_skills: Iterable[str],
                 reject_threads: bool, api: Bindings | None) -> None:
        self.tree = tree
        allowed = set(allowed_packages)
        if reject_threads:
            allowed -= THREAD_MODULES
        self.allowed = allowed
        self.reject_threads = reject_threads
        self.skills = {skill_module_name(s) for s in active_skills}
        self.api = api
        self.problems: list[tuple[int, str]] = []
        self.tool_aliases: set[str] = set()  # names bound to the tools module
        self.tool_names: dict[str, str] = {}  # name bound by `from tools import x` -> x
        self.parallel_aliases: set[str] = set()
        self.parallel_names: dict[str, str] = {}
        self.bound: set[str] = set()  # every name the script binds anywhere
        self.scopes: dict[ast.AST, _Scope] = {}
        self.functions: set[str] = set()  # names of the functions it defines

    def add(self, line: int, text: str) -> None:
        self.problems.append((line, text))

    def run(self) -> list[tuple[int, str]]:
        uses: list[ast.Name] = []
        loads: list[ast.Name] = []
        star = False
        annotations: list[ast.expr] = []  # not evaluated (or not by run): never "not defined"
        calls: list[ast.Call] = []
        attributes: list[ast.Attribute] = []
        subscripts: list[ast.Subscript] = []
        scopes = self.scopes
        # one walk, each node with the function (or lambda, or the module) whose scope it is in
        stack: list[tuple[ast.AST, ast.AST]] = [(child, self.tree) for child in self.tree.body]
        while stack:
            node, scope = stack.pop()
            kind = type(node)
            inner = node if kind in _SCOPES else scope
            for child in ast.iter_child_nodes(node):
                stack.append((child, inner))
            if kind is ast.Name:
                assert isinstance(node, ast.Name)
                if node.id in FORBIDDEN_NAMES:
                    self.add(node.lineno, f"{node.id!r} is not allowed")
                info = scopes.get(scope) or scopes.setdefault(scope, _Scope())
                if not isinstance(node.ctx, ast.Load):
                    self.bound.add(node.id)
                    info.stores[node.id] = info.stores.get(node.id, 0) + 1
                elif node.id in PROVIDED_MODULES:
                    uses.append(node)
                else:
                    loads.append(node)
                    info.loads.append(node)
            elif kind is ast.Assign:
                assert isinstance(node, ast.Assign)
                if len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) and isinstance(node.value, ast.Call):
                    (scopes.get(scope) or scopes.setdefault(scope, _Scope())).assigns.append(node)
            elif kind in (ast.Yield, ast.YieldFrom):
                info = scopes.get(scope) or scopes.setdefault(scope, _Scope())
                info.yields = info.yields or node  # type: ignore[assignment]
            elif kind is ast.Attribute:
                assert isinstance(node, ast.Attribute)
                if node.attr.startswith("__") and node.attr.endswith("__"):
                    hint = _DUNDER_HINTS.get(node.attr)
                    self.add(node.lineno, f"dunder attribute {node.attr!r} is not allowed" + (f": {hint}" if hint else ""))
                else:
                    attributes.append(node)
            elif kind is ast.Call:
                calls.append(node)  # type: ignore[arg-type]
            elif kind is ast.Subscript:
                subscripts.append(node)  # type: ignore[arg-type]
            elif kind is ast.Import:
                assert isinstance(node, ast.Import)
                for alias in node.names:
                    self.check_module(alias.name, node.lineno)
                    bound = alias.asname or alias.name.partition(".")[0]
                    self.bound.add(bound)
                    if alias.name == "tools":
                        self.tool_aliases.add(bound)
                    elif alias.name == "parallel":
                        self.parallel_aliases.add(bound)
            elif kind is ast.ImportFrom:
                assert isinstance(node, ast.ImportFrom)
                self.import_from(node)
                star = star or any(alias.name == "*" for alias in node.names)
            elif kind in (ast.FunctionDef, ast.AsyncFunctionDef):
                assert isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                self.bound.add(node.name)
                self.functions.add(node.name)
                for arg in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs,
                            node.args.vararg, node.args.kwarg):
                    if arg is not None:
                        self.bound.add(arg.arg)
                        if arg.annotation is not None:
                            annotations.append(arg.annotation)
                if node.returns is not None:
                    annotations.append(node.returns)
                info = scopes.get(node) or scopes.setdefault(node, _Scope())
                for arg in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs):
                    info.stores[arg.arg] = info.stores.get(arg.arg, 0) + 1
                if kind is ast.AsyncFunctionDef and not (node.name == "run" and node in self.tree.body):
                    self.add(node.lineno, f"async def {node.name}: a script runs no event loop; tool calls are "
                                          "plain calls that block (fan out with parallel.map(items, fn))")
            elif kind is ast.AnnAssign:
                annotations.append(node.annotation)  # type: ignore[attr-defined]
            elif kind is ast.ClassDef:
                self.bound.add(node.name)  # type: ignore[attr-defined]
            elif kind is ast.ExceptHandler and node.name:  # type: ignore[attr-defined]
                self.bound.add(node.name)  # type: ignore[attr-defined]
            elif kind in (ast.Global, ast.Nonlocal):
                self.bound.update(node.names)  # type: ignore[attr-defined]
                (scopes.get(scope) or scopes.setdefault(scope, _Scope())).skip.update(node.names)  # type: ignore[attr-defined]
            elif kind in (ast.MatchAs, ast.MatchStar) and node.name:  # type: ignore[attr-defined]
                self.bound.add(node.name)  # type: ignore[attr-defined]
            elif kind is ast.MatchMapping and node.rest:  # type: ignore[attr-defined]
                self.bound.add(node.rest)  # type: ignore[attr-defined]
            elif kind is ast.Lambda:
                a = node.args  # type: ignore[attr-defined]
                info = scopes.get(node) or scopes.setdefault(node, _Scope())
                for arg in (*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg):
                    if arg is not None:
                        self.bound.add(arg.arg)
                        info.stores[arg.arg] = info.stores.get(arg.arg, 0) + 1
        self.check_run()
        for name in uses:
            if name.id not in self.bound:
                self.add(name.lineno, f"`{name.id}` is used but not imported: add `import {name.id}` at the top")
        if not star:  # a name no statement binds, anywhere: a misspelling (NameError when it runs)
            known = self.bound | BUILTIN_NAMES
            unknown = [name for name in loads if name.id not in known and name.id not in FORBIDDEN_NAMES]
            if unknown and annotations:
                skip = {id(n) for a in annotations for n in ast.walk(a)}
                unknown = [name for name in unknown if id(name) not in skip]
            for name in unknown:
                close = difflib.get_close_matches(name.id, sorted(known - _RARE_BUILTINS), n=1, cutoff=0.7)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                self.add(name.lineno, f"name {name.id!r} is not defined{hint}")
        if self.tool_aliases or self.tool_names or self.parallel_aliases or self.parallel_names:
            self.check_api(calls, attributes, subscripts)
        return self.problems

    # -- imports and run ----------------------------------------------------------------------

    def import_from(self, node: ast.ImportFrom) -> None:
        line = node.lineno
        if node.level:
            self.add(line, "relative imports are not allowed")
            return
        if node.module == "skills":
            for alias in node.names:
                self.check_module(f"skills.{alias.name}", line)
                self.bound.add(alias.asname or alias.name)
            return
        self.check_module(node.module or "", line)
        for alias in node.names:
            bound = alias.asname or alias.name
            self.bound.add(bound)
            if node.module == "tools":
                self.tool_names[bound] = alias.name
                if self.api is not None and alias.name != "*" and alias.name not in self.api.names:
                    self.add(line, self.no_tool(alias.name))
            elif node.module == "parallel":
                self.parallel_names[bound] = alias.name
                if alias.name not in PARALLEL_FUNCTIONS and alias.name != "*":
                    self.add(line, self.no_parallel(alias.name))

    def check_module(self, name: str, line: int) -> None:
        top, _, rest = name.partition(".")
        if top in ALWAYS_ALLOWED:
            return
        if top in PROVIDED_MODULES:
            if rest:
                self.add(line, f"'{name}' does not exist: import {top} itself")
            return
        if top == "skills":
            sub = rest.partition(".")[0]
            if not sub:
                self.add(line, "import a skill's helpers as skills.<name>")
            elif sub not in self.skills:
                active = ", ".join(sorted(self.skills)) or "none"
                self.add(line, f"skill {sub!r} is not active (active skills: {active})")
            return
        if self.reject_threads and top in THREAD_MODULES:
            hint = _hint(top, _THREAD_HINTS, self.api) or "use parallel.map"
            self.add(line, f"import of {name!r} is not allowed: scripts may not start threads or processes ({hint})")
        elif top not in self.allowed:
            hint = _hint(top, _MODULE_HINTS, self.api)
            if top in ("os", "pathlib") and "posixpath" in self.allowed:
                hint += ("; " if hint else "") + "path strings are joined and split with posixpath (join, basename, splitext)"
            self.add(line, f"import of {name!r} is not allowed (allowed: "
                           f"{', '.join(sorted(self.allowed | set(PROVIDED_MODULES)))}, skills.<active skill>)"
                           + (f"; {hint}" if hint else ""))

    def check_run(self) -> None:
        runs = [n for n in self.tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == "run"]
        if not runs:
            others = [n.name for n in self.tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
            found = f" (it defines {', '.join(f'`{n}`' for n in others)}: the one to call must be `run`)" \
                if others else ""
            self.add(1, f"the script must define a top-level function `def run(ctx):`{found}")
        for fn in runs:
            if isinstance(fn, ast.AsyncFunctionDef):
                self.add(fn.lineno, "run must be a plain `def`, not `async def`")
            a = fn.args
            positional = a.posonlyargs + a.args
            if len(positional) != 1 or a.vararg or a.kwarg or a.kwonlyargs or a.defaults:
                self.add(fn.lineno, "run must take exactly one parameter: `def run(ctx):`")
            info = self.scopes.get(fn)
            if info is not None and info.yields is not None:
                self.add(info.yields.lineno, "run must return its result, not yield it (collect the values in a "
                                             "list and return the list)")

    # -- tools and parallel -------------------------------------------------------------------

    def no_tool(self, name: str) -> str:
        assert self.api is not None
        gone = self.api.left_out_names.get(name)
        if gone is not None:
            return f"tools.{name} is not available: tool {gone[0]!r} is left out of the bindings ({gone[1]})"
        close = difflib.get_close_matches(name, sorted(self.api.names - RUNTIME_PRIVATE), n=1, cutoff=0.6)
        if close:
            return f"no tool {name!r}; did you mean {close[0]!r}?"
        functions = sorted(self.api.functions)
        if len(functions) <= 40:
            return f"no tool {name!r} (the tools: {', '.join(functions) or 'none'})"
        return f"no tool {name!r} (run_code_api finds the tools that do what you need)"

    @staticmethod
    def no_parallel(name: str) -> str:
        close = difflib.get_close_matches(name, PARALLEL_FUNCTIONS, n=1, cutoff=0.6)
        if close:
            return f"parallel has no {name!r}; did you mean parallel.{close[0]}?"
        return (f"parallel has no {name!r}: use parallel.all(f, g, ...) to run functions at once, or "
                "parallel.map(items, fn) / parallel.for_each(items, fn) for one function over many items")

    def tools_attr(self, node: ast.expr) -> str | None:
        """The name in `tools` that `node` refers to (`tools.read`, or `read` from `from tools
        import read`), or None."""
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in self.tool_aliases:
            return node.attr
        if isinstance(node, ast.Name) and node.id in self.tool_names:
            return self.tool_names[node.id]
        return None

    def parallel_attr(self, node: ast.expr) -> str | None:
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in self.parallel_aliases:
            return node.attr
        if isinstance(node, ast.Name) and node.id in self.parallel_names:
            return self.parallel_names[node.id]
        return None

    def check_api(self, calls: list[ast.Call], attributes: list[ast.Attribute], subscripts: list[ast.Subscript]) -> None:
        api = self.api
        for node in attributes:
            if api is not None and isinstance(node.value, ast.Name) and node.value.id in self.tool_aliases:
                if node.attr not in api.names:
                    self.add(node.lineno, self.no_tool(node.attr))
            elif isinstance(node.value, ast.Name) and node.value.id in self.parallel_aliases:
                if node.attr not in PARALLEL_FUNCTIONS:
                    self.add(node.lineno, self.no_parallel(node.attr))
        for call in calls:
            name = self.tools_attr(call.func)
            if name is not None and api is not None:
                if name in api.api:
                    self.check_tool_call(call, api.api[name])
                else:
                    cls = api.classes.get(name)
                    if cls is not None:
                        self.check_keywords(call, f"tools.{name}()", cls.fields, cls.signature.rsplit(" -> ", 1)[0],
                                            positional_ok=False)
                continue
            fn = self.parallel_attr(call.func)
            if fn in PARALLEL_FUNCTIONS:
                self.check_parallel(call, fn)
        if api is not None:
            self.check_results(attributes, subscripts)

    def check_tool_call(self, call: ast.Call, fn: FunctionApi) -> None:
        if fn.loose:  # its keywords are its JSON names, as they are: the host checks them
            return
        where = f"tools.{fn.name}()"
        if len(call.args) > 1 or any(isinstance(a, ast.Starred) for a in call.args):
            self.add(call.lineno, f"{where} takes keyword arguments, not positional ones: it is {fn.signature}")
            return
        if call.args:
            arg = call.args[0]
            if call.keywords:
                self.add(call.lineno, f"{where} takes {_a(fn.args_class)} or keywords, not both: it is {fn.signature}")
                return
            if isinstance(arg, (ast.Constant, ast.JoinedStr, ast.BinOp, *_COLLECTIONS)) and not isinstance(arg, ast.Dict):
                self.add(call.lineno, f"{where} takes keyword arguments, not a positional value: it is {fn.signature}")
                return
            other = self.tools_attr(arg.func) if isinstance(arg, ast.Call) else None
            if other is not None and other != fn.args_class and self.api is not None and other in self.api.classes:
                self.add(call.lineno, f"{where} takes {_a(fn.args_class)}, not {_a(other)}: it is {fn.signature}")
            return
        self.check_keywords(call, where, fn.params, fn.signature, positional_ok=True)

    def check_keywords(self, call: ast.Call, where: str, params: dict[str, bool], signature: str,
                       positional_ok: bool) -> None:
        if call.args and not positional_ok:
            self.add(call.lineno, f"{where} takes keyword arguments, not positional ones: it is {signature}")
            return
        given = [k.arg for k in call.keywords if k.arg is not None]
        unknown = [name for name in given if name not in params]
        for name in unknown:
            close = difflib.get_close_matches(name, list(params), n=1, cutoff=0.6) or \
                [p for p in _SYNONYMS.get(name.lower(), ()) if p in params][:1]
            hint = f"; did you mean {close[0]!r}? It is" if close else ": it is"
            self.add(call.lineno, f"{where} has no argument {name!r}{hint} {signature}")
        if any(k.arg is None for k in call.keywords) or call.args or unknown:
            # **kwargs (or an Args object): what it holds is not known here; a misspelt keyword
            # is what "missing" would be about
            return
        missing = [p for p, required in params.items() if required and p not in given]
        if missing:
            which = "argument" if len(missing) == 1 else "arguments"
            self.add(call.lineno, f"{where} is missing its required {which} "
                                  f"{', '.join(repr(m) for m in missing)}: it is {signature}")

    def check_parallel(self, call: ast.Call, fn: str) -> None:
        line = call.lineno
        if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
            return
        if fn == "all":
            if len(call.args) == 1 and isinstance(call.args[0], _COLLECTIONS):
                self.add(line, "parallel.all takes the functions themselves as arguments, not a list: "
                               "parallel.all(f, g) (or parallel.all(*fns))")
            elif any(isinstance(a, ast.Call) and self.tools_attr(a.func) is not None for a in call.args):
                self.add(line, "parallel.all takes functions, not their results: wrap each call in a lambda, "
                               "parallel.all(lambda: tools.a(...), lambda: tools.b(...))")
            if call.keywords:
                self.add(line, "parallel.all takes only functions: parallel.all(f, g)")
            return
        form = f"parallel.{fn}(items, fn)"
        if len(call.args) + len(call.keywords) != 2:
            self.add(line, f"parallel.{fn} takes two arguments, the items and then the function: {form}")
            return
        if call.keywords:
            return  # by name: whatever the order, the names say which is which
        first, second = call.args
        if self.is_function(first) or isinstance(second, _COLLECTIONS) \
                or (isinstance(second, ast.Call) and isinstance(second.func, ast.Name) and second.func.id == "range"):
            self.add(line, f"parallel.{fn} takes the items first, then the function: {form}")
        elif isinstance(second, ast.Call) and self.tools_attr(second.func) is not None:
            self.add(line, f"parallel.{fn} takes a function, not the result of a call: {form}, e.g. "
                           f"parallel.{fn}(paths, lambda p: tools.read(path=p))")

    def is_function(self, node: ast.expr) -> bool:
        if isinstance(node, ast.Lambda):
            return True
        if isinstance(node, ast.Name) and node.id in self.functions:
            return True
        name = self.tools_attr(node)
        return name is not None and self.api is not None and name in self.api.api

    # -- results: attributes, not keys ---------------------------------------------------------

    def result_of(self, node: ast.expr) -> FunctionApi | None:
        """The function whose result `node` is, for a direct call `tools.read(...)`."""
        if isinstance(node, ast.Call) and self.api is not None:
            name = self.tools_attr(node.func)
            if name is not None:
                return self.api.api.get(name)
        return None

    def check_results(self, attributes: list[ast.Attribute], subscripts: list[ast.Subscript]) -> None:
        known = self.result_names()
        for node in attributes:
            if not isinstance(node.ctx, ast.Load):
                continue
            fn = self.result_of(node.value) or (known.get(node.value) if isinstance(node.value, ast.Name) else None)
            if fn is None or fn.result_fields is None or node.attr in fn.result_fields:
                continue
            if node.attr in _DICT_METHODS:
                self.add(node.lineno, f"tools.{fn.name}() returns {_a(fn.result)}, an object, not a dict: read its "
                                      f"fields as attributes ({', '.join('.' + f for f in fn.result_fields)})")
                continue
            close = difflib.get_close_matches(node.attr, list(fn.result_fields), n=1, cutoff=0.6) or \
                [f for f in _SYNONYMS.get(node.attr.lower(), ()) if f in fn.result_fields][:1]
            hint = f"; did you mean .{close[0]}?" if close else ""
            fields = ", ".join(fn.result_fields) or "none"
            self.add(node.lineno, f"tools.{fn.name}() returns {_a(fn.result)}, which has no attribute {node.attr!r}"
                                  f"{hint} (its fields: {fields})")
        for sub in subscripts:
            if not isinstance(sub.ctx, ast.Load):
                continue
            fn = self.result_of(sub.value) or (known.get(sub.value) if isinstance(sub.value, ast.Name) else None)
            if fn is None or fn.result_fields is None:
                continue
            key = sub.slice.value if isinstance(sub.slice, ast.Constant) else None
            use = f"write .{key}, not [{key!r}]" if isinstance(key, str) and key in fn.result_fields \
                else f"read its fields as attributes ({', '.join('.' + f for f in fn.result_fields)})"
            self.add(sub.lineno, f"tools.{fn.name}() returns {_a(fn.result)}, an object, not a dict: {use}")

    def result_names(self) -> dict[ast.Name, FunctionApi]:
        """The uses of names that hold a tool's result: in each function (and the module), a name
        assigned once, from a direct call `name = tools.read(...)`."""
        out: dict[ast.Name, FunctionApi] = {}
        for info in self.scopes.values():
            results = {}
            for assign in info.assigns:
                fn = self.result_of(assign.value)
                target = assign.targets[0]
                if fn is not None and isinstance(target, ast.Name):
                    results[target.id] = fn
            if not results:
                continue
            for name in info.loads:
                fn = results.get(name.id)
                if fn is not None and info.stores.get(name.id) == 1 and name.id not in info.skip:
                    out[name] = fn
        return out


@attrs.define
class _Scope:
    """What the check keeps of one function's (or lambda's, or the module's) own body."""

    stores: dict[str, int] = attrs.Factory(dict)  # how often each name is bound in it
    loads: list[ast.Name] = attrs.Factory(list)
    assigns: list[ast.Assign] = attrs.Factory(list)  # `name = <call>`
    skip: set[str] = attrs.Factory(set)  # names declared global or nonlocal
    yields: ast.expr | None = None  # its first yield


_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
