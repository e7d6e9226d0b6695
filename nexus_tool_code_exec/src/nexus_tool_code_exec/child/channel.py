"""The child's end of its two pipes to the host: messages out, replies in (runs in the child)."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from typing import Any

from .. import protocol
from ..protocol import PipeReader

#: the longest message the child reads from the host (the host is trusted: a START with the
#: bindings of many tools, a RESULT with a large output)
MAX_LINE = 64 * 1024 * 1024


class ChannelClosed(Exception):
    """The host went away (or sent something that is not a message)."""


class Channel:
    """The pipes to the host. Any thread may `request`; whichever waiting thread holds the
    reader role reads replies and hands them to their waiters (so a lone caller reads its own
    reply directly, with no thread hop)."""

    def __init__(self, rfd: int, wfd: int, encode: Callable[[Any], bytes] = protocol.encode) -> None:
        self.rfd, self.wfd = rfd, wfd
        self._encode = encode
        self._wlock = threading.Lock()
        # taken as a plain lock on every call; waited on only by a thread whose reply another
        # thread reads (parallel's workers), counted in `_waiting` so that a lone caller's
        # reply notifies nobody
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._waiting = 0
        self._replies: dict[int, dict[str, Any]] = {}
        self._reading = False
        self._closed: str | None = None
        self._lines = protocol.LineReader(MAX_LINE)
        self._ids = itertools.count(1)
        # answers come within microseconds of a call once the host keeps this process and the
        # thread that answers on CPUs of their own: it says so in an answer ("spin"), and from
        # then on the reader polls first. Before that, it sleeps until a message comes.
        self._reader = PipeReader(rfd, eager=False)

    def send(self, msg: Any) -> None:
        data = self._encode(msg)
        with self._wlock:
            protocol.write_all(self.wfd, data)

    def read_message(self) -> dict[str, Any]:
        try:
            msg = self._lines.read(self._reader.read)
        except protocol.FramingError as exc:
            raise ChannelClosed(str(exc)) from None
        if msg is None:
            raise ChannelClosed("the host closed the pipe")
        return msg

    def expect(self, window: float | None = None) -> None:
        """A message is coming soon: poll for it before sleeping (see protocol.PipeReader)."""
        self._reader.expect(window)

    def request(self, msg: dict[str, Any]) -> dict[str, Any]:
        rid = next(self._ids)
        self.send({**msg, "id": rid})
        with self._lock:
            while True:
                if rid in self._replies:
                    return self._replies.pop(rid)
                if self._closed:
                    raise ChannelClosed(self._closed)
                if not self._reading:
                    self._reading = True
                    break
                self._waiting += 1
                try:
                    self._cond.wait()
                finally:
                    self._waiting -= 1
        try:
            while True:
                reply = self.read_message()
                if reply.get("spin"):
                    self._reader.expect()
                with self._lock:
                    self._replies[reply.get("id", -1)] = reply
                    if rid in self._replies:
                        self._reading = False
                        if self._waiting:
                            self._cond.notify_all()  # another waiter takes over reading
                        return self._replies.pop(rid)
                    if self._waiting:
                        self._cond.notify_all()  # the reply is another waiter's
        except BaseException as exc:
            with self._cond:
                self._reading = False
                self._closed = self._closed or str(exc) or type(exc).__name__
                self._cond.notify_all()
            raise
