"""Meta-tests: the project's promises about itself (datasette's pattern).

Every hook (the core's, and those packages bring through `nexus.hookspecs`) is documented in
docs/hooks.md with its real signature, declares its kind, and is exercised by some test;
every package ships py.typed and declares the plugin ids the design names; every public name
is importable; every docs page is reachable from docs/index.md; the packages type-check with mypy.
"""

from __future__ import annotations

import importlib.util
import inspect
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pluggy
import pytest

import nexus_core
from nexus_core._plugins import ENTRY_POINT_GROUP, HOOKSPECS_GROUP, new_plugin_manager

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
HOOK_HEADING = re.compile(r"^## (nexus_\w+)\((.*)\)\s*$", re.MULTILINE)

def _hookspecs() -> dict[str, pluggy.HookCaller]:
    """Every hook a Nexus knows, by name: the core's and the installed packages' own."""
    pm, failures = new_plugin_manager()
    assert not failures, failures
    return {caller.name: caller for caller in vars(pm.hook).values()
            if isinstance(caller, pluggy.HookCaller) and caller.spec is not None}


SPECS = _hookspecs()
HOOKS = sorted(SPECS)

#: folder -> (import package, the plugin ids its nexus.plugins entry points must declare)
PACKAGES = {
    "nexus_core": ("nexus_core", {"nexus.skills", "nexus.tool.todo", "nexus.tool.question"}),
    "nexus_tool_shell": ("nexus_tool_shell", {"nexus.tool.shell"}),
    "nexus_tool_file": ("nexus_tool_file", {"nexus.tool.file"}),
    "nexus_tool_code_exec": ("nexus_tool_code_exec", {"nexus.tool.code_exec"}),
    "nexus_tool_web": ("nexus_tool_web", {"nexus.tool.web"}),
    "nexus_mcp": ("nexus_mcp", {"nexus.mcp.client"}),
    "nexus_agent": ("nexus_agent", {"nexus.agent"}),
    "nexus_provider_openai": ("nexus_provider_openai", {"nexus.provider.openai"}),
    "nexus_provider_anthropic": ("nexus_provider_anthropic", {"nexus.provider.anthropic"}),
    "nexus_provider_gemini": ("nexus_provider_gemini", {"nexus.provider.gemini"}),
    "nexus_otel": ("nexus_otel", {"nexus.otel"}),
    "nexus_durable": ("nexus_durable", {"nexus.durable"}),
    "examples/nexus-rt-example-units": ("nexus_example_units", {"nexus.example.units"}),
    "examples/nexus-rt-example-gate": ("nexus_example_gate", {"nexus.example.gate"}),
}


def documented_hooks() -> dict[str, list[str]]:
    text = (DOCS / "hooks.md").read_text(encoding="utf-8")
    return {name: [a.strip() for a in args.split(",") if a.strip()]
            for name, args in HOOK_HEADING.findall(text)}


def test_hookspecs_are_found() -> None:
    assert "nexus_before_tool_invoke" in HOOKS and len(HOOKS) >= 10
    assert "nexus_code_exec_stdout" in HOOKS  # a package's own (nexus_tool_code_exec's)


def test_plugin_hooks_are_documented() -> None:
    documented = documented_hooks()
    undocumented = [h for h in HOOKS if h not in documented]
    assert not undocumented, f"hooks without a '## name(' heading in docs/hooks.md: {', '.join(undocumented)}"
    unknown = [h for h in documented if h not in HOOKS]
    assert not unknown, f"docs/hooks.md documents hooks that no hookspec module has: {', '.join(unknown)}"


@pytest.mark.parametrize("hook", HOOKS)
def test_documented_hook_signature_matches_hookspec(hook: str) -> None:
    assert SPECS[hook].spec is not None
    spec_args = list(inspect.signature(SPECS[hook].spec.function).parameters)
    assert documented_hooks().get(hook) == spec_args


