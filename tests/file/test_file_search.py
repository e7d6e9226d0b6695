"""glob, grep and list: what they find, what they skip, and how they report limits."""

from __future__ import annotations

from pathlib import Path

import pytest

from nexus_core import Nexus
from nexus_core.testing import NexusFactory, assert_error, assert_ok
from nexus_tool_file._patterns import compile_glob, subject


@pytest.fixture
def tree(nexus_workspace: Path) -> Path:
    for rel, text in {
        "README.md": "# Title\nhello world\n",
        "setup.py": "import os\n",
        "src/app.py": "def main():\n    print('Hello')\n",
        "src/app.pyi": "def main() -> None: ...\n",
        "src/lib/util.py": "HELLO = 1\n",
        "src/lib/data.json": '{"hello": true}\n',
        ".git/config": "hello from git\n",
        "node_modules/pkg/index.js": "hello\n",
    }.items():
        path = nexus_workspace / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (nexus_workspace / "logo.bin").write_bytes(b"hello\0binary")
    return nexus_workspace


@pytest.mark.parametrize("pattern, path, matches", [
    ("src/app.py", "x/src/app.py", False),  # anchored: matched against the whole path
    ("*.py", "app.py", True),
    ("*.py", "src/app.py", False),
    ("**/*.py", "app.py", True),
    ("**/*.py", "a/b/c.py", True),
    ("src/**", "src/a/b", True),
    ("src/**/*.py", "src/app.py", True),
    ("*.{py,pyi}", "a.pyi", True),
    ("*.{py,pyi}", "a.pyc", False),
    ("test_?.py", "test_1.py", True),
    ("[!a]*.txt", "a.txt", False),
    ("[ab]*.txt", "b.txt", True),
    (".*", ".hidden", True),
    ("a+b(c).txt", "a+b(c).txt", True),
    ("*.{py{,i},md}", "a.pyi", True),  # nested choices
    ("*.{py{,i},md}", "a.pyc", False),
    ("{**/,}test_*.py", "a/b/test_x.py", True),  # `**` as a whole segment of a choice
    ("{**/,}test_*.py", "test_x.py", True),
    ("{a", "{a", True),  # an unclosed brace is a literal
    ("a},b", "a},b", True),
    ("[]]x", "]x", True),  # `]` first in a class is a member
    ("*", "caf\udce9", True),  # a name that is not UTF-8 still matches `*`
])
def test_compile_glob(pattern: str, path: str, matches: bool) -> None:
    assert (compile_glob(pattern).match(subject(path)) is not None) is matches


# -- glob -----------------------------------------------------------------------------------


def test_glob_matches_below_path_and_returns_workspace_paths(files: Nexus, tree: Path) -> None:
    assert assert_ok(files.invoke("glob", {"pattern": "*.py"})).output == "setup.py"
    result = assert_ok(files.invoke("glob", {"pattern": "**/*.py"}))
    assert result.output_structured == {"paths": ["setup.py", "src/app.py", "src/lib/util.py"], "truncated": False}
    below = assert_ok(files.invoke("glob", {"pattern": "*.{py,pyi}", "path": "src"}))
    assert below.output_structured["paths"] == ["src/app.py", "src/app.pyi"]


def test_glob_skips_excluded_folders_unless_searched_directly(files: Nexus, tree: Path) -> None:
    everything = assert_ok(files.invoke("glob", {"pattern": "**/*"})).output_structured["paths"]
    assert not [p for p in everything if p.startswith((".git/", "node_modules/"))]
    inside = assert_ok(files.invoke("glob", {"pattern": "*", "path": ".git"})).output_structured["paths"]
    assert inside == [".git/config"]


def test_glob_limit_and_no_match_are_reported(files: Nexus, tree: Path) -> None:
    result = assert_ok(files.invoke("glob", {"pattern": "**/*", "limit": 2}))
    assert result.output_structured["truncated"] is True and len(result.output_structured["paths"]) == 2
    assert "showing the first 2 matches" in result.output
    assert_ok(files.invoke("glob", {"pattern": "*.rs"}), "[no files match '*.rs' under .]")


def test_glob_refuses_patterns_that_climb_out(files: Nexus, tree: Path) -> None:
    assert_error(files.invoke("glob", {"pattern": "../*"}), "cannot start with / or contain '..'", kind="failure")
    assert_error(files.invoke("glob", {"pattern": "/etc/*"}), "set `path`", kind="failure")
    assert_error(files.invoke("glob", {"pattern": "*", "path": "README.md"}), "is a file, not a folder")


# -- grep -----------------------------------------------------------------------------------


