"""`nexus_core.llm.make_stoppable`: an HTTP request a stoppable client sends inside
`stopping(token)` ends as soon as the token is cancelled, before the server's first byte too, on
a new connection or a kept-alive one, through a proxy from the environment too, with httpx and
with httpx2 (the fork the SDKs use where it is installed); the server sees the connection
closed. Outside `stopping`, the client is the library's own. Against a real server on loopback;
every wait is for an event."""

from __future__ import annotations

import importlib.util
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from nexus_core.llm import RequestCancelled, make_stoppable, stopping

from nexus_core import CancelToken

LIBRARIES = [pytest.param(name, marks=pytest.mark.skipif(importlib.util.find_spec(name) is None,
                                                        reason=f"{name} is not installed"))
             for name in ("httpx", "httpx2")]


class Server:
    """`GET /answer` answers at once (the connection kept alive); `GET /silent` sends nothing
    until the client closes its end (`disconnected`)."""

    def __init__(self) -> None:
        self.waiting = threading.Event()
        self.disconnected = threading.Event()
        self.connections: set[tuple[str, int]] = set()
        state = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                state.connections.add(self.client_address)
                if self.path.endswith("/answer"):
                    self.send_response(200)
                    self.send_header("Content-Length", "2")
                    self.end_headers()
                    self.wfile.write(b"ok")
                    return
                state.waiting.set()
                self.close_connection = True
                if not self.connection.recv(1, socket.MSG_PEEK):  # blocks until data or an EOF
                    state.disconnected.set()

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server() -> Iterator[Server]:
    s = Server()
    yield s
    s.close()


def send_in_thread(client: Any, url: str, token: CancelToken) -> tuple[threading.Thread, dict[str, BaseException]]:
    outcome: dict[str, BaseException] = {}

    def send() -> None:
        with stopping(token):
            try:
                client.get(url, timeout=600)
            except BaseException as exc:  # noqa: BLE001 - the test reads it
                outcome["error"] = exc

    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    return thread, outcome


@pytest.mark.parametrize("library", LIBRARIES)
def test_a_request_waiting_for_its_first_byte_ends_when_its_token_is_cancelled(library: str, server: Server) -> None:
    lib = importlib.import_module(library)
    with make_stoppable(lib.Client()) as client:
        token = CancelToken()
        thread, outcome = send_in_thread(client, server.url + "/silent", token)
        assert server.waiting.wait(60)
        token.cancel("stop")
        thread.join(60)
        assert not thread.is_alive()
        assert isinstance(outcome.get("error"), RequestCancelled), outcome
        assert server.disconnected.wait(60)
        # the client is fine afterwards: the next request gets its answer
        assert client.get(server.url + "/answer").text == "ok"


@pytest.mark.parametrize("library", LIBRARIES)
def test_a_kept_alive_connection_is_stopped_too(library: str, server: Server) -> None:
    lib = importlib.import_module(library)
    with make_stoppable(lib.Client()) as client:
        assert client.get(server.url + "/answer").text == "ok"  # the connection the next one reuses
        token = CancelToken()
        thread, outcome = send_in_thread(client, server.url + "/silent", token)
        assert server.waiting.wait(60)
        assert len(server.connections) == 1  # the same connection, made before `stopping`
        token.cancel()
        thread.join(60)
        assert isinstance(outcome.get("error"), RequestCancelled), outcome
        assert server.disconnected.wait(60)


@pytest.mark.parametrize("library", LIBRARIES)
def test_a_token_cancelled_before_the_request_stops_it_before_it_connects(library: str, server: Server) -> None:
    lib = importlib.import_module(library)
    token = CancelToken()
    token.cancel("too late")
    with make_stoppable(lib.Client()) as client, stopping(token), \
            pytest.raises(RequestCancelled):
        client.get(server.url + "/answer")
    assert not server.connections


@pytest.mark.parametrize("library", LIBRARIES)
def test_outside_stopping_the_transport_is_the_librarys_own(library: str, server: Server) -> None:
    lib = importlib.import_module(library)
    token = CancelToken()
    token.cancel()  # a token not in use: nothing to do with this request
    with make_stoppable(lib.Client()) as client:
        assert client.get(server.url + "/answer").text == "ok"


def test_request_cancelled_passes_an_except_exception() -> None:
    """What lets it through the SDKs' retry loops (`except Exception: retry`)."""
    assert not issubclass(RequestCancelled, Exception)


@pytest.mark.parametrize("library", LIBRARIES)
def test_a_request_through_a_proxy_from_the_environment_is_stopped_too(
        library: str, server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    """The proxy's transport is one httpx makes for HTTP_PROXY (the server plays the proxy: it
    gets the request for the absolute URL, and answers nothing)."""
    for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", server.url)
    lib = importlib.import_module(library)
    with make_stoppable(lib.Client()) as client:
        token = CancelToken()
        thread, outcome = send_in_thread(client, "http://model.invalid/silent", token)
        assert server.waiting.wait(60)
        token.cancel()
        thread.join(60)
        assert isinstance(outcome.get("error"), RequestCancelled), outcome
        assert server.disconnected.wait(60)


def test_a_client_with_nothing_to_wrap_is_left_as_it_is_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    class Elsewhere:  # a client of another library, or an httpx that moved its pool
        pass

    client = Elsewhere()
    assert make_stoppable(client) is client
    assert "has no connection pool to make stoppable" in caplog.text
