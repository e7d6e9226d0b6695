"""run_code's journal (runs in the host): each inner call's result, kept as the call completes, so
that a run can be run again from the start (resumed) with the calls it already made answered from
the journal instead of running again.

    Journal        the interface: what an earlier attempt recorded (`entries`), and `placed`,
                   `asking` and `finished` for each live call
    FolderJournal  the default: journal.jsonl in the run's session folder, one line appended per
                   event with one write, so a `kill -9` of the host loses at most the call in flight
    MemoryJournal  the same in memory (a run without a session folder; replay)
    Cursor         where each call of a run falls in the journal: its slot, and whether the
                   journal answers it, says it was in flight, or has nothing (it runs live); a
                   call that differs from what the journal holds there is a `Divergence`

Slots. A script is deterministic up to its calls' results, which a resumed run gets back from the
journal; so it makes the same calls again, in the same order, except inside `parallel`, whose
callbacks race. A sequential call takes a slot of its own; the calls of one `parallel` call (all
that arrive while it runs, nested ones too: they run one after another inside a callback) share
one slot and are matched within it by tool and arguments (their SHA-256), whatever order they
come in. The n-th slot of a resumed run is compared with the n-th slot of the journal.

In flight. `placed` is written when the host takes a live call (before its gates), `asking` while
a person decides about it, `finished` when it has its result. A call placed and never finished
may have had its effect: a resumed run answers it with an error saying so (`POSSIBLY_DONE`), and
never runs it again; unless it was waiting for a person (its gates asked, nobody answered yet):
then nothing of it ran, and it is made, and asked about, again. Its id, the same in every attempt
(`key`), is the idempotency key a tool can use (`ctx.call_id`). A host killed while a call's gates
run (and none asks) leaves that call "possibly done": it errs on the side of not repeating it.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import threading
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Protocol

import attrs

from nexus_core import ToolCall, ToolResult

from .session import FILE_MODE, make_private_dirs
from .streaming import _canonical, _record_encode, _string

log = logging.getLogger("nexus_tool_code_exec")

#: journal.jsonl in a run's session folder, while the run has not ended (removed when it has)
JOURNAL_FILE = "journal.jsonl"
#: what a resumed run answers for a call that was running when its host stopped
POSSIBLY_DONE = ("possibly done: {name} was running when the run's host stopped, and is not run again: "
                 "its effect may or may not have happened (its idempotency key, ctx.call_id, is {key!r})")
#: how much of a call's arguments a divergence message shows
SHOWN_CHARS = 160

#: what a journal in memory keeps of a run's results (a run without a session folder)
MEMORY_BUDGET = 16 * 1024 * 1024
_OPEN_FLAGS = os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC | os.O_NOFOLLOW


def arguments_hash(arguments: Any) -> tuple[str, int, str]:
    """Arguments as calls.jsonl hashes them: their canonical JSON (compact, keys sorted), its
    size in UTF-8 and its SHA-256 (made once a call, for the journal and calls.jsonl both)."""
    text = _canonical(arguments)
    data = text.encode("utf-8", "surrogatepass")
    return text, len(data), hashlib.sha256(data).hexdigest()


def call_text(name: str, arguments: Any) -> str:
    """A call as a person reads it in an error: `write({"path": "a.txt", ...})`, cut short."""
    return shown_text(name, _canonical(arguments) if isinstance(arguments, dict) else "{}")


def shown_text(name: str, arguments_json: str) -> str:
    shown = arguments_json if len(arguments_json) <= SHOWN_CHARS else arguments_json[:SHOWN_CHARS] + "...}"
    return f"{name}({shown})"


@attrs.define
class Entry:
    """One call an earlier attempt made: its slot, whether `parallel` made it, the tool, its
    arguments (and their hash), and its result once it finished (None: it was in flight)."""

    n: int  # its number in the journal (pairs `placed` with `finished`)
    slot: int
    parallel: bool
    name: str
    sha: str
    #: the call as an error shows it (`write({"path":"a.txt"...})`): its arguments are not kept,
    #: so a run's journal in memory stays small whatever its calls carry
    shown: str
    result: ToolResult | None = None
    #: a person was deciding about it (its gates asked) and had not answered
    asking: bool = False


def result_json(result: ToolResult) -> dict[str, Any]:
    return {"output": result.output, "error": result.error, "error_kind": result.error_kind,
            "output_file": result.output_file, "output_structured": result.output_structured,
            "metadata": result.metadata}


def result_from(data: dict[str, Any], call: ToolCall) -> ToolResult:
    """A recorded result as the answer to `call` (its id and name)."""
    metadata = data.get("metadata")
    return ToolResult(id=call.id, name=call.name, output=str(data.get("output") or ""), error=data.get("error"),
                      error_kind=data.get("error_kind"), output_file=data.get("output_file"),
                      output_structured=data.get("output_structured"),
                      metadata=metadata if isinstance(metadata, dict) else {})


class Journal(Protocol):
    """Where a run keeps its calls' results as they complete. `entries` is what earlier attempts
    of the run recorded (read as each attempt starts); `placed` announces a live call (its slot,
    tool, arguments), `asking` that a person decides about it (and then that they answered),
    `finished` its result. Each is called from the thread that handles the call; an
    implementation is thread-safe. A `closed` journal
    answers calls and takes none: a call it does not hold is a divergence (replay)."""

    closed: bool
    resumable: bool
    #: unique to the run, the same in every attempt of it (its first line in journal.jsonl): a
    #: run_code call id comes from the provider and may repeat across sessions, this does not
    run_id: str

    def entries(self) -> list[Entry]: ...

    def placed(self, entry: Entry, arguments_json: str) -> None: ...

    def asking(self, entry: Entry, waiting: bool) -> None: ...

    def finished(self, entry: Entry, result: ToolResult, line: str | None = None) -> None: ...

    def close(self, keep: bool) -> None: ...

    def settle(self, timeout: float) -> None: ...


class MemoryJournal:
    """A journal in memory: suspension and resumption within one process, and replay."""

    def __init__(self, entries: Iterable[Entry] = (), closed: bool = False) -> None:
        self._entries = list(entries)
        self._lock = threading.Lock()
        self.closed = closed
        self.run_id = uuid.uuid4().hex
        #: whether a run can be resumed from it: one that kept more than MEMORY_BUDGET of results
        #: is not (it stops keeping them: a run is then not suspended)
        self.resumable = True
        self._kept = 0

    def entries(self) -> list[Entry]:
        with self._lock:
            return list(self._entries)

    def placed(self, entry: Entry, arguments_json: str) -> None:
        with self._lock:
            if self.resumable:
                self._entries.append(entry)

    def asking(self, entry: Entry, waiting: bool) -> None:
        entry.asking = waiting

    def finished(self, entry: Entry, result: ToolResult, line: str | None = None) -> None:
        """`entry`'s call ended with `result`; `line` is its line of calls.jsonl, when whole."""
        entry.result = result
        with self._lock:
            self._kept += len(result.output) + len(entry.shown)
            if self._kept > MEMORY_BUDGET and self.resumable:
                self.resumable = False
                self._entries.clear()

    def settle(self, timeout: float) -> None:
        """Wait (up to `timeout`) until every call placed has its end written."""

    def close(self, keep: bool) -> None:
        pass


