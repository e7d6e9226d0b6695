"""The static check of a run_code script: every rule, every violation at once, each with its line.

These call `check_script` directly; test_run_code.py checks that run_code returns the same
rejections without starting anything.
"""

from __future__ import annotations

import textwrap

import pytest

from nexus_tool_code_exec import DEFAULT_ALLOWED_PACKAGES
from nexus_tool_code_exec.host.check import ScriptRejected, check_script, skill_module_name


def check(source: str, **kwargs: object) -> None:
    kwargs.setdefault("allowed_packages", DEFAULT_ALLOWED_PACKAGES)
    check_script(textwrap.dedent(source), **kwargs)  # type: ignore[arg-type]


def rejected(source: str, **kwargs: object) -> ScriptRejected:
    with pytest.raises(ScriptRejected) as info:
        check(source, **kwargs)
    assert str(info.value).startswith("script rejected: ")
    return info.value


def test_a_plain_script_passes() -> None:
    check("""\
        import json, math, tools, parallel
        from collections import Counter

        def helper(x):
            return math.sqrt(x)

        def run(ctx):
            return json.dumps(Counter("abc"))
        """)


def test_threading_import_is_rejected_with_its_line() -> None:
    exc = rejected("""\
        import json
        import threading

        def run(ctx):
            return 1
        """)
    assert exc.problems == [
        "line 2: import of 'threading' is not allowed: scripts may not start threads or processes (use parallel.map)"
    ]


@pytest.mark.parametrize("statement", [
    "import _thread", "from concurrent.futures import ThreadPoolExecutor", "import multiprocessing.pool",
    "import asyncio", "from subprocess import run as sh",
])
def test_every_way_to_start_threads_or_processes_is_rejected(statement: str) -> None:
    exc = rejected(f"{statement}\n\ndef run(ctx):\n    return 1\n")
    assert len(exc.problems) == 1
    assert exc.problems[0].startswith("line 1: ") and "may not start threads or processes" in exc.problems[0]


def test_thread_modules_stay_rejected_even_when_allowed() -> None:
    """`reject_threads` wins over an allowlist that names a thread module."""
    exc = rejected("import threading\ndef run(ctx):\n    return 1\n",
                   allowed_packages=[*DEFAULT_ALLOWED_PACKAGES, "threading"])
    assert "may not start threads" in exc.problems[0]


def test_reject_threads_off_lets_an_allowed_thread_module_through() -> None:
    check("import threading\ndef run(ctx):\n    return 1\n",
          allowed_packages=["threading"], reject_threads=False)


def test_os_import_is_rejected() -> None:
    exc = rejected("""\
        def run(ctx):
            import os
            return os.getcwd()
        """)
    assert exc.problems[0].startswith("line 2: import of 'os' is not allowed (allowed: ")
    assert "json" in exc.problems[0] and "tools" in exc.problems[0]


@pytest.mark.parametrize("statement", ["import os.path", "from os import path", "import sys", "import socket",
                                       "import importlib", "import ctypes", "import pathlib"])
def test_modules_outside_the_allowlist_are_rejected(statement: str) -> None:
    exc = rejected(f"{statement}\ndef run(ctx):\n    return 1\n")
    assert exc.problems[0].startswith("line 1: import of ")


def test_every_violation_is_reported_at_once_with_its_line() -> None:
    exc = rejected("""\
        import os
        import threading
        from . import sibling

        def run(ctx):
            x = eval("1")
            return ().__class__
        """)
    lines = [p.split(":")[0] for p in exc.problems]
    assert lines == ["line 1", "line 2", "line 3", "line 6", "line 7"]
    text = str(exc)
    for fragment in ("'os'", "'threading'", "relative imports", "'eval' is not allowed", "'__class__'"):
        assert fragment in text


def test_problems_are_sorted_by_line_and_not_repeated() -> None:
    exc = rejected("def run(ctx):\n    return eval('1') + eval('2')\nimport os\n")
    assert exc.problems == ["line 2: 'eval' is not allowed",
                            "line 3: import of 'os' is not allowed (allowed: " + exc.problems[1].split("(allowed: ")[1]]


def test_syntax_error_names_its_line() -> None:
    exc = rejected("""\
        def run(ctx):
            x = (1,
        """)
    assert len(exc.problems) == 1
    assert exc.problems[0].startswith("line 2: syntax error: ")


def test_missing_run_is_rejected() -> None:
    exc = rejected("x = 1\n")
    assert exc.problems == ["line 1: the script must define a top-level function `def run(ctx):`"]
    exc = rejected("def main(ctx):\n    return 1\n")  # and says which function it found (issue 14.3)
    assert exc.problems == ["line 1: the script must define a top-level function `def run(ctx):` "
                            "(it defines `main`: the one to call must be `run`)"]


