"""A real HTTP(S) server on a loopback address for the webfetch tests: pages, redirects, slow and
huge responses, binary and compressed bodies, and responses that break the rules on purpose.

Each `Site` runs `http.server` in a thread and records every request it answers and every
connection it accepts, so a test can tell which server (which address) a fetch reached.
Responses are written as raw bytes, so a route can send exactly what a hostile server would.
"""

from __future__ import annotations

import gzip
import json
import socket
import ssl
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

PAGE = """<!doctype html>
<html><head><title>The test page</title><style>body { color: red }</style>
<script>document.write("not page text")</script></head>
<body><h1>Hello, <b>web</b></h1>
<p>A paragraph with <a href="/other">a link</a> and   some    spaces.</p>
<ul><li>first</li><li>second</li></ul>
<pre>def f():
    return 1</pre>
</body></html>
"""

#: a PNG's signature and the start of its header chunk: enough to be binary
PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00\x1f\x15\xc4\x89"

Route = Callable[["Handler", dict[str, str]], None]


@dataclass
class Seen:
    """One request a site answered."""

    path: str
    headers: dict[str, str]
    client: str
    server: str


@dataclass
class Site:
    """A server on `host`, port `port` (0: any free one), over TLS when given a context."""

    host: str = "127.0.0.1"
    port: int = 0
    tls: ssl.SSLContext | None = None
    requests: list[Seen] = field(default_factory=list)
    connections: list[str] = field(default_factory=list)
    #: routes that stream until the client goes away set this when it did
    client_gone: threading.Event = field(default_factory=threading.Event)
    stopping: threading.Event = field(default_factory=threading.Event)
    bytes_sent: int = 0
    sni: list[str | None] = field(default_factory=list)

    def __post_init__(self) -> None:
        site = self

        class Server(ThreadingHTTPServer):
            daemon_threads = True
            allow_reuse_address = True

            def get_request(self) -> tuple[socket.socket, object]:
                sock, address = super().get_request()
                site.connections.append(sock.getsockname()[0])
                return sock, address

        self._server = Server((self.host, self.port), Handler)
        self._server.site = self  # type: ignore[attr-defined]
        if self.tls is not None:
            self.tls.sni_callback = lambda _sock, name, _ctx: self.sni.append(name)  # type: ignore[assignment]
            self._server.socket = self.tls.wrap_socket(self._server.socket, server_side=True)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)
        self._thread.start()

    def url(self, path: str = "/", host: str | None = None) -> str:
        scheme = "https" if self.tls is not None else "http"
        name = host or (f"[{self.host}]" if ":" in self.host else self.host)
        return f"{scheme}://{name}:{self.port}{path}"

    def paths(self) -> list[str]:
        return [r.path for r in self.requests]

    def close(self) -> None:
        self.stopping.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:
        pass

    @property
    def site(self) -> Site:
        return self.server.site  # type: ignore[attr-defined, no-any-return]

    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        self.site.requests.append(Seen(path=parts.path, headers=dict(self.headers.items()),
                                       client=self.client_address[0], server=self.connection.getsockname()[0]))
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        route = ROUTES.get(parts.path)
        if route is None and parts.path.startswith("/chain/"):
            route = chain
        if route is None and parts.path.startswith("/status/"):
            route = status
        (route or not_found)(self, query)

    # -- writing raw responses ----------------------------------------------------------------

    def raw(self, data: bytes) -> bool:
        """Write bytes; False once the client has gone."""
        try:
            self.wfile.write(data)
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError, OSError):
            self.site.client_gone.set()
            self.close_connection = True
            return False
        self.site.bytes_sent += len(data)
        return True

    def reply(self, status: int, body: bytes = b"", content_type: str | None = "text/html; charset=utf-8",
              headers: dict[str, str] | None = None, reason: str = "") -> None:
        lines = [f"HTTP/1.1 {status} {reason or self.responses.get(status, ('',))[0]}"]
        if content_type is not None:
            lines.append(f"Content-Type: {content_type}")
        for name, value in (headers or {}).items():
            lines.append(f"{name}: {value}")
        lines += [f"Content-Length: {len(body)}", "Connection: close"]
        self.close_connection = True
        self.raw(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)


# -- routes -------------------------------------------------------------------------------------


def page(h: Handler, q: dict[str, str]) -> None:
    h.reply(200, PAGE.encode())


def plain(h: Handler, q: dict[str, str]) -> None:
    h.reply(200, b"just text, <b>not</b> HTML\n", "text/plain; charset=utf-8")


