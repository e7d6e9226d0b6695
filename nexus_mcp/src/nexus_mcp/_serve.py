"""A Nexus as an MCP server (`nexus mcp serve`), on the SDK's low-level `Server`.

Every registered tool is listed with its input and output schemas; every `tools/call` goes
through `Nexus.invoke`, so the gates and observers see it like any other call (a veto comes back
as an `isError` result carrying the reason). The tool list follows the registry: when a tool is
added, replaced or removed, clients are told (`notifications/tools/list_changed` on a 2025-era
session, a `ToolsListChanged` event on a 2026-era `subscriptions/listen` stream). Skills, when
the `skill` tool is there, are offered as prompts, and their files as resources, with the
records of the run_code runs a client made (`_resources`).

While a call runs, its client hears how far it has got (`notifications/progress`: what the
tool reports with `ctx.progress`, and run_code's output as it comes) and, when it asked with
`logging/setLevel`, the Nexus's log records (`_calls`); a gate's `Ask` and the `question` tool
are put to the client's user through elicitation (`_serve_elicit`); `notifications/cancelled`
cancels the call's `CancelToken`. Over HTTP, each SSE stream starts with a priming event and
`retry:` and can be resumed (`_event_store`).

stdio: the protocol owns the real stdin and stdout. `claim_stdio` takes private copies of both
before anything else runs, then points fd 1 at stderr and fd 0 at /dev/null for the whole
process, so a plugin's stray `print` (or a child process writing to its inherited stdout) lands
on stderr instead of corrupting the JSON-RPC stream.
"""

from __future__ import annotations

import asyncio
import io
import logging
import os
import queue
import signal
import socket
import sys
import threading
import warnings
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import IO, Any, cast

import anyio
import mcp_types as types
from mcp.server import Server
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.lowlevel.server import NotificationOptions
from mcp.server.models import InitializationOptions
from mcp.server.stdio import stdio_server
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ToolsListChanged
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, LOG_LEVEL_META_KEY
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from nexus_core.adapters import mcp_output_schema
from opentelemetry import trace  # the MCP SDK's own dependency: its server spans are made with it

from nexus_core import CancelToken, Nexus, ToolCall, ToolDef, hookimpl

from ._calls import MCP_LEVELS, CallChannel, LogBridge, current_channel, drained
from ._convert import to_call_tool_result
from ._serve_elicit import mcp_approver
from ._event_store import RETRY_MILLISECONDS, BoundedEventStore
from ._http_security import HttpSecurity, RefuseTokenInQuery, Token, checked_token, generate_token, listen
from ._resources import RunRecords, list_resources, read_resource
from ._tools import WRAP_RESULT

log = logging.getLogger("nexus_mcp")

#: tool calls one server runs at once (each one a thread blocked in `Nexus.invoke`); more wait
MAX_CONCURRENT_CALLS = 32
#: changes to the registry closer together than this make one tools/list_changed, not one each
NOTIFY_DELAY_SECONDS = 0.05
#: the plugin name the server's registry observer goes by in the Nexus
WATCH_PLUGIN = "nexus.mcp.serve"
#: the reason a call's CancelToken carries when its MCP client cancelled it (or went away)
CLIENT_CANCELLED = "the MCP client cancelled the request"


class _NotifyingServer(Server[Any]):
    """The SDK's server, telling 2025-era clients at `initialize` that its tool list can change
    (the SDK's default says it cannot)."""

    def create_initialization_options(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
    ) -> InitializationOptions:
        options = notification_options or NotificationOptions(tools_changed=True)
        return super().create_initialization_options(options, experimental_capabilities, extensions)


