"""One asyncio event loop on its own thread, for code that is not async to drive async code.

The MCP SDK is async-only and its sessions belong to the loop they were opened on, while Nexus
calls tools from any thread (run_code's parallel callbacks call from many at once). So each
client plugin runs one loop on one thread; every other thread submits a coroutine to it and
waits for the outcome (`run`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class LoopThread:
    """A daemon thread running an asyncio loop, started on first use, stopped by `stop`."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def in_loop_thread(self) -> bool:
        return self._thread is not None and threading.current_thread() is self._thread

    def loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                started = threading.Event()

                def main() -> None:
                    asyncio.set_event_loop(loop)
                    loop.call_soon(started.set)
                    loop.run_forever()

                self._thread = threading.Thread(target=main, name=self._name, daemon=True)
                self._thread.start()
                started.wait()
                self._loop = loop
            return self._loop

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop())

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run `coro` on the loop and wait for its result (or exception). A `timeout` that runs
        out cancels it and raises TimeoutError. Never call this from the loop's own thread: it
        would wait for itself."""
        if self.in_loop_thread():
            coro.close()
            raise RuntimeError(f"{self._name}: run() called from the event loop's own thread")
        future = self.submit(coro)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError(f"{self._name}: no answer within {timeout} s") from None

    def stop(self, timeout: float = 5.0) -> None:
        """Cancel what still runs on the loop, stop it and join its thread."""
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is None or thread is None:
            return

        async def cancel_all() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            if tasks:
                await asyncio.wait(tasks, timeout=timeout)

        if not loop.is_closed() and thread.is_alive():
            try:
                asyncio.run_coroutine_threadsafe(cancel_all(), loop).result(timeout + 1)
            except (concurrent.futures.TimeoutError, RuntimeError):
                pass
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout)
        if not thread.is_alive():
            loop.close()
