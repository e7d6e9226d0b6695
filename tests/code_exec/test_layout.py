"""The package's layout is its architecture: a module's folder says which process it runs in, and
what runs in the zygote and the child imports nothing of the host's. Read from the sources' import
statements (what a module would pull into the zygote's memory, and into every child's)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

import nexus_tool_code_exec
from nexus_tool_code_exec import sandbox

PACKAGE = Path(nexus_tool_code_exec.__file__).parent
NAME = "nexus_tool_code_exec"

#: where each part may reach, besides the standard library: what runs in the child and the
#: zygote stays small, and must not import the host's side (nexus_core's invocation path, the
#: engine, the launchers)
ALLOWED = {
    "protocol": set(),
    "child": {"protocol", "child", "sandbox", "attrs", "cattrs", "_nexus_rt"},  # (child.runtime, by its name in the child)
    "zygote": {"protocol", "child", "sandbox", "zygote", "attrs", "cattrs"},
    "sandbox": {"protocol", "sandbox", "attrs"},
    "launchers": {"protocol", "sandbox", "launchers", "attrs"},  # nothing of the host's: see below
    "poolserver": {"launchers"},  # the machine's pool server: the launchers' own code, no host
}


def part_of(path: Path) -> str:
    rel = path.relative_to(PACKAGE)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def imports_of(path: Path) -> set[str]:
    """What the module imports: `nexus_tool_code_exec.x.y` as `x.y`, anything else by its top
    level name."""
    package = ".".join((NAME, *path.relative_to(PACKAGE).parent.parts))
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                module = f"{base}.{node.module}" if node.module else base
                # `from .. import protocol` names modules, not attributes
                names = [module] if node.module else [f"{base}.{alias.name}" for alias in node.names]
            else:
                names = [node.module or ""]
        else:
            continue
        for name in names:
            found.add(name[len(NAME) + 1:] if name.startswith(NAME + ".") else name.split(".")[0])
    return found - {"__future__"}


def modules(*parts: str) -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts and part_of(p) in parts)


@pytest.mark.parametrize("path", modules(*ALLOWED), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_each_part_imports_only_what_its_process_may(path: Path) -> None:
    allowed = ALLOWED[part_of(path)]
    wrong = sorted(name for name in imports_of(path)
                   if name.split(".")[0] not in sys.stdlib_module_names
                   and not any(name == a or name.startswith(a + ".") for a in allowed))
    assert not wrong, f"{path.relative_to(PACKAGE)} imports {wrong}"


def test_the_childs_read_paths_cover_every_package_it_imports() -> None:
    """Landlock lets the child read only the runtime's paths: a package that the child's or the
    zygote's modules import and sandbox.RUNTIME_PACKAGES leaves out would fail to load in a
    child that imports it lazily."""
    outside = {name.split(".")[0] for path in modules("protocol", "child", "zygote", "sandbox")
               for name in imports_of(path)} - set(sys.stdlib_module_names) - set(ALLOWED) - {"_nexus_rt"}
    assert outside <= set(sandbox.RUNTIME_PACKAGES), outside - set(sandbox.RUNTIME_PACKAGES)


def test_every_module_is_in_a_part_that_says_where_it_runs() -> None:
    parts = {part_of(p) for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts}
    assert parts == {"__init__", "protocol", "host", "launchers", "zygote", "child", "sandbox", "poolserver"}
