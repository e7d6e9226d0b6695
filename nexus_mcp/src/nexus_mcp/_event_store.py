"""A bounded in-memory `EventStore` for the SDK's streamable HTTP transport: what makes it send
each SSE stream's priming event (an event id with empty data, and `retry:`) and lets a client
that lost a stream resume it with `Last-Event-ID`, getting what it missed.

The SDK defines the interface and leaves the store to the server (its examples keep every event
forever). This one keeps the last `MAX_EVENTS` events of the whole server and the last
`MAX_EVENTS_PER_STREAM` of each stream, and forgets a stream's events `MAX_AGE_SECONDS` after its
last one, so neither a long-running server nor a client that never resumes makes it grow. A
client that resumes from an event forgotten since gets nothing replayed (the SDK answers as for
an unknown id).

Event ids are `<random prefix>.<counter>`, the prefix new for each store, so an id from another
server (or an earlier start of this one) names no event here.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections import OrderedDict, deque

from mcp.server.streamable_http import EventCallback, EventId, EventMessage, EventStore, StreamId
from mcp_types import JSONRPCMessage

#: events kept for the whole server
MAX_EVENTS = 2000
#: events kept per stream (a long call's progress notifications, its response)
MAX_EVENTS_PER_STREAM = 500
#: a stream's events are forgotten this long after its last one
MAX_AGE_SECONDS = 600.0
#: how long a client is told to wait before reconnecting a stream the server closed (`retry:`)
RETRY_MILLISECONDS = 1000


class BoundedEventStore(EventStore):
    """See the module's text. Safe to share between the server's sessions."""

    def __init__(self, max_events: int = MAX_EVENTS, per_stream: int = MAX_EVENTS_PER_STREAM,
                 max_age: float = MAX_AGE_SECONDS) -> None:
        self._max_events = max_events
        self._per_stream = per_stream
        self._max_age = max_age
        self._prefix = secrets.token_hex(4)
        self._counter = 0
        self._lock = threading.Lock()
        # stream id -> (time of its last event, its events in order: (event id, message or None))
        self._streams: OrderedDict[str, tuple[float, deque[tuple[str, JSONRPCMessage | None]]]] = OrderedDict()
        self._count = 0

    async def store_event(self, stream_id: StreamId, message: JSONRPCMessage | None) -> EventId:
        with self._lock:
            self._counter += 1
            event_id = f"{self._prefix}.{self._counter}"
            now = time.monotonic()
            _, events = self._streams.pop(stream_id, (now, deque()))
            events.append((event_id, message))
            self._count += 1
            if len(events) > self._per_stream:
                events.popleft()
                self._count -= 1
            self._streams[stream_id] = (now, events)  # the most recent stream last
            self._trim(now)
            return event_id

    def _trim(self, now: float) -> None:
        while self._streams:
            stream_id, (last, events) = next(iter(self._streams.items()))
            if self._count <= self._max_events and now - last <= self._max_age:
                return
            if self._count > self._max_events and len(events) > 1:
                events.popleft()
                self._count -= 1
                continue
            del self._streams[stream_id]
            self._count -= len(events)

    async def replay_events_after(self, last_event_id: EventId, send_callback: EventCallback) -> StreamId | None:
        with self._lock:
            self._trim(time.monotonic())
            found: tuple[str, list[tuple[str, JSONRPCMessage | None]]] | None = None
            for stream_id, (_, events) in self._streams.items():
                ids = [event_id for event_id, _ in events]
                if last_event_id in ids:
                    found = (stream_id, list(events)[ids.index(last_event_id) + 1:])
                    break
        if found is None:
            return None
        stream_id, missed = found
        for event_id, message in missed:
            if message is not None:  # a priming event carries nothing to replay
                await send_callback(EventMessage(message, event_id))
        return stream_id

    @property
    def count(self) -> int:
        """The events kept now. (Not `__len__`: the SDK tests the store for truth, and an
        empty store must still be one.)"""
        return self._count
