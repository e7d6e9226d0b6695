"""A session's transcript: one JSON object per line, appended and flushed as the session goes, so
a run that crashes still leaves what happened up to the crash.

Where: `<session_dir>/plugins/nexus.agent/<session id>.jsonl`, the folder made private to its
owner (0700) and the file readable by its owner only (0600): a transcript holds what the tools
read. Every record has `type`, `seq` (its line number, from 1) and `time` (UTC, ISO 8601); the
types and their keys are listed in docs/agent.md.
"""

from __future__ import annotations

import datetime
import json
import os
import threading
from pathlib import Path
from typing import IO, Any


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _json(value: Any) -> str:
    # output_structured may hold what a tool returned; anything JSON cannot say becomes its text
    return json.dumps(value, ensure_ascii=False, default=str, separators=(",", ":"))


class Transcript:
    """The records of one session, kept in memory (for `nexus ask --json`) and, when `path` is
    given, appended to that file line by line. Safe to write from several threads."""

    def __init__(self, path: Path | None, records: list[dict[str, Any]] | None = None) -> None:
        self.path = path
        #: what was written so far (`records`: those of the file it goes on, a resumed session's)
        self.records: list[dict[str, Any]] = list(records or [])
        self._lock = threading.Lock()
        self._file: IO[str] | None = None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
            self._file = os.fdopen(fd, "a", encoding="utf-8")

    def write(self, type: str, **fields: Any) -> dict[str, Any]:
        with self._lock:
            record = {"type": type, "seq": len(self.records) + 1, "time": _now(), **fields}
            self.records.append(record)
            if self._file is not None:
                self._file.write(_json(record) + "\n")
                self._file.flush()
            return record

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None


def read_transcript(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The records of a transcript file, in order. A last line cut short by a crash is skipped."""
    records = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                if not line.endswith("\n"):
                    break
                raise
    return records
