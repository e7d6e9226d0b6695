"""Persisting a run in its session folder, `<session_dir>/plugins/<plugin id>/<call id>/`:
script.py, stdout.txt, result.json or error.txt, and calls.jsonl (runs in the host).

`SessionStore` is what the engine uses: `open` while the child starts the script, `persist` at the
end (also for a run that never started: a rejected script is persisted too).

Making a file is the slow part: ~60 us in a tight loop on the ext4 disks of small VMs, 150-200 us
next to a run, against ~5 us for writing into one already open. So the folder for the next run is
made ahead, between runs, by a helper thread: a hidden `.pending-<random>` folder beside the
others, holding the four files empty and open. A run renames it to its call id while its child
starts the script, and at the end only writes the contents: the folder and files are complete
when run_code returns, as before, for one rename and four writes. Where no folder is ready (the
first run, runs at the same time) or the rename cannot happen (a folder of that call id exists),
the run makes its folder itself. A folder made ahead and never used is removed on close.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from ..protocol import write_all
from ..launchers.cleanup import remove_logged

if TYPE_CHECKING:
    from .runner import Outcome

log = logging.getLogger("nexus_tool_code_exec")

#: the files of a session folder made ahead (error.txt, for a failed run, is made when needed)
FILES = ("script.py", "stdout.txt", "result.json", "calls.jsonl")
# never through a symlink someone left where a record goes
_WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
#: records are the user's alone: folders 0700, files 0600, whatever the umask allows more
FOLDER_MODE = 0o700
FILE_MODE = 0o600
PENDING_PREFIX = ".pending-"


def make_private_dirs(path: Path) -> None:
    """`path` and each folder above it that does not exist yet, made FOLDER_MODE (folders that
    exist are left as they are: they are the user's)."""
    missing: list[Path] = []
    here = path
    while not os.path.lexists(here):
        missing.append(here)
        if here.parent == here:
            break
        here = here.parent
    for folder in reversed(missing):
        try:
            os.mkdir(folder, FOLDER_MODE)
        except FileExistsError:
            pass


def problem_text(exc: OSError) -> str:
    where = f"{exc.filename}: " if exc.filename else ""
    return f"{where}{exc.strerror or exc}"


def write_fd(fd: int, text: str) -> None:
    """All of `text`, as UTF-8 (characters UTF-8 cannot encode, lone surrogates, as '?')."""
    write_all(fd, text.encode("utf-8", "replace"))


def write_text(path: Path, text: str) -> None:
    """`path.write_text(text)` without the io stack (never through a symlink)."""
    fd = os.open(path, _WRITE_FLAGS, FILE_MODE)
    try:
        write_fd(fd, text)
    finally:
        os.close(fd)


class _Folder:
    """A session folder and its files, open for writing."""

    def __init__(self, path: Path, fds: dict[str, int]) -> None:
        self.path = path
        self.fds = fds

    @classmethod
    def make(cls, path: Path, exist_ok: bool) -> _Folder:
        """The folder (FOLDER_MODE, and the folders above it that run_code makes) with its
        files open; the folder itself must be a folder, not a symlink to one."""
        make_private_dirs(path.parent)
        try:
            os.mkdir(path, FOLDER_MODE)
        except FileExistsError:
            if not exist_ok:
                raise
        folder = os.open(path, _DIR_FLAGS)
        fds: dict[str, int] = {}
        try:
            for name in FILES:
                fds[name] = os.open(name, _WRITE_FLAGS, FILE_MODE, dir_fd=folder)
        except OSError as exc:
            exc.filename = exc.filename or str(path / name)
            cls(path, fds).close()
            raise
        finally:
            os.close(folder)
        return cls(path, fds)

    def close(self) -> None:
        for fd in self.fds.values():
            try:
                os.close(fd)
            except OSError:
                pass
        self.fds.clear()


#: a `.pending-*` folder older than this was left by a process that died: removed when found
STALE_SECONDS = 3600.0


class FolderMaker:
    """Makes one session folder ahead, on a helper thread, for the next run to rename."""

    def __init__(self, parent: Path) -> None:
        self.parent = parent
        self._swept = False
        self._lock = threading.Lock()
        self._wanted = threading.Event()
        self._ready: _Folder | None = None
        self._thread: threading.Thread | None = None
        self._closed = False

    def held_fds(self) -> set[int]:
        """The fds of the folder made ahead (its files, open), if one is ready."""
        with self._lock:
            return set(self._ready.fds.values()) if self._ready is not None else set()

    def take(self) -> _Folder | None:
        with self._lock:
            ready, self._ready = self._ready, None
        return ready

    def give_back(self, folder: _Folder) -> None:
        with self._lock:
            if self._ready is None and not self._closed:
                self._ready, folder = folder, None  # type: ignore[assignment]
        if folder is not None:
            _discard(folder)

    def make_next(self) -> None:
        """Have the next folder made (now, on the helper thread) unless one is ready."""
        with self._lock:
            if self._closed or self._ready is not None:
                return
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, daemon=True, name="run_code-session")
                self._thread.start()
        self._wanted.set()

    def _sweep(self) -> None:
        """Remove the folders made ahead by processes that died before they could (a folder is
        renamed or removed within a run's time by a live one, so an hour-old one is not)."""
        try:
            entries = list(os.scandir(self.parent))
        except OSError:
            return
        now = time.time()
        for entry in entries:
            try:
                if (entry.name.startswith(PENDING_PREFIX) and entry.is_dir(follow_symlinks=False)
                        and now - entry.stat(follow_symlinks=False).st_mtime > STALE_SECONDS):
                    remove_logged(entry.path)
            except OSError:
                continue

    def _work(self) -> None:
        while True:
            self._wanted.wait()
            self._wanted.clear()
            with self._lock:
                if self._closed:
                    return
                if self._ready is not None:
                    continue
            if not self._swept:
                self._swept = True
                self._sweep()
            try:
                folder = _Folder.make(self.parent / (PENDING_PREFIX + os.urandom(6).hex()), exist_ok=False)
            except OSError:
                log.debug("could not make a session folder ahead in %s", self.parent, exc_info=True)
                continue  # the next run makes its own
            with self._lock:
                if self._closed or self._ready is not None:
                    stale: _Folder | None = folder
                else:
                    self._ready, stale = folder, None
            if stale is not None:
                _discard(stale)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            ready, self._ready = self._ready, None
        self._wanted.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if ready is not None:
            _discard(ready)


