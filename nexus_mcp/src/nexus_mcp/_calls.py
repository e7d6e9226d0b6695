"""What a `tools/call` under `nexus mcp serve` tells its client while it runs: progress and log
records, carried from the thread that runs `Nexus.invoke` to the request's own stream.

A call gets a `CallChannel`. Its thread `put`s reports (it never blocks on the client); a pump
on the server's event loop sends them in order, and the call's result goes out only once the
channel is drained, so a client sees every notification before the response it belongs to.
What a slow client has not taken yet is bounded: past `MAX_PENDING_PROGRESS` waiting progress
reports the newest replaces the last one waiting (each says how far the call has got, so the
newest says most), log records beyond
`MAX_PENDING_LOGS` are dropped and counted, and the count is sent as one record.

Log records (`LogBridge`): a `logging.Handler` on the root logger takes the records of the
Nexus's own loggers (`nexus*`) at or above what a client asked for (`logging/setLevel` on a
2025-era connection; the `io.modelcontextprotocol/logLevel` key of a call's `_meta` on a
2026-07-28 one, for that call), and a record made while one of a client's calls runs (in the call's thread: the call's context
travels with it) goes to that client, on that call's stream. A record made outside any call
goes to the client only over stdio, where the one client is the operator's own; over HTTP it
may be about another client's calls, so it goes to no client. Each message is cut to
`MAX_LOG_CHARS` and its control characters made visible (`visible`), so a record cannot
rewrite what a client's terminal shows.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import threading
import weakref
from collections import deque
from typing import Any, Literal

import anyio
import mcp_types as types
from nexus_core.terminal import escape

log = logging.getLogger("nexus_mcp")

#: log records one call may have waiting for its client; more are dropped, and counted
MAX_PENDING_LOGS = 256
#: progress reports one call may have waiting; past that, the newest replaces the last waiting
MAX_PENDING_PROGRESS = 32
#: the longest log message sent, in characters (a record is a line for a person, not data)
MAX_LOG_CHARS = 4000

McpLevel = Literal["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"]
#: MCP's levels (RFC 5424's) from the least severe, with the Python level each one starts at
MCP_LEVELS: dict[str, int] = {"debug": logging.DEBUG, "info": logging.INFO, "notice": logging.INFO + 5,
                              "warning": logging.WARNING, "error": logging.ERROR, "critical": logging.CRITICAL,
                              "alert": logging.CRITICAL + 5, "emergency": logging.CRITICAL + 10}



def visible(text: str, limit: int = MAX_LOG_CHARS) -> str:
    """`text` with each control character written as its escape (`\\x1b`), cut to `limit`: the
    core's `nexus_core.terminal.escape`, the one rule for what a person is shown."""
    shown = escape(text)
    if len(shown) > limit:
        shown = f"{shown[:limit]}... [{len(shown) - limit} more characters]"
    return shown


def mcp_level(levelno: int) -> McpLevel:
    """The MCP level of a Python log level (the most severe one it reaches)."""
    found: McpLevel = "debug"
    for name, start in MCP_LEVELS.items():
        if levelno >= start:
            found = name  # type: ignore[assignment]
    return found


class CallChannel:
    """The reports of one running call, waiting for its client. `put_*` from any thread."""

    def __init__(self, loop: asyncio.AbstractEventLoop, *, wants_progress: bool, log_level: int | None) -> None:
        self._loop = loop
        self.wants_progress = wants_progress
        #: the Python level from which this call's log records go to its client (None: none do)
        self.log_level = log_level
        self._lock = threading.Lock()
        self._progress: deque[tuple[float, float | None, str | None]] = deque()
        self._logs: deque[tuple[McpLevel, str, str]] = deque()
        self._dropped = 0
        self._wake = asyncio.Event()
        self._closed = False
        self._gone = False
        #: run_code output chunks seen so far (the progress that output reports)
        self.output_chunks = 0

    # -- from the call's thread ------------------------------------------------------------

    def put_progress(self, done: float, total: float | None = None, message: str | None = None) -> None:
        if not self.wants_progress:
            return
        report = (done, total, visible(message, 1000) if message else None)
        with self._lock:
            if len(self._progress) >= MAX_PENDING_PROGRESS:
                self._progress[-1] = report  # each report says how far the call got: the newest says most
            else:
                self._progress.append(report)
        self._poke()

    def put_log(self, record: logging.LogRecord) -> None:
        if self.log_level is None or record.levelno < self.log_level:
            return
        with self._lock:
            if len(self._logs) >= MAX_PENDING_LOGS:
                self._dropped += 1
                return
            self._logs.append((mcp_level(record.levelno), record.name, _message(record)))
        self._poke()

    def _poke(self) -> None:
        try:
            self._loop.call_soon_threadsafe(self._wake.set)
        except RuntimeError:  # the loop closed: nobody is listening any more
            pass

    # -- on the event loop -----------------------------------------------------------------

    def close(self) -> None:
        """No more reports: the pump sends what is left, then returns."""
        self._closed = True
        self._wake.set()

    async def pump(self, session: Any, request_id: Any) -> None:
        """Send the reports to the call's client, in order, until closed and drained."""
        while True:
            await self._wake.wait()
            self._wake.clear()
            with self._lock:
                progress, self._progress = self._progress, deque()
                logs, self._logs = self._logs, deque()
                dropped, self._dropped = self._dropped, 0
            if not self._gone:
                for level, name, message in logs:
                    if not await _send_log(session, level, name, message, request_id):
                        self._gone = True  # the client went away: what comes next is dropped
                        break
            if dropped and not self._gone:
                await _send_log(session, "warning", "nexus_mcp",
                                f"{dropped} log records of this call were dropped: the client took them too slowly",
                                request_id)
            for report in progress if not self._gone else ():
                try:
                    await session.report_progress(*report)
                except Exception:
                    self._gone = True
                    break
            if self._closed and not self._wake.is_set():
                return