def test_grep_gives_file_line_text(files: Nexus, tree: Path) -> None:
    result = assert_ok(files.invoke("grep", {"pattern": "hello"}))
    assert result.output == 'README.md:2:hello world\nsrc/lib/data.json:1:{"hello": true}'
    assert result.output_structured["matches"][0] == {"path": "README.md", "line": 2, "text": "hello world"}


def test_grep_include_ignore_case_and_a_single_file(files: Nexus, tree: Path) -> None:
    by_name = assert_ok(files.invoke("grep", {"pattern": "hello", "include": "*.py", "ignore_case": True}))
    assert by_name.output == "src/app.py:2:    print('Hello')\nsrc/lib/util.py:1:HELLO = 1"
    by_path = assert_ok(files.invoke("grep", {"pattern": "hello", "include": "src/lib/*", "ignore_case": True}))
    assert [m["path"] for m in by_path.output_structured["matches"]] == ["src/lib/data.json", "src/lib/util.py"]
    one = assert_ok(files.invoke("grep", {"pattern": "print", "path": "src/app.py"}))
    assert one.output == "src/app.py:2:    print('Hello')"


def test_grep_limit_no_match_and_bad_regex(files: Nexus, tree: Path) -> None:
    limited = assert_ok(files.invoke("grep", {"pattern": ".", "limit": 3}))
    assert len(limited.output_structured["matches"]) == 3 and limited.output_structured["truncated"] is True
    assert "showing the first 3 matches" in limited.output
    assert_ok(files.invoke("grep", {"pattern": "zebra"}), "[no lines match 'zebra' in .]")
    assert_error(files.invoke("grep", {"pattern": "("}), "invalid regular expression '('", kind="failure")


def test_grep_skips_binary_files_and_cuts_long_lines(files: Nexus, tree: Path) -> None:
    (tree / "min.js").write_text("hello" + "x" * 2000 + "\n")
    matches = assert_ok(files.invoke("grep", {"pattern": "^hello"})).output_structured["matches"]
    assert [m["path"] for m in matches] == ["README.md", "min.js"]  # not logo.bin, .git, node_modules
    assert len(matches[1]["text"]) == 501 and matches[1]["text"].endswith("…")


def test_max_results_caps_what_a_call_may_ask_for(nexus_factory: NexusFactory, tree: Path) -> None:
    nx = nexus_factory(plugins=["nexus.tool.file"], config={"plugins": {"nexus.tool.file": {"max_results": 2}}})
    assert len(assert_ok(nx.invoke("glob", {"pattern": "**/*", "limit": 100})).output_structured["paths"]) == 2


# -- list -----------------------------------------------------------------------------------


def test_list_shows_entries_sorted_with_kinds_and_sizes(files: Nexus, tree: Path) -> None:
    result = assert_ok(files.invoke("list", {"path": "src"}))
    assert result.output == "app.py\napp.pyi\nlib/"
    assert result.output_structured["entries"][0] == {"name": "app.py", "type": "file", "size": 31}
    assert result.output_structured["entries"][2] == {"name": "lib", "type": "dir", "size": None}
    root = assert_ok(files.invoke("list", {})).output.splitlines()
    assert ".git/" in root and "README.md" in root  # list hides nothing inside the workspace


def test_list_limit_empty_folder_and_wrong_kinds(files: Nexus, tree: Path) -> None:
    limited = assert_ok(files.invoke("list", {"limit": 2}))
    assert limited.output_structured["truncated"] is True
    assert limited.output.endswith("[first 2 of 6 entries]")
    (tree / "empty").mkdir()
    assert_ok(files.invoke("list", {"path": "empty"}), "[empty is empty]")
    assert_error(files.invoke("list", {"path": "README.md"}), "README.md is a file; use read")
    assert_error(files.invoke("list", {"path": "nowhere"}), "nowhere: no such folder")


@pytest.mark.parametrize("pattern", ["hello", "^hello", "world$", "^$", r"o\s*$", r"\Ahello", r"end\Z",
                                     "(?i)HELLO WORLD", "caf.", "x*", "^[^h]"])
def test_searching_a_file_whole_first_finds_the_same_lines(files: Nexus, tree: Path, pattern: str,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """grep first searches a small file whole (one RE2 call) and skips it when nothing matches;
    line ends, anchors and bytes that are not UTF-8 must not make it skip a file with a match."""
    import nexus_tool_file._search as search

    (tree / "crlf.txt").write_bytes(b"hello world\r\nthe end\r\n")
    (tree / "latin1.txt").write_bytes(b"caf\xe9 hello\nend")
    (tree / "blank.txt").write_text("hello\n\nworld")
    whole = assert_ok(files.invoke("grep", {"pattern": pattern})).output_structured
    monkeypatch.setattr(search, "_whole_file_regex", lambda *args: None)
    by_line = assert_ok(files.invoke("grep", {"pattern": pattern})).output_structured
    assert whole == by_line