class _RunWatch:
    """Observes run_code for the server (when it is installed: its hooks are its own): the record
    folders of the runs its clients made, and their output as it comes, as progress."""

    def __init__(self, server: NexusMcpServer) -> None:
        self._server = server

    @hookimpl
    def nexus_code_exec_request(self, request: Any) -> None:
        self._server._runs.started(request.call_id, request.session_dir)

    @hookimpl
    def nexus_code_exec_stdout(self, chunk: Any) -> None:
        channel = self._server._channels.get(chunk.call_id)
        if channel is not None and chunk.data:
            channel.output_chunks += 1
            channel.put_progress(channel.output_chunks, None, chunk.data.rstrip("\n"))


class _RegistryWatch:
    """Observes the Nexus's registry for the server: any tool in or out changes the list."""

    def __init__(self, on_change: Any) -> None:
        self._on_change = on_change

    @hookimpl
    def nexus_tool_register(self, tool: ToolDef) -> None:
        self._on_change()

    @hookimpl
    def nexus_tool_unregister(self, tool: ToolDef) -> None:
        self._on_change()


def _mcp_tools(nexus: Nexus) -> list[types.Tool]:
    out = []
    # a tool whose result is not an object (`-> int`) is listed with its schema wrapped as
    # {"result": ...} (nexus_core.adapters.mcp_output_schema), and its results are wrapped to match
    for entry in nexus.schemas("mcp"):
        out.append(types.Tool.model_validate(entry))
    return out


