"""What a launcher is (runs in the host): it gives the runner a `Child`, a process in its own
process group with a scratch folder of its own and the two pipe ends the run protocol runs on.
The engine and the runner use nothing of a launcher but `Launcher`'s methods, and nothing of a
child but `Child`'s: whatever made it (a fresh interpreter, a fork of the warm zygote, or some
day a process on another machine) stays behind them.
"""

from __future__ import annotations

import abc
import os
import signal
from collections.abc import Callable
from typing import ClassVar

import attrs

from .. import protocol
from .cleanup import janitor

#: the environment a child (and the zygote) gets: nothing of the host's
CHILD_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1",
             "PYTHONIOENCODING": "utf-8"}


@attrs.define(eq=False)
class Child:
    """A running child: its pid (= its process group) and the host's ends of its pipes.

    As it stands, a process the host started itself (`waiter` waits for it); a launcher whose
    children another process makes (the zygote's) subclasses it."""

    #: a process of this machine (its pid may be signalled and placed here); a child in another
    #: machine's pool (nexus_ray's RemoteChild) is not
    local: ClassVar[bool] = True
    pid: int
    rfd: int  # the host reads the child's messages here
    wfd: int  # the host writes to the child here
    scratch: str | None = None  # the child's scratch folder, removed on close
    _waiter: Callable[[float], int | None] | None = attrs.field(default=None, repr=False)
    #: CPU seconds the process used, once its exit is known (None where the launcher cannot tell)
    cpu_seconds: float | None = None
    #: the bindings it has compiled already (None: none), so the START can leave them out
    bindings_key: str | None = None
    #: a pidfd of the process, where it cannot have started others (seccomp refuses fork): then
    #: `end` signals it directly instead of asking for a group kill
    pidfd: int | None = None
    _closed: bool = attrs.field(default=False, repr=False)

    def end(self) -> None:
        """Make sure a child that said it finished is gone: it is exiting by itself already, so
        without waiting, and, where only it can be left, without a message to the launcher."""
        if self.pidfd is not None:
            try:
                signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
                return
            except OSError:
                pass
        self.kill()

    def kill(self) -> None:
        """Kill the child's whole process group (it may have started nothing, but if it did)."""
        for kill in (os.killpg, os.kill):
            try:
                kill(self.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def wait(self, timeout: float = 5.0) -> int | None:
        """The exit status as subprocess reports it (negative: killed by that signal), or None
        if it is not known within `timeout` seconds."""
        return self._waiter(timeout) if self._waiter else None

    def finished(self) -> None:
        """Its run is over (it is being ended): what the launcher does next is its business."""

    def died_with_its_maker(self) -> bool:
        """Whether it ended because the process that made it went away (a zygote's children
        die with it), not through anything its script did. Known once `wait` has returned."""
        return False

    def maker_text(self) -> str:
        """What made it, for the error of a run whose child died with its maker."""
        return "the zygote that forked it"

    def close(self) -> None:
        """Close the host's ends of its pipes and have its scratch folder removed (off this
        thread: a script may have left 100,000 files there; `Launcher.close` waits for it)."""
        if self._closed:
            return
        self._closed = True
        self._close_fds()
        if self.scratch:
            janitor.remove(self.scratch)

    def _close_fds(self) -> None:
        for fd in (self.rfd, self.wfd, self.pidfd):
            if fd is None:
                continue
            try:
                os.close(fd)
            except OSError:
                pass


class LayersMissing(Exception):
    """No child: where the launcher's children run (a Ray node, for nexus_ray) lacks sandbox
    layers the session requires (code_exec's `require`). The run is refused as "sandbox
    unavailable", as a session that lacks them on its own machine refuses it."""


class Launcher(abc.ABC):
    """Makes the children that run scripts, each isolated by one policy (layers, limits, read
    paths) and with a scratch folder of its own, which `Child.close()` removes."""

    #: the pid of the helper process it keeps, if any (for `nexus doctor`)
    pid: int | None = None

    def start(self) -> None:
        """Be ready to launch now rather than on the first launch; raises where it cannot."""

    @abc.abstractmethod
    def launch(self) -> Child:
        """A new child, waiting for its START. Raises where none can be made."""

    def preload(self, key: str, bindings: protocol.BindingsPayload) -> None:
        """The bindings the next children should have compiled (not run) before their script
        comes, where the launcher can do that (a child without them gets them in the START)."""

    def held_fds(self) -> set[int]:
        """The fds it keeps open between runs (for a test that looks for leaks)."""
        return set()

    @abc.abstractmethod
    def close(self) -> None:
        """Let every child it made go, and whatever helper it keeps; once it returns, their
        scratch folders are gone (`cleanup.janitor.drain`)."""
