"""Removing what a run leaves on disk (runs in the host): scratch folders, a zygote's run folder,
session folders made ahead and never used.

A scratch folder holds whatever its script made: a chain of folders 3000 deep (shutil.rmtree
recurses, and gave up with RecursionError past `ignore_errors`), paths longer than PATH_MAX,
100,000 files, folders and files it chmod'ed to 0000, symlinks to anywhere. `remove_tree` walks
it without recursion, by file descriptor, with one directory open at a time: it goes down into a
folder by name (never following a symlink: a link is unlinked, not entered), and back up
through "..", checking that the folder it comes back to is the one it left (device and inode),
so a tree changed under it cannot walk it out of the folder it was given. A folder it may not
read or write (a non-root host, a script's chmod) is given back its owner's rights first.

`Janitor` does the removing on a thread of its own, so that a run's thread (or the zygote's
reader) never waits for a script's 100,000 files to go; `drain()` waits for it, which a
launcher's `close()` does: nothing is left behind once it returns.
"""

from __future__ import annotations

import logging
import os
import queue
import stat
import threading

import attrs

log = logging.getLogger("nexus_tool_code_exec")

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
#: times a folder is listed again when it still is not empty after its entries went (something
#: still writing into it)
_RESCANS = 3


@attrs.define
class _Level:
    """A folder on the way down: its identity, its name in its parent, the subfolders still to
    remove; its fd is open only while it is the folder being worked on."""

    ident: tuple[int, int]
    name: str
    todo: list[str]
    rescans: int = 0


def _open_dir(name: str, parent: int | None) -> int:
    """A folder's fd (never through a symlink); a folder its owner may not read is given back
    the owner's rights first (root needs none)."""
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=parent)
    except PermissionError:
        os.chmod(name, 0o700, dir_fd=parent)  # it is a folder, not a link: O_NOFOLLOW did not fail
        return os.open(name, _DIR_FLAGS, dir_fd=parent)


def _clear(fd: int, problems: list[str], where: str) -> list[str]:
    """Unlink every entry of the folder `fd` but its subfolders, which it returns."""
    if os.geteuid() != 0:
        try:
            mode = os.fstat(fd).st_mode
            if mode & 0o700 != 0o700:
                os.fchmod(fd, stat.S_IMODE(mode) | 0o700)
        except OSError:
            pass
    folders: list[str] = []
    try:
        with os.scandir(fd) as entries:
            names = [(e.name, e.is_dir(follow_symlinks=False)) for e in entries]
    except OSError as exc:
        problems.append(f"{where}: cannot list: {exc.strerror}")
        return folders
    for name, is_dir in names:
        if is_dir:
            folders.append(name)
            continue
        try:
            os.unlink(name, dir_fd=fd)
        except FileNotFoundError:
            pass
        except OSError as exc:
            problems.append(f"{where}/{name}: {exc.strerror}")
    return folders


def remove_tree(path: str | os.PathLike[str]) -> list[str]:
    """Remove `path` and everything below it, whatever its depth, never following a symlink and
    never leaving the tree. Returns what could not be removed (empty when all went)."""
    top = os.fspath(path)
    problems: list[str] = []
    try:
        st = os.lstat(top)
    except FileNotFoundError:
        return problems
    except OSError as exc:
        return [f"{top}: {exc.strerror}"]
    if not stat.S_ISDIR(st.st_mode):
        try:
            os.unlink(top)
        except FileNotFoundError:
            pass
        except OSError as exc:
            problems.append(f"{top}: {exc.strerror}")
        return problems
    try:
        fd = _open_dir(top, None)
    except OSError as exc:
        return [f"{top}: {exc.strerror}"]
    try:
        first = os.fstat(fd)
        if (first.st_dev, first.st_ino) != (st.st_dev, st.st_ino):
            return [f"{top}: changed while it was being removed"]
        stack = [_Level((st.st_dev, st.st_ino), top, _clear(fd, problems, top))]
        while stack:
            level = stack[-1]
            where = f"{top}/...({len(stack) - 1} deep)/{level.name}" if len(stack) > 1 else top
            if level.todo:
                name = level.todo.pop()
                try:
                    child = _open_dir(name, fd)
                except FileNotFoundError:
                    continue
                except OSError as exc:
                    problems.append(f"{where}/{name}: {exc.strerror}")
                    continue
                os.close(fd)
                fd = child
                cst = os.fstat(fd)
                stack.append(_Level((cst.st_dev, cst.st_ino), name, _clear(fd, problems, f"{where}/{name}")))
                continue
            if level.rescans < _RESCANS:
                # its entries are gone; anything that came meanwhile goes too before rmdir
                level.rescans += 1
                level.todo = _clear(fd, problems, where)
                if level.todo:
                    continue
            stack.pop()
            if not stack:
                break
            try:
                parent = os.open("..", _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                problems.append(f"{where}: cannot go back up: {exc.strerror}")
                return problems
            pst = os.fstat(parent)
            os.close(fd)
            fd = parent
            if (pst.st_dev, pst.st_ino) != stack[-1].ident:
                problems.append(f"{where}: moved while it was being removed; stopped there")
                return problems
            try:
                os.rmdir(level.name, dir_fd=fd)
            except FileNotFoundError:
                pass
            except OSError as exc:
                problems.append(f"{where}: {exc.strerror}")
    finally:
        os.close(fd)
    try:
        os.rmdir(top)
    except FileNotFoundError:
        pass
    except OSError as exc:
        problems.append(f"{top}: {exc.strerror}")
    return problems


def remove_logged(path: str | os.PathLike[str]) -> bool:
    """`remove_tree`, its problems logged; whether everything went."""
    problems = remove_tree(path)
    if problems:
        shown = "; ".join(problems[:5]) + (f"; and {len(problems) - 5} more" if len(problems) > 5 else "")
        log.error("run_code could not remove %s: %s", path, shown)
    return not problems


class Janitor:
    """Removes trees on a thread of its own (started when first needed), in the order given."""

    def __init__(self) -> None:
        self._queue: queue.Queue[str | threading.Event] = queue.Queue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def remove(self, path: str | os.PathLike[str]) -> None:
        """Have `path` removed soon, off the calling thread."""
        self._put(os.fspath(path))

    def drain(self, timeout: float = 30.0) -> bool:
        """Wait until every removal asked for so far is done; whether it was within `timeout`."""
        done = threading.Event()
        self._put(done)
        return done.wait(timeout)

    def _put(self, item: str | threading.Event) -> None:
        self._queue.put(item)
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, name="run_code-janitor", daemon=True)
                self._thread.start()

    def _work(self) -> None:
        while True:
            try:
                item = self._queue.get(timeout=5.0)
            except queue.Empty:
                with self._lock:  # idle: let the thread go (a later remove starts another)
                    if self._queue.empty():
                        self._thread = None
                        return
                continue
            if isinstance(item, threading.Event):
                item.set()
                continue
            try:
                remove_logged(item)
            except Exception:  # one tree must not stop the rest
                log.exception("run_code could not remove %s", item)


#: the janitor of this process (every launcher shares it)
janitor = Janitor()