def test_plugin_hooks_have_tests() -> None:
    """Each hook name appears in some test file besides this one. Strict on purpose."""
    sources = "\n".join(
        p.read_text(encoding="utf-8") for p in (REPO / "tests").rglob("test_*.py") if p.name != "test_meta.py"
    )
    untested = [h for h in HOOKS if not re.search(rf"\b{h}\b", sources)]
    assert not untested, f"hooks that no test under tests/ mentions: {', '.join(untested)}"


@pytest.mark.parametrize("folder", sorted(PACKAGES))
def test_package_has_py_typed_and_declares_its_plugins(folder: str) -> None:
    package, plugin_ids = PACKAGES[folder]
    root = REPO / folder
    assert (root / "src" / package / "py.typed").is_file(), f"{folder}: no src/{package}/py.typed"
    project = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    entry_points = project.get("entry-points", {}).get(ENTRY_POINT_GROUP, {})
    assert set(entry_points) >= plugin_ids, f"{folder}: missing nexus.plugins entry points"
    for plugin_id, target in entry_points.items():
        module = target.split(":")[0]
        assert module.split(".")[0] == package, f"{plugin_id} points outside {package}: {target}"
        path = root / "src" / Path(*module.split("."))
        assert path.with_suffix(".py").is_file() or (path / "__init__.py").is_file(), \
            f"{plugin_id}: no module {module}"
    for name, target in project.get("entry-points", {}).get(HOOKSPECS_GROUP, {}).items():
        module = target.split(":")[0]
        assert module.split(".")[0] == package, f"hookspecs {name} point outside {package}: {target}"
        assert (root / "src" / Path(*module.split("."))).with_suffix(".py").is_file(), f"{name}: no module {module}"
    if package != "nexus_core":
        deps = [re.split(r"[<>=!~ \[;]", d)[0].lower() for d in project.get("dependencies", [])]
        assert "nexus-rt-core" in deps, f"{folder} must depend on nexus-rt-core"
        siblings = {d for d in deps if d.startswith(DIST_PREFIX) and d != "nexus-rt-core"}
        assert not siblings, f"{folder}: plugin packages never depend on each other ({siblings})"


#: the prefix of every distribution this repo builds (`nexus-core` and `nexus-mcp` belong to other
#: projects on PyPI): ours now and the ones planned, each checked free on PyPI when chosen
DIST_PREFIX = "nexus-rt-"


def repo_pyprojects() -> list[Path]:
    skip = {".git", ".venv", "node_modules", "build", "dist"}
    return sorted(p for p in REPO.rglob("pyproject.toml") if not skip & set(p.relative_to(REPO).parts))


def test_every_distribution_carries_the_prefix() -> None:
    pyprojects = repo_pyprojects()
    assert len(pyprojects) >= len(PACKAGES) + 1, pyprojects
    for path in pyprojects:
        project = tomllib.loads(path.read_text(encoding="utf-8"))["project"]
        where = path.relative_to(REPO)
        # an agent distribution (`nexus init`, examples/acme-agent) is a user's own package, named as
        # its user likes; what it depends on of ours still carries the prefix
        if "nexus.distributions" not in project.get("entry-points", {}):
            assert project["name"].startswith(DIST_PREFIX), f"{where}: {project['name']!r} lacks {DIST_PREFIX!r}"
        # a dependency on one of our own packages names it by its prefixed name too
        deps = [re.split(r"[<>=!~ \[;]", d)[0].lower() for d in project.get("dependencies", [])]
        ours = [d for d in deps if d.startswith("nexus") and not d.startswith(DIST_PREFIX)]
        assert not ours, f"{where} depends on {ours}: our packages are called {DIST_PREFIX}*"


