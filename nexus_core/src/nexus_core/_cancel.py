"""`CancelToken`: how whoever made a call (a tool call, a model request) stops it.

The caller keeps the token and may `cancel()` it from any thread (Ctrl-C at the prompt, a
run_code script whose run ended while its inner calls were still running). The callee checks
`cancelled` between steps and registers with `on_cancel(fn)` what stops a blocked wait at once
(killing a command's processes, closing an HTTP stream). A leaf module: it imports nothing of
the package.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger("nexus_core")


class CancelToken:
    """Set once, from any thread; what was registered with `on_cancel` runs then (or at once,
    for what is registered afterwards). `reason` says why, for the error a stopped call reports."""

    __slots__ = ("_event", "_lock", "_callbacks", "reason")

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[], Any]] = []
        self.reason = ""

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the token is cancelled or `timeout` passes; True when cancelled."""
        return self._event.wait(timeout)

    def on_cancel(self, fn: Callable[[], Any]) -> Callable[[], None]:
        """Run `fn` when the token is cancelled (now, if it already is). Returns a function that
        takes `fn` back off, for a callee that finished first (a long-lived token, a session's,
        must not collect one callback per call it ever made)."""
        with self._lock:
            if not self._event.is_set():
                self._callbacks.append(fn)
                return lambda: self._forget(fn)
        self._run(fn)
        return lambda: None

    def cancel(self, reason: str = "") -> None:
        """Cancel: the first call's `reason` stands; later calls do nothing."""
        with self._lock:
            if self._event.is_set():
                return
            self.reason = reason
            self._event.set()
            callbacks, self._callbacks = self._callbacks, []
        for fn in callbacks:
            self._run(fn)

    def _forget(self, fn: Callable[[], Any]) -> None:
        with self._lock:
            try:
                self._callbacks.remove(fn)
            except ValueError:  # it ran already, or was taken back before
                pass

    @staticmethod
    def _run(fn: Callable[[], Any]) -> None:
        try:
            fn()
        except Exception:  # stopping something that is already gone, typically
            log.debug("an on_cancel callback raised", exc_info=True)

    def __repr__(self) -> str:
        state = f"cancelled{f': {self.reason}' if self.reason else ''}" if self.cancelled else "active"
        return f"<CancelToken {state}>"
