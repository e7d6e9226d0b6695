"""Patterns written to freeze the host: nested quantifiers, huge alternations, huge and nested
brace sets, `*a*a*a...` globs, very long patterns, and pathological text in large files.

Before RE2, `grep` with `(a+)+$` froze every host thread (Python's `re` backtracks with the GIL
held), a glob of repeated `*a` froze the host 8 s against one 44-character name, and a 300 KB
brace glob cost 25 s of CPU. Each attack here goes through `Nexus.invoke` while `HostWatch`
measures the host: the longest gap of a heartbeat thread, the CPU time and the memory the call
cost. The bounds are generous (the old code broke them by seconds to hours); the inputs are
sized so that the old code would take seconds at least.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from host_watch import HostWatch

from nexus_core import Nexus, ToolResult
from nexus_core.testing import NexusFactory, assert_error, assert_ok
from nexus_tool_file._patterns import MAX_BRACE_CHOICES, MAX_BRACE_DEPTH, MAX_GLOB_CHARS, MAX_REGEX_CHARS


@pytest.fixture
def files(nexus_factory: NexusFactory) -> Nexus:
    return nexus_factory(plugins=["nexus.tool.file"])


def watched(nx: Nexus, tool: str, arguments: dict[str, Any], **bounds: Any) -> ToolResult:
    """Invoke under a HostWatch and check the host stayed responsive and bounded."""
    with HostWatch() as watch:
        result = nx.invoke(tool, arguments)
    watch.assert_host_fine(**bounds)
    return result


# -- grep: the regex --------------------------------------------------------------------------


@pytest.mark.parametrize("pattern", [
    r"(a+)+$",  # 28 a's and a `!`: 2**28 ways to split them, for Python's re
    r"(a|aa)+$",
    r"(a*)*b",
    r"(.*a){12}!x",
    r"^(\w+\s?)*$",
    r"(x+x+)+y",
])
def test_nested_quantifiers_cannot_freeze_the_host(files: Nexus, nexus_workspace: Path, pattern: str) -> None:
    lines = ["a" * 28 + "!", "x" * 28, "word " * 30 + "!"] * 200
    (nexus_workspace / "victim.txt").write_text("\n".join(lines) + "\n")
    result = assert_ok(watched(files, "grep", {"pattern": pattern}))
    assert result.output_structured["truncated"] is False


def test_a_match_is_still_found_and_reported(files: Nexus, nexus_workspace: Path) -> None:
    (nexus_workspace / "victim.txt").write_text("a" * 28 + "!\n" + "a" * 28 + "\n")
    result = assert_ok(watched(files, "grep", {"pattern": r"(a+)+$"}))
    assert [m["line"] for m in result.output_structured["matches"]] == [2]


def test_pathological_text_in_a_large_file(files: Nexus, nexus_workspace: Path) -> None:
    """48 MiB: a 32 MiB line of `a`s, then 16 MiB of short lines; and 16 MiB of random letters for
    a pattern whose DFA would need a state for every 14-letter window. Memory stays bounded
    (a line is read in pieces), the GIL stays free (RE2 lets go of it while it matches)."""
    with open(nexus_workspace / "huge.txt", "w") as f:
        f.write("a" * (32 << 20) + "!\n")
        f.writelines(["a" * 30 + "!\n"] * ((16 << 20) // 32))
    rng = random.Random(11)
    letters = "abcdefghijklmnopqrstuvwxyz"
    with open(nexus_workspace / "random.txt", "w") as f:
        f.writelines("".join(rng.choices(letters, k=1 << 20)) + "\n" for _ in range(16))
    for pattern in [r"(a+)+$", r"[a-q][^u-z]{13}x", r"(?i)(a|b|c|d)+e{5}"]:
        result = assert_ok(watched(files, "grep", {"pattern": pattern, "limit": 5}, cpu_seconds=30))
        assert len(result.output_structured["matches"]) <= 5


def test_a_costly_pattern_stops_at_max_search_seconds(nexus_factory: NexusFactory, nexus_workspace: Path) -> None:
    """RE2 is linear in the text, but a pattern of 12,000 instructions makes the constant large (a
    minute a megabyte). The search is cut into bounded pieces and stops at its deadline."""
    nx = nexus_factory(plugins=["nexus.tool.file"],
                       config={"plugins": {"nexus.tool.file": {"max_search_seconds": 1}}})
    (nexus_workspace / "a.txt").write_text(("a" * 4000 + "\n") * 1000)
    result = assert_ok(watched(nx, "grep", {"pattern": r"\w{1000}\w{1000}\w{1000}\w{1000}x"}, cpu_seconds=15))
    assert result.output_structured == {"matches": [], "truncated": True}
    assert result.output == ("[grep stopped after max_search_seconds=1: what was found so far is shown; narrow "
                             "the pattern, path or include]")


def test_a_huge_alternation_is_linear_and_a_longer_one_is_refused(files: Nexus, nexus_workspace: Path) -> None:
    words = [f"word{i:05d}" for i in range(100_000)]
    (nexus_workspace / "words.txt").write_text(" ".join(words[::7]) + "\n" + "nothing here\n" * 10_000)
    fits = "|".join(words[:MAX_REGEX_CHARS // 10])  # 819 choices
    result = assert_ok(watched(files, "grep", {"pattern": fits}))
    assert [m["line"] for m in result.output_structured["matches"]] == [1]
    too_long = "|".join(words)
    result = watched(files, "grep", {"pattern": too_long}, cpu_seconds=5)
    assert_error(result, f"the regular expression is {len(too_long)} characters long; grep takes at most "
                         f"{MAX_REGEX_CHARS} (pattern length limit)", kind="failure")


def test_a_very_long_pattern_is_refused_with_the_limit(files: Nexus, nexus_workspace: Path) -> None:
    (nexus_workspace / "a.txt").write_text("a\n")
    result = watched(files, "grep", {"pattern": "(a?)" * 3000 + "a" * 3000})
    assert_error(result, f"grep takes at most {MAX_REGEX_CHARS} (pattern length limit)", kind="failure")


def test_a_pattern_too_big_for_re2_is_refused_naming_the_memory_limit(files: Nexus, nexus_workspace: Path) -> None:
    (nexus_workspace / "a.txt").write_text("a\n")
    result = watched(files, "grep", {"pattern": r"\pL{1000}\pL{1000}"})
    assert_error(result, "compiles to more than RE2's memory limit for one pattern (8 MiB)", kind="failure")


@pytest.mark.parametrize("pattern, feature", [
    (r"(a)\1", "a backreference (\\1)"),
    (r"(?P<q>['\"]).*?(?P=q)", "a named backreference ((?P=name))"),
    (r"foo(?=bar)", "lookahead ((?=...) or (?!...))"),
    (r"foo(?!bar)", "lookahead ((?=...) or (?!...))"),
    (r"(?<=foo)bar", "lookbehind ((?<=...) or (?<!...))"),
    (r"(?<!foo)bar", "lookbehind ((?<=...) or (?<!...))"),
    (r"(?>a+)b", "an atomic group ((?>...))"),
    (r"a++b", "a possessive quantifier (*+, ++, ?+)"),
    (r"(a)?(?(1)b|c)", "a conditional ((?(1)...|...))"),
])
def test_what_re2_lacks_is_named_clearly(files: Nexus, nexus_workspace: Path, pattern: str, feature: str) -> None:
    (nexus_workspace / "a.txt").write_text("foobar\n")
    result = assert_error(files.invoke("grep", {"pattern": pattern}), kind="failure")
    assert result.error is not None
    assert result.error.startswith(f"regular expression {pattern!r} uses {feature}, which RE2 does not have")
    assert "linear in the text" in result.error


def test_python_spellings_re2_lacks_are_rewritten(files: Nexus, nexus_workspace: Path) -> None:
    (nexus_workspace / "a.txt").write_text("café\nend\n")
    assert [m["line"] for m in assert_ok(files.invoke("grep", {"pattern": r"end\Z"})).output_structured["matches"]] == [2]
    assert [m["line"] for m in assert_ok(files.invoke("grep", {"pattern": r"caf\u00e9"})).output_structured["matches"]] == [1]


# -- glob and include -------------------------------------------------------------------------


def test_repeated_star_a_cannot_freeze_the_host(files: Nexus, nexus_workspace: Path) -> None:
    (nexus_workspace / ("a" * 44)).write_text("x\n")
    (nexus_workspace / ("a" * 43 + "b")).write_text("x\n")
    pattern = "*a" * 30 + "*b"  # Python's re took 8 s for far fewer against the 44 a's
    result = assert_ok(watched(files, "glob", {"pattern": pattern}))
    assert result.output_structured["paths"] == ["a" * 43 + "b"]
    grep = assert_ok(watched(files, "grep", {"pattern": "x", "include": pattern}))
    assert [m["path"] for m in grep.output_structured["matches"]] == ["a" * 43 + "b"]


def test_a_huge_brace_set_is_refused_at_once(files: Nexus, nexus_workspace: Path) -> None:
    """300 KB of braces cost 25 s of CPU to translate before; now its length refuses it."""
    pattern = "{" + ",".join(f"name{i}" for i in range(30_000)) + "}"
    assert len(pattern) > 250_000
    result = watched(files, "glob", {"pattern": pattern}, cpu_seconds=2)
    assert_error(result, f"the glob is {len(pattern)} characters long; at most {MAX_GLOB_CHARS} are taken "
                         "(pattern length limit)", kind="failure")


def test_a_brace_set_at_the_limits_is_matched_in_one_pass(files: Nexus, nexus_workspace: Path) -> None:
    names = [f"f{i}" for i in range(600)]
    pattern = "{" + ",".join(names) + "}.txt"
    assert len(pattern) < MAX_GLOB_CHARS
    for name in ["f5", "f599", "f600"]:
        (nexus_workspace / f"{name}.txt").write_text("x\n")
    result = assert_ok(watched(files, "glob", {"pattern": pattern}))
    assert result.output_structured["paths"] == ["f5.txt", "f599.txt"]


def test_too_many_brace_choices_are_refused(files: Nexus, nexus_workspace: Path) -> None:
    pattern = "{" + ",".join("x" * (MAX_BRACE_CHOICES + 1)) + "}"
    result = watched(files, "glob", {"pattern": pattern}, cpu_seconds=2)
    assert_error(result, f"the glob's braces hold more than {MAX_BRACE_CHOICES} choices (brace choices limit)",
                 kind="failure")


@pytest.mark.parametrize("pattern", [
    "{a," * (MAX_BRACE_DEPTH + 1) + "b" + "}" * (MAX_BRACE_DEPTH + 1),
    "{" * 2000 + "}" * 2000,  # deep enough to break a recursive translation
])
def test_deeply_nested_braces_are_refused_without_recursion(files: Nexus, nexus_workspace: Path, pattern: str) -> None:
    assert len(pattern) <= MAX_GLOB_CHARS
    result = watched(files, "glob", {"pattern": pattern}, cpu_seconds=2)
    assert_error(result, f"the glob nests braces more than {MAX_BRACE_DEPTH} deep (brace depth limit)",
                 kind="failure")


def test_nested_braces_within_the_limit_work(files: Nexus, nexus_workspace: Path) -> None:
    for name in ["a.py", "b.pyi", "c.md", "d.txt"]:
        (nexus_workspace / name).write_text("x\n")
    result = assert_ok(files.invoke("glob", {"pattern": "*.{py{,i},m{d,x}}"}))
    assert result.output_structured["paths"] == ["a.py", "b.pyi", "c.md"]


def test_a_very_long_glob_is_refused_with_the_limit(files: Nexus, nexus_workspace: Path) -> None:
    result = watched(files, "glob", {"pattern": "*a" * 5000})
    assert_error(result, f"at most {MAX_GLOB_CHARS} are taken (pattern length limit)", kind="failure")
    result = watched(files, "grep", {"pattern": "x", "include": "?" * 5000})
    assert_error(result, f"at most {MAX_GLOB_CHARS} are taken (pattern length limit)", kind="failure")


def test_a_costly_glob_over_many_files_stops_at_max_search_seconds(nexus_factory: NexusFactory,
                                                                   nexus_workspace: Path) -> None:
    nx = nexus_factory(plugins=["nexus.tool.file"],
                       config={"plugins": {"nexus.tool.file": {"max_search_seconds": 1}}})
    for i in range(300):
        (nexus_workspace / (f"{i:03d}" + "a" * 200)).write_text("x\n")
    pattern = "[a-z0-9]" * 400 + "*x"  # costly per name, and never matches
    result = assert_ok(watched(nx, "glob", {"pattern": pattern[:MAX_GLOB_CHARS]}, cpu_seconds=15))
    assert result.output_structured["paths"] == []