class FolderJournal(MemoryJournal):
    """journal.jsonl in the run's session folder (and in memory, for a resumption in this
    process). Lines: `{"k": "run", "id"}` first (the run's `run_id`), then `{"k": "start", "n", "slot", "par", "name", "sha", "args"}` when the host
    takes a live call, `{"k": "ask", "n"}` and `{"k": "answered", "n"}` around a person's
    decision about it, `{"k": "done", "n", "call": <its line of calls.jsonl>}` (or `"result"`,
    where that line was cut) when it has its result (a refusal by its gates too).

    Each line is one write(2) on the O_APPEND file (no fsync): in the kernel's page cache when
    the call returns, so a `kill -9` of the host at any point keeps every line before it and at
    most tears the last one, which `load` skips. It survives the host's death, not the machine's
    (the durable backend, on a database, is for that). (A file mapped MAP_SHARED, each line a
    copy into it, was tried: no system call a line, but mapping and unmapping it cost a run more
    than many lines' writes on the loaded 2-core machine: bench/bench_journal.py.)"""

    def __init__(self, folder: Path, resume: bool) -> None:
        self.path = folder / JOURNAL_FILE
        self._fresh = not resume  # a fresh run of a call id seen before: the old journal goes
        self._fd: int | None = None
        self._broken = False  # it could not be made, or it is closed: nothing more is written
        self._unfinished = 0  # calls placed whose end is not written yet
        super().__init__()
        self._written = threading.Condition(self._lock)
        if resume:  # locked first: no other process resumes it at the same time
            self._open()

    def entries(self) -> list[Entry]:
        """What the file holds (read again for each attempt: nothing is kept in memory)."""
        with self._lock:
            if self._fd is None:
                return []
        return load(self.path)

    def settle(self, timeout: float) -> None:
        with self._written:
            self._written.wait_for(lambda: self._unfinished <= 0, timeout)

    def _open(self) -> None:
        make_private_dirs(self.path.parent)
        fd = os.open(self.path, _OPEN_FLAGS, FILE_MODE)
        try:
            # held while the run goes on, let go by the kernel when its host dies: what tells a
            # run another host serves from one whose host is gone (`in_use`)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise JournalBusy(f"{self.path} is in use: its run is going on in another process") from None
            if self._fresh:
                os.ftruncate(fd, 0)
                os.write(fd, f'{{"k":"run","id":"{self.run_id}"}}\n'.encode())
            else:
                found = _run_id(fd)
                if found is None:  # a journal of an older release: it gets one now
                    os.write(fd, f'{{"k":"run","id":"{self.run_id}"}}\n'.encode())
                else:
                    self.run_id = found
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd

    def _write(self, text: str, unfinished: int = 0) -> None:
        data = text.encode("utf-8", "replace")
        with self._lock:
            self._unfinished += unfinished
            if unfinished < 0:
                self._written.notify_all()
            if self._fd is None:
                # closed (a call that outlived its run ends after it: its line is not kept), or
                # it could not be made
                if self._broken:
                    return
                try:
                    self._open()
                except (OSError, JournalBusy) as exc:
                    # the run goes on unjournaled: it is not suspended (nothing could resume it)
                    self._broken = True
                    self.resumable = False
                    log.error("run_code: cannot keep the journal %s: %s", self.path, exc)
                    return
            assert self._fd is not None
            try:
                os.write(self._fd, data)
            except OSError as exc:
                self.resumable = False
                log.error("run_code: cannot write the journal %s: %s", self.path, exc)

    def placed(self, entry: Entry, arguments_json: str) -> None:
        # made as text: the arguments' JSON is the one calls.jsonl hashes (made once a call)
        self._write(f'{{"k":"start","n":{entry.n},"slot":{entry.slot},"par":{"true" if entry.parallel else "false"},'
                    f'"name":{_string(entry.name)},"sha":"{entry.sha}","args":{arguments_json}}}\n', +1)

    def asking(self, entry: Entry, waiting: bool) -> None:
        entry.asking = waiting
        self._write(f'{{"k":"{"ask" if waiting else "answered"}","n":{entry.n}}}\n')

    def finished(self, entry: Entry, result: ToolResult, line: str | None = None) -> None:
        entry.result = result
        if line is not None:  # its line of calls.jsonl holds the whole result
            self._write(f'{{"k":"done","n":{entry.n},"call":{line.rstrip()}}}\n', -1)
        else:
            self._write(f'{{"k":"done","n":{entry.n},"result":{_record_encode(result_json(result))}}}\n', -1)

    def close(self, keep: bool) -> None:
        """The run ended (`keep` False: its record is complete, the journal goes) or was left
        to be resumed (`keep`)."""
        with self._lock:
            fd, self._fd = self._fd, None
            self._broken = True  # nothing is written after this
            if not keep and (fd is not None or not self._fresh):
                try:
                    os.unlink(self.path)
                except FileNotFoundError:
                    pass
            if fd is not None:
                os.close(fd)