def test_run_inside_a_class_does_not_count() -> None:
    exc = rejected("class Job:\n    def run(ctx):\n        return 1\n")
    assert "must define a top-level function" in str(exc)


@pytest.mark.parametrize("signature", ["def run():", "def run(ctx, extra):", "def run(*args):",
                                       "def run(ctx, **kw):", "def run(ctx=None):", "def run(ctx, *, k):"])
def test_run_with_the_wrong_arity_is_rejected(signature: str) -> None:
    exc = rejected(f"x = 1\n{signature}\n    return 1\n")
    assert exc.problems == ["line 2: run must take exactly one parameter: `def run(ctx):`"]


def test_async_run_is_rejected() -> None:
    exc = rejected("async def run(ctx):\n    return 1\n")
    assert exc.problems == ["line 1: run must be a plain `def`, not `async def`"]


def test_positional_only_ctx_is_fine() -> None:
    check("def run(ctx, /):\n    return 1\n")


@pytest.mark.parametrize("name", ["exec", "eval", "compile", "__import__", "breakpoint", "globals", "locals",
                                  "vars", "input", "__builtins__"])
def test_builtins_that_run_strings_or_hand_out_namespaces_are_rejected(name: str) -> None:
    exc = rejected(f"def run(ctx):\n    f = {name}\n    return 1\n")
    assert exc.problems == [f"line 2: {name!r} is not allowed"]


@pytest.mark.parametrize("expr", ["ctx.__class__", "().__class__.__bases__", "run.__globals__", "print.__self__"])
def test_dunder_attributes_are_rejected(expr: str) -> None:
    exc = rejected(f"def run(ctx):\n    return {expr}\n")
    assert all(p.startswith("line 2: dunder attribute") for p in exc.problems)


def test_tools_and_parallel_must_be_imported_whole() -> None:
    exc = rejected("import tools.shell\nfrom parallel.x import y\ndef run(ctx):\n    return 1\n")
    assert exc.problems == ["line 1: 'tools.shell' does not exist: import tools itself",
                            "line 2: 'parallel.x' does not exist: import parallel itself"]


def test_from_tools_import_names_is_fine() -> None:
    check("from tools import ToolVetoed\nfrom parallel import map as pmap\ndef run(ctx):\n    return 1\n")


def test_skill_helpers_import_only_when_active() -> None:
    source = "import skills.math_helpers\nfrom skills import text_tools\ndef run(ctx):\n    return 1\n"
    check(source, active_skills=["math-helpers", "text_tools"])
    exc = rejected(source, active_skills=["math-helpers"])
    assert exc.problems == ["line 2: skill 'text_tools' is not active (active skills: math_helpers)"]
    exc = rejected(source)
    assert "(active skills: none)" in exc.problems[0]


def test_bare_skills_import_is_rejected() -> None:
    exc = rejected("import skills\ndef run(ctx):\n    return 1\n", active_skills=["a"])
    assert exc.problems == ["line 1: import a skill's helpers as skills.<name>"]


@pytest.mark.parametrize(("skill", "module"), [("math-helpers", "math_helpers"), ("pdf.tools", "pdf_tools"),
                                               ("2d", "_2d"), ("plain", "plain")])
def test_skill_module_names_are_identifiers(skill: str, module: str) -> None:
    assert skill_module_name(skill) == module
    assert module.isidentifier()


def test_the_check_returns_the_parsed_tree() -> None:
    tree = check_script("def run(ctx):\n    return 1\n", DEFAULT_ALLOWED_PACKAGES)
    assert tree.body[0].name == "run"  # type: ignore[attr-defined]


@pytest.mark.parametrize("source", [
    "def run(ctx):\n    return " + "-" * 200_000 + "1\n",
    "x = " + "1+" * 100_000 + "1\ndef run(ctx):\n    return x\n",
], ids=["deep-unary", "long-sum"])
def test_a_script_too_deeply_nested_to_parse_is_rejected_not_crashed(source: str) -> None:
    exc = rejected(source)
    assert len(exc.problems) == 1 and "too deeply nested" in exc.problems[0]


def test_a_null_byte_is_a_rejection_with_a_real_line() -> None:
    exc = rejected("def run(ctx):\n    return 1\x00\n")
    assert exc.problems[0].startswith("line 1: syntax error: ") or exc.problems[0].startswith("line 2: syntax error: ")


def test_future_imports_are_always_allowed() -> None:
    check("from __future__ import annotations\n\ndef run(ctx) -> list[int]:\n    return [1]\n", allowed_packages=[])
