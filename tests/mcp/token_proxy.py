"""A loopback HTTP proxy that adds `Authorization: Bearer <token>` to every request, for MCP
clients that cannot send a header of their own (the conformance suite 0.1.16 has no option for
one) in front of a `nexus mcp serve --http` that requires it.

It is transparent otherwise: methods, bodies, the other headers and status codes pass through,
responses stream (SSE events arrive as the server sends them; a client that goes away closes the
upstream request). `Host` and `Origin` naming the proxy are rewritten to name the server (the
address the client meant); any other value passes unchanged, so a forged `Host` or `Origin`
reaches the server's own check, as it would without the proxy.
"""

from __future__ import annotations

import asyncio
import itertools
import socket
import threading
from collections.abc import Sequence
from typing import Any, Self

import httpx
import uvicorn

#: headers that belong to one hop (RFC 9110 7.6.1), not passed on either way
HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "te",
                        "trailer", "proxy-authorization", "proxy-authenticate", "host", "content-length"})


class TokenProxy:
    """`TokenProxy(upstream_port, token)`, then `.start()`: `.url` is the MCP endpoint through it;
    `.stop()` (or the `with` block's end) closes it. `TokenProxy(ports, token)` with several ports
    sends the requests to them in turn (round robin: replicas of a stateless server)."""

    def __init__(self, upstream_port: int | Sequence[int], token: str, path: str = "/mcp") -> None:
        self.upstreams = [upstream_port] if isinstance(upstream_port, int) else list(upstream_port)
        self.upstream_port = self.upstreams[0]
        self._turn = itertools.count()
        self.token = token
        self.path = path
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.bind(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}{path}"
        self._server = uvicorn.Server(uvicorn.Config(self._app, interface="asgi3", proxy_headers=False, server_header=False,
                                                         date_header=False,
                                                         log_level="warning", lifespan="off"))
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._sock]},
                                        name="token-proxy", daemon=True)
        self._client: httpx.AsyncClient | None = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> Self:
        self._thread.start()
        for _ in range(6000):  # until it listens (the thread is ours; a busy machine takes its time)
            if self._server.started:
                return self
            if not self._thread.is_alive():
                break
            threading.Event().wait(0.01)
        raise RuntimeError("the token proxy did not start")

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(60)
        self._sock.close()

    def _rewrite(self, value: str, upstream: int) -> str:
        """A Host or Origin that names the proxy, made to name the server instead."""
        for name in ("127.0.0.1", "localhost"):
            for form in (f"{name}:{self.port}", f"http://{name}:{self.port}"):
                if value.lower() == form:
                    return form.replace(f":{self.port}", f":{upstream}")
        return value

    async def _app(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=httpx.Timeout(None), follow_redirects=False)
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        upstream = self.upstreams[next(self._turn) % len(self.upstreams)]
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope["headers"]]
        host = next((v for k, v in headers if k.lower() == "host"), f"127.0.0.1:{self.port}")
        forwarded = [(k, self._rewrite(v, upstream) if k.lower() == "origin" else v) for k, v in headers
                     if k.lower() not in HOP_BY_HOP and k.lower() != "authorization"]
        forwarded.append(("Host", self._rewrite(host, upstream)))
        forwarded.append(("Authorization", f"Bearer {self.token}"))
        query = scope.get("query_string", b"").decode("latin-1")
        url = f"http://127.0.0.1:{upstream}{scope['path']}" + (f"?{query}" if query else "")
        request = self._client.build_request(scope["method"], url, headers=forwarded, content=body)
        response = await self._client.send(request, stream=True)
        try:
            await send({"type": "http.response.start", "status": response.status_code,
                        "headers": [(k.encode("latin-1"), v.encode("latin-1"))
                                    for k, v in response.headers.multi_items() if k.lower() not in HOP_BY_HOP]})

            async def pump() -> None:
                async for chunk in response.aiter_raw():
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
                await send({"type": "http.response.body", "body": b"", "more_body": False})

            # whichever ends first: the server's response, or the client going away (an idle SSE
            # stream must not keep the upstream request open after its client left)
            pumping = asyncio.ensure_future(pump())
            gone = asyncio.ensure_future(_disconnected(receive))
            await asyncio.wait({pumping, gone}, return_when=asyncio.FIRST_COMPLETED)
            for task in (pumping, gone):
                task.cancel()
            await asyncio.gather(pumping, gone, return_exceptions=True)
        finally:
            await response.aclose()


async def _disconnected(receive: Any) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
