"""nexus_core's layers, read from its import statements: leaves -> the plugin manager ->
the registry, native tools, config and model requests -> the invocation path -> `Nexus` -> the
front ends. A module imports only its own layer and those below, and no import circle exists
(function-level imports count; `if TYPE_CHECKING:` blocks do not). Beside it, the other packages
use nexus_core only through its public names."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

import nexus_core

SRC = Path(nexus_core.__file__).parent
REPO = Path(__file__).resolve().parents[2]

#: every module of nexus_core, by layer (a new module must be placed here)
LAYERS: list[set[str]] = [
    {  # leaves: models, schemas, JSON, markers; nothing that knows plugins
        "_cancel", "_content", "_converter", "_docstrings", "_durability", "_errors", "_httpstop", "_markers", "_models", "_regex", "_results",
        "_schema", "_typeschema", "_yaml", "hookspecs", "adapters", "adapters._calls", "adapters._common",
        "adapters._declare", "adapters._gemini", "adapters._jsonschema", "adapters._replies", "adapters._strict",
        "content", "terminal", "wire", "supervisor", "_subreaper",
    },
    {"_hookcalls", "_plugins"},  # the plugin manager, and how it calls observer and gate hooks
    {"_config", "_distribution", "_llm", "_plugin", "_registry", "_tool", "_trust", "llm", "skills"},  # registry, tools, config, models
    {"_invoke"},  # the one invocation path
    {"_nexus"},  # Nexus
    {  # what builds on a Nexus: toolkits, the command line, the pytest plugin, built-in plugins
        "", "__main__", "_completion", "_toolkit", "cli", "plugins", "testing", "builtins", "builtins.question",
        "builtins.skills", "builtins.todo",
    },
]
LAYER = {module: n for n, modules in enumerate(LAYERS) for module in modules}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def imports_of(path: Path) -> set[str]:
    """The nexus_core modules `path` imports (relative to the package, "" for nexus_core itself),
    at any depth but under `if TYPE_CHECKING:`."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if _is_type_checking(child):
                for other in child.orelse:  # type: ignore[attr-defined]
                    visit(other)
                continue
            if isinstance(child, ast.ImportFrom):
                if child.level:
                    base = package.split(".") if package else []
                    base = base[:len(base) - (child.level - 1)] if child.level > 1 else base
                    target = ".".join([*base, *(child.module.split(".") if child.module else [])])
                elif child.module and child.module.startswith("nexus_core"):
                    target = child.module.removeprefix("nexus_core").lstrip(".")
                else:
                    continue
                if child.module:  # `from . import x` imports x, not what the package's __init__ holds
                    found.add(target)
                for alias in child.names:  # `from . import x` and `from .pkg import mod`: modules
                    sub = f"{target}.{alias.name}".lstrip(".")
                    if sub in LAYER:
                        found.add(sub)
            elif isinstance(child, ast.Import):
                found.update(a.name.removeprefix("nexus_core").lstrip(".") for a in child.names
                             if a.name.split(".")[0] == "nexus_core")
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8")))
    return found - {name}


MODULES = {module_name(p): imports_of(p) for p in SRC.rglob("*.py") if "__pycache__" not in p.parts}


def test_every_module_has_a_layer() -> None:
    assert not set(MODULES) - set(LAYER), f"place these in LAYERS: {sorted(set(MODULES) - set(LAYER))}"
    assert not set(LAYER) - set(MODULES), f"LAYERS names modules that are gone: {sorted(set(LAYER) - set(MODULES))}"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_a_module_imports_only_its_layer_and_those_below(module: str) -> None:
    above = sorted(t for t in MODULES[module] if t in LAYER and LAYER[t] > LAYER[module])
    assert not above, f"nexus_core.{module} (layer {LAYER[module]}) imports {above}, from a layer above"


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles of `graph` (Tarjan's strongly connected components of 2 or more)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in graph.get(node, ()):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_there_is_no_import_circle() -> None:
    graph = {m: {t for t in ts if t in MODULES and t} for m, ts in MODULES.items()}
    assert cycles(graph) == []
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]  # the check works


def sibling_sources() -> list[Path]:
    roots = [p / "src" for p in REPO.glob("nexus_*") if p.name != "nexus_core"]
    roots += [p / "src" for p in (REPO / "examples").iterdir() if (p / "src").is_dir()]
    return sorted(f for root in roots for f in root.rglob("*.py") if "__pycache__" not in f.parts)


def test_other_packages_use_only_public_names_of_nexus_core() -> None:
    """`from nexus_core._x import y` outside nexus_core fails: what another package needs has a
    public home (a name in `__all__` of nexus_core or of one of its namespaces)."""
    wrong = []
    for path in sibling_sources():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "nexus_core":
                where = f"{path.relative_to(REPO)}:{node.lineno}"
                if any(part.startswith("_") for part in node.module.split(".")):
                    wrong.append(f"{where}: from {node.module} (private)")
                    continue
                public = set(getattr(importlib.import_module(node.module), "__all__", ()))
                wrong.extend(f"{where}: {node.module}.{a.name} is not in its __all__"
                             for a in node.names if a.name not in public)
            elif isinstance(node, ast.Import):
                wrong.extend(f"{path.relative_to(REPO)}:{node.lineno}: import {a.name} (private)" for a in node.names
                             if a.name.split(".")[0] == "nexus_core" and "._" in a.name)
    assert not wrong, "\n".join(wrong)


def test_the_top_level_is_small_and_written_once() -> None:
    stub = (SRC / "__init__.pyi").read_text(encoding="utf-8")
    assert 20 <= len(nexus_core.__all__) <= 30, nexus_core.__all__
    # one table: each public name is one `from .x import Name as Name` line of the stub, and the
    # package's __init__.py lists none of them
    assert sorted(nexus_core.__all__) == sorted(
        a.asname for n in ast.parse(stub).body if isinstance(n, ast.ImportFrom) for a in n.names)
    source = (SRC / "__init__.py").read_text(encoding="utf-8")
    assert not [n for n in nexus_core.__all__ if f'"{n}"' in source]


def test_names_that_moved_still_resolve_with_a_warning_naming_their_home() -> None:
    from nexus_core.llm import ModelRequest

    with pytest.warns(DeprecationWarning, match=r"nexus_core.ModelRequest moved to nexus_core.llm.ModelRequest"):
        assert nexus_core.ModelRequest is ModelRequest  # type: ignore[attr-defined]
    assert "ModelRequest" not in nexus_core.__all__ and "ModelRequest" not in dir(nexus_core)
