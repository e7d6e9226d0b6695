"""The ```python examples of the native-tools, adapters, skills and built-in-tools pages run as
written, so the docs cannot rot. Each page's blocks run in order in one namespace (a later block
builds on an earlier one), in an empty temporary folder; the examples check themselves with
`assert`."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs"
PAGES = ["native-tools.md", "adapters.md", "skills.md", "builtin-tools.md"]
BLOCK = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)


def python_blocks(page: str) -> list[tuple[int, str]]:
    """(first line number, code) of each ```python block of a docs page."""
    text = (DOCS / page).read_text(encoding="utf-8")
    return [(text.count("\n", 0, m.start(1)) + 1, textwrap.dedent(m.group(1))) for m in BLOCK.finditer(text)]


@pytest.mark.parametrize("page", PAGES)
def test_docs_page_examples_run(page: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                capsys: pytest.CaptureFixture[str]) -> None:
    blocks = python_blocks(page)
    assert blocks, f"docs/{page} has no ```python examples"
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": f"docs_{page.removesuffix('.md').replace('-', '_')}"}
    for line, code in blocks:
        # padding with newlines makes a traceback's line number the line in the .md file
        compiled = compile("\n" * (line - 1) + code, str(DOCS / page), "exec")
        exec(compiled, namespace)  # noqa: S102 (running the docs' own examples is the point)
    capsys.readouterr()  # the examples print; only their asserts matter


def test_the_block_extractor_finds_every_block() -> None:
    for page in PAGES:
        text = (DOCS / page).read_text(encoding="utf-8")
        assert len(python_blocks(page)) == text.count("```python"), page
