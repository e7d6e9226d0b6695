"""HTTP requests that a `CancelToken` stops at once, for the providers' SDK clients.

A provider's SDK (openai, anthropic, google-genai) sends a request from the thread that called it
and blocks there: waiting for the server's first byte, then reading the stream. Closing the
response from another thread does not wake a read blocked in the kernel (and before the first
byte there is no response to close), so Ctrl-C used to wait for the server to answer, up to the
request's timeout. Here the blocking happens on sockets we can reach: `make_stoppable(client)`
takes the SDK's own HTTP client (httpx, or the httpx2 fork the SDKs use where it is installed),
as the SDK made it (its proxies from the environment, its keep-alive socket options), and has
the connection pool of each of its transports read and write through `_StoppableStream`. While
a thread runs inside `stopping(token)`, each read, write and connect of that thread registers
with the token what ends it: `shutdown()` of the socket, which wakes the blocked read with an
end of file. The read then raises `RequestCancelled`, and the SDK's request ends, its
connection closed: the server sees the client go.

httpx lets no one choose a transport's network backend (httpcore's `ConnectionPool` takes one,
httpx's `HTTPTransport` does not pass it on), so the backend of each pool is wrapped where httpx
keeps it: `client._transport`, `client._mounts`, `transport._pool._network_backend`, the same
in httpx and httpx2 for years. Should a release move them, `make_stoppable` warns and leaves
the client as it is: a request then stops at its next chunk.

`RequestCancelled` derives from `BaseException`, as `asyncio.CancelledError` does and for the same
reason: the SDKs retry a request that failed with any `Exception` (after sleeping up to seconds),
and a cancelled request must not be retried. `SDKProvider.complete` turns it into
`ModelError(kind="cancelled")`.

A leaf module: it imports only `_cancel`, and the HTTP library when a transport is made.
"""

from __future__ import annotations

import contextlib
import contextvars
import importlib
import logging
import os
import socket
from collections.abc import Callable, Iterator
from typing import Any

from ._cancel import CancelToken

log = logging.getLogger("nexus_core")

#: the token of the model request this thread (or task) is sending, if any
_current: contextvars.ContextVar[CancelToken | None] = contextvars.ContextVar("nexus_http_cancel", default=None)


class RequestCancelled(BaseException):
    """An HTTP read, write or connect stopped because the request's `CancelToken` was cancelled.
    A `BaseException` so that an SDK's `except Exception` (its retry loop) lets it through."""


@contextlib.contextmanager
def stopping(token: CancelToken) -> Iterator[None]:
    """While inside, the HTTP requests this thread sends through a `make_stoppable()` client end
    as soon as `token` is cancelled (`RequestCancelled`)."""
    reset = _current.set(token)
    try:
        yield
    finally:
        _current.reset(reset)


def http_library(client_class: type | None = None) -> str:
    """The HTTP library ("httpx" or "httpx2") that `client_class` (an SDK's default client class,
    `openai.DefaultHttpxClient`) is built on; without one, httpx2 when it is installed, else httpx
    (what google-genai picks)."""
    for cls in getattr(client_class, "__mro__", ()):
        package = (cls.__module__ or "").partition(".")[0]
        if package in ("httpx", "httpx2"):
            return package
    chosen = os.environ.get("GOOGLE_GENAI_HTTP_CLIENT", "").strip().lower() if client_class is None else ""
    if chosen in ("httpx", "httpx2"):
        return chosen
    try:
        importlib.import_module("httpx2")
    except ImportError:
        return "httpx"
    return "httpx2"


def make_stoppable(client: Any) -> Any:
    """Make the requests `client` (an `httpx.Client` or `httpx2.Client`, such as an SDK's
    `DefaultHttpxClient()`) sends inside `stopping(token)` stop when the token is cancelled, on
    every transport it has (the default one and those for proxies). Returns the client."""
    transports = [getattr(client, "_transport", None), *dict(getattr(client, "_mounts", None) or {}).values()]
    wrapped = sum(_wrap(t) for t in transports if t is not None)
    if not wrapped:
        log.warning("%s has no connection pool to make stoppable: a cancelled model request waits for "
                    "the server's next byte", type(client).__name__)
    return client


def _wrap(transport: Any) -> bool:
    pool: Any = getattr(transport, "_pool", None)
    backend = getattr(pool, "_network_backend", None)
    if pool is None or not callable(getattr(backend, "connect_tcp", None)):
        return False
    if not isinstance(backend, _StoppableBackend):
        pool._network_backend = _StoppableBackend(backend)
    return True


def _guarded(operation: Callable[..., Any], stream: _StoppableStream | None, *args: Any, **kwargs: Any) -> Any:
    """Run one blocking socket operation so that the current token, if any, ends it."""
    token = _current.get()
    if token is None:
        return operation(*args, **kwargs)
    if token.cancelled:
        raise RequestCancelled(token.reason)
    forget = token.on_cancel(stream.shutdown) if stream is not None else (lambda: None)
    try:
        result = operation(*args, **kwargs)
    except Exception as exc:
        if token.cancelled:  # the shutdown's doing (an SSL read reports it as an error)
            raise RequestCancelled(token.reason) from exc
        raise
    finally:
        forget()
    if token.cancelled:  # a read woken by the shutdown returns an end of file: not the server's
        close = getattr(result, "close", None)
        if callable(close):  # a connection made as the token was cancelled: not left open
            with contextlib.suppress(Exception):
                close()
        raise RequestCancelled(token.reason)
    return result


class _StoppableStream:
    """An httpcore network stream whose blocking reads and writes the current token can end."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        data: bytes = _guarded(self._stream.read, self, max_bytes, timeout)
        return data

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        _guarded(self._stream.write, self, buffer, timeout)

    def close(self) -> None:
        self._stream.close()

    def start_tls(self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None) -> Any:
        return _StoppableStream(_guarded(self._stream.start_tls, self, ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)

    def shutdown(self) -> None:
        """Wake whatever blocks on the socket (from the cancelling thread). The plain socket's
        shutdown, also under TLS: `SSLSocket.shutdown` would drop the SSL object that the
        reading thread is using."""
        sock = self._stream.get_extra_info("socket")
        if isinstance(sock, socket.socket):
            with contextlib.suppress(OSError):  # closed already: nothing is blocked on it
                socket.socket.shutdown(sock, socket.SHUT_RDWR)


class _StoppableBackend:
    """An httpcore network backend whose connections are `_StoppableStream`s. A connect in
    progress is not interrupted (there is no socket to reach yet); it is checked before and
    after."""

    def __init__(self, backend: Any) -> None:
        self._backend = backend

    def connect_tcp(self, *args: Any, **kwargs: Any) -> _StoppableStream:
        return _StoppableStream(_guarded(self._backend.connect_tcp, None, *args, **kwargs))

    def connect_unix_socket(self, *args: Any, **kwargs: Any) -> _StoppableStream:
        return _StoppableStream(_guarded(self._backend.connect_unix_socket, None, *args, **kwargs))

    def sleep(self, seconds: float) -> None:
        self._backend.sleep(seconds)