def as_json(h: Handler, q: dict[str, str]) -> None:
    h.reply(200, json.dumps({"answer": 42, "html": "<p>x</p>"}).encode(), "application/json")


def echo(h: Handler, q: dict[str, str]) -> None:
    """The request's headers, as JSON."""
    h.reply(200, json.dumps(dict(h.headers.items())).encode(), "application/json")


def redirect(h: Handler, q: dict[str, str]) -> None:
    h.reply(int(q.get("status", "302")), b"", None, {"Location": q["to"]})


def chain(h: Handler, q: dict[str, str]) -> None:
    """/chain/N redirects N times (relative Locations), then shows the page; ?end=URL redirects to
    URL last instead."""
    n = int(h.path.split("?")[0].rsplit("/", 1)[1])
    if n > 0:
        query = h.path.partition("?")[2]
        h.reply(302, b"", None, {"Location": f"/chain/{n - 1}" + (f"?{query}" if query else "")})
    elif "end" in q:
        h.reply(302, b"", None, {"Location": q["end"]})
    else:
        page(h, q)


def loop(h: Handler, q: dict[str, str]) -> None:
    h.reply(301, b"", None, {"Location": "/loop"})


def status(h: Handler, q: dict[str, str]) -> None:
    code = int(h.path.split("?")[0].rsplit("/", 1)[1])
    body = f"<html><body><h1>Error {code}</h1><p>{q.get('say', 'Nothing here.')}</p></body></html>"
    h.reply(code, body.encode() * int(q.get("repeat", "1")))


def status_png(h: Handler, q: dict[str, str]) -> None:
    h.reply(404, PNG, "image/png")


