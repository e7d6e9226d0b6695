"""Reading run_code's session records back, for `nexus runs` and `nexus runs show ID` (runs in
the host: the `nexus` command).

A run's folder, `<session_dir>/plugins/nexus.tool.code_exec/<call id>/`, holds script.py (written
as the run starts), calls.jsonl (one line per inner call: its result, when it came in, how long
it took, whether it was made inside `parallel`), stdout.txt, and result.json or error.txt
(written as it ends). When a run started and ended is read from the times of those files, so a
run costs no extra file. Everything in a record came from a script, a tool or a model: it is
data, never shown to a terminal without `escape`.
"""

from __future__ import annotations

import importlib
import json
import os
import unicodedata
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, cast

import attrs

from .journal import JOURNAL_FILE, in_use


def _plain_escape(text: str, *, multiline: bool = True) -> str:
    """Each control, format or separator character (ESC, CR, bidi controls...) shown as an escape."""
    keep = "\n\t" if multiline else ""
    return "".join(ch if ch in keep or unicodedata.category(ch) not in ("Cc", "Cf", "Cs", "Zl", "Zp")
                   else (f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else f"\\u{ord(ch):04x}") for ch in text)


def _escape() -> Callable[..., str]:
    """`nexus_core.terminal.escape`, which every front end uses; it lands with the approvals
    slice, and until then the same rule for the characters that act on a terminal."""
    try:
        return cast(Callable[..., str], importlib.import_module("nexus_core.terminal").escape)
    except (ImportError, AttributeError):
        return _plain_escape


escape = _escape()

PLUGIN_ID = "nexus.tool.code_exec"
#: how much of a call's result a tree line shows
SHORT = 60


@attrs.define
class InnerCall:
    """One line of calls.jsonl."""

    id: str
    name: str
    arguments: Any
    outcome: str  # "ok", "vetoed", "cancelled", or the error kind
    error: str | None
    output: str
    started_at: float | None
    duration: float | None
    #: which of the script's `parallel` calls made it (1, 2, ...), or 0 for a call made outside one
    parallel: int
    #: the gates that rewrote its arguments (its result's `metadata["rewritten_by"]`), in order
    rewritten_by: list[str] = attrs.field(factory=list)

    def as_json(self) -> dict[str, Any]:
        return attrs.asdict(self)


@attrs.define
class Run:
    """One run_code run, as its folder records it."""

    id: str
    path: Path
    started: float
    ended: float | None
    #: "ok", "error", "running" (no result yet), or "interrupted" (no result, and its host is gone:
    #: `nexus runs resume ID` finishes it)
    status: str
    error: str | None
    calls: list[InnerCall]
    bad_lines: int = 0

    @property
    def duration(self) -> float | None:
        return None if self.ended is None else max(0.0, self.ended - self.started)

    @property
    def vetoes(self) -> int:
        return sum(call.outcome == "vetoed" for call in self.calls)

    def summary(self) -> dict[str, Any]:
        return {"id": self.id, "started": _iso(self.started), "status": self.status,
                "duration_seconds": None if self.duration is None else round(self.duration, 6),
                "tool_calls": len(self.calls), "vetoes": self.vetoes, "error": self.error, "path": str(self.path)}

    def details(self) -> dict[str, Any]:
        return {**self.summary(), "script": _read(self.path / "script.py"), "stdout": _read(self.path / "stdout.txt"),
                "result": self.result(), "calls": [call.as_json() for call in self.calls]}

    def result(self) -> Any:
        text = _read(self.path / "result.json")
        if text is None:
            return None
        try:
            return json.loads(text)
        except ValueError:
            return text


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def _mtime(path: Path) -> float | None:
    try:
        return os.stat(path, follow_symlinks=False).st_mtime
    except OSError:
        return None


def runs_folder(session_dir: Path) -> Path:
    return session_dir / "plugins" / PLUGIN_ID


def _calls(path: Path) -> tuple[list[InnerCall], int]:
    calls, bad = [], 0
    text = _read(path / "calls.jsonl") or ""
    for line in text.splitlines():
        try:
            entry = json.loads(line)
            result = entry.get("result") or {}
            kind = result.get("error_kind") if result.get("is_error") else None
            started, took = entry.get("started_at"), entry.get("duration_seconds")
            calls.append(InnerCall(
                id=str(entry.get("id", "")), name=str(entry.get("name", "")), arguments=entry.get("arguments"),
                outcome="ok" if kind is None and not result.get("is_error") else str(kind or "error"),
                error=result.get("error"), output=str(result.get("output") or ""),
                started_at=float(started) if isinstance(started, (int, float)) else None,
                duration=float(took) if isinstance(took, (int, float)) else None,
                parallel=_group(entry.get("parallel")), rewritten_by=_plugins(result.get("metadata"))))
        except (ValueError, AttributeError, TypeError):
            bad += 1
    # recorded as each was answered; shown in the order the script made them
    calls.sort(key=lambda c: c.started_at if c.started_at is not None else float("inf"))
    return calls, bad


def _plugins(metadata: Any) -> list[str]:
    """The `rewritten_by` of a recorded result's metadata: plugin ids (anything else is left out)."""
    found = metadata.get("rewritten_by") if isinstance(metadata, dict) else None
    return [p for p in found if isinstance(p, str)] if isinstance(found, list) else []


def _group(value: Any) -> int:
    if value is True:  # inside parallel, number unknown
        return -1
    return value if type(value) is int and value > 0 else 0


