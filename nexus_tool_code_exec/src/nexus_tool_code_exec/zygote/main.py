"""The zygote process: imports the runtime once, then forks one child per script (runs in the
zygote, and in each child until that child becomes a script's: see `_child_after_fork`).

Started by the host (launchers/zygote.py) as `python -I -m nexus_tool_code_exec.zygote`, it talks
to the host over a Unix socket pair (protocol.py's zygote messages; each child's pipe ends are
passed to the host with SCM_RIGHTS). It keeps `spare_count` children forked ahead, each with its own
scratch folder and two pipes, already isolated (sandbox.enter) and waiting for a script; it hands
a spare's pipe ends to the host as soon as it has forked it, so that a run takes a child without
asking the zygote anything. The host then speaks the run protocol with the child directly,
exactly as with a spawned child. `Zygote` is the zygote: what it keeps, and each state and
request in a method of its own, in the order `Zygote.serve_host` goes through them. It reads the
host's requests through `protocol.read_zygote_request` (the host is trusted: a bad request is a
bug, and the zygote stops, taking its children with it). The zygote stays single-threaded (forking from a threaded
process is unsafe, and a user namespace can only be entered by a single-threaded process); it
reaps its children and reports how each ended.

It forks a spare's replacement once that spare has ended (its run is over: the host kills it, or
it exits), not while the run goes on: a fork and a sandbox set-up are a few ms of CPU, largely in
the kernel, and this kernel does not preempt them, so next to a run they delayed the run's
wake-ups by up to a millisecond on a 2-vCPU VM (measured; with the refill at the start of each
run, the 100-call benchmark took a fifth longer). With two spares, a run that follows another
within those few ms still finds one ready. As root the refill runs under SCHED_IDLE, so that it
only takes CPU time nobody else wants (the zygote is started in the host's session, so in its
scheduler autogroup, where a policy counts against the host's own threads); the host lifts
SCHED_IDLE off the spare it gives a script. A run that finds no spare waits for one being forked,
or, when none is (more runs at the same time than spares), asks for a FORK.

What a fork costs is mostly what the zygote's memory costs: its page tables are copied, and
every page a child then writes to is copied too (docs/performance.md has the figures). So the
zygote imports only what children use, collects and freezes its heap before it forks, and does
between forks as little as it can: a scratch folder whose script left it untouched is used again
(`ScratchFolders`) rather than removed and made anew.
"""

from __future__ import annotations

import fcntl
import gc
import os
import select
import signal
import socket
import stat
import struct
from typing import Any, NoReturn

from .. import protocol


#: the exits of children the host has not asked about that the zygote keeps, for a KILL that
#: comes after its child ended by itself (the host kills every child that did not finish)
ENDED_KEPT = 256


def _preimport(allowed: list[str], policy: protocol.ChildPolicy, scratch_root: str) -> int | None:
    """Import what every script needs and work out the sandbox's programs once, so a forked
    child starts warm; as root, make the runtime view children live in (sandbox/view.py), so
    that they need no capability to read the runtime. Returns the fd of a network namespace
    children share (root only)."""
    import attrs  # noqa: F401
    import cattrs  # noqa: F401

    from ..child import parallel, runtime  # noqa: F401

    for name in allowed:
        try:
            __import__(name)
        except ImportError:
            pass
    net_fd = None
    try:
        from .. import sandbox

        sandbox.prepare()
        net_fd = sandbox.make_shared_netns()
        if "uid" in policy.get("layers", ()) and os.geteuid() == 0:
            from ..sandbox import view

            view.make(tuple(policy.get("read_paths", ())), (scratch_root,))
    except Exception:  # noqa: BLE001 - each child's enter() reports what is wrong, with its layer
        pass
    runtime.warm_up()
    gc.collect()
    gc.freeze()  # children then do not touch (and copy) the zygote's objects when they collect
    return net_fd


def _status_of(wait_status: int) -> int:
    if os.WIFSIGNALED(wait_status):
        return -os.WTERMSIG(wait_status)
    return os.WEXITSTATUS(wait_status)


def _close_all_but(keep: set[int]) -> None:
    """Close every fd above 2 except `keep`: a child must not hold another child's pipe ends
    (its EOF would never come) nor the zygote's socket."""
    low = 3
    for fd in sorted(keep):
        if fd >= low:
            os.closerange(low, fd)
            low = fd + 1
    os.closerange(low, 1 << 20)


#: ioctl(FS_IOC_GETFLAGS): a file's inode flags (chattr), _IOR('f', 1, long) on 64-bit Linux
_FS_IOC_GETFLAGS = 0x80086601


