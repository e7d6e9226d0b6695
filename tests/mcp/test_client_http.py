"""The client plugin with a streamable HTTP server: headers (with `${VAR}`) on every request, and
a server that goes away and comes back."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from mcp_helpers import SERVERS, wait_for

from nexus_core import Nexus


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


class HttpFixture:
    """fixture_server.py over streamable HTTP, on a port of its own."""

    def __init__(self, log: Path) -> None:
        self.port = free_port()
        self.log = log
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def start(self) -> None:
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen([sys.executable, str(SERVERS / "fixture_server.py"), "--http",
                                             str(self.port)], stdout=log, stderr=log)
        wait_for(lambda: listening(self.port), what=f"the HTTP fixture server on port {self.port}")

    def stop(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None


@pytest.fixture
def http_server(tmp_path: Path) -> Iterator[HttpFixture]:
    server = HttpFixture(tmp_path / "http-server.log")
    server.start()
    yield server
    server.stop()


def test_an_http_server_gets_the_headers_and_its_tools_work(
        http_server: HttpFixture, make_nexus: Callable[..., Nexus], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NEXUS_TEST_TOKEN", "t0ken")
    nx = make_nexus({"web": {"url": http_server.url, "headers": {"Authorization": "Bearer ${NEXUS_TEST_TOKEN}",
                                                                 "X-Plain": "plain"}}})
    assert nx.invoke("web_header", {"name": "authorization"}).output == "Bearer t0ken"
    assert nx.invoke("web_header", {"name": "x-plain"}).output == "plain"
    result = nx.invoke("web_segment", {"x1": 0, "y1": 0, "x2": 6, "y2": 8})
    assert result.output_structured["length"] == 10.0
    [status] = nx.plugin("nexus.mcp.client").status()
    assert status.transport == "http" and status.running and status.target == http_server.url


def test_an_http_server_that_goes_away_is_an_error_naming_it_then_comes_back(
        http_server: HttpFixture, make_nexus: Callable[..., Nexus]) -> None:
    nx = make_nexus({"web": {"url": http_server.url, "timeout_seconds": 10}})
    assert nx.invoke("web_echo", {"text": "one"}).output == "one"
    http_server.stop()
    down = nx.invoke("web_echo", {"text": "two"})
    assert down.is_error and "MCP server 'web'" in down.error
    http_server.start()
    assert nx.invoke("web_echo", {"text": "three"}).output == "three"