def load_run(folder: Path) -> Run | None:
    """The run recorded in `folder`, or None when it is no run's folder."""
    started = _mtime(folder / "script.py")
    if started is None:
        return None
    result_time, error_time = _mtime(folder / "result.json"), _mtime(folder / "error.txt")
    if error_time is not None:
        status, ended = "error", error_time
        error = (_read(folder / "error.txt") or "").strip() or None
    elif result_time is not None and (folder / "result.json").stat().st_size > 0:
        status, ended, error = "ok", result_time, None
    else:
        status, ended, error = "running", None, None
        journal = folder / JOURNAL_FILE
        if journal.is_file() and not in_use(journal):
            status = "interrupted"
    calls, bad = _calls(folder)
    return Run(id=folder.name, path=folder, started=started, ended=ended, status=status, error=error,
               calls=calls, bad_lines=bad)


def list_runs(session_dir: Path) -> list[Run]:
    """The runs recorded under `session_dir`, the latest first."""
    root = runs_folder(session_dir)
    try:
        entries = [e for e in os.scandir(root) if e.is_dir(follow_symlinks=False) and not e.name.startswith(".")]
    except OSError:
        return []
    runs = [run for run in (load_run(Path(e.path)) for e in entries) if run is not None]
    return sorted(runs, key=lambda r: r.started, reverse=True)


def find_run(session_dir: Path, run_id: str) -> Run | None:
    """The run whose id is `run_id`, or starts with it when only one does."""
    runs = list_runs(session_dir)
    exact = [r for r in runs if r.id == run_id]
    if exact:
        return exact[0]
    matching = [r for r in runs if r.id.startswith(run_id)]
    return matching[0] if len(matching) == 1 else None


# -- drawing --------------------------------------------------------------------------------


def _seconds(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value * 1000:.1f} ms" if value < 1 else f"{value:.2f} s"


def _one_line(text: str, width: int = SHORT) -> str:
    flat = " ".join(text.split())
    return escape(flat if len(flat) <= width else flat[: width - 1] + "…", multiline=False)


def _arguments(arguments: Any) -> str:
    return _one_line(json.dumps(arguments, ensure_ascii=False) if arguments is not None else "", 80)


def groups(calls: list[InnerCall]) -> Iterator[list[InnerCall]]:
    """The calls in order, the ones one `parallel` call made in one group (they are in order of
    arrival, so a group's calls are together unless the script's other threads interleave)."""
    group: list[InnerCall] = []
    for call in calls:
        if group and call.parallel and call.parallel == group[0].parallel:
            group.append(call)
            continue
        if group:
            yield group
        group = [call]
    if group:
        yield group


def _call_line(call: InnerCall) -> str:
    outcome = "ok" if call.outcome == "ok" else call.outcome
    if call.rewritten_by:  # the arguments shown are the script's; these gates changed them before it ran
        outcome += f", rewritten by {escape(', '.join(call.rewritten_by), multiline=False)}"
    line = f"{escape(call.name, multiline=False)} {_arguments(call.arguments)}  {outcome}  {_seconds(call.duration)}"
    shown = call.error if call.outcome != "ok" and call.error else call.output
    if shown:
        line += f"  → {_one_line(shown)}"
    return line


def draw(run: Run) -> str:
    """The run as a tree: its inner calls in order (parallel ones grouped), each with its gate
    outcome, duration and a short result; then its stdout and its result or error."""
    when = datetime.fromtimestamp(run.started).strftime("%Y-%m-%d %H:%M:%S")
    lines = [f"run_code {escape(run.id, multiline=False)}  {run.status}  {_seconds(run.duration)}  {when}  "
             f"{len(run.calls)} call{'s' if len(run.calls) != 1 else ''}, {run.vetoes} vetoed"]
    items: list[list[str]] = []
    for group in groups(run.calls):
        if len(group) == 1 and not group[0].parallel:
            items.append([_call_line(group[0])])
        else:
            items.append([f"parallel ({len(group)} calls)", *[_call_line(c) for c in group]])
    stdout = _read(run.path / "stdout.txt") or ""
    if stdout:
        items.append(["stdout", *[escape(line, multiline=False) for line in stdout.splitlines()]])
    if run.status == "ok":
        items.append([f"result {_one_line(json.dumps(run.result(), ensure_ascii=False), 200)}"])
    elif run.error:
        items.append(["error", *[escape(line, multiline=False) for line in run.error.splitlines()]])
    if run.bad_lines:
        items.append([f"({run.bad_lines} lines of calls.jsonl could not be read)"])
    for i, (head, *rest) in enumerate(items):
        last = i == len(items) - 1
        lines.append(("└─ " if last else "├─ ") + head)
        for j, sub in enumerate(rest):
            lines.append(("   " if last else "│  ") + ("└─ " if j == len(rest) - 1 else "├─ ") + sub)
    return "\n".join(lines)


def table(runs: list[Run]) -> str:
    """`nexus runs`: one line per run, the latest first."""
    rows = [("ID", "STARTED", "STATUS", "DURATION", "CALLS", "VETOES")]
    for run in runs:
        rows.append((escape(run.id, multiline=False), datetime.fromtimestamp(run.started).strftime("%Y-%m-%d %H:%M:%S"),
                     run.status, _seconds(run.duration), str(len(run.calls)), str(run.vetoes)))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in rows)
