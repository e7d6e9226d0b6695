"""Fixtures for the file tools: a Nexus with only `nexus.tool.file`, over a temporary workspace."""

from __future__ import annotations

import pytest

from nexus_core import Nexus
from nexus_core.testing import NexusFactory


@pytest.fixture
def files(nexus_factory: NexusFactory) -> Nexus:
    return nexus_factory(plugins=["nexus.tool.file"])