class NexusMcpServer:
    """The MCP server of one Nexus. Make it, then `serve_stdio(...)` or `serve_http(...)`; or
    mount `http_app(security)` in an ASGI app of yours."""

    def __init__(self, nexus: Nexus, name: str = "nexus") -> None:
        from nexus_core.skills import skills_prompt

        from . import __version__

        self.nexus = nexus
        self._bus = InMemorySubscriptionBus()
        self._listen = ListenHandler(self._bus)
        self._limiter = anyio.CapacityLimiter(MAX_CONCURRENT_CALLS)
        self._legacy_connections: weakref.WeakSet[Any] = weakref.WeakSet()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._notify_pending = False
        self._tools_cache: tuple[int, list[types.Tool]] | None = None
        self._channels: dict[str, CallChannel] = {}  # call id -> the channel of a running call
        self._runs = RunRecords()
        self._logs = LogBridge()
        self._stdio = False
        self._outside_pump: asyncio.Future[None] | None = None
        self.event_store = BoundedEventStore()
        with warnings.catch_warnings():
            # logging/setLevel is deprecated by 2026-07-28 (SEP-2577), and still what 2025-era clients send
            warnings.simplefilter("ignore")
            self.server = _NotifyingServer(
                name,
                version=__version__,
                instructions=skills_prompt(nexus) or None,
                get_tool_input_schema=self._input_schema,
                on_list_tools=self._list_tools,
                on_call_tool=self._call_tool,
                on_list_prompts=self._list_prompts,
                on_get_prompt=self._get_prompt,
                on_list_resources=self._list_resources,
                on_read_resource=self._read_resource,
                on_subscriptions_listen=self._listen,
                on_set_logging_level=self._set_logging_level,
            )
        self.server.middleware.append(self._track_sessions)
        self._watch = _RegistryWatch(self._registry_changed)
        self._watch_name = nexus.register(self._watch, name=f"{WATCH_PLUGIN}#{id(self):x}")
        self._run_watch_name: str | None = None
        if hasattr(nexus.hook, "nexus_code_exec_request") and hasattr(nexus.hook, "nexus_code_exec_stdout"):
            self._run_watch_name = nexus.register(_RunWatch(self), name=f"{WATCH_PLUGIN}.runs#{id(self):x}")

    def close(self) -> None:
        """Stop following the Nexus's registry (the Nexus itself is the caller's to close)."""
        self._listen.close()
        self._logs.detach()
        for name in (self._watch_name, self._run_watch_name):
            if name is not None and self.nexus.plugin(name) is not None:
                self.nexus.unregister(name)

    # -- handlers -----------------------------------------------------------------------------

    def _input_schema(self, name: str) -> dict[str, Any] | None:
        tool = self.nexus.tool(name)
        return tool.input_schema if tool is not None else None

    async def _list_tools(self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
                          ) -> types.ListToolsResult:
        version = self.nexus.tools_version
        if self._tools_cache is None or self._tools_cache[0] != version:
            self._tools_cache = (version, _mcp_tools(self.nexus))
        return types.ListToolsResult(tools=self._tools_cache[1])

    async def _call_tool(self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
                         ) -> types.CallToolResult:
        call = ToolCall(name=params.name, arguments=dict(params.arguments or {}), metadata={"via": "mcp"})
        connection = _connection_of(ctx)
        meta: dict[str, Any] = dict(ctx.meta or {})
        wants_progress = meta.get("progress_token", meta.get("progressToken")) is not None
        asked = meta.get(LOG_LEVEL_META_KEY)  # a 2026-07-28 client asks per call
        channel = CallChannel(asyncio.get_running_loop(), wants_progress=wants_progress,
                              log_level=MCP_LEVELS.get(asked) if isinstance(asked, str) else self._logs.level_for(connection))
        token = CancelToken()
        approver = mcp_approver(self.nexus, ctx.session, ctx.request_id, token, asyncio.get_running_loop())

        def invoke() -> Any:
            return self.nexus.invoke(call, cancel=token, approver=approver,
                                     progress=channel.put_progress if wants_progress else None)

        async def work() -> Any:
            outcome: list[Any] = []
            finished = anyio.Event()

            async def in_thread() -> None:
                # not abandoned on cancel: the thread keeps its place among MAX_CONCURRENT_CALLS
                # until the tool has stopped, so cancelling calls cannot pile up running ones
                outcome.append(await anyio.to_thread.run_sync(invoke, limiter=self._limiter))
                finished.set()

            async with anyio.create_task_group() as group:
                group.start_soon(in_thread)
                try:
                    await finished.wait()
                except anyio.get_cancelled_exc_class():
                    # the client sent notifications/cancelled (or went away): the tool is told,
                    # and the request ends (unanswered, as the spec asks) once it has stopped
                    token.cancel(CLIENT_CANCELLED)
                    raise
            return outcome[0]

        self._channels[call.id] = channel
        self._runs.expect(call.id, connection)
        reset = current_channel.set(channel)
        try:
            result = await drained(channel, ctx.session, ctx.request_id, work)
        finally:
            current_channel.reset(reset)
            self._channels.pop(call.id, None)
            self._runs.done(call.id)
        if result.error_kind == "unknown_tool":
            # a protocol error, as both MCP revisions ask (after the gates and observers saw it)
            raise MCPError(INVALID_PARAMS, result.error or f"unknown tool: {params.name!r}")
        tool = self.nexus.tool(params.name)
        wrap = tool is not None and tool.output_schema is not None and WRAP_RESULT in mcp_output_schema(tool.output_schema)
        return to_call_tool_result(result, wrap=wrap)

    async def _list_prompts(self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
                            ) -> types.ListPromptsResult:
        if self.nexus.tool("skill") is None:
            return types.ListPromptsResult(prompts=[])
        from nexus_core.skills import list_skills

        skills = await anyio.to_thread.run_sync(list_skills, self.nexus)
        return types.ListPromptsResult(prompts=[
            types.Prompt(name=s.name, description=s.description or None) for s in skills
        ])

    async def _get_prompt(self, ctx: ServerRequestContext[Any], params: types.GetPromptRequestParams
                          ) -> types.GetPromptResult:
        """A skill's instructions, loaded the way a model loads them: a call of the `skill` tool,
        through the gates."""
        if self.nexus.tool("skill") is None:
            raise MCPError(INVALID_PARAMS, f"unknown prompt: {params.name!r} (this Nexus offers no skills)")
        call = ToolCall(name="skill", arguments={"name": params.name}, metadata={"via": "mcp"})
        result = await anyio.to_thread.run_sync(self.nexus.invoke, call, limiter=self._limiter)
        if result.is_error:
            raise MCPError(INVALID_PARAMS, result.error or "the skill could not be loaded")
        structured = result.output_structured if isinstance(result.output_structured, dict) else {}
        return types.GetPromptResult(
            description=structured.get("description") or None,
            messages=[types.PromptMessage(role="user", content=types.TextContent(type="text", text=result.output))],
        )

    async def _list_resources(self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
                              ) -> types.ListResourcesResult:
        runs = self._runs.of(_connection_of(ctx))
        return types.ListResourcesResult(resources=await anyio.to_thread.run_sync(list_resources, self.nexus, runs))

    async def _read_resource(self, ctx: ServerRequestContext[Any], params: types.ReadResourceRequestParams
                             ) -> types.ReadResourceResult:
        runs = self._runs.of(_connection_of(ctx))
        return await anyio.to_thread.run_sync(read_resource, self.nexus, runs, str(params.uri))

    async def _set_logging_level(self, ctx: ServerRequestContext[Any], params: types.SetLevelRequestParams
                                 ) -> types.EmptyResult:
        """`logging/setLevel`: from now on, this client gets the Nexus's records from `level` on."""
        connection = _connection_of(ctx)
        self._logs.set_level(connection, params.level)
        if self._stdio:  # one client, the operator's: it gets the records made outside calls too
            outside = self._logs.outside
            if outside is None:
                outside = CallChannel(asyncio.get_running_loop(), wants_progress=False, log_level=None)
                self._logs.outside = outside
                self._outside_pump = asyncio.ensure_future(outside.pump(ctx.session, None))
            outside.log_level = self._logs.level_for(connection)
        return types.EmptyResult()

    async def _track_sessions(self, ctx: ServerRequestContext[Any], call_next: CallNext) -> HandlerResult:
        """Name the request's MCP session on its span (the SDK's, made just outside this
        middleware; a no-op span unless tracing is on). Remember each 2025-era connection, to
        tell it when the tool list changes (a 2026-era
        client asks for that itself, with `subscriptions/listen`). `ctx.session` is a proxy made
        per request; the connection behind it lives as long as the client stays, and the SDK
        offers no public way to it from a low-level handler (mcp 2.3), hence `_connection`."""
        connection = getattr(ctx.session, "_connection", None)
        session_id = getattr(connection, "session_id", None)
        if isinstance(session_id, str):  # the MCP conventions' mcp.session.id, on the SDK's span of the request
            trace.get_current_span().set_attribute("mcp.session.id", session_id)
        if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
            if connection is not None and hasattr(connection, "send_tool_list_changed"):
                self._legacy_connections.add(connection)
        return await call_next(ctx)

    # -- tools/list_changed -------------------------------------------------------------------

    def _registry_changed(self) -> None:
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        try:
            loop.call_soon_threadsafe(self._schedule_notify)
        except RuntimeError:  # the loop closed in between
            pass

    def _schedule_notify(self) -> None:
        if not self._notify_pending:
            self._notify_pending = True
            asyncio.get_running_loop().call_later(NOTIFY_DELAY_SECONDS, lambda: asyncio.ensure_future(self._notify()))

    async def _notify(self) -> None:
        self._notify_pending = False
        await self._bus.publish(ToolsListChanged())
        for connection in list(self._legacy_connections):
            try:
                await connection.send_tool_list_changed()
            except Exception:
                self._legacy_connections.discard(connection)

    # -- transports ---------------------------------------------------------------------------

    async def serve_stdio(self, stdin: IO[bytes], stdout: IO[bytes]) -> None:
        """Serve one client over a pair of byte streams (`claim_stdio`'s) until stdin ends."""
        self._loop = asyncio.get_running_loop()
        self._stdio = True
        self._logs.attach()
        reader = _DaemonStream(io.TextIOWrapper(stdin, encoding="utf-8", errors="replace"), "stdin")
        writer = _DaemonStream(io.TextIOWrapper(stdout, encoding="utf-8", newline="\n", write_through=True), "stdout")
        try:
            async with stdio_server(stdin=cast(Any, reader), stdout=cast(Any, writer)) as (read_stream, write_stream):
                await self.server.run(read_stream, write_stream, self.server.create_initialization_options())
        finally:
            self._stop_logs()
            self._loop = None

    def _stop_logs(self) -> None:
        self._logs.detach()
        outside, self._logs.outside = self._logs.outside, None
        if outside is not None:
            outside.close()

    def http_app(self, security: HttpSecurity, *, stateless: bool = False, path: str = "/mcp") -> Any:
        """The streamable HTTP app (ASGI) of this server at `path`, with `security`'s
        protections: the SDK's bearer-token middleware (`token_verifier`, `auth`), its
        DNS-rebinding check (`transport_security`), and the refusal of a token in the URL. Its
        SSE streams start with a priming event and `retry:`, and resume from `self.event_store`
        (with `stateless`, no stream outlives its request, so none is kept)."""
        app = self.server.streamable_http_app(
            streamable_http_path=path, stateless_http=stateless, transport_security=security.transport_security(),
            auth=security.auth_settings(), token_verifier=security.token_verifier(),
            event_store=None if stateless else self.event_store, retry_interval=RETRY_MILLISECONDS)
        return RefuseTokenInQuery(app)

    async def serve_http(self, host: str, port: int, *, token: Token | str | None = None, allow_remote: bool = False,
                         allowed_hosts: tuple[str, ...] = (), allowed_origins: tuple[str, ...] = (),
                         stateless: bool = False, path: str = "/mcp", sock: socket.socket | None = None,
                         on_ready: Callable[[HttpSecurity], None] | None = None) -> None:
        """Serve streamable HTTP at `http://host:port/mcp` until interrupted, every request
        needing `token` (a new one when None; a string is checked as `NEXUS_MCP_TOKEN` is) and
        Host and Origin checked against the address
        bound (see `_http_security`). A non-loopback `host` needs `allow_remote` (else
        BindRefused). `sock`: a socket `listen(host, port, ...)` already bound. `on_ready` is
        called once it listens, with the protections in force (the real port in `.url`)."""
        import uvicorn

        if isinstance(token, str):
            token = checked_token(token, "the token given to serve_http")
        listener = sock if sock is not None else listen(host, port, allow_remote)
        security = HttpSecurity.for_socket(listener, given_host=host, token=token or generate_token(), path=path,
                                           allowed_hosts=allowed_hosts, allowed_origins=allowed_origins)
        self._loop = asyncio.get_running_loop()
        self._logs.attach()
        app = self.http_app(security, stateless=stateless, path=path)
        server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))

        async def announce() -> None:
            while not server.started:
                if server.should_exit:
                    return
                await asyncio.sleep(0.02)
            if on_ready is not None:
                on_ready(security)

        watcher = asyncio.ensure_future(announce())
        try:
            await server.serve(sockets=[listener])
        finally:
            watcher.cancel()
            self._stop_logs()
            self._loop = None
            listener.close()


