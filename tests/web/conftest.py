"""Fixtures for the webfetch tests: a real HTTP server on loopback, and a Nexus whose webfetch may
reach it (loopback is refused by default; these allow 127.0.0.1 and any port)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from nexus_core.testing import NexusFactory
from web_server import Site

from nexus_core import Nexus

WEB = "nexus.tool.web"
#: the settings that let webfetch reach the test server, and nothing else private
LOOPBACK = {"allow_hosts": ["127.0.0.1"], "allow_ports": None}


@pytest.fixture
def site() -> Iterator[Site]:
    server = Site()
    yield server
    server.close()


@pytest.fixture
def web(nexus_factory: NexusFactory) -> Nexus:
    return nexus_factory(plugins=[WEB], config={"plugins": {WEB: LOOPBACK}})