def load(path: Path) -> list[Entry]:
    """The entries of a journal.jsonl (none if there is no file); a torn or foreign line is
    skipped: a line is only ever torn at the end, by a kill in the middle of its write."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return []
    entries: dict[int, Entry] = {}
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if not isinstance(record, dict) or type(record.get("n")) is not int:
            continue
        n, kind = record["n"], record.get("k")
        if kind == "start" and type(record.get("slot")) is int and isinstance(record.get("name"), str):
            entries[n] = Entry(n=n, slot=record["slot"], parallel=record.get("par") is True, name=record["name"],
                               sha=str(record.get("sha")), shown=call_text(record["name"], record.get("args")))
        elif kind in ("ask", "answered") and n in entries:
            entries[n].asking = kind == "ask"
        elif kind == "done" and n in entries:
            result = record.get("result")
            if result is None and isinstance(record.get("call"), dict):
                result = record["call"].get("result")
            if isinstance(result, dict):
                entry = entries[n]
                entry.result = result_from(result, ToolCall(id="", name=entry.name, arguments={}))
    return sorted(entries.values(), key=lambda e: e.n)


def _run_id(fd: int) -> str | None:
    """The run id on the first line of the journal open as `fd`, or None."""
    first = os.pread(fd, 200, 0).split(b"\n", 1)[0]
    try:
        record = json.loads(first)
    except ValueError:
        return None
    found = record.get("id") if isinstance(record, dict) and record.get("k") == "run" else None
    return found if isinstance(found, str) and found.isalnum() and len(found) <= 64 else None


class JournalBusy(Exception):
    """The journal is locked by another process: its run is going on there."""


def in_use(path: Path) -> bool:
    """Whether the journal at `path` is held by a live process (its run is going on)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