def _connection_of(ctx: ServerRequestContext[Any]) -> Any:
    """The client's connection behind a request (what a setLevel and a run belong to). The SDK
    makes `ctx.session` per request and offers the connection only as `_connection` (mcp 2.3)."""
    return getattr(ctx.session, "_connection", None) or ctx.session


class _DaemonStream:
    """A blocking text stream as the SDK's stdio transport wants it (`async for line`, `await
    write`, `await flush`), each operation run on a thread of the stream's own. That thread is
    a daemon: a read blocked on a client that neither writes nor closes (and a write blocked on
    one that does not read) cannot keep the process from exiting when the server is stopped,
    as it would on anyio's worker threads."""

    def __init__(self, file: IO[str], name: str) -> None:
        self._file = file
        self._jobs: queue.SimpleQueue[tuple[Callable[[], Any], asyncio.Future[Any]]] = queue.SimpleQueue()
        threading.Thread(target=self._work, name=f"nexus mcp serve {name}", daemon=True).start()

    def _work(self) -> None:
        while True:
            job, future = self._jobs.get()
            try:
                outcome: tuple[Any, BaseException | None] = (job(), None)
            except BaseException as exc:
                outcome = (None, exc)
            try:
                future.get_loop().call_soon_threadsafe(_settle, future, *outcome)
            except RuntimeError:  # the loop is closed: nobody waits any more
                return

    async def _run(self, job: Callable[[], Any]) -> Any:
        future = asyncio.get_running_loop().create_future()
        self._jobs.put((job, future))
        return await future

    async def write(self, text: str) -> None:
        await self._run(lambda: self._file.write(text))

    async def flush(self) -> None:
        await self._run(self._file.flush)

    def __aiter__(self) -> _DaemonStream:
        return self

    async def __anext__(self) -> str:
        line = await self._run(self._file.readline)
        if not line:
            raise StopAsyncIteration
        return str(line)


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.done():  # the awaiting task was cancelled
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


