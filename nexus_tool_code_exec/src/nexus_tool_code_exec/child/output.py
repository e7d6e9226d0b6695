"""The script's sys.stdout and sys.stderr: what it writes goes to the host as OUT messages
(runs in the child). Past the first half of `max_output_bytes` output is held back, and only its
last part (`Tail`) is sent when the script ends: the model reads the head and the tail, with how
much was dropped between them."""

from __future__ import annotations

import collections
import threading
from typing import Any

from .. import protocol
from .channel import Channel

#: characters of output per OUT message (at most 12 bytes each once JSON-escaped), so that one
#: print of 40 MB does not become one message past the host's line limit
OUT_PIECE = 64 * 1024
#: bytes of the cap left for the host's `[... N bytes dropped ...]` line between head and tail
MARKER_RESERVE = 64


class Tail:
    """The last bytes a script wrote past its head (stdout and stderr in the order written), and
    how many bytes before them were dropped. Sent once, when the script ends."""

    def __init__(self) -> None:
        self.capacity = 0
        self.parts: collections.deque[tuple[str, bytes]] = collections.deque()
        self.size = 0
        self.dropped = 0
        self._lock = threading.Lock()

    def reset(self, capacity: int) -> None:
        self.capacity = max(capacity, 0)
        self.parts.clear()
        self.size = self.dropped = 0

    def add(self, stream: str, data: bytes) -> None:
        if not self.capacity:  # no tail kept (a cap too small to split): the head alone
            return
        with self._lock:
            if len(data) >= self.capacity:
                self.dropped += self.size + len(data) - self.capacity
                self.parts.clear()
                data = data[len(data) - self.capacity:] if self.capacity else b""
                self.size = 0
            if data:
                self.parts.append((stream, data))
                self.size += len(data)
            while self.size > self.capacity:
                stream0, first = self.parts[0]
                over = self.size - self.capacity
                if len(first) <= over:
                    self.parts.popleft()
                    self.size -= len(first)
                    self.dropped += len(first)
                else:
                    self.parts[0] = (stream0, first[over:])
                    self.size -= over
                    self.dropped += over

    def send(self, channel: Channel) -> int:
        """The tail, as OUT messages; the first says how many bytes were dropped before it.
        Returns that number."""
        with self._lock:
            parts, dropped = list(self.parts), self.dropped
            self.parts.clear()
            self.size = self.dropped = 0
        if not parts and not dropped:
            return 0
        first = True
        for stream, data in parts or [("stdout", b"")]:
            text = data.decode("utf-8", "ignore")
            for at in range(0, max(len(text), 1), OUT_PIECE):
                msg: dict[str, Any] = {"t": protocol.OUT, "s": stream, "d": text[at:at + OUT_PIECE]}
                if first:
                    msg["dropped"] = dropped
                    first = False
                channel.send(msg)
        return dropped


class StreamWriter:
    """sys.stdout / sys.stderr for the script: lines (or 512-byte pieces) go to the host, up to
    the shared byte cap; past it output is dropped and `truncated` set."""

    encoding = "utf-8"
    errors = "replace"

    def __init__(self, channel: Channel, stream: str, budget: list[int], flags: dict[str, bool],
                 tail: Tail | None = None) -> None:
        self._channel = channel
        self._stream = stream
        self._budget = budget
        self._flags = flags
        self._tail = tail
        self._pending = ""
        self._lock = threading.Lock()

    def write(self, text: str) -> int:
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        if self._flags["truncated"] and self._budget[0] <= 0:
            # past the head nothing more is sent now: only the tail is kept
            if self._tail is not None and text:
                self._tail.add(self._stream, text.encode("utf-8", "replace"))
            return len(text)
        with self._lock:
            self._pending += text
            if "\n" in self._pending or len(self._pending) >= protocol.OUTPUT_CHUNK:
                cut = self._pending.rfind("\n") + 1 or len(self._pending)
                self._emit(self._pending[:cut])
                self._pending = self._pending[cut:]
        return len(text)

    def _emit(self, text: str) -> None:
        data = text.encode("utf-8", "replace")
        first_cut = False
        if len(data) > self._budget[0]:
            keep = max(self._budget[0], 0)
            while keep and (data[keep] & 0xC0) == 0x80:  # not in the middle of a character
                keep -= 1
            if self._tail is not None:
                self._tail.add(self._stream, data[keep:])
            data = data[:keep]
            text = data.decode("utf-8", "ignore")
            first_cut = not self._flags["truncated"]
            self._flags["truncated"] = True
        if not text and not first_cut:
            return
        self._budget[0] -= len(data)
        # in pieces: one print of 40 MB must not become one message past the host's line limit
        for at in range(0, max(len(text), 1), OUT_PIECE):
            msg: dict[str, Any] = {"t": protocol.OUT, "s": self._stream, "d": text[at:at + OUT_PIECE]}
            if first_cut and at + OUT_PIECE >= len(text):
                # told at once, not only in "done": a script that then fails or times out never
                # sends "done" (nor its tail), and its result must still say the output was cut
                msg["held" if self._tail is not None and self._tail.capacity else "truncated"] = True
            self._channel.send(msg)

    def flush(self) -> None:
        with self._lock:
            if self._pending:
                self._emit(self._pending)
                self._pending = ""

    def isatty(self) -> bool:
        return False

    def writable(self) -> bool:
        return True