class Divergence(Exception):
    """A resumed script asked for another call than its journal holds at that point."""


@attrs.define
class Placement:
    """Where a call falls: its slot and key, and the journal's entry for it (answered from the
    journal when it has a result; in flight when it was placed and never finished), or a new
    entry (`live`) for a call past the journal."""

    entry: Entry
    key: str
    live: bool
    #: the call's arguments as `arguments_hash` gave them (calls.jsonl's line uses them too)
    hashed: tuple[str, int, str] | None = None

    @property
    def recorded(self) -> ToolResult | None:
        return None if self.live else self.entry.result


class Cursor:
    """Places a run's calls, in the order the script issues them, against the journal of its
    earlier attempts (see the module's docstring for slots). One per attempt; `place` is called
    from the one thread that reads the script's process."""

    def __init__(self, run_id: str, entries: list[Entry], live: bool = True) -> None:
        self.run_id = run_id
        self.live = live  # a call past the journal runs (else it is a divergence)
        self.what = "journal" if live else "record"  # what the errors call it
        self.why = _WHY if live else _WHY_REPLAY
        self._slots: dict[int, list[Entry]] = {}
        for entry in entries:
            if entry.result is not None or not entry.asking:  # one a person was asked about is made again
                self._slots.setdefault(entry.slot, []).append(entry)
        self._last = max(self._slots, default=-1)
        self._next_n = max((e.n for e in entries), default=-1) + 1
        self.slot = -1
        self._group: Any = None  # the `parallel` call the current slot belongs to (the child's number)
        self._left: list[Entry] = []  # the journal's calls of the current parallel slot not yet made
        self._keys: dict[str, int] = {}  # keys given in the current slot (a repeated call gets :2, :3...)
        self.from_journal = 0

    def place(self, name: str, arguments: Any, group: Any) -> Placement:
        """The call `name(arguments)`, made by the script's `parallel` call `group` (None: outside
        one). Raises `Divergence` naming both calls when the journal holds another one here."""
        if group is None or group != self._group:
            if self._left:
                self._leave_slot()
            self.slot += 1
            self._group = group
            if self.slot <= self._last:
                recorded = self._slots.get(self.slot)
                if recorded and recorded[0].parallel != (group is not None):
                    made, held = ("inside", "outside") if group is not None else ("outside", "inside")
                    raise Divergence(self._diverged(
                        f"{call_text(name, arguments)} (made {made} parallel)",
                        f"{recorded[0].shown} (made {held} parallel)"))
                self._left = list(recorded) if recorded and group is not None else []
            if group is not None:
                self._keys = {}
        hashed = arguments_hash(arguments)
        sha = hashed[2]
        if group is None:
            key = f"{self.run_id}:{self.slot}"
            recorded = self._slots.get(self.slot) if self.slot <= self._last else None
            if recorded:
                entry = recorded[0]
                if entry.name != name or entry.sha != sha:
                    raise Divergence(self._diverged(call_text(name, arguments),
                                                    entry.shown))
                return self._from_journal(entry, key, hashed)
        else:
            key = f"{self.run_id}:{self.slot}:{sha[:12]}"
            seen = self._keys.get(key, 0)  # the same call again in one parallel call
            self._keys[key] = seen + 1
            if seen:
                key = f"{key}:{seen + 1}"
            for i, entry in enumerate(self._left):
                if entry.name == name and entry.sha == sha:
                    del self._left[i]
                    return self._from_journal(entry, key, hashed)
            if self.slot in self._slots and (self.slot < self._last or not self.live):
                held = ", ".join(e.shown for e in self._left[:3]) or "no more calls"
                raise Divergence(self._diverged(call_text(name, arguments), f"{held} for this parallel call"))
        if not self.live:
            raise Divergence(self._diverged(call_text(name, arguments), "no call", " (past the end of the record)"
                                            if self.slot > self._last else ""))
        entry = Entry(self._next_n, self.slot, group is not None, name, sha, shown_text(name, hashed[0]))
        self._next_n += 1
        return Placement(entry, key, True, hashed)

    def _from_journal(self, entry: Entry, key: str, hashed: tuple[str, int, str]) -> Placement:
        if entry.result is not None:
            self.from_journal += 1
        return Placement(entry, key, live=False, hashed=hashed)

    def _leave_slot(self) -> None:
        """The current slot is over: a parallel one must have made every call the journal holds
        for it, unless one of them failed (a parallel call stops starting callbacks at its first
        error, so which of the rest ran is a race)."""
        left, self._left = self._left, []
        if not left or self._group is None:
            return
        if any(e.result is not None and e.result.error is not None for e in self._slots.get(self.slot, [])):
            return
        raise Divergence(
            f"journal diverged: the script's parallel call (call {self.slot + 1} of the run) made fewer calls "
            f"than the {self.what} holds for it: {', '.join(e.shown for e in left[:3])} "
            f"{'was' if len(left) == 1 else 'were'} not made; {self.why}")

    def finish(self) -> None:
        """The script ended: it must have made every call the journal holds (raises Divergence)."""
        self._leave_slot()
        rest = [e for slot, entries in sorted(self._slots.items()) if slot > self.slot for e in entries]
        if rest:
            raise Divergence(
                f"journal diverged: the script ended after {self.slot + 1} calls, but the {self.what} holds "
                f"{len(rest)} more (the next: {rest[0].shown}); {self.why}")

    def _diverged(self, made: str, held: str, how: str = "") -> str:
        return (f"journal diverged: the script's call {self.slot + 1} is {made}{how}, but the {self.what} holds "
                f"{held} there; {self.why}")


_WHY = ("a resumed script must make the calls it made before, in the same order (was the script changed, or "
        "does what it calls depend on time or chance?)")
_WHY_REPLAY = "a replayed script is answered only the calls the recorded run made, in the same order"
