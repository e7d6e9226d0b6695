"""The MCP servers of one Nexus and their tools in its registry.

`McpClient` owns the event-loop thread, one `ServerConnection` per configured server, and the
table of which Nexus tool is which server's tool. Tool lists come from a server when it starts
(and again when it says its list changed), or, for a lazy server not started yet, from the list
cached at its last start; each list is applied to the registry as a difference (tools added,
replaced, removed), so the registry observers (run_code's bindings) follow every change.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import json
import logging
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
from nexus_core.plugins import describe_exception

from nexus_core import CallContext, Nexus, ToolCall, ToolDef, ToolRegistrationError, ToolResult

from ._loop import LoopThread
from ._names import Claim, nexus_tool_name, plan_names
from ._settings import PLUGIN_ID, ServerConfig
from ._tools import MCP_SERVER, to_tooldef, tool_name, wraps_result

if TYPE_CHECKING:
    import mcp_types as types

    from ._connection import ServerConnection

log = logging.getLogger("nexus_mcp")

#: the format of a server's cached tool list; another value is not read
CACHE_VERSION = 1
#: how long stopping the servers may take (each run's own stop is bounded by the SDK: see
#: `_connection.STOP_SECONDS`)
CLOSE_SECONDS = 13.0


@attrs.frozen
class ServerStatus:
    """What `McpClient.status()` (and `nexus doctor`) reports of one server."""

    name: str
    transport: str
    target: str
    start: str
    running: bool
    starts: int
    tools: tuple[str, ...]
    protocol_version: str | None = None
    tools_from_cache: bool = False
    error: str | None = None
    problems: tuple[str, ...] = ()


def _comparable(tool: ToolDef) -> str:
    return json.dumps([tool.description, tool.input_schema, tool.output_schema, tool.annotations],
                      sort_keys=True, default=str)


class McpClient:
    """The configured MCP servers of `nexus`, and the tools they give it."""

    def __init__(self, nexus: Nexus, servers: list[ServerConfig]) -> None:
        self.nexus = nexus
        self.folder = Path(nexus.config.session_dir) / "plugins" / PLUGIN_ID
        self._loop = LoopThread(f"nexus-mcp-{id(self):x}")
        self._lock = threading.RLock()  # one registry update at a time
        self._register: Any = None
        self._closed = False
        self.configs: dict[str, ServerConfig] = {s.name: s for s in servers}
        #: made on first use: until a server starts or is called, the MCP SDK is not imported
        self._connections: dict[str, ServerConnection] = {}
        #: Nexus tool name -> (server, the server's name for the tool), for the tools registered
        self._owners: dict[str, tuple[str, str]] = {}
        #: server -> its latest tool list (MCP JSON), from a start or from the cache
        self._listings: dict[str, list[dict[str, Any]]] = {}
        #: server -> {Nexus tool name: the ToolDef registered for it}
        self._registered: dict[str, dict[str, ToolDef]] = {s.name: {} for s in servers}
        self._from_cache: set[str] = set()
        self._problems: dict[str, list[str]] = {s.name: [] for s in servers}
        #: servers not started with the Nexus because they need a login first, with why
        self._login_needed: dict[str, str] = {}
        #: while the Nexus starts: the listings of the servers started with it, by server
        self._deferred: dict[str, list[dict[str, Any]]] | None = None

    # -- start ------------------------------------------------------------------------------

    def register_tools(self, register: Any) -> None:
        """Give the Nexus every server's tools: an eager server (and a lazy one with no usable
        cache) is started now, all of them at once; a lazy one with a cached list is not. The
        lists are applied together, once all are in, so which tool gets a contested name does
        not depend on which server answered first (see `_names`)."""
        self._register = register
        initial: dict[str, tuple[list[dict[str, Any]], bool]] = {}
        to_start = []
        for name, config in self.configs.items():
            cached = self._read_cache(config)
            if config.start == "lazy" and cached is not None:
                initial[name] = (cached, True)
            elif config.oauth is not None and (why := self._cannot_log_in(config)) is not None:
                # no token to send: a start could only fail, after a round trip, for the same reason
                self._login_needed[name] = why
                log.warning("nexus.mcp.client: %s", why)
                if cached is not None:
                    initial[name] = (cached, True)
            else:
                to_start.append(self.connection(name))
        if to_start:
            from ._connection import STOP_SECONDS, _describe

            deadline = max(c.config.start_timeout_seconds for c in to_start) + STOP_SECONDS
            self._deferred = {}
            try:
                outcomes = self._loop.run(self._start_all(to_start), timeout=deadline)
            finally:
                deferred, self._deferred = self._deferred, None
            for name, listing in deferred.items():
                initial[name] = (listing, False)
            for connection, outcome in zip(to_start, outcomes):
                if not isinstance(outcome, BaseException):
                    continue
                cached = self._read_cache(connection.config)
                tail = ("; its tools are listed from the cache of its last start, and a call starts it again"
                        if cached is not None else "; it has no tools until a Nexus starts it (nexus doctor shows this)")
                log.warning("nexus.mcp.client: %s%s", _describe(outcome), tail)
                if cached is not None and connection.name not in initial:
                    initial[connection.name] = (cached, True)
        self._apply({name: initial[name] for name in self.configs if name in initial})

    def _cannot_log_in(self, config: ServerConfig) -> str | None:
        """Why a server that logs in with OAuth cannot be started now (no tokens kept for it, or a
        token folder a tool could read), or None."""
        from ._auth import AuthStoreError, LoginRequired, auth_dir, check_outside, storage_for

        try:
            check_outside(auth_dir(), Path(self.nexus.config.workspace))
        except AuthStoreError as exc:
            return f"MCP server {config.name!r} cannot log in: {exc}"
        return None if storage_for(config).has_tokens() else str(LoginRequired(config.name))

    def connection(self, server: str) -> ServerConnection:
        """The connection of a configured server (made on first use)."""
        connection = self._connections.get(server)
        if connection is None:
            from . import __version__
            from ._connection import ServerConnection

            with self._lock:
                connection = self._connections.get(server)
                if connection is None:
                    import mcp_types

                    info = mcp_types.Implementation(name="nexus", version=__version__)
                    config = self.configs[server]
                    connection = ServerConnection(config, self.folder / f"{server}.log", self._on_listing, info,
                                                  on_elicit=self._on_elicit,
                                                  auth=self._oauth if config.oauth else None)
                    self._connections[server] = connection
        return connection

    async def _start_all(self, connections: list[ServerConnection]) -> list[Any]:
        return await asyncio.gather(*(c.client() for c in connections), return_exceptions=True)

    # -- the registry -------------------------------------------------------------------------

    async def _on_listing(self, connection: ServerConnection, tools: list[types.Tool]) -> None:
        """A running server's tool list (at its start, or after it said it changed): cache it,
        then apply it off the loop (registry observers may do anything, even call a tool). In
        that order, so whoever sees the registry change finds the cache saying the same."""
        from ._convert import tool_json

        listing = [tool_json(t) for t in tools]
        await asyncio.to_thread(self._write_cache, connection.config, listing)
        deferred = self._deferred
        if deferred is not None:  # the servers starting with the Nexus: applied together
            deferred[connection.name] = listing
        else:
            await asyncio.to_thread(self._apply, {connection.name: (listing, False)})

    def _apply(self, listings: dict[str, tuple[list[dict[str, Any]], bool]]) -> None:
        """Take the new tool lists of `listings`' servers (each with whether it came from the
        cache; the other servers keep theirs), and make the registry hold what they all list
        now: new tools added, changed ones replaced, the ones gone removed. A tool whose name is
        contested (see `_names`), that is not a valid tool, or that the registry refuses is left
        out and reported; the others still register."""
        if self._closed:
            return
        with self._lock:
            for server, (tools, from_cache) in listings.items():
                self._listings[server] = tools
                if from_cache:
                    self._from_cache.add(server)
                else:
                    self._from_cache.discard(server)
            problems: dict[str, list[str]] = {server: [] for server in self.configs}
            claims: list[Claim] = []
            entries: dict[tuple[str, str], dict[str, Any]] = {}
            for server, tools in self._listings.items():
                prefix = self.configs[server].prefix
                for tool in tools:
                    try:
                        mcp_name = tool_name(tool)
                    except ValueError as exc:
                        problems[server].append(f"MCP server {server!r}: {exc}")
                        continue
                    claims.append(Claim(server, mcp_name, nexus_tool_name(prefix, mcp_name)))
                    entries[(server, mcp_name)] = tool
            plan = plan_names(claims, self._owners)
            for server, found in plan.problems.items():
                problems[server].extend(found)
            for server in self.configs:
                self._sync(server, plan.granted.get(server, []), entries, server in listings, problems[server])
            reported = {p for found in self._problems.values() for p in found}
            self._problems = problems
        for problem in dict.fromkeys(p for found in problems.values() for p in found):
            if problem not in reported:
                log.warning("nexus.mcp.client: %s", problem)

    def _sync(self, server: str, granted: list[Claim], entries: dict[tuple[str, str], dict[str, Any]],
              relisted: bool, problems: list[str]) -> None:
        """Make the registry hold `granted` for `server`. A tool already registered is rebuilt
        only when its server `relisted` its tools (it may have changed)."""
        current = self._registered[server]
        wanted = {claim.name: claim for claim in granted}
        for name in [n for n in current if n not in wanted]:
            self.nexus.remove_tool(name)
            del current[name]
            self._owners.pop(name, None)
        for name, claim in wanted.items():
            if name in current and not relisted:
                continue
            tool = entries[(server, claim.tool)]
            try:
                handler = functools.partial(self.call, server, claim.tool, wraps_result(tool))
                tooldef = to_tooldef(server, tool, handler, name, takes_context=True)
            except Exception as exc:  # noqa: BLE001 (a server's odd tool must not stop the others)
                problems.append(f"MCP server {server!r} tool {claim.tool!r} is left out: {describe_exception(exc)}")
                if name in current:
                    self.nexus.remove_tool(name)
                    del current[name]
                    self._owners.pop(name, None)
                continue
            try:
                if name in current:
                    if _comparable(current[name]) != _comparable(tooldef):
                        self.nexus.replace_tool(tooldef, plugin=PLUGIN_ID)
                else:
                    self._register(tooldef)
            except ToolRegistrationError as exc:
                problems.append(f"MCP server {server!r} tool {claim.tool!r} is left out: {exc}")
                continue
            current[name] = tooldef
            self._owners[name] = (server, claim.tool)

    # -- the tool cache -----------------------------------------------------------------------

    def _cache_path(self, server: str) -> Path:
        return self.folder / f"{server}.tools.json"

    def _read_cache(self, config: ServerConfig) -> list[dict[str, Any]] | None:
        """The tool list cached at the server's last start, if its settings have not changed
        since; None when there is none or it cannot be read."""
        path = self._cache_path(config.name)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            log.warning("nexus.mcp.client: ignoring the tool cache %s: %s", path, exc)
            return None
        if not isinstance(data, dict) or data.get("version") != CACHE_VERSION \
                or data.get("fingerprint") != config.fingerprint or not isinstance(data.get("tools"), list) \
                or not all(isinstance(t, dict) for t in data["tools"]):
            return None
        return data["tools"]

    def _write_cache(self, config: ServerConfig, tools: list[dict[str, Any]]) -> None:
        path = self._cache_path(config.name)
        data = {"version": CACHE_VERSION, "server": config.name, "fingerprint": config.fingerprint,
                "tools": tools}
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            temporary = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
            temporary.write_text(json.dumps(data, indent=1, ensure_ascii=False), encoding="utf-8")
            os.replace(temporary, path)  # another Nexus reading it sees the old list or the new one
        except OSError as exc:
            log.warning("nexus.mcp.client: cannot write the tool cache %s: %s", path, exc)

    # -- calls --------------------------------------------------------------------------------

    def call(self, server: str, tool: str, wrapped: bool, arguments: dict[str, Any],
             ctx: CallContext | None = None) -> ToolResult:
        """A tool's handler: the call, made on the loop thread, and its result (its value
        unwrapped, for a tool whose outputSchema wraps it). Any thread may call this, many at once.
        What the server asks during the call goes to the call's approver (`ctx.approver`)."""
        if self._closed:
            return self._error(server, f"MCP server {server!r} is stopped: the Nexus is closed")
        if self._loop.in_loop_thread():  # a registry observer on the loop thread calling a tool
            return self._error(server, f"MCP server {server!r}: a tool cannot be called from the MCP event loop")
        from ._connection import STOP_SECONDS, ServerError, _describe
        from ._convert import to_toolresult, unwrap_result

        connection = self.connection(server)
        config = connection.config
        # the call bounds itself (start_timeout_seconds, then timeout_seconds); this only guards
        # against a loop that stopped answering
        limit = config.start_timeout_seconds + config.timeout_seconds + STOP_SECONDS
        try:
            call, approver = None, None
            if ctx is not None:
                call = ToolCall(name=ctx.tool_name or tool, arguments=dict(arguments), id=ctx.call_id,
                                parent_call_id=ctx.parent_call_id)
                approver = ctx.approver
            future = self._loop.submit(connection.call(tool, arguments, call=call, approver=approver))
            while True:
                try:
                    result = future.result(limit)
                    break
                except concurrent.futures.TimeoutError:
                    if connection.asking():  # a person is answering the server: the call's clock has stopped
                        continue
                    future.cancel()
                    raise TimeoutError from None
        except ServerError as exc:
            return self._error(server, str(exc))
        except TimeoutError:
            return self._error(server, f"MCP server {server!r}: no answer from the MCP event loop within {limit:g} s")
        except Exception as exc:  # noqa: BLE001 (a handler's result, never its exception)
            return self._error(server, f"MCP server {server!r}: {_describe(exc)}")
        converted = to_toolresult(server, tool, result)
        return unwrap_result(converted) if wrapped and not converted.is_error else converted

    # -- what servers ask, and their logins ---------------------------------------------------

    def _oauth(self, connection: ServerConnection) -> Any:
        """The OAuth provider of one run of `connection`'s server (see `_auth`)."""
        from ._auth import auth_dir, check_outside, run_provider

        check_outside(auth_dir(), Path(self.nexus.config.workspace))

        def needed(exc: Exception) -> None:
            connection.login_needed = str(exc)

        return run_provider(connection.config, needed)

    async def _on_elicit(self, server: str, params: Any, waiting: list[Any]) -> Any:
        """A server's elicitation, put to the person who answers for the calls it came with (see
        `_client_elicit`): the answer, a decline saying why, or an error the server sees."""
        import mcp_types as types

        from ._client_elicit import MAX_PER_CALL, REASON_KEY, Asker, SchemaRefused, check_form

        def declined(reason: str) -> types.ElicitResult:
            log.info("nexus.mcp.client: MCP server %r asked the user something; declined: %s", server, reason)
            return types.ElicitResult(action="decline", _meta={REASON_KEY: reason})

        if not waiting:
            return declined("the server asked while none of its tools' calls was running: only a call's questions "
                            "are put to the person, who knows what they are answering for")
        approvers = {id(item.approver): item.approver for item in waiting}
        if len(approvers) > 1:
            return declined("several calls with different front ends were waiting on this server: which person "
                            "should answer cannot be told, so no one is asked")
        approver = next(iter(approvers.values()))
        if approver is None:
            approver = self.nexus.approver
        if approver is None:
            return declined("no one can answer here: this Nexus has no front end to ask its user (nexus chat "
                            "asks at its prompt; give the Nexus, or the call, an approver)")
        for item in waiting:
            item.asked += 1
            if item.asked > MAX_PER_CALL:
                return types.ErrorData(code=types.INVALID_REQUEST,
                                       message=f"this call already asked the user {MAX_PER_CALL} times; no more "
                                               "questions are put to them during it")
        call = waiting[0].call if len(waiting) == 1 else None
        asker = Asker(self.nexus, server)

        def ask(question: Any) -> Any:
            return self.nexus.ask(question, approver=approver)

        if isinstance(params, types.ElicitRequestURLParams):
            outcome = await asyncio.to_thread(asker.url, ask, call, params.message, params.url)
        else:
            try:
                fields = check_form(params.requested_schema)
            except SchemaRefused as exc:
                return types.ErrorData(code=types.INVALID_PARAMS, message=f"Nexus does not ask this: {exc}")
            outcome = await asyncio.to_thread(asker.form, ask, call, params.message, fields)
        if outcome.action == "accept":
            return types.ElicitResult(action="accept", content=outcome.content)
        return declined(outcome.reason or "the user declined")

    @staticmethod
    def _error(server: str, message: str) -> ToolResult:
        return ToolResult(id="", name="", output=message, error=message, error_kind="failure",
                          metadata={MCP_SERVER: server})

    # -- status and shutdown ------------------------------------------------------------------

    def status(self) -> list[ServerStatus]:
        out = []
        for name, config in self.configs.items():
            connection = self._connections.get(name)
            out.append(ServerStatus(
                name=name, transport=config.transport, target=config.describe(), start=config.start,
                running=connection is not None and connection.running,
                starts=connection.starts if connection is not None else 0,
                tools=tuple(sorted(self._registered.get(name, {}))),
                protocol_version=connection.protocol_version if connection is not None else None,
                tools_from_cache=name in self._from_cache,
                error=connection.last_error if connection is not None else self._login_needed.get(name),
                problems=tuple(self._problems.get(name, ())),
            ))
        return out

    def doctor_lines(self) -> list[str]:
        lines = []
        shown: set[str] = set()
        for s in self.status():
            state = "running" if s.running else "not running"
            if s.running and s.protocol_version:
                state += f" (MCP {s.protocol_version})"
            source = ", listed from the cache of its last start" if s.tools_from_cache else ""
            lines.append(f"server {s.name}: {s.transport} {s.target}; {s.start} start; {state}; "
                         f"{len(s.tools)} tools{source}")
            if s.error and not s.running:
                lines.append(f"error: {s.error}")
            for problem in s.problems:  # one naming two servers is listed under both: shown once
                if problem not in shown:
                    shown.add(problem)
                    lines.append(f"error: {problem}")
        return lines

    def close(self) -> None:
        """Stop every server and the loop; no orphan process is left behind."""
        if self._closed:
            return
        self._closed = True
        if self._loop.running:
            try:
                self._loop.run(self._close_all(), timeout=CLOSE_SECONDS)
            except Exception:
                log.exception("nexus.mcp.client: stopping the MCP servers failed")
            self._loop.stop()

    async def _close_all(self) -> None:
        await asyncio.gather(*(c.close() for c in list(self._connections.values())), return_exceptions=True)
