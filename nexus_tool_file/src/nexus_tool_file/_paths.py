"""Confinement: every path a file tool touches lies inside the workspace, and is opened there
in one step, so nothing can swap a folder for a symlink between a check and the open.

A requested path is first named relative to the workspace (`relative`): `..` is resolved
lexically, an absolute path must lie inside. Then it is opened beneath the workspace's folder
(`_beneath.open_beneath`: openat2 with RESOLVE_BENEATH, or an O_NOFOLLOW walk): symlinks that
stay inside are followed, any that lead out make the open fail, whatever changes on disk while
it happens. A file is written as a temporary file created in its folder's fd and renamed over
it there (`Location`); walks (glob, grep) go from fd to fd with O_NOFOLLOW and never enter a
symlinked folder.

`realpath` is still used, but only for words: to tell a model where a refused symlink leads.

The session folder, when a config puts it inside the workspace, is out of bounds too: run
records must not be rewritten by a tool a script can call. And files that configure programs run
on the host (`.git/`, `.envrc`, ...) are not changed: `locate`, the way to a file that is about to
change, asks the workspace's `Protection` (see _protect) about every name the file goes by.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ._beneath import DIR_ANCHOR, MAX_SYMLINKS, READ_DIR, READ_FILE, STAT_ONLY, fd_path, open_beneath


if TYPE_CHECKING:
    from ._protect import Protection


class FileToolError(Exception):
    """An expected failure: the message is what the model reads, so it says what and where."""


class OutsideWorkspace(FileToolError):
    """A path that resolves outside the workspace."""


def _join(*parts: str) -> str:
    return "/".join(p for p in parts if p)


@dataclass
class Location:
    """Where a file is, for changing it: an open fd of its folder, and its name there (never a
    symlink: a link as the last component was followed while it stayed inside). Close it."""

    dir_fd: int
    name: str
    rel: str  # relative to the workspace root, symlinks resolved: what results show
    stat: os.stat_result | None  # the file as it was found (lstat), None when it does not exist
    created: list[str] = field(default_factory=list)  # folders made for it, outermost first

    def close(self) -> None:
        os.close(self.dir_fd)

    def open_read(self) -> int:
        """An fd to read the file: opened in the folder, O_NOFOLLOW (a symlink swapped in since
        it was located fails, it is not followed)."""
        return os.open(self.name, READ_FILE | os.O_NOFOLLOW, dir_fd=self.dir_fd)


@dataclass
class Found:
    """A file a walk found: `rel` names it (as walked: a symlink keeps its own name)."""

    rel: str
    dir_fd: int  # the fd of its folder, valid until the walk moves on
    name: str
    is_link: bool
    ws: Workspace

    def open_read(self) -> int:
        """An fd to read it. A regular entry is opened in its folder with O_NOFOLLOW; a symlink
        (one the walk found to lead inside) is opened beneath the workspace, so a link changed
        since cannot lead out."""
        if not self.is_link:
            return os.open(self.name, READ_FILE | os.O_NOFOLLOW, dir_fd=self.dir_fd)
        return self.ws.open(self.rel, READ_FILE).fd


@dataclass
class Opened:
    fd: int
    rel: str  # relative to the root, symlinks resolved


@dataclass(frozen=True)
class Workspace:
    """The folder the file tools may touch, held as its real path, the session folder they may
    not touch (when a config puts it inside), and the files in it they may not change."""

    root: Path
    session_dir: Path | None = None
    protection: Protection | None = None

    @classmethod
    def at(cls, folder: str | os.PathLike[str], session_dir: str | os.PathLike[str] | None = None,
           protection: Protection | None = None) -> Workspace:
        return cls(Path(os.path.realpath(folder)), Path(session_dir) if session_dir is not None else None,
                   protection)

    # -- naming ----------------------------------------------------------------------------

    def show(self, rel: str) -> str:
        """How results name a path: relative to the root, with `/`, `.` for the root itself."""
        return rel or "."

    def _rel_of(self, absolute: str) -> str | None:
        """`absolute` (normalized) relative to the root, or None when it is not inside."""
        path = Path(absolute)
        if not path.is_relative_to(self.root):
            return None
        rel = path.relative_to(self.root).as_posix()
        return "" if rel == "." else rel

    def relative(self, requested: str) -> str:
        """The path `requested` (relative to the root, or absolute) names, relative to the root
        and normalized (`..` resolved by name), or OutsideWorkspace. Nothing is opened."""
        if "\0" in requested:
            raise FileToolError(f"{requested!r}: a path cannot contain a NUL character")
        lexical = os.path.normpath(os.path.join(self.root, requested))
        rel = self._rel_of(lexical)
        if rel is not None:
            return rel
        real = os.path.realpath(lexical)  # an absolute path through another name of the workspace
        rel = self._rel_of(real)
        if rel is not None:
            return rel
        raise OutsideWorkspace(f"{requested}: outside the workspace ({self.root}); use a path inside it")

    def _escaped(self, requested: str) -> OutsideWorkspace:
        real = os.path.realpath(os.path.join(self.root, self.relative(requested)))
        if self._rel_of(real) is not None:  # it changed between the open and this look
            return OutsideWorkspace(f"{requested}: leads outside the workspace ({self.root}) through a symlink")
        return OutsideWorkspace(f"{requested}: leads outside the workspace ({self.root}) through a symlink, to {real}")

    def _session_rel(self) -> str | None:
        if self.session_dir is None:
            return None
        return self._rel_of(os.path.realpath(self.session_dir))

    def guard(self, rel: str, requested: str) -> None:
        """Refuse `rel` (real, relative to the root) when it lies in the session folder."""
        session = self._session_rel()
        if session is not None and (session == "" or rel == session or rel.startswith(session + "/")):
            raise FileToolError(f"{requested}: inside the session folder ({self.session_dir}), where run records "
                                "are kept; the file tools do not touch it")

    def protect(self, rel: str, named: str, *, folder: bool = False) -> None:
        """Refuse to change `rel` (relative to the root) when it is protected; `named` is how the
        call named it (see `Protection.check`)."""
        if self.protection is not None:
            self.protection.check(rel, named, folder=folder)

    def real_of_new(self, rel: str) -> str:
        """Where a file that does not exist yet would be made: the real path of the nearest
        folder above `rel` that exists, with the rest of `rel` below it."""
        parts = rel.split("/")
        for i in range(len(parts) - 1, -1, -1):
            try:
                opened = self.open("/".join(parts[:i]), STAT_ONLY)
            except (FileNotFoundError, NotADirectoryError):
                continue
            os.close(opened.fd)
            return _join(opened.rel, *parts[i:])
        return rel

    def _real_rel(self, fd: int, fallback: str) -> str:
        """Where the open `fd` is, relative to the root, as the kernel says; where it cannot say
        (no /proc), `fallback` with its symlinks resolved by name, for naming and the session
        check only (what was opened was opened beneath the workspace either way)."""
        path = fd_path(fd)
        if path is None:
            resolved = self._rel_of(os.path.realpath(os.path.join(self.root, fallback)))
            return resolved if resolved is not None else fallback
        rel = self._rel_of(path)
        if rel is None:  # moved out from under the call after it was opened
            raise OutsideWorkspace(f"{fallback or '.'}: it was moved outside the workspace ({self.root}) "
                                   "while the call ran")
        return rel

    # -- opening ---------------------------------------------------------------------------

    @contextmanager
    def anchor(self) -> Iterator[int]:
        """An fd of the workspace folder, for the duration of one call (opened per call, so a
        workspace folder that is removed and made again is followed)."""
        try:
            fd = os.open(self.root, DIR_ANCHOR)
        except OSError as exc:
            raise FileToolError(f"the workspace {self.root} cannot be opened: {exc.strerror}; create it, "
                                "or configure another") from None
        try:
            yield fd
        finally:
            os.close(fd)

    def _open_rel(self, root_fd: int, rel: str, flags: int, requested: str, mode: int = 0o666) -> int:
        try:
            return open_beneath(root_fd, rel or ".", flags, mode)
        except OSError as exc:
            if exc.errno != errno.EXDEV:
                raise
        # RESOLVE_BENEATH refuses every absolute symlink, also one that points back inside:
        # those are followed by name here, and the path they give is opened beneath again.
        real = self._rel_of(os.path.realpath(os.path.join(self.root, rel)))
        if real is not None and real != rel:
            try:
                return open_beneath(root_fd, real or ".", flags, mode)
            except OSError as exc:
                if exc.errno != errno.EXDEV:
                    raise
        raise self._escaped(requested)

    def open(self, requested: str, flags: int) -> Opened:
        """Open what `requested` names, symlinks inside followed; the caller closes `.fd`."""
        rel = self.relative(requested)
        with self.anchor() as root_fd:
            fd = self._open_rel(root_fd, rel, flags, requested)
        try:
            real = self._real_rel(fd, rel)
            self.guard(real, requested)
        except BaseException:
            os.close(fd)
            raise
        return Opened(fd, real)

    def kind(self, requested: str) -> tuple[str, str]:
        """("file" | "dir" | "other" | "missing", real rel) of what `requested` names."""
        try:
            opened = self.open(requested, STAT_ONLY)
        except (FileNotFoundError, NotADirectoryError):
            return "missing", self.relative(requested)
        try:
            mode = os.fstat(opened.fd).st_mode
        finally:
            os.close(opened.fd)
        what = "file" if stat.S_ISREG(mode) else "dir" if stat.S_ISDIR(mode) else "other"
        return what, opened.rel

    def _open_dir(self, root_fd: int, rel: str, requested: str, created: list[str] | None, named: str = "") -> int:
        """An anchor fd of the folder `rel`; with `created` (a list), missing folders are made
        (and listed there, outermost first), none that is protected (`named`: the file they are
        made for, as the call named it)."""
        if created is None:
            return self._open_rel(root_fd, rel, DIR_ANCHOR, requested)
        try:
            return self._open_rel(root_fd, rel, DIR_ANCHOR, requested)
        except (FileNotFoundError, NotADirectoryError):
            pass  # made below, one folder at a time (a file where a folder should be is named there)
        current = os.open(".", DIR_ANCHOR, dir_fd=root_fd)
        try:
            parts = rel.split("/")
            for i, part in enumerate(parts):
                prefix = "/".join(parts[: i + 1])
                try:
                    step = self._open_rel(root_fd, prefix, DIR_ANCHOR, requested)
                except NotADirectoryError:
                    raise FileToolError(f"cannot create {requested}: {prefix} is a file, not a folder") from None
                except FileNotFoundError:
                    making = _join(self._real_rel(current, "/".join(parts[:i])), part)
                    self.guard(making, requested)  # no folder is made in the session folder
                    self.protect(making, named or making, folder=True)  # nor a protected one (`link/hooks`, link -> .git)
                    try:
                        os.mkdir(part, dir_fd=current)
                        created.append(making)
                    except FileExistsError:
                        pass  # made meanwhile: open it like any other
                    # opened in the folder it was made in, not followed if it became a symlink
                    step = os.open(part, DIR_ANCHOR | os.O_NOFOLLOW, dir_fd=current)
                os.close(current)
                current = step
            return current
        except BaseException:
            os.close(current)
            raise

    @contextmanager
    def in_folder(self, rel: str) -> Iterator[int]:
        """An anchor fd of the existing folder `rel` (real, relative to the root), opened beneath,
        and not in the session folder (checked on what was opened: a folder swapped for a symlink
        since `rel` was worked out cannot lead there)."""
        with self.anchor() as root_fd:
            fd = self._open_rel(root_fd, rel, DIR_ANCHOR, rel or ".")
        try:
            self.guard(self._real_rel(fd, rel), rel or ".")
            yield fd
        finally:
            os.close(fd)

    def locate(self, requested: str, *, create_parents: bool = False) -> Location:
        """The folder and name of the file `requested` names, for reading then replacing (or
        deleting) it in place. A symlink as the last component is followed while it leads inside
        (a write replaces the file a link points to, never the link, never anything outside);
        with `create_parents`, missing folders above it are made.

        Only for a file about to change: a protected path is refused, by the name the call gave
        (`..` resolved), by each name a symlink gives it, by its real path, and by each folder
        that would be made for it, before any is made."""
        rel = self.relative(requested)
        named = rel
        self.protect(rel, named)
        created: list[str] = []
        with self.anchor() as root_fd:
            for _ in range(MAX_SYMLINKS + 1):
                if rel == "":
                    raise FileToolError(f"{requested} is the workspace folder; give the path of a file")
                parent, _, name = rel.rpartition("/")
                dir_fd = self._open_dir(root_fd, parent, requested, created if create_parents else None, named)
                try:
                    dir_rel = self._real_rel(dir_fd, parent)
                    try:
                        found: os.stat_result | None = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
                    except FileNotFoundError:
                        found = None
                    if found is not None and stat.S_ISLNK(found.st_mode):
                        target = os.readlink(name, dir_fd=dir_fd)
                        lexical = os.path.normpath(os.path.join(self.root, dir_rel, target))
                        followed = self._rel_of(lexical)
                        if followed is None:
                            raise OutsideWorkspace(f"{requested}: leads outside the workspace ({self.root}) "
                                                   f"through a symlink, to {os.path.realpath(lexical)}")
                        self.protect(followed, named)  # before the fd is closed: this raises
                        os.close(dir_fd)
                        rel = followed
                        continue
                    real = _join(dir_rel, name)
                    self.guard(real, requested)
                    self.protect(real, named)
                    return Location(dir_fd, name, real, found, created)
                except BaseException:
                    os.close(dir_fd)
                    raise
        raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), requested)

    # -- walking ---------------------------------------------------------------------------

    def walk_files(self, start: str, exclude: Collection[str] = (), max_depth: int | None = None) -> Iterator[Found]:
        """Files below the folder `start` (a real rel path), each folder's files by name, then
        its subfolders' in name order.

        The walk holds one folder fd at a time: it steps into a subfolder with
        O_NOFOLLOW|O_DIRECTORY relative to the folder's fd (a symlink is never entered, whatever
        was swapped in), and back out through `..` of the subfolder's fd, checking that it comes
        back to the very folder it left (a folder moved meanwhile ends the walk with an error).
        Symlinked files are yielded only when they lead to a regular file inside. Folders named
        in `exclude`, and the session folder, are skipped. `max_depth` 1 means the files directly
        in `start`. Deep trees cost no recursion and no extra fds.
        """
        session = self._session_rel()
        self.guard(start, start or ".")
        with self.anchor() as root_fd:
            fd = self._open_rel(root_fd, start, READ_DIR, start or ".")
        # frames: (rel, (st_dev, st_ino), subfolders still to visit); the last is where fd is
        frames: list[tuple[str, tuple[int, int], Iterator[str]]] = []
        rel = start
        try:
            while True:
                depth = len(frames) + 1
                files, folders = [], []
                with os.scandir(fd) as scan:
                    for entry in scan:
                        if entry.is_dir(follow_symlinks=False):
                            folders.append(entry.name)
                        else:
                            files.append((entry.name, entry.is_symlink()))
                for name, is_link in sorted(files):
                    path = _join(rel, name)
                    if is_link and not self._leads_to_a_file_inside(path):
                        continue
                    if session is not None and (path == session or path.startswith(session + "/")):
                        continue
                    yield Found(path, fd, name, is_link, self)
                wanted = [] if max_depth is not None and depth >= max_depth else sorted(
                    d for d in folders if d not in exclude and _join(rel, d) != session)
                here = os.fstat(fd)
                frames.append((rel, (here.st_dev, here.st_ino), iter(wanted)))
                while frames:
                    frame_rel, _, todo = frames[-1]
                    subfolder = next(todo, None)
                    if subfolder is not None:
                        try:
                            child = os.open(subfolder, READ_DIR | os.O_NOFOLLOW, dir_fd=fd)
                        except OSError:
                            continue  # gone, swapped for a symlink or a file, or unreadable: skip it
                        os.close(fd)
                        fd, rel = child, _join(frame_rel, subfolder)
                        break
                    frames.pop()
                    if not frames:
                        return
                    parent = os.open("..", READ_DIR, dir_fd=fd)
                    seen = os.fstat(parent)
                    os.close(fd)
                    fd = parent
                    if (seen.st_dev, seen.st_ino) != frames[-1][1]:
                        raise FileToolError(f"{frame_rel}: the folder was moved while it was searched; "
                                            "search again")
        finally:
            os.close(fd)

    def dangling_inside(self, rel: str) -> bool:
        """Whether a dangling symlink's target would lie inside (for naming it, nothing more)."""
        return self._rel_of(os.path.realpath(os.path.join(self.root, rel))) is not None

    def _leads_to_a_file_inside(self, rel: str) -> bool:
        try:
            opened = self.open(rel, STAT_ONLY)
        except (OSError, FileToolError):
            return False
        try:
            return stat.S_ISREG(os.fstat(opened.fd).st_mode)
        finally:
            os.close(opened.fd)