@contextmanager
def claim_stdio() -> Iterator[tuple[IO[bytes], IO[bytes]]]:
    """Private copies of the process's stdin and stdout for the protocol; meanwhile fd 1 points
    at stderr and fd 0 at /dev/null, for this process and every child it starts. Restored on
    exit. The copies are not inherited by child processes (PEP 446), so none can write into the
    protocol stream or read a client's messages."""
    sys.stdout.flush()
    wire_in, wire_out = os.dup(0), os.dup(1)
    saved_in, saved_out = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(2, 1)
        os.dup2(null, 0)
    finally:
        os.close(null)
    stdin = os.fdopen(wire_in, "rb", buffering=0)
    stdout = os.fdopen(wire_out, "wb", buffering=0)
    try:
        yield stdin, stdout
    finally:
        sys.stdout.flush()
        os.dup2(saved_in, 0)
        os.dup2(saved_out, 1)
        os.close(saved_in)
        os.close(saved_out)
        for stream in (stdin, stdout):
            try:
                stream.close()
            except OSError:
                pass


class Terminated(BaseException):
    """SIGTERM arrived: the server stops, the Nexus closes, the command exits 0. A BaseException,
    like KeyboardInterrupt, so no `except Exception` on the way swallows it."""


@contextmanager
def closing_through_sigterm() -> Iterator[None]:
    """While the server closes its Nexus (stopping the MCP servers it started, which can take
    their own grace time), a SIGTERM does not cut that short: a client that closed stdin and
    then signals after its grace time (the MCP SDK's stdio client waits 2 s) asks for what is
    already under way, and the close finishes (a SIGKILL still ends it, and the supervisor then
    stops the MCP servers' trees)."""
    with _on_sigterm(lambda signum, frame: None):
        yield


@contextmanager
def stop_on_sigterm() -> Iterator[None]:
    """SIGTERM (how service managers and `docker stop` end a server) raises `Terminated`, so the
    server unwinds and the Nexus closes, stopping the MCP servers it started, instead of the
    process dying on the spot. uvicorn handles SIGTERM itself while it serves (a graceful
    shutdown) and raises the signal again when done, which lands here."""
    def terminate(signum: int, frame: Any) -> None:
        raise Terminated

    with _on_sigterm(terminate):
        yield


@contextmanager
def _on_sigterm(handler: Callable[[int, Any], None]) -> Iterator[None]:
    """`handler` for SIGTERM while the block runs, the previous one after; nothing off the main
    thread (where Python cannot set a handler)."""
    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
