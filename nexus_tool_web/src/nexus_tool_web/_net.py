"""The network under httpx: resolve a host, check every address, connect to a checked one, and keep
every socket operation inside the call's deadline.

httpx hands each connection to an httpcore connection pool, and the pool asks its network backend
to `connect_tcp(host, port)`. `GuardedBackend` is that backend. It resolves the host itself
(through a resolver it is given), has the policy check every address, and opens the socket to one
of those very addresses, so no second lookup can swap in another (DNS rebinding). The host name
stays what httpx and httpcore see, so the Host header, TLS SNI and the certificate check all use
the name, not the address.

Every stream it returns takes its timeouts from one `Deadline`: each read, write, connect and TLS
handshake may last at most what is left of the call, so a server that sends a byte at a time
cannot hold a call past its timeout.
"""

from __future__ import annotations

import queue
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import httpcore
import httpx

from ._errors import FetchError
from ._policy import IPAddress, Policy, parse_ip

#: `resolver(host, port)` -> the host's addresses, as strings ("93.184.216.34", "2606:2800::1")
Resolver = Callable[[str, int], Iterable[str]]


def system_resolver(host: str, port: int) -> list[str]:
    """The operating system's lookup (getaddrinfo), for TCP."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    return [str(info[4][0]) for info in infos]


class DeadlineExceeded(Exception):
    """The call's time ran out (turned into a "timed out after" message by the fetcher), while
    `doing` what, when it is more precise than the fetcher knows."""

    def __init__(self, doing: str | None = None) -> None:
        super().__init__(doing)
        self.doing = doing


class Deadline:
    """The end of one call's time, shared by everything the call does on the network."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.end = time.monotonic() + seconds

    def remaining(self) -> float:
        return self.end - time.monotonic()

    @property
    def expired(self) -> bool:
        return self.remaining() <= 0

    def cap(self, timeout: float | None) -> float:
        """`timeout`, shortened to what is left; raises DeadlineExceeded when nothing is."""
        left = self.remaining()
        if left <= 0:
            raise DeadlineExceeded()
        return left if timeout is None else min(timeout, left)


def resolve(resolver: Resolver, host: str, port: int, deadline: Deadline) -> list[IPAddress]:
    """The addresses `host` resolves to, in the resolver's order, within the deadline.

    getaddrinfo cannot be interrupted, so it runs on a daemon thread the call stops waiting for
    at the deadline; the thread ends when the system resolver gives up (resolv.conf's timeout).
    """
    answer: queue.SimpleQueue[tuple[bool, Any]] = queue.SimpleQueue()

    def lookup() -> None:
        try:
            answer.put((True, list(resolver(host, port))))
        except BaseException as exc:  # noqa: BLE001 (handed to the waiting call, which reports it)
            answer.put((False, exc))

    threading.Thread(target=lookup, name=f"webfetch resolve {host}", daemon=True).start()
    try:
        ok, value = answer.get(timeout=deadline.cap(None))
    except queue.Empty:
        raise DeadlineExceeded(f"resolving {host}") from None
    if not ok:
        if isinstance(value, socket.gaierror):
            raise FetchError(f"cannot resolve {host}: {value.strerror or value}")
        raise FetchError(f"cannot resolve {host}: {value}")
    addresses: list[IPAddress] = []
    for text in value:
        addr = parse_ip(str(text).split("%", 1)[0])  # an IPv6 scope (fe80::1%eth0) is not part of the address
        if addr is None:
            raise FetchError(f"cannot resolve {host}: the resolver answered {text!r}, which is not an IP address")
        if addr not in addresses:
            addresses.append(addr)
    if not addresses:
        raise FetchError(f"cannot resolve {host}: no addresses")
    return addresses


class DeadlineStream(httpcore.NetworkStream):
    """A network stream whose every operation ends by the deadline."""

    def __init__(self, inner: httpcore.NetworkStream, deadline: Deadline) -> None:
        self._inner = inner
        self._deadline = deadline

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, self._deadline.cap(timeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, self._deadline.cap(timeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(self, ssl_context: ssl.SSLContext, server_hostname: str | None = None,
                  timeout: float | None = None) -> httpcore.NetworkStream:
        # the socket timeout bounds the whole handshake, not each read in it (Python >= 3.5)
        inner = self._inner.start_tls(ssl_context, server_hostname, self._deadline.cap(timeout))
        return DeadlineStream(inner, self._deadline)

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class GuardedBackend(httpcore.NetworkBackend):
    """Connects only to addresses the policy allows, looked up once per connection."""

    def __init__(self, policy: Policy, resolver: Resolver, deadline: Deadline) -> None:
        self._policy = policy
        self._resolver = resolver
        self._deadline = deadline
        self._inner = httpcore.SyncBackend()
        #: (host, address) of each connection made, in order: what the call actually reached
        self.connections: list[tuple[str, str]] = []

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options: Iterable[Any] | None = None) -> httpcore.NetworkStream:
        literal = parse_ip(host)
        addresses = [literal] if literal is not None else resolve(self._resolver, host, port, self._deadline)
        self._policy.check_addresses(host, addresses)
        failed: httpcore.ConnectError | None = None
        for addr in addresses:  # each one checked above; try them in the resolver's order
            try:
                stream = self._inner.connect_tcp(str(addr), port, timeout=self._deadline.cap(timeout),
                                                 local_address=local_address, socket_options=socket_options)
            except httpcore.ConnectError as exc:
                failed = exc
                continue
            self.connections.append((host, str(addr)))
            return DeadlineStream(stream, self._deadline)
        assert failed is not None
        raise failed

    def connect_unix_socket(self, path: str, timeout: float | None = None,
                            socket_options: Iterable[Any] | None = None) -> httpcore.NetworkStream:
        raise FetchError("webfetch does not connect to unix sockets")

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


class _ResponseStream(httpx.SyncByteStream):
    def __init__(self, response: httpcore.Response) -> None:
        self._response = response

    def __iter__(self) -> Iterator[bytes]:
        yield from self._response.iter_stream()

    def close(self) -> None:
        self._response.close()


class GuardedTransport(httpx.BaseTransport):
    """An httpx transport over an httpcore pool that uses `GuardedBackend`.

    httpx's own HTTPTransport builds its pool without a way to pass a network backend, so this is
    the few lines of it that turn an httpx request into an httpcore one and back. httpcore's
    exceptions come through as they are; the fetcher turns them into messages.
    """

    def __init__(self, backend: GuardedBackend, ssl_context: ssl.SSLContext) -> None:
        self._pool = httpcore.ConnectionPool(ssl_context=ssl_context, network_backend=backend, http1=True,
                                             http2=False, retries=0, max_connections=4)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        assert isinstance(request.stream, httpx.SyncByteStream)
        response = self._pool.handle_request(httpcore.Request(
            method=request.method,
            url=httpcore.URL(scheme=request.url.raw_scheme, host=request.url.raw_host, port=request.url.port,
                             target=request.url.raw_path),
            headers=request.headers.raw,
            content=request.stream,
            extensions=request.extensions,
        ))
        return httpx.Response(status_code=response.status, headers=response.headers,
                              stream=_ResponseStream(response), extensions=response.extensions)

    def close(self) -> None:
        self._pool.close()