class ScratchFolders:
    """The children's scratch folders, below `root`. A folder whose script left it exactly as it
    was given is reset, renamed and kept for a later child of this zygote (so of the same Nexus),
    unless the zygote is the shared pool's (`reuse` False: its children are of many sessions, and
    no session's script gets a folder another session's had; an untouched one is simply removed);
    any other is removed. Making and removing a folder are the dearest file-system operations of
    a run (an inode made and one freed; on ext4 without a journal each new inode is searched for
    past every one freed in the last half minute).

    "Exactly as it was given": empty; mode 0700; one link per parent (no subfolder); size, mtime
    and inode flags (chattr) as when it was made; no extended attribute. Anything else a script
    changed, it changed on purpose, and that folder goes. What is reset on one that stays: its
    owner (the uid layer gave it to the child's uid) and its access time; and its name, so that
    no path a script saw names a folder another script gets. A later script can tell nothing of
    it but its change time, which the reset sets.

    A folder that goes is renamed out of the way at once (`trash`), and removed by the host
    (launchers/cleanup.py's janitor, which walks any tree a script can make without recursion): the
    zygote never walks a script's tree, so no tree can hold it up."""

    def __init__(self, root: str, reuse: bool = True) -> None:
        self.root = root
        self.reuse = reuse
        self._free: list[str] = []
        #: every folder of ours -> (atime, mtime, size, flags) as first made
        self._first: dict[str, tuple[int, int, int, int]] = {}
        #: folders that go, renamed out of the way, for the host to remove (sent with a SPARE)
        self.trash: list[str] = []

    def _name(self) -> str:
        return f"{self.root}/run-{os.urandom(6).hex()}"  # as unguessable as mkdtemp's

    def take(self) -> str:
        """A folder for a child about to be forked: one given back, or a new one."""
        while self._free:
            path = self._free.pop()
            try:
                if next(iter(os.scandir(path)), None) is None:  # still empty (only root can write there now)
                    return path
            except OSError:
                pass
            self._first.pop(path, None)
            self._throw_away(path)
        path = self._name()
        os.mkdir(path, 0o700)
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            st = os.fstat(fd)
            self._first[path] = (st.st_atime_ns, st.st_mtime_ns, st.st_size, _flags(fd))
        finally:
            os.close(fd)
        return path

    def give_back(self, path: str) -> None:
        """The child that had `path` is gone (reaped: nothing of it can still write there)."""
        first = self._first.pop(path, None)
        if first is None:
            return
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            fd = -1
        if fd >= 0:
            try:
                st = os.fstat(fd)
                if (stat.S_IMODE(st.st_mode) == 0o700 and st.st_nlink == 2 and st.st_size == first[2]
                        and st.st_mtime_ns == first[1] and _flags(fd) == first[3] and not os.listxattr(fd)
                        and next(iter(os.scandir(fd)), None) is None):
                    if not self.reuse:
                        os.rmdir(path)  # empty, and its child is reaped: nothing can write there
                        return
                    if st.st_uid != os.geteuid() or st.st_gid != os.getegid():
                        os.fchown(fd, os.geteuid(), os.getegid())
                    os.utime(fd, ns=first[:2])
                    fresh = self._name()
                    os.rename(path, fresh)
                    self._first[fresh] = first
                    self._free.append(fresh)
                    return
            except OSError:
                pass
            finally:
                os.close(fd)
        self._throw_away(path)

    def _throw_away(self, path: str) -> None:
        """`path` goes: renamed to a trash name (no path a script saw names it any more), for
        the host to remove."""
        gone = f"{self.root}/trash-{os.urandom(6).hex()}"
        try:
            os.rename(path, gone)
        except OSError:
            gone = path
        self.trash.append(gone)


def _flags(fd: int) -> int:
    """The inode flags of `fd` (-1 where the file system has none)."""
    try:
        return int(struct.unpack("l", fcntl.ioctl(fd, _FS_IOC_GETFLAGS, bytes(8)))[0])
    except OSError:
        return -1


class _Forked:
    """A child just forked: it isolates itself, then waits on its pipe for a script. The zygote
    keeps only the host's ends of its pipes, until it has passed them on."""

    def __init__(self, pid: int, scratch: str, host_read: int, host_write: int) -> None:
        self.pid, self.scratch, self.host_read, self.host_write = pid, scratch, host_read, host_write