def _remove(path: Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _discard(folder: _Folder) -> None:
    folder.close()
    remove_logged(folder.path)


class SessionFiles:
    """One run's session folder: made (or renamed from one made ahead) while its child starts
    the script, with script.py written and the other files open; `finish` writes the outcome."""

    def __init__(self, path: Path, maker: FolderMaker | None) -> None:
        self.path = path
        self._maker = maker
        self._folder: _Folder | None = None
        self._reused = False  # the folder existed (a call id seen before): clear the old outcome
        self.problem: str | None = None  # why the folder could not be made, if it could not

    def open(self, script: str) -> None:
        ahead = self._maker.take() if self._maker is not None else None
        try:
            if ahead is not None:
                try:
                    os.rename(ahead.path, self.path)  # fails if a folder of that call id exists
                    ahead.path = self.path
                    self._folder, ahead = ahead, None
                except OSError:
                    pass
            if self._folder is None:
                self._reused = self.path.exists()
                self._folder = _Folder.make(self.path, exist_ok=True)
            write_fd(self._folder.fds["script.py"], script)
        except OSError as exc:
            # the end of the run tries again, writing the folder whole, and reports what fails
            self.problem = problem_text(exc)
            log.error("could not persist a run_code script in %s: %s", self.path, self.problem)
            if self._folder is not None:
                self._folder.close()
                self._folder = None
        finally:
            if ahead is not None and self._maker is not None:
                self._maker.give_back(ahead)

    def finish(self, stdout: str, result_json: str | None, error: str | None, call_lines: list[str]) -> bool:
        """Write the run's outcome into its open files; False if they could not be made or
        written (`problem` says why). Then the next run's folder is made (between runs: during
        one, the work would take CPU time and wake-ups from it)."""
        try:
            return self._finish(stdout, result_json, error, call_lines)
        finally:
            if self._maker is not None:
                self._maker.make_next()

    def _finish(self, stdout: str, result_json: str | None, error: str | None, call_lines: list[str]) -> bool:
        folder, self._folder = self._folder, None
        if folder is None:
            return False
        try:
            write_fd(folder.fds["stdout.txt"], stdout)
            if error is None:
                write_fd(folder.fds["result.json"], result_json or "null")
                if self._reused:  # an earlier run's failure must not sit next to this result
                    _remove(folder.path / "error.txt")
            else:
                os.close(folder.fds.pop("result.json"))
                os.unlink(folder.path / "result.json")
                write_text(folder.path / "error.txt", error + "\n")
            write_fd(folder.fds["calls.jsonl"], "".join(call_lines))
        except OSError as exc:
            self.problem = problem_text(exc)
            log.error("could not persist a run_code call in %s: %s", folder.path, self.problem)
            return False
        finally:
            folder.close()
        return True


def folder_for(session_dir: str | Path, plugin_id: str, call_id: str) -> Path:
    """`<session_dir>/plugins/<plugin id>/<call id>`. Call ids may come from an LLM provider, so
    the id is made a plain folder name first: it can never name a path elsewhere."""
    name = re.sub(r"[^A-Za-z0-9._-]", "_", call_id).lstrip(".") or "_"
    return Path(session_dir) / "plugins" / plugin_id / name


class SessionStore:
    """The session folders of one engine: a `FolderMaker` per parent folder (the session_dir
    may change between runs), each run's `SessionFiles`, and the folders written whole."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._makers: dict[Path, FolderMaker] = {}

    def open(self, folder: Path, script: str) -> SessionFiles:
        """A run's folder, made (or renamed from one made ahead) with script.py written and the
        other files open, while its child starts the script."""
        with self._lock:
            maker = self._makers.get(folder.parent)
            if maker is None:
                maker = self._makers[folder.parent] = FolderMaker(folder.parent)
        files = SessionFiles(folder, maker)
        files.open(script)
        return files

    def persist(self, folder: Path, files: SessionFiles | None, script: str, outcome: Outcome) -> str | None:
        """The run's outcome into its open files, or, where none were opened (the run never
        started) or they could not be made or written, the whole folder written now. None once
        the record is complete; else what went wrong, which is logged, and which the caller
        reports with the run's result: a record is never skipped in silence."""
        if files is not None and files.finish(outcome.stdout, outcome.result_json, outcome.error,
                                              outcome.call_lines):
            return None
        try:
            make_private_dirs(folder.parent)
            try:
                os.mkdir(folder, FOLDER_MODE)
            except FileExistsError:
                os.close(os.open(folder, _DIR_FLAGS))  # a folder (not a symlink, not a file) it is
            write_text(folder / "script.py", script)
            write_text(folder / "stdout.txt", outcome.stdout)
            stale = folder / ("error.txt" if outcome.error is None else "result.json")
            if os.path.lexists(stale):  # an earlier run of this call id: only this run's outcome stays
                stale.unlink()
            if outcome.error is None:
                write_text(folder / "result.json", outcome.result_json or "null")
            else:
                write_text(folder / "error.txt", outcome.error + "\n")
            write_text(folder / "calls.jsonl", "".join(outcome.call_lines))
        except OSError as exc:
            problem = f"could not write the record of this run in {folder}: {problem_text(exc)}"
            log.error("run_code: %s", problem)
            return problem
        return None

    def held_fds(self) -> set[int]:
        """The files of the folders made ahead, open between runs."""
        with self._lock:
            makers = list(self._makers.values())
        held: set[int] = set()
        for maker in makers:
            held |= maker.held_fds()
        return held

    def close(self) -> None:
        with self._lock:
            makers, self._makers = list(self._makers.values()), {}
        for maker in makers:
            maker.close()  # a folder made ahead and never used goes
