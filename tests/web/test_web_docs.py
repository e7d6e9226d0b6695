"""The ```python examples of docs/tool-web.md run as written, in order, in an empty folder, and
check themselves with assert (the other tool pages do the same). They start their own server on
loopback and stop it at the end."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parents[2] / "docs" / "tool-web.md"
BLOCK = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)


def test_docs_examples_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = PAGE.read_text(encoding="utf-8")
    blocks = [(text.count("\n", 0, m.start(1)) + 1, textwrap.dedent(m.group(1))) for m in BLOCK.finditer(text)]
    assert len(blocks) == text.count("```python") >= 6
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": "docs_tool_web"}
    try:
        for line, code in blocks:
            # padding makes a traceback's line number the line in the .md file
            exec(compile("\n" * (line - 1) + code, str(PAGE), "exec"), namespace)  # noqa: S102
    finally:
        for name in ("nx", "local", "scripted", "mine"):
            nexus = namespace.get(name)
            if nexus is not None:
                nexus.close()  # type: ignore[attr-defined]