class Zygote:
    """The zygote's state, and what it does for the host, from its start to its exit.

    It lives through three states, top to bottom in `serve_host`: starting (the imports and the
    sandbox's programs, `_preimport`; then READY and the first spares), serving (it waits for a
    signal or a request, whichever comes: a SIGCHLD makes it reap, report and refill; a request
    is a FORK, a PRELOAD or a KILL), and stopping (the host went away: it kills every child and
    exits). What it keeps:

    - `children`: each child forked and not yet reaped, with its scratch folder;
    - `spares`: the spares forked (held by the host, or running a script), newest last;
    - `killed`: the children the host had killed, whose EXIT it waits for;
    - `ended`: the exits of the last children reaped that nobody asked about (a KILL may come
      after its child ended by itself);
    - `preloaded` and `key`: the bindings compiled for the children forked from now on.
    """

    def __init__(self, ctrl_fd: int, allowed: list[str], policy: protocol.ChildPolicy, scratch_root: str,
                 spare_count: int) -> None:
        self.ctrl = socket.socket(fileno=ctrl_fd)
        self._ctrl_fd = ctrl_fd
        self.policy = policy
        self.spare_count = spare_count
        self.net_fd = _preimport(allowed, policy, scratch_root)
        self.layers = bool(policy.get("layers"))
        from ..child import runtime

        # the sandbox policy of every child, made once: each child gives its own folder and fds
        self.made = runtime.sandbox_policy({**policy, "scratch": scratch_root, "net_fd": self.net_fd})
        self.children: dict[int, str] = {}
        self.spares: list[int] = []
        self.killed: set[int] = set()
        self.ended: dict[int, protocol.ExitMessage] = {}
        self.preloaded: dict[str, Any] = {}
        self.key = ""  # of the bindings preloaded (spares forked since have them compiled)
        self.folders = ScratchFolders(scratch_root, reuse=not policy.get("shared", False))
        # Spares are forked and set themselves up under SCHED_IDLE (root only: the host must be
        # able to lift it off the spare it gives a script), so that this work only gets CPU time
        # nobody else wants; the zygote itself stays at the host's priority for everything else
        # (a kill the watchdog asks for must not wait for an idle CPU).
        self.idle = os.geteuid() == 0 and hasattr(os, "SCHED_IDLE")
        self._requests = protocol.LineReader(1 << 30)  # the host is trusted
        self._wake_r, wake_w = os.pipe()
        os.set_blocking(wake_w, False)
        os.set_blocking(self._wake_r, False)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)

    # -- the states ---------------------------------------------------------------------------------

    def serve_host(self) -> NoReturn:
        """Say READY, fork the first spares, then serve until the host goes away (or sends what is
        not the protocol); then stop."""
        self.send({"t": protocol.READY, "pid": os.getpid()})
        for _ in range(self.spare_count):
            self.push_spare()
        # poll(), not select(): select() takes no fd past 1023 (FD_SETSIZE), and the socket's
        # number is whatever the host had free, past 1023 in a host with many sessions open
        poller = select.poll()
        poller.register(self._ctrl_fd, select.POLLIN)
        poller.register(self._wake_r, select.POLLIN)
        try:
            while True:
                ready = dict(poller.poll())
                if ready.get(self._wake_r):
                    self.children_changed()
                if ready.get(self._ctrl_fd) and not self.read_requests():
                    break
        except protocol.ProtocolError:
            pass  # a request it cannot read is the host's bug: stop as if it had gone away
        self.stop()

    def children_changed(self) -> None:
        """A SIGCHLD came: reap, report the exits asked for and the folders to remove, and fork a
        spare in place of each that ended."""
        try:
            os.read(self._wake_r, 4096)
        except BlockingIOError:
            pass
        self.reap()
        if self.folders.trash:  # now, not with the next spare: its fork (under SCHED_IDLE) can wait long
            trash, self.folders.trash = self.folders.trash, []
            self.send({"t": protocol.TRASH, "paths": trash})
        for pid in [pid for pid in self.spares if pid not in self.children]:  # its run is over (or it died)
            self.spares.remove(pid)
            self.push_spare(pid)

    def read_requests(self) -> bool:
        """Serve the requests that have come; False once the host has gone away."""
        try:
            data = self.ctrl.recv(1 << 16)
        except InterruptedError:
            return True
        if not data:
            return False
        self._requests.feed(data)
        while (msg := self._requests.next()) is not None:
            request = protocol.read_zygote_request(msg)  # a bad one is the host's bug: we stop
            if request["t"] == protocol.FORK:
                self.fork_for(request["req"])
            elif request["t"] == protocol.PRELOAD:
                self.preload(request["key"], request["bindings"])
            else:
                self.kill(request["pid"])
        return True

    def stop(self) -> NoReturn:
        """The host went away: take the children with us."""
        for pid in list(self.children):
            # the group, and the process itself: a spare that has not run yet (SCHED_IDLE on a
            # busy machine) has not made its group, and killpg alone would miss it
            for kill in (os.killpg, os.kill):
                try:
                    kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        os._exit(0)

    # -- the requests -------------------------------------------------------------------------------

    def fork_for(self, req: int) -> None:
        """FORK: the host has no spare at hand (concurrent runs): a child now."""
        child = self.fork_child()
        self.send({"t": protocol.FORKED, "req": req, "pid": child.pid, "scratch": child.scratch},
                  [child.host_read, child.host_write])
        os.close(child.host_read)
        os.close(child.host_write)

    def preload(self, key: str, bindings: protocol.BindingsPayload) -> None:
        """PRELOAD: compiled, never run here: a tool's metadata is a third party's, and the code
        made of it runs only in a child, inside its sandbox, when its script uses it. Then
        spares with these bindings (the host drops the older ones)."""
        from ..child import runtime

        try:
            self.preloaded.clear()
            self.preloaded[key] = runtime.compile_pieces(bindings)
            self.key = key
            gc.collect()
            gc.freeze()
        except Exception:  # a child will compile what it uses itself, and say what failed
            self.preloaded.clear()
            self.key = ""
        for _ in range(self.spare_count):
            self.push_spare()

    def kill(self, pid: int) -> None:
        """KILL: kill that child's process group; its EXIT goes to the host once it is reaped
        (at once if it had ended already)."""
        ended = self.ended.pop(pid, None)
        if ended is not None:  # it had ended already: how
            self.send(ended)
        if pid in self.children:  # only our own, not yet reaped: no pid-reuse race
            self.killed.add(pid)
            for kill in (os.killpg, os.kill):
                try:
                    kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        if pid in self.spares:  # its run is over: the next spare now
            self.spares.remove(pid)
            self.push_spare(pid)

    # -- children -----------------------------------------------------------------------------------

    def reap(self) -> None:
        while self.children:
            try:
                pid, status, usage = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            scratch = self.children.pop(pid, None)
            if scratch is not None:
                self.folders.give_back(scratch)
            exit_msg: protocol.ExitMessage = {"t": protocol.EXIT, "pid": pid, "status": _status_of(status),
                                              "cpu": round(usage.ru_utime + usage.ru_stime, 6)}
            if pid in self.killed:  # the host waits to know how it ended
                self.killed.discard(pid)
                self.send(exit_msg)
            else:  # nobody has asked (yet: a KILL can come after a child ended by itself)
                self.ended[pid] = exit_msg
                if len(self.ended) > ENDED_KEPT:
                    del self.ended[next(iter(self.ended))]

    def fork_child(self) -> _Forked:
        """A new child with its own scratch folder and pipes; it isolates itself at once and
        then waits for its script. The zygote keeps only the host's ends of the pipes."""
        scratch = self.folders.take()
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        net_fd = self.net_fd
        parent = os.getpid()  # known before the fork: the child checks its parent is still this one
        pid = os.fork()
        if pid == 0:
            if not self.layers:  # (entering the sandbox closes every fd but those it keeps)
                _close_all_but({to_child_r, from_child_w} | ({net_fd} if net_fd is not None else set()))
            _child_after_fork(to_child_r, from_child_w,
                              {**self.policy, "scratch": scratch, "net_fd": net_fd, "parent": parent}, self.preloaded,
                              self.made)
        os.close(to_child_r)
        os.close(from_child_w)
        self.children[pid] = scratch
        return _Forked(pid, scratch, from_child_r, to_child_w)

    def push_spare(self, replaces: int | None = None) -> None:
        """Fork the next spare (in place of spare `replaces`, whose run is over) and hand its pipe
        ends to the host, which keeps them until a script needs a child (the zygote keeps nothing
        of it but its pid)."""
        if self.idle:
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
            try:
                child = self.fork_child()  # the child keeps SCHED_IDLE while it sets itself up
            finally:
                os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
        else:
            child = self.fork_child()
        self.spares.append(child.pid)
        del self.spares[:-self.spare_count]  # older ones (of older bindings) the host drops
        self.send({"t": protocol.SPARE, "pid": child.pid, "scratch": child.scratch, "key": self.key, "idle": self.idle,
                   "replaces": replaces}, [child.host_read, child.host_write])
        os.close(child.host_read)
        os.close(child.host_write)

    def send(self, msg: protocol.ZygoteMessage, fds: list[int] | None = None) -> None:
        protocol.send_with_fds(self.ctrl, msg, fds)


def zygote_main(ctrl_fd: int, allowed: list[str], policy: protocol.ChildPolicy, scratch_root: str,
                spare_count: int) -> NoReturn:
    """Serve the host on `ctrl_fd` until it goes away; then kill every child and exit."""
    Zygote(ctrl_fd, allowed, policy, scratch_root, spare_count).serve_host()


def _child_after_fork(rfd: int, wfd: int, policy: protocol.ChildPolicy, preloaded: dict[str, Any],
                      made: Any = None) -> None:
    """In the forked child: isolate, wait for the script, run it, exit."""
    from ..child import runtime

    code = 0
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        runtime.isolate(policy, rfd, wfd, made)
        runtime.PRELOADED_BINDINGS.update(preloaded)
        runtime.serve(rfd, wfd)
    except BaseException:
        code = 1
    finally:
        os._exit(code)