def drip(h: Handler, q: dict[str, str]) -> None:
    """Headers at once, then one byte of body every 20 ms, for up to 60 s or until the client goes."""
    if not h.raw(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 100000\r\n\r\n"):
        return
    end = time.monotonic() + 60
    while time.monotonic() < end and not h.site.stopping.is_set():
        if not h.raw(b"x"):
            return
        time.sleep(0.02)


def drip_headers(h: Handler, q: dict[str, str]) -> None:
    """The status line and headers one byte every 20 ms: a response that never gets going."""
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n" + b"X-Slow: " + b"y" * 50000 + b"\r\n\r\n"
    for i in range(len(head)):
        if h.site.stopping.is_set() or not h.raw(head[i:i + 1]):
            return
        time.sleep(0.02)


def stall(h: Handler, q: dict[str, str]) -> None:
    """Read the request, answer nothing."""
    while not h.site.stopping.wait(0.05):
        try:
            h.connection.settimeout(0.01)
            if h.connection.recv(1) == b"":
                h.site.client_gone.set()
                return
        except TimeoutError:
            continue
        except OSError:
            h.site.client_gone.set()
            return


def huge(h: Handler, q: dict[str, str]) -> None:
    """A chunked text body that never ends: 64 KiB chunks until the client goes."""
    if not h.raw(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n"):
        return
    chunk = b"%x\r\n" % 65536 + b"z" * 65536 + b"\r\n"
    while not h.site.stopping.is_set():
        if not h.raw(chunk):
            return


def png(h: Handler, q: dict[str, str]) -> None:
    h.reply(200, PNG + b"\x00" * 1000, "image/png")


def octets(h: Handler, q: dict[str, str]) -> None:
    h.reply(200, b"\x7fELF\x02\x01\x01\x00" * 100, "application/octet-stream")


def lying(h: Handler, q: dict[str, str]) -> None:
    """Declares HTML, sends binary."""
    h.reply(200, PNG + b"\x00" * 100, "text/html")


def untyped(h: Handler, q: dict[str, str]) -> None:
    kind = q.get("kind", "text")
    body = {"text": b"plain words\n", "html": PAGE.encode(), "binary": b"\x00\x01\x02\x03" * 50}[kind]
    h.reply(200, body, None)


def gzipped(h: Handler, q: dict[str, str]) -> None:
    h.reply(200, gzip.compress(PAGE.encode()), headers={"Content-Encoding": "gzip"})


def deflated(h: Handler, q: dict[str, str]) -> None:
    data = PAGE.encode()
    if q.get("raw"):
        compressor = zlib.compressobj(wbits=-zlib.MAX_WBITS)
        body = compressor.compress(data) + compressor.flush()
    else:
        body = zlib.compress(data)
    h.reply(200, body, headers={"Content-Encoding": "deflate"})


def bomb(h: Handler, q: dict[str, str]) -> None:
    h.reply(200, GZIP_BOMB.data(), "text/plain", {"Content-Encoding": "gzip"})


def brotli(h: Handler, q: dict[str, str]) -> None:
    h.reply(200, b"\x1b\x03\x00\xf8\xa5\x82\x14", "text/plain", {"Content-Encoding": "br"})


def double_gzip(h: Handler, q: dict[str, str]) -> None:
    h.reply(200, gzip.compress(gzip.compress(b"twice")), "text/plain", {"Content-Encoding": "gzip, gzip"})


def huge_headers(h: Handler, q: dict[str, str]) -> None:
    """200 KiB of headers, in lines of 1 KiB."""
    lines = b"".join(b"X-Filler-%d: %s\r\n" % (i, b"h" * 1000) for i in range(200))
    h.close_connection = True
    h.raw(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n" + lines + b"Content-Length: 2\r\n\r\nok")


def latin1(h: Handler, q: dict[str, str]) -> None:
    h.reply(200, "<p>caf\u00e9 cr\u00e8me</p>".encode("latin-1"), "text/html; charset=ISO-8859-1")


def meta_charset(h: Handler, q: dict[str, str]) -> None:
    body = '<html><head><meta charset="windows-1252"></head><body><p>na\u00efve \u20ac</p></body></html>'
    h.reply(200, body.encode("cp1252"), "text/html")


def deep(h: Handler, q: dict[str, str]) -> None:
    depth = int(q.get("depth", "20000"))
    h.reply(200, b"<html><body>" + b"<div>" * depth + b"deep text" + b"</div>" * depth + b"</body></html>")


def slow_chain(h: Handler, q: dict[str, str]) -> None:
    """Waits 150 ms, then redirects to itself: every hop is quick, all of them together are not."""
    time.sleep(0.15)
    h.reply(302, b"", None, {"Location": "/slow-chain"})


def empty_members(h: Handler, q: dict[str, str]) -> None:
    """A gzip body of empty gzip members that never ends: bytes that inflate to nothing."""
    if not h.raw(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Encoding: gzip\r\n"
                 b"Transfer-Encoding: chunked\r\n\r\n"):
        return
    members = gzip.compress(b"") * 3000
    chunk = b"%x\r\n" % len(members) + members + b"\r\n"
    while not h.site.stopping.is_set():
        if not h.raw(chunk):
            return


def corrupt_gzip(h: Handler, q: dict[str, str]) -> None:
    data = gzip.compress(PAGE.encode() * 20)
    h.reply(200, data[:40] + b"garbage!" * 20 + data[200:], headers={"Content-Encoding": "gzip"})


def set_cookie(h: Handler, q: dict[str, str]) -> None:
    h.reply(302, b"", None, {"Location": "/echo", "Set-Cookie": "session=abc123; Path=/"})


ROUTES: dict[str, Route] = {
    "/": page, "/page": page, "/other": page, "/plain": plain, "/json": as_json, "/echo": echo,
    "/redirect": redirect, "/loop": loop, "/status-png": status_png, "/drip": drip,
    "/drip-headers": drip_headers, "/stall": stall, "/huge": huge, "/png": png, "/octets": octets,
    "/lying": lying, "/untyped": untyped, "/gzip": gzipped, "/deflate": deflated, "/bomb": bomb,
    "/br": brotli, "/double-gzip": double_gzip, "/huge-headers": huge_headers, "/latin1": latin1,
    "/meta-charset": meta_charset, "/deep": deep, "/set-cookie": set_cookie, "/slow-chain": slow_chain,
    "/empty-members": empty_members, "/corrupt-gzip": corrupt_gzip,
}


def not_found(h: Handler, q: dict[str, str]) -> None:
    h.reply(404, b"no such route", "text/plain")


class _Bomb:
    """256 MiB of text gzipped to a few hundred KiB, made once (lazily) per test session."""

    SIZE = 256 * 1024 * 1024

    def __init__(self) -> None:
        self._data: bytes | None = None
        self._lock = threading.Lock()

    def data(self) -> bytes:
        with self._lock:
            if self._data is None:
                compressor = zlib.compressobj(9, wbits=16 + zlib.MAX_WBITS)
                block = b"A" * (1024 * 1024)
                parts = [compressor.compress(block) for _ in range(self.SIZE // len(block))]
                self._data = b"".join(parts) + compressor.flush()
            return self._data


GZIP_BOMB = _Bomb()
