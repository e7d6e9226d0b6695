"""`parallel`: fan-out for run_code scripts.

    results = parallel.map(paths, lambda p: tools.read(path=p).content)

All three functions keep the input order, run at most `max_workers` callbacks at once, and on the
first error stop starting new callbacks, wait for the running ones, and raise that error (its
traceback points at the callback's line). Inside a callback, a nested parallel call runs its
callbacks one after another, so nesting can never deadlock the pool.
"""

from __future__ import annotations

import builtins
import functools
import itertools
import threading
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

T = TypeVar("T")
R = TypeVar("R")

#: set by the runtime from the run_code config before the script runs
MAX_WORKERS = 1

_local = threading.local()


#: numbers each `parallel` call that runs callbacks concurrently, for the run's record
_groups = itertools.count(1)


def _mark_parallel(group: int) -> None:
    import _nexus_rt  # type: ignore[import-not-found]  # the runtime module inside the child

    _nexus_rt._local.parallel = group


def _run(thunks: list[Callable[[], Any]]) -> list[Any]:
    n = len(thunks)
    results: list[Any] = [None] * n
    if n == 0:
        return results
    if getattr(_local, "inside", False) or MAX_WORKERS <= 1 or n == 1:
        for i, thunk in enumerate(thunks):
            results[i] = thunk()
        return results

    lock = threading.Lock()
    group = next(_groups)
    next_index = [0]
    failure: list[BaseException] = []

    def worker() -> None:
        _local.inside = True
        try:
            _mark_parallel(group)
        except ImportError:
            pass
        while True:
            with lock:
                if failure or next_index[0] >= n:
                    return
                i = next_index[0]
                next_index[0] += 1
            try:
                results[i] = thunks[i]()
            except BaseException as exc:  # noqa: BLE001 - handed to the caller as is
                with lock:
                    if not failure:
                        failure.append(exc)
                return

    threads = []
    for k in range(min(MAX_WORKERS, n)):
        thread = threading.Thread(target=worker, daemon=True, name=f"parallel-{k}")
        try:
            thread.start()
        except RuntimeError:
            # the sandbox caps the threads of a script (RLIMIT_NPROC) below a generous
            # max_workers: go on with the workers that did start
            break
        threads.append(thread)
    if not threads:
        for i, thunk in enumerate(thunks):
            results[i] = thunk()
        return results
    for t in threads:
        t.join()
    if failure:
        raise failure[0]
    return results


def map(items: Iterable[T], fn: Callable[[T], R]) -> list[R]:  # noqa: A001 - the brief's name
    """`[fn(item) for item in items]`, concurrently, in order."""
    values = builtins.list(items)
    return _run([functools.partial(fn, v) for v in values])


def for_each(items: Iterable[T], fn: Callable[[T], Any]) -> None:
    """Call `fn(item)` for every item, concurrently; results are discarded."""
    map(items, fn)


def all(*fns: Callable[[], Any]) -> list[Any]:  # noqa: A001 - the brief's name
    """Call every function (no arguments), concurrently; their results in order."""
    return _run(builtins.list(fns))
