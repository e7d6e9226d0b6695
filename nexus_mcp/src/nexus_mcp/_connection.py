"""One configured MCP server, as the client plugin sees it: started when needed, its session
kept, its calls bounded in time, stopped (and started afresh on the next call) when it fails.

Everything here runs on the plugin's event loop (`_loop.LoopThread`). A *run* is one start of a
server: one process (stdio) or one session (HTTP), from start to stop, owned by one task that
opens the SDK's `Client` and keeps it open until told to stop or the server goes away. Calls
from other tasks share that session; the SDK multiplexes them.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import math
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from types import TracebackType
from typing import Any, Self, TextIO

import anyio
import attrs
import mcp_types as types
from mcp import Client, InputRequiredRoundsExceededError, MCPError
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CONNECTION_CLOSED
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from nexus_core.plugins import describe_exception
from nexus_core.supervisor import supervised_command, why_unavailable

from ._client_elicit import MAX_PER_CALL
from ._settings import ServerConfig

log = logging.getLogger("nexus_mcp")

#: tools/list pages read from one server at most (a server that pages forever cannot hang a start)
MAX_TOOL_PAGES = 100
#: a server's log file is moved aside to `<name>.log.1` when it reaches this size at a start
MAX_LOG_BYTES = 1 << 20
#: how long stopping one run may take: the SDK closes stdin, waits 2 s, sends SIGTERM to the
#: process group, waits 2 s more, then SIGKILL
STOP_SECONDS = 8.0
#: how long a stdio server has between the SIGTERM its supervisor passes on and the kill of its
#: whole tree: the SDK sends SIGTERM, and SIGKILL 2 s later (FORCE_KILL_TIMEOUT), by when the
#: tree must be gone
TERM_GRACE_SECONDS = 1.0
#: what `ps -e` and `top` show for a stdio server's supervisor
SUPERVISOR_NAME = "nexus-mcp-reap"

Listing = Callable[["ServerConnection", list[types.Tool]], Awaitable[None]]
#: what answers a server's elicitation: (server, the request's params, the calls waiting on the
#: server) -> the result or an error (see `McpClient._on_elicit`)
Elicit = Callable[[str, Any, "list[Waiting]"], Awaitable[Any]]


@attrs.define(eq=False)
class Waiting:
    """A call in flight on a server: who answers for it (its approver), the Nexus call it serves,
    and the scope holding its deadline, which stops while a person answers the server."""

    call: Any
    approver: Any
    scope: anyio.CancelScope
    asked: int = 0
    paused: int = 0


#: the call the running task serves (a 2026-era input request is answered in its task)
_CURRENT: contextvars.ContextVar[Waiting | None] = contextvars.ContextVar("nexus_mcp_call", default=None)


class ServerError(Exception):
    """A call that did not reach a tool result: the server failed to start, timed out, went
    away, or answered with a protocol error. The message names the server."""


class _EofWatch:
    """A transport's read stream that notices when the server has gone (its end of the stream
    closed): the session dispatcher reads through it, and `on_eof` marks the run dead so the next
    call starts the server afresh instead of writing into a closed pipe."""

    def __init__(self, inner: Any, on_eof: Callable[[], None]) -> None:
        self._inner = inner
        self._on_eof = on_eof

    async def receive(self) -> Any:
        try:
            return await self._inner.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._on_eof()
            raise

    def __aiter__(self) -> _EofWatch:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> Self:
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> bool | None:
        return await self._inner.__aexit__(exc_type, exc, tb)

    def __getattr__(self, name: str) -> Any:  # `last_context` and whatever else a stream offers
        return getattr(self._inner, name)


@contextlib.asynccontextmanager
async def _watched(transport: Any, on_eof: Callable[[], None]) -> AsyncIterator[tuple[Any, Any]]:
    async with transport as (read_stream, write_stream):
        yield _EofWatch(read_stream, on_eof), write_stream


class _Run:
    """One start of a server."""

    def __init__(self, number: int) -> None:
        self.number = number
        self.started: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.stop = asyncio.Event()
        self.client: Client | None = None
        self.closed = False  # the server went away, or the run was told to stop
        self.timed_out = False  # its start took longer than start_timeout_seconds
        self.task: asyncio.Task[None] | None = None

    def end(self) -> None:
        self.closed = True
        self.stop.set()


class ServerConnection:
    """One MCP server: its current run (if any), its calls, and what it last did."""

    def __init__(self, config: ServerConfig, log_path: Path, on_listing: Listing,
                 client_info: types.Implementation, on_elicit: Elicit | None = None,
                 auth: Callable[[ServerConnection], Any] | None = None) -> None:
        self.config = config
        self.name = config.name
        self.log_path = log_path
        self._on_listing = on_listing
        self._client_info = client_info
        self._on_elicit = on_elicit
        #: makes the httpx auth of a run (an OAuth provider), for a server logged in to with OAuth
        self._auth = auth
        #: set by the OAuth provider when the server needs the person to log in (why, as a message)
        self.login_needed: str | None = None
        self._waiting: set[Waiting] = set()
        self._run: _Run | None = None
        self._runs: set[_Run] = set()
        self._refreshing: asyncio.Lock | None = None
        self._refresh_again = False
        self._background: set[asyncio.Task[Any]] = set()
        self.starts = 0
        self.last_error: str | None = None
        self.protocol_version: str | None = None
        self.closed = False

    @property
    def running(self) -> bool:
        return self._run is not None and not self._run.closed and self._run.started.done() \
            and self._run.started.exception() is None

    # -- starting and stopping --------------------------------------------------------------

    async def client(self) -> Client:
        """The session of the current run, starting the server first when none is running (the
        first caller starts it; the others wait for that start). Raises ServerError."""
        if self.closed:
            raise ServerError(f"MCP server {self.name!r} is stopped: the Nexus is closing")
        run = self._run
        if run is not None and run.closed:
            self._retire(run)
            run = None
        if run is None:
            run = self._start()
        try:
            await asyncio.shield(run.started)
        except ServerError:
            self._retire(run)
            raise
        except BaseException:
            if not run.started.done():  # this waiter was cancelled; the start goes on for the others
                raise
            self._retire(run)
            raise
        client = run.client
        if client is None or run.closed:  # it started, and went away at once
            self._retire(run)
            raise ServerError(self.last_error or f"MCP server {self.name!r} stopped as soon as it started")
        return client

    def _start(self) -> _Run:
        self.starts += 1
        run = _Run(self.starts)
        loop = asyncio.get_running_loop()
        run.task = loop.create_task(self._main(run), name=f"mcp server {self.name}")
        # The start's deadline is a timer that cancels the run's task, not a cancel scope around
        # the start: the SDK's client leaves task groups open when it has started, and a cancel
        # scope cannot be left while task groups opened inside it still are.
        deadline = loop.call_later(self.config.start_timeout_seconds, self._start_timed_out, run)
        run.started.add_done_callback(lambda _: deadline.cancel())
        self._run = run
        self._runs.add(run)
        run.task.add_done_callback(lambda _: self._runs.discard(run))
        return run

    def _start_timed_out(self, run: _Run) -> None:
        if not run.started.done() and run.task is not None:
            run.timed_out = True
            run.task.cancel()

    def _retire(self, run: _Run | None) -> None:
        """Stop `run` (in the background: the call that found it broken returns at once); the
        next call starts the server again."""
        if run is None:
            return
        if self._run is run:
            self._run = None
        run.end()

    async def close(self) -> None:
        """Stop every run of this server and wait (boundedly) until each has let go of its
        process; no call starts it again."""
        self.closed = True
        self._retire(self._run)
        for task in list(self._background):
            task.cancel()
        runs = [r.task for r in list(self._runs) if r.task is not None]
        for run in list(self._runs):
            run.end()
            if not run.started.done() and run.task is not None:
                run.task.cancel()  # a start still under way: its process is stopped as it unwinds
        if runs:
            _, pending = await asyncio.wait(runs, timeout=STOP_SECONDS)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending, timeout=2)

    # -- one run ----------------------------------------------------------------------------

    def _open_log(self) -> TextIO:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(OSError):
            if self.log_path.stat().st_size >= MAX_LOG_BYTES:
                os.replace(self.log_path, self.log_path.with_name(self.log_path.name + ".1"))
        errlog = open(self.log_path, "a", encoding="utf-8", errors="replace")  # noqa: SIM115 (the run owns it)
        errlog.write(f"--- nexus: starting {self.config.describe()} at {time.strftime('%Y-%m-%d %H:%M:%S')}\n")
        errlog.flush()
        return errlog

    def _transport(self, stack: contextlib.AsyncExitStack, run: _Run) -> Any:
        config = self.config
        if config.transport == "stdio":
            errlog = stack.enter_context(self._open_log())
            command, args = config.command, list(config.args)
            if why_unavailable() is None:  # its whole process tree ends with it (docs/supervisor.md)
                # below a subreaper that the SDK starts in the server's place: the server keeps its
                # stdio, environment and folder, stays in the process group the SDK stops, and the
                # supervisor passes the SDK's SIGTERM on (or the host's death), then kills its tree
                path = config.env.get("PATH", os.environ.get("PATH"))
                command, *args = supervised_command(
                    [command, *args], cwd=config.cwd, path=path, name=SUPERVISOR_NAME, log="the MCP server",
                    grace_seconds=TERM_GRACE_SECONDS)
            params = StdioServerParameters(command=command, args=args, env=config.env or None, cwd=config.cwd)
            transport: Any = stdio_client(params, errlog=errlog)
        else:
            import httpx2

            self.login_needed = None
            auth = self._auth(self) if self._auth is not None else None
            http = httpx2.AsyncClient(headers=config.headers, auth=auth, timeout=httpx2.Timeout(30.0, read=300.0))
            transport = streamable_http_client(config.url, http_client=http)
            stack.push_async_callback(http.aclose)
        return _watched(transport, run.end)

    async def _main(self, run: _Run) -> None:
        """Own one run: start the server, list its tools, then hold the session open until the
        run is told to stop (or the server goes away)."""
        try:
            async with contextlib.AsyncExitStack() as stack:
                client = Client(self._transport(stack, run), cache=None, client_info=self._client_info,
                                message_handler=lambda message: self._on_message(run, message),
                                elicitation_callback=self._elicit if self._on_elicit is not None else None,
                                # one round more than the requests a call may make, so that bound
                                # (`_client_elicit.MAX_PER_CALL`) is the one a server meets, in both eras
                                input_required_max_rounds=MAX_PER_CALL + 1)
                await stack.enter_async_context(client)
                tools = await self._list_tools(client)
                run.client = client
                self.protocol_version = client.protocol_version
                await self._on_listing(self, tools)
                async with anyio.create_task_group() as tg:
                    tools_capability = client.server_capabilities.tools
                    if (client.protocol_version in MODERN_PROTOCOL_VERSIONS and tools_capability is not None
                            and tools_capability.list_changed):
                        tg.start_soon(self._listen, run, client)
                    self.last_error = None
                    run.started.set_result(None)
                    await run.stop.wait()
                    tg.cancel_scope.cancel()
        except BaseException as exc:
            if not run.started.done():
                error = self._start_error(exc, run)
                self.last_error = str(error)
                run.started.set_exception(error)
                log.debug("MCP server %r failed to start", self.name, exc_info=True)
            elif not run.closed and not isinstance(exc, asyncio.CancelledError):
                self.last_error = f"MCP server {self.name!r} failed: {_describe(exc)}"
                log.debug("MCP server %r: its session ended with an error", self.name, exc_info=True)
            if isinstance(exc, asyncio.CancelledError) and not run.timed_out:
                raise
        finally:
            run.end()
            run.client = None
            if not run.started.done():
                run.started.set_exception(ServerError(f"MCP server {self.name!r} stopped before it started"))

    def _start_error(self, exc: BaseException, run: _Run) -> ServerError:
        where = f" (its stderr: {self.log_path})" if self.config.transport == "stdio" else ""
        from ._auth import login_required

        needed = login_required(exc)
        if needed is not None or self.login_needed is not None:
            return ServerError(str(needed) if needed is not None else str(self.login_needed))
        if run.timed_out:
            what = f"did not start within {self.config.start_timeout_seconds:g} s (start_timeout_seconds)"
        elif isinstance(exc, asyncio.CancelledError):
            what = "was stopped while starting"
        else:
            what = f"failed to start: {_describe(exc)}"
        return ServerError(f"MCP server {self.name!r} ({self.config.describe()}) {what}{where}")

    async def _list_tools(self, client: Client) -> list[types.Tool]:
        tools: list[types.Tool] = []
        cursor: str | None = None
        for _ in range(MAX_TOOL_PAGES):
            page = await client.list_tools(cursor=cursor)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                return tools
        raise ServerError(f"MCP server {self.name!r} listed more than {MAX_TOOL_PAGES} pages of tools")

    # -- tool list changes --------------------------------------------------------------------

    async def _on_message(self, run: _Run, message: Any) -> None:
        """The SDK's message handler: a 2025-era server announces a new tool list this way."""
        if isinstance(message, types.ToolListChangedNotification) and not run.closed:
            self._spawn(self._refresh(run))

    async def _listen(self, run: _Run, client: Client) -> None:
        """A 2026-era server announces a new tool list on a `subscriptions/listen` stream."""
        try:
            async with client.listen(tools_list_changed=True) as subscription:
                async for _event in subscription:
                    self._spawn(self._refresh(run))
        except Exception:
            log.debug("MCP server %r: tool list subscription ended", self.name, exc_info=True)

    def _spawn(self, coro: Awaitable[None]) -> None:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _refresh(self, run: _Run) -> None:
        """List the tools again and hand them on; changes that arrive while a refresh runs make
        one more refresh after it, not one each."""
        if self._refreshing is None:
            self._refreshing = asyncio.Lock()
        if self._refreshing.locked():
            self._refresh_again = True
            return
        async with self._refreshing:
            again = True
            while again and not run.closed and run.client is not None:
                self._refresh_again = False
                try:
                    with anyio.fail_after(self.config.timeout_seconds):
                        tools = await self._list_tools(run.client)
                    await self._on_listing(self, tools)
                except Exception as exc:  # noqa: BLE001
                    log.warning("nexus.mcp.client: MCP server %r announced new tools, but listing them failed: %s",
                                self.name, _describe(exc))
                    return
                again = self._refresh_again

    # -- calls ------------------------------------------------------------------------------

    async def call(self, tool: str, arguments: dict[str, Any], *, call: Any = None,
                   approver: Any = None) -> types.CallToolResult:
        """Call one of the server's tools (starting the server if need be). Raises ServerError
        when no tool result comes back; a server that timed out or went away is stopped, and
        started again by the next call. `call` (the Nexus call) and `approver` say who answers
        what the server asks during the call; the time a person takes is not counted."""
        client = await self.client()
        run = self._run
        waiting = Waiting(call, approver, anyio.CancelScope(deadline=anyio.current_time() + self.config.timeout_seconds))
        self._waiting.add(waiting)
        token = _CURRENT.set(waiting)
        try:
            with waiting.scope:
                return await client.call_tool(tool, arguments)
            raise TimeoutError  # only the scope's deadline ends the block without a result
        except TimeoutError:
            self._retire(run)
            raise ServerError(
                f"MCP server {self.name!r} did not answer {tool!r} within {self.config.timeout_seconds:g} s "
                "(timeout_seconds): it was stopped, and starts again on the next call") from None
        except InputRequiredRoundsExceededError:
            raise ServerError(f"MCP server {self.name!r} kept asking for input during {tool!r} (more than "
                              f"{MAX_PER_CALL + 1} rounds): the call was stopped") from None
        except MCPError as exc:
            if self.login_needed is not None:
                self._retire(run)
                raise ServerError(f"{self.login_needed}; {tool!r} was not called") from None
            if (run is not None and run.closed) or exc.code == CONNECTION_CLOSED:
                self._retire(run)
                raise ServerError(self._gone(tool)) from None
            raise ServerError(f"MCP server {self.name!r} refused {tool!r}: {exc.message} "
                              f"(JSON-RPC error {exc.code})") from None
        except Exception as exc:  # noqa: BLE001 (the transport, or a result the SDK rejected)
            from ._auth import login_required

            gone = run is not None and run.closed
            self._retire(run)
            needed = login_required(exc)
            if needed is not None or self.login_needed is not None:
                why = str(needed) if needed is not None else self.login_needed
                raise ServerError(f"{why}; {tool!r} was not called") from None
            if gone:
                raise ServerError(self._gone(tool)) from None
            raise ServerError(f"MCP server {self.name!r} failed on {tool!r}: {_describe(exc)}; "
                              "it starts again on the next call") from None
        finally:
            _CURRENT.reset(token)
            self._waiting.discard(waiting)

    # -- what the server asks ---------------------------------------------------------------

    def asking(self) -> bool:
        """Whether a person is answering this server for one of its calls now."""
        return any(item.paused for item in list(self._waiting))

    async def _elicit(self, context: Any, params: Any) -> Any:
        """The SDK's elicitation callback: the request goes to whoever answers for the call it
        came with (the one this task serves, else the calls in flight on this server), and the
        deadlines of those calls stop while a person answers."""
        assert self._on_elicit is not None
        current = _CURRENT.get()
        waiting = [current] if current is not None and current in self._waiting else list(self._waiting)
        for item in waiting:
            item.paused += 1
            item.scope.deadline = math.inf
        try:
            return await self._on_elicit(self.name, params, waiting)
        finally:
            for item in waiting:
                item.paused -= 1
                if item.paused == 0:  # the clock starts again, whole: the server has its full time to answer
                    item.scope.deadline = anyio.current_time() + self.config.timeout_seconds

    def _gone(self, tool: str) -> str:
        where = f" (its stderr: {self.log_path})" if self.config.transport == "stdio" else ""
        return (f"MCP server {self.name!r} went away during {tool!r}{where}; "
                "it starts again on the next call")


def _describe(exc: BaseException) -> str:
    """An exception as one line, the first of a group's (anyio wraps errors in task groups)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, ServerError):
        return str(exc)
    if isinstance(exc, MCPError):
        return f"{exc.message} (JSON-RPC error {exc.code})"
    return describe_exception(exc)
