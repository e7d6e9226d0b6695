"""The runtime view (root only): a mount namespace in which the child's read-only runtime paths
are reachable by a uid without any capability, so that the ``uid`` layer can drop them all.

Why: the ``uid`` layer turns the child into an unprivileged uid. The Python runtime it imports
from lazily may sit below a folder other users cannot search (pyenv's /root/.pyenv under a 0700
/root is the usual case). Keeping CAP_DAC_READ_SEARCH to read it also let a script search every
folder on the machine: stat, readlink, getxattr and inotify need no open, so Landlock never saw
them. Instead, each folder that is not searchable by others and holds a runtime path (/root) is
covered, in a mount namespace of the child's own, by an empty tmpfs holding only the runtime
paths beneath it, each bind-mounted read-only at its own path. Every path keeps its name (the
modules the zygote imported already name their files by them), and everything else in /root is
simply not there (ENOENT) for the child.

Made once by the zygote, before it forks (its children inherit its mount namespace: no cost per
run); a process that enters the sandbox without one (the spawn launcher's children, the probes)
makes its own in `enter()` (~2 ms). Where nothing needs covering (a runtime under /usr), no
namespace is made at all.

Where the view cannot be made (no mount namespaces, say in a container without CAP_SYS_ADMIN)
or would not help (a runtime path that other users may not read itself), `View.error` says why,
and the ``uid`` layer keeps CAP_DAC_READ_SEARCH as before, saying so in `nexus doctor`.
"""

from __future__ import annotations

import ctypes
import os
import stat

import attrs

from .libc import last_error, libc

_mount = libc.mount
_mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
_umount2 = libc.umount2

CLONE_NEWNS = 0x00020000
MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
MNT_DETACH = 2

#: the tmpfs that covers a folder holds only a few folders and mount points
_TMPFS_OPTIONS = b"mode=0755,size=256k,nr_inodes=1024"


class ViewError(Exception):
    """The view could not be made; the message says why."""


@attrs.frozen
class View:
    """The mount view a process lives in. covered: the folders replaced by a tmpfs that holds
    only the runtime paths beneath them; bound: those paths; error: why there is no view although
    one is needed (then the child keeps CAP_DAC_READ_SEARCH)."""

    covered: tuple[str, ...] = ()
    bound: tuple[str, ...] = ()
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    def describe(self) -> str:
        if self.error is not None:
            return f"no runtime view ({self.error})"
        if not self.covered:
            return "the runtime is readable by every user"
        return (f"the runtime below {', '.join(self.covered)} reached through a mount view that shows "
                f"only the runtime there")


#: the view of this process: made here, or inherited from the zygote across fork
_current: View | None = None


def current() -> View | None:
    return _current


def _usable_by_others(st: os.stat_result, read: bool) -> bool:
    """Whether a user of no group of the file's may read it (`read`), or else search it."""
    if not stat.S_ISDIR(st.st_mode):
        return bool(st.st_mode & stat.S_IROTH) or not read
    want = stat.S_IROTH | stat.S_IXOTH if read else stat.S_IXOTH
    return st.st_mode & want == want


def plan(read_paths: tuple[str, ...], rw_paths: tuple[str, ...] = ()) -> dict[str, list[str]]:
    """For each folder that other users cannot search and that holds one of the paths, the paths
    below it; the highest such folder of each path (so covers never nest). Raises ViewError
    for a read path that other users could not read even through a view (or a read-write folder
    they could not search: a child's own scratch folder below it is its own)."""
    covers: dict[str, list[str]] = {}
    for path in dict.fromkeys(read_paths + rw_paths):
        try:
            st = os.stat(path)
        except OSError as exc:
            raise ViewError(f"cannot stat {path!r}: {exc.strerror}") from None
        if not _usable_by_others(st, read=path not in rw_paths):
            raise ViewError(f"{path!r} (mode {stat.S_IMODE(st.st_mode):04o}) is not readable by other users")
        parts = path.strip("/").split("/")
        for i in range(len(parts)):
            ancestor = "/" + "/".join(parts[:i])
            try:
                mode = os.stat(ancestor).st_mode
            except OSError as exc:
                raise ViewError(f"cannot stat {ancestor!r}: {exc.strerror}") from None
            if not mode & stat.S_IXOTH:
                if ancestor == "/":
                    raise ViewError("'/' is not searchable by other users")
                covers.setdefault(ancestor, []).append(path)
                break
    return covers


def _call(what: str, res: int) -> None:
    if res != 0:
        raise ViewError(f"{what} failed: {last_error()}")


def make(read_paths: tuple[str, ...], rw_paths: tuple[str, ...] = ()) -> View:
    """Make (or reuse) this process's view of `read_paths` (bound read-only) and `rw_paths`
    (bound read-write). Never raises: a View whose `error` says why there is none."""
    global _current
    if _current is not None:
        return _current
    try:
        covers = plan(read_paths, rw_paths)
    except ViewError as exc:
        _current = View(error=str(exc))
        return _current
    if not covers:
        _current = View()
        return _current
    if os.geteuid() != 0:
        return View(error="not root")
    try:
        _current = _mount_view(covers, frozenset(rw_paths))
    except (ViewError, OSError) as exc:
        _current = View(error=str(exc))
    return _current


def _mount_view(covers: dict[str, list[str]], writable: frozenset[str]) -> View:
    _call("unshare(CLONE_NEWNS)", libc.unshare(CLONE_NEWNS))
    # nothing mounted from here on may propagate back into the host's namespace
    _call("making / private", _mount(None, b"/", None, MS_REC | MS_PRIVATE, None))
    bound: list[str] = []
    covered: list[str] = []
    old_umask = os.umask(0o022)
    try:
        for folder, paths in sorted(covers.items()):
            # each runtime path held by an fd before the tmpfs hides it, then bound from the fd
            wanted = [p for p in sorted(set(paths))
                      if not any(p.startswith(b.rstrip("/") + "/") for b in paths if b != p)]
            fds = {p: os.open(p, os.O_PATH | os.O_CLOEXEC) for p in wanted}
            try:
                _call(f"mounting a tmpfs on {folder}", _mount(b"tmpfs", os.fsencode(folder), b"tmpfs",
                                                              MS_NOSUID | MS_NODEV | MS_NOEXEC, _TMPFS_OPTIONS))
                covered.append(folder)
                for path, fd in fds.items():
                    source = f"/proc/self/fd/{fd}".encode()
                    if stat.S_ISDIR(os.fstat(fd).st_mode):
                        os.makedirs(path, 0o755, exist_ok=True)
                    else:
                        os.makedirs(os.path.dirname(path), 0o755, exist_ok=True)
                        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644))
                    target = os.fsencode(path)
                    _call(f"binding {path}", _mount(source, target, None, MS_BIND | MS_REC, None))
                    if path not in writable:
                        _call(f"making {path} read-only",
                              _mount(None, target, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, None))
                    bound.append(path)
            finally:
                for fd in fds.values():
                    os.close(fd)
    except BaseException:
        # half a view would hide the runtime from a child that keeps the capability to read it:
        # take every tmpfs away again (with the binds inside it), back to the plain tree
        for folder in reversed(covered):
            _umount2(os.fsencode(folder), MNT_DETACH)
        raise
    finally:
        os.umask(old_umask)
    return View(covered=tuple(sorted(covers)), bound=tuple(bound))