async def _send_log(session: Any, level: McpLevel, name: str, message: str, request_id: Any) -> bool:
    """Send one record; False when the client cannot be reached (not logged: a record about a
    record that could not be sent would be one more to send)."""
    # the notification itself, on the call's stream: `ServerSession.send_log_message` warns at
    # each use (logging is deprecated by 2026-07-28), and the level was checked here already
    notification = types.LoggingMessageNotification(
        params=types.LoggingMessageNotificationParams(level=level, data=message, logger=name))
    try:
        await session.send_notification(notification, related_request_id=request_id)
    except Exception:
        return False
    return True


def _message(record: logging.LogRecord) -> str:
    try:
        text = record.getMessage()
    except Exception:  # a record whose arguments do not fit its format
        text = f"{record.msg!r} {record.args!r}"
    if record.exc_info and record.exc_info[1] is not None:
        text += f" ({type(record.exc_info[1]).__name__}: {record.exc_info[1]})"
    return visible(text)


#: the channel of the call the current thread is running for a client (anyio copies the
#: context into the worker thread of `to_thread.run_sync`)
current_channel: contextvars.ContextVar[CallChannel | None] = contextvars.ContextVar("nexus_mcp_call", default=None)


def _ours(name: str) -> bool:
    return name.split(".", 1)[0].startswith("nexus")


class LogBridge(logging.Handler):
    """The Nexus's log records to the MCP clients that asked for them (see the module's text).
    `attach()` while serving, `detach()` after; `set_level(connection, level)` for each
    `logging/setLevel`."""

    def __init__(self) -> None:
        super().__init__(logging.NOTSET)
        # connection -> the Python level it asked for (forgotten with the connection)
        self._levels: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
        self._saved_levels: dict[logging.Logger, int] = {}
        #: where records made outside any call go (stdio's one client), or None (HTTP)
        self.outside: CallChannel | None = None
        self._guard = threading.local()

    def level_for(self, connection: Any) -> int | None:
        return self._levels.get(connection)

    def set_level(self, connection: Any, level: str) -> None:
        python_level = MCP_LEVELS[level]
        self._levels[connection] = python_level
        # a logger makes records only from its level on (by default the root's: warning), so a
        # client asking for more has the root and the Nexus's loggers make them; the other
        # handlers keep their own levels, and this one drops what is not the Nexus's
        loggers = [logging.root] + [logger for name, logger in list(logging.root.manager.loggerDict.items())
                                    if isinstance(logger, logging.Logger) and _ours(name) and logger.level]
        for logger in loggers:
            self._saved_levels.setdefault(logger, logger.level)
            if logger.getEffectiveLevel() > python_level:
                logger.setLevel(python_level)

    def forget(self, connection: Any) -> None:
        self._levels.pop(connection, None)

    def attach(self) -> None:
        logging.root.addHandler(self)

    def detach(self) -> None:
        logging.root.removeHandler(self)
        for logger, level in self._saved_levels.items():
            logger.setLevel(level)
        self._saved_levels.clear()

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno >= logging.WARNING:
            _last_resort(record)
        if not _ours(record.name) or getattr(self._guard, "busy", False):
            return
        self._guard.busy = True
        try:
            channel = current_channel.get()
            if channel is None:
                channel = self.outside
            if channel is not None:
                channel.put_log(record)
        finally:
            self._guard.busy = False


def _last_resort(record: logging.LogRecord) -> None:
    """What Python prints when no handler takes a record (warnings and worse, on stderr), kept
    for records that only this handler takes: attaching it must not silence the server's stderr."""
    logger: logging.Logger | None = logging.getLogger(record.name)
    while logger is not None:
        if any(h for h in logger.handlers if not isinstance(h, LogBridge)):
            return
        if not logger.propagate:
            break
        logger = logger.parent
    if logging.lastResort is not None and record.levelno >= logging.lastResort.level:
        logging.lastResort.handle(record)


async def drained(channel: CallChannel, session: Any, request_id: Any, work: Any) -> Any:
    """Run `work()` (awaitable) while `channel`'s reports are pumped to `session`; return its
    value once every report made before it ended has been sent."""
    async with anyio.create_task_group() as group:
        group.start_soon(channel.pump, session, request_id)
        try:
            return await work()
        finally:
            channel.close()
