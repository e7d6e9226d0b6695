"""DBOS, once per process: the engine every durable Nexus of this process shares.

DBOS keeps one instance per process (`DBOS(config=...)`, then `DBOS.launch()`), on one system
database. So the first Nexus with nexus.durable on starts it, the next ones on the same
database share it (counted), and the last one to close destroys it; a Nexus that names another
database while one is in use is a config error, not a second engine.

Each process is its own DBOS executor (`nexus:<host>:<pid>:<random>`), so a process that starts
never takes over the work of one that is still alive (DBOS's default, one executor "local" per
application, would have every starting process recover every pending workflow, a live host's
included). What a killed host left is taken over by `recover_dead`, which asks DBOS to recover
only the executors of this machine whose process is gone.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from typing import Any

log = logging.getLogger("nexus_durable")

#: DBOS's application name and version: fixed, so a workflow started by one release's process is
#: recovered by another's (DBOS's default version is a hash of the workflow code, and a workflow
#: is only recovered by a process of the version that started it)
APP_NAME = "nexus"
APP_VERSION = "nexus-durable-1"
#: how often a waiting `recv` looks for a message on SQLite (DBOS's default is 1 s; the answer
#: from another process should resume the call well within a second)
POLL_SECONDS = 0.2
EXECUTOR_PREFIX = "nexus"

_lock = threading.Lock()
_url: str | None = None
_users = 0
_executor_id = ""


def executor_id() -> str:
    """This process's DBOS executor id (empty before the engine starts)."""
    return _executor_id


def database_url() -> str | None:
    """The system database of the running engine, or None."""
    return _url


def acquire(url: str) -> None:
    """Start DBOS on `url` (or count one more user of the running engine). Raises ValueError
    when DBOS runs on another database in this process."""
    global _url, _users, _executor_id
    from dbos import DBOS

    from . import _workflows  # noqa: F401  (the workflows are registered before launch)

    with _lock:
        if _url is not None:
            if url != _url:
                raise ValueError(f"this process runs durable calls on {_redacted(_url)} already; one durable "
                                 "database per process (give every Nexus of the process the same `database`)")
            _users += 1
            return
        _executor_id = f"{EXECUTOR_PREFIX}:{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        config: Any = {
            "name": APP_NAME,
            "system_database_url": url,
            "application_version": APP_VERSION,
            "executor_id": _executor_id,
            "log_level": "WARNING",
            "notification_listener_polling_interval_sec": POLL_SECONDS,
        }
        DBOS(config=config)
        try:
            DBOS.launch()
        except BaseException:
            DBOS.destroy(destroy_registry=False)
            raise
        _url, _users = url, 1


def release() -> None:
    """One user fewer; the last one destroys the engine (its threads stop, its pool closes)."""
    global _url, _users
    from dbos import DBOS

    with _lock:
        if _url is None:
            return
        _users -= 1
        if _users > 0:
            return
        _url = None
        DBOS.destroy(destroy_registry=False)


def _alive_here(executor: str) -> bool | None:
    """Whether the process of a nexus executor id runs: True or False for one of this machine,
    None for another machine's or another kind of id (it cannot be told from here)."""
    parts = executor.split(":")
    if len(parts) != 4 or parts[0] != EXECUTOR_PREFIX or parts[1] != socket.gethostname():
        return None
    try:
        pid = int(parts[2])
    except ValueError:
        return None
    if pid == os.getpid():
        return executor == _executor_id
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def recover_dead(workflow_names: tuple[str, ...]) -> list[str]:
    """Recover the pending workflows (of these names) of this machine's executors whose process
    has ended: DBOS re-enqueues each, and one running process (this one, or another host on the
    database) runs it from its last checkpoint. Returns the executors recovered."""
    from dbos import DBOS

    dead: set[str] = set()
    for name in workflow_names:
        for status in DBOS.list_workflows(status="PENDING", name=name, load_input=False, load_output=False):
            executor = status.executor_id or ""
            if executor and _alive_here(executor) is False:
                dead.add(executor)
    if dead:
        log.info("recovering the pending durable calls of ended processes: %s", ", ".join(sorted(dead)))
        # DBOS's own recovery of named executors (what its Conductor asks for): the re-enqueue is
        # atomic, so two hosts that recover the same executor at once still run each workflow once
        DBOS._recover_pending_workflows(sorted(dead))
    return sorted(dead)


def _redacted(url: str) -> str:
    """A database URL without its password, for messages."""
    try:
        from sqlalchemy.engine import make_url

        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        return url.split("@")[-1]