def test_packages_type_check() -> None:
    """mypy, with the settings in the root pyproject.toml, finds nothing in the packages."""
    if importlib.util.find_spec("mypy") is None:
        pytest.fail(f"mypy is not installed in {sys.executable}: run scripts/setup (the dev extra installs "
                    "mypy and the stubs it needs)")
    folders = [f"{folder}/src/{package}" for folder, (package, _) in PACKAGES.items()
               if not folder.startswith("examples/")]
    proc = subprocess.run([sys.executable, "-m", "mypy", *folders], cwd=REPO, capture_output=True,
                          text=True, timeout=900)  # generous: mypy on a busy machine took over 300 s
    assert proc.returncode == 0, (
        f"mypy {' '.join(folders)} exited {proc.returncode} "
        f"(if it says library stubs are not installed, run scripts/setup):\n{proc.stdout}{proc.stderr}"
    )


#: mypy --strict's flags that can be set per module (`strict` itself is global only)
STRICT_FLAGS = {"disallow_any_generics", "disallow_subclassing_any", "disallow_untyped_calls", "disallow_untyped_defs",
                "disallow_incomplete_defs", "check_untyped_defs", "disallow_untyped_decorators", "warn_return_any",
                "no_implicit_reexport", "strict_equality", "extra_checks"}


@pytest.mark.parametrize("package", ["nexus_core", "nexus_tool_code_exec"])
def test_the_core_and_run_code_are_type_checked_strictly(package: str) -> None:
    """test_packages_type_check runs mypy with these settings: nexus_core and nexus_tool_code_exec
    (which runs untrusted code, and whose three processes speak a typed protocol) under every
    strict flag."""
    mypy = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["mypy"]
    strict = [o for o in mypy.get("overrides", []) if f"{package}.*" in o.get("module", [])]
    assert strict and all(strict[0].get(flag) is True for flag in STRICT_FLAGS), strict
    assert mypy.get("warn_unused_ignores") and mypy.get("warn_redundant_casts")


def test_public_names_are_importable() -> None:
    assert len(set(nexus_core.__all__)) == len(nexus_core.__all__), "a name listed twice in __all__"
    namespace: dict[str, object] = {}
    exec("from nexus_core import *", namespace)  # raises AttributeError for a name that is not there
    assert [n for n in nexus_core.__all__ if namespace.get(n) is None] == []
    # the names ARCHITECTURE.md promises other code
    for name in ("Nexus", "hookimpl", "Veto", "Rewrite", "ToolCall", "ToolResult", "ToolDef", "tool",
                 "native_tool", "success", "failure", "sanitize"):
        assert name in nexus_core.__all__, name


def test_every_docs_page_is_linked_from_the_index() -> None:
    index = (DOCS / "index.md").read_text(encoding="utf-8")
    linked = set(re.findall(r"\]\(([\w.-]+\.md)(?:#[\w-]*)?\)", index))
    pages = {p.name for p in DOCS.glob("*.md")} - {"index.md"}
    orphans = sorted(pages - linked)
    assert not orphans, f"docs pages that docs/index.md does not link: {', '.join(orphans)}"


#: the pages whose ```python examples must run as written (other pages test their own)
RUNNABLE_PAGES = ["hooks.md", "getting-started.md", "writing-a-tool-plugin.md", "writing-a-gate.md",
                  "configuration.md"]
PYTHON_BLOCK = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)


@pytest.mark.parametrize("page", RUNNABLE_PAGES)
def test_docs_examples_run(page: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                           capsys: pytest.CaptureFixture[str]) -> None:
    """Each ```python block runs on its own, in an empty folder, against the installed packages.
    Blocks that are only a signature (`def hook(...)` with no body) do not compile and are skipped."""
    text = (DOCS / page).read_text(encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(REPO / "examples" / "nexus-rt-example-units" / "src"))
    (tmp_path / "nexus.yaml").write_text("workspace: .\n")  # for the examples that load one
    ran = 0
    for match in PYTHON_BLOCK.finditer(text):
        line = text.count("\n", 0, match.start(1)) + 1
        try:
            code = compile("\n" * (line - 1) + match.group(1), str(DOCS / page), "exec")
        except SyntaxError:
            continue
        exec(code, {"__name__": "docs_example"})  # noqa: S102 (running the docs' examples is the point)
        ran += 1
    capsys.readouterr()
    assert ran >= 1, f"docs/{page} has no runnable ```python example"
