"""Fixtures for the file tools: a Nexus with only `nexus.tool.file`, over a temporary workspace."""

from __future__ import annotations

import pytest

import nexus_tool_file._beneath as beneath
from nexus_core import Nexus
from nexus_core.testing import NexusFactory


@pytest.fixture
def files(nexus_factory: NexusFactory) -> Nexus:
    return nexus_factory(plugins=["nexus.tool.file"])


@pytest.fixture(params=["openat2", "walk"])
def opener(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run a test against both ways the file tools open paths beneath the workspace: the kernel's
    openat2(RESOLVE_BENEATH) (skipped where it is missing), and the O_NOFOLLOW walk used then."""
    if request.param == "openat2" and beneath._syscall is None:
        pytest.skip(f"no openat2 here: {beneath.WHY_NOT_OPENAT2}")
    if request.param == "walk":
        monkeypatch.setattr(beneath, "_syscall", None)
    return str(request.param)
