"""The ```python examples of docs/tool-shell.md run as written, in order, in an empty folder that
is their workspace, and check themselves with assert (the core's docs pages do the same).
The page sets an environment variable to show it does not leak; the test puts the environment
back whatever happens."""

from __future__ import annotations

import os
import re
import textwrap
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parents[2] / "docs" / "tool-shell.md"
BLOCK = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)


def test_docs_examples_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = PAGE.read_text(encoding="utf-8")
    blocks = [(text.count("\n", 0, m.start(1)) + 1, textwrap.dedent(m.group(1))) for m in BLOCK.finditer(text)]
    assert len(blocks) == text.count("```python") >= 5
    monkeypatch.chdir(tmp_path)
    saved = dict(os.environ)
    namespace: dict[str, object] = {"__name__": "docs_tool_shell"}
    try:
        for line, code in blocks:
            # padding makes a traceback's line number the line in the .md file
            exec(compile("\n" * (line - 1) + code, str(PAGE), "exec"), namespace)
    finally:
        os.environ.clear()
        os.environ.update(saved)
