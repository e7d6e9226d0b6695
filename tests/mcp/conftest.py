"""Fixtures for nexus_mcp's tests: a Nexus with MCP servers configured (helpers: mcp_helpers)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp_helpers import NEXUS_ENV, mcp_config

from nexus_core import Nexus


@pytest.fixture(autouse=True)
def _clean_nexus_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """The developer's own NEXUS_* settings must not change what a test sees."""
    for name in NEXUS_ENV:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def make_nexus(tmp_path: Path) -> Iterator[Callable[..., Nexus]]:
    """`make_nexus({"time": time_server()}, active=[...])` -> a Nexus with those MCP servers,
    its session folder under tmp_path; closed after the test."""
    made: list[Nexus] = []

    def make(servers: dict[str, Any], **kwargs: Any) -> Nexus:
        nexus = Nexus(mcp_config(tmp_path, servers, **kwargs))
        made.append(nexus)
        return nexus

    yield make
    for nexus in made:
        nexus.close()
