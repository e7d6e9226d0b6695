"""The ```python examples of the native-tools, adapters, skills and built-in-tools pages run as
written, so the docs cannot rot. Each page's blocks run in order in one namespace (a later block
builds on an earlier one), in an empty temporary folder; the examples check themselves with
`assert`. The adapters page's provider loops run against a local fake of each API."""

from __future__ import annotations

import re
import textwrap
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path

import pytest
from fakes.providers import (
    Call,
    FakeProviders,
    anthropic_message,
    chat_completion,
    gemini_response,
    responses_response,
)
from provider_shapes import assert_shape

DOCS = Path(__file__).resolve().parents[2] / "docs"
PAGES = ["native-tools.md", "adapters.md", "skills.md", "builtin-tools.md", "supervisor.md"]
BLOCK = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)


def python_blocks(page: str) -> list[tuple[int, str]]:
    """(first line number, code) of each ```python block of a docs page."""
    text = (DOCS / page).read_text(encoding="utf-8")
    return [(text.count("\n", 0, m.start(1)) + 1, textwrap.dedent(m.group(1))) for m in BLOCK.finditer(text)]


@contextmanager
def provider_apis(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """adapters.md's loops use the real SDKs as a user would (keys and all from the
    environment): here the environment points them at a local fake of each API, scripted with
    what a model would answer (two calls, then text), and every request they sent is checked
    against the provider's documented shape."""
    with FakeProviders() as fake:
        for name, value in {"OPENAI_API_KEY": "test", "OPENAI_BASE_URL": fake.openai_base_url,
                            "ANTHROPIC_API_KEY": "test", "ANTHROPIC_BASE_URL": fake.anthropic_base_url,
                            "GEMINI_API_KEY": "test", "GOOGLE_GEMINI_BASE_URL": fake.gemini_base_url}.items():
            monkeypatch.setenv(name, value)
        monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
        calls = [Call("get_weather", {"location": "Paris"}), Call("get_weather", {"location": "Oslo"})]
        answer = "Sunny and 22 degrees in both."
        fake.script("openai.chat", chat_completion(calls=calls), chat_completion(text=answer),
                    chat_completion(calls=[Call("get_weather", {"location": "Oslo", "unit": None})]))
        fake.script("openai.responses", responses_response(calls=calls), responses_response(text=answer))
        fake.script("anthropic.messages", anthropic_message(text="Let me check.", calls=calls),
                    anthropic_message(text=answer))
        signed = [Call("get_weather", {"location": "Paris"}, thought_signature="CiQB0e2Kb7f3"), calls[1]]
        fake.script("gemini.generate", gemini_response(calls=signed), gemini_response(text=answer))
        yield
        assert fake.pending() == 0, "a loop on the page stopped before the model's last answer"
        assert len(fake.requests) == 9  # two per loop, and the strict-mode example's one
        shapes = {"openai.chat": "openai_chat_request", "openai.responses": "responses_request",
                  "anthropic.messages": "anthropic_request", "gemini.generate": "gemini_request"}
        for request in fake.requests:
            assert_shape(request.body, shapes[request.endpoint])
        # each loop sent the two results back, matched to the calls by id
        chat_results = [m for m in fake.requests_for("openai.chat")[1].body["messages"] if m["role"] == "tool"]
        assert [m["content"] for m in chat_results] == ["Paris: 22 degrees celsius, sunny",
                                                        "Oslo: 22 degrees celsius, sunny"]
        gemini_turn = fake.requests_for("gemini.generate")[1].body["contents"][1]
        assert gemini_turn["parts"][0]["thoughtSignature"] == "CiQB0e2Kb7f3"


#: what a page's examples need around them
PAGE_SETUP: dict[str, Callable[[pytest.MonkeyPatch], AbstractContextManager[None]]] = {"adapters.md": provider_apis}


@pytest.mark.parametrize("page", PAGES)
def test_docs_page_examples_run(page: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                capsys: pytest.CaptureFixture[str]) -> None:
    blocks = python_blocks(page)
    assert blocks, f"docs/{page} has no ```python examples"
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": f"docs_{page.removesuffix('.md').replace('-', '_')}"}
    setup = PAGE_SETUP.get(page)
    with setup(monkeypatch) if setup else nullcontext():
        for line, code in blocks:
            # padding with newlines makes a traceback's line number the line in the .md file
            compiled = compile("\n" * (line - 1) + code, str(DOCS / page), "exec")
            exec(compiled, namespace)  # noqa: S102 (running the docs' own examples is the point)
    capsys.readouterr()  # the examples print; only their asserts matter


def test_the_block_extractor_finds_every_block() -> None:
    for page in PAGES:
        text = (DOCS / page).read_text(encoding="utf-8")
        assert len(python_blocks(page)) == text.count("```python"), page
