"""The script's sys.stdout and sys.stderr: what it writes goes to the host as OUT messages
(runs in the child)."""

from __future__ import annotations

import threading
from typing import Any

from .. import protocol
from .channel import Channel

#: characters of output per OUT message (at most 12 bytes each once JSON-escaped), so that one
#: print of 40 MB does not become one message past the host's line limit
OUT_PIECE = 64 * 1024


class StreamWriter:
    """sys.stdout / sys.stderr for the script: lines (or 512-byte pieces) go to the host, up to
    the shared byte cap; past it output is dropped and `truncated` set."""

    encoding = "utf-8"
    errors = "replace"

    def __init__(self, channel: Channel, stream: str, budget: list[int], flags: dict[str, bool]) -> None:
        self._channel = channel
        self._stream = stream
        self._budget = budget
        self._flags = flags
        self._pending = ""
        self._lock = threading.Lock()

    def write(self, text: str) -> int:
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        if self._flags["truncated"] and self._budget[0] <= 0:
            return len(text)  # past the cap nothing more is sent: do not buffer it either
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
            data = data[: max(self._budget[0], 0)]
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
                # sends "done", and its result must still say the output was cut
                msg["truncated"] = True
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
