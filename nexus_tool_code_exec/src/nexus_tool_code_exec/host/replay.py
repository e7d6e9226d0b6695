"""Replaying a recorded run_code call (runs in the host: `nexus replay CALL_ID` and `replay()`): its
script, from its session folder (or another script given in its place), run again in a fresh child
with the Nexus's current bindings, with every inner call answered from the run's record
(calls.jsonl) and no tool run, no gate asked; then whether it produced the same result and made the
same calls.

The record is a journal that ends where the run ended: a call the record does not hold at that
point (another tool or other arguments, or one past its end) stops the replay with a `journal
diverged:` error naming both calls, and so does a script that ends before making every recorded
call. Calls of one `parallel` call are matched by tool and arguments within it (journal.py).
A call whose record was cut (past the record budget, 16 MiB a run) is matched by its arguments'
SHA-256, which the record keeps whole, and answered with the result as the record has it (cut):
the report says so.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from nexus_core import ToolCall

from .journal import Entry, MemoryJournal, call_text, result_from
from .session import folder_for

if TYPE_CHECKING:
    from nexus_core import Nexus

    from .engine import CodeExec


class ReplayError(LookupError):
    """The call cannot be replayed: no such record, or one without its script."""


@attrs.define
class ReplayReport:
    """What a replay found: whether the result and the calls were the same as recorded, and
    each difference in words."""

    call_id: str
    same_result: bool
    same_calls: bool
    calls: int  # the calls the record holds
    replayed: int  # the calls the replay had answered from it
    differences: list[str]
    recorded: Any  # the recorded result (None when the run failed)
    recorded_error: str | None
    result: Any
    error: str | None
    stdout: str

    @property
    def same(self) -> bool:
        return self.same_result and self.same_calls

    def as_json(self) -> dict[str, Any]:
        return {**attrs.asdict(self), "same": self.same}

    def text(self) -> str:
        verdict = "the same result and the same calls" if self.same else (
            ("the same result" if self.same_result else "a different result") + " and "
            + ("the same calls" if self.same_calls else "different calls"))
        lines = [f"replay of run_code {self.call_id}: {verdict} ({self.replayed} of {self.calls} recorded "
                 f"call{'s' if self.calls != 1 else ''} answered from the record, no tool run)"]
        lines += [f"- {difference}" for difference in self.differences]
        return "\n".join(lines)


def record_entries(calls_jsonl: str) -> tuple[list[Entry], list[str]]:
    """calls.jsonl's lines as journal entries (slots: each call outside `parallel` its own, the
    calls of one `parallel` call together), and notes on what cannot be replayed exactly."""
    parsed: list[dict[str, Any]] = []
    notes: list[str] = []
    for number, line in enumerate(calls_jsonl.splitlines(), 1):
        try:
            record = json.loads(line)
        except ValueError:
            notes.append(f"line {number} of calls.jsonl is not JSON: it is left out")
            continue
        if isinstance(record, dict) and isinstance(record.get("name"), str) and isinstance(record.get("result"), dict):
            parsed.append(record)
    parsed.sort(key=_started_at)  # recorded as each was answered: in the order the script made them
    entries: list[Entry] = []
    slot, group = -1, None
    for n, record in enumerate(parsed):
        made_by = record.get("parallel")
        made_by = made_by if made_by not in (False, 0, None) else None
        if made_by is None or made_by != group:
            slot += 1
        group = made_by
        entry = Entry(n=n, slot=slot, parallel=made_by is not None, name=record["name"],
                      sha=str(record.get("arguments_sha256")), shown=call_text(record["name"], record.get("arguments")))
        entry.result = result_from(record["result"], ToolCall(id=str(record.get("id", "")), name=record["name"],
                                                                arguments={}))
        if record.get("cut") is True:
            notes.append(f"the record of call {n + 1} ({record['name']}) was cut (past the record budget): it is "
                         "matched by its arguments' hash and answered with its result as recorded, shortened")
        entries.append(entry)
    return entries, notes


def replay(nexus: Nexus, call_id: str, script: str | None = None) -> ReplayReport:
    """Replay the recorded run_code call `call_id` of this Nexus's session folder (with `script`
    in place of its own, to check a change), every inner call answered from its record. Raises
    ReplayError when there is no such record."""
    from .. import engine_for

    engine = engine_for(nexus)
    if engine is None:
        raise ReplayError("run_code is not active in this Nexus (nexus.tool.code_exec)")
    return replay_with(engine, call_id, script)


def replay_with(engine: CodeExec, call_id: str, script: str | None = None) -> ReplayReport:
    folder = folder_for(engine.nexus.config.session_dir, engine.plugin_id, call_id)
    recorded_script = _read(folder / "script.py")
    if recorded_script is None:
        raise ReplayError(f"no recorded run_code call {call_id!r} in {folder.parent} (no script.py)")
    entries, notes = record_entries(_read(folder / "calls.jsonl") or "")
    recorded_error = (_read(folder / "error.txt") or "").strip() or None
    result_text = _read(folder / "result.json")
    if recorded_error is None and not result_text:
        raise ReplayError(f"run_code call {call_id!r} has not ended (no result.json or error.txt in {folder}): "
                          "`nexus runs resume` finishes it")
    recorded = None
    if recorded_error is None:
        try:
            recorded = json.loads(result_text or "null")
        except ValueError:
            raise ReplayError(f"{folder / 'result.json'} is not JSON") from None

    journal = MemoryJournal(entries, closed=True)
    outcome = engine.execute(script if script is not None else recorded_script, f"{call_id}-replay",
                             record=False, resume=True, journal=journal)
    differences = list(notes)
    diverged = outcome.error is not None and outcome.error.startswith("journal diverged:")
    replayed = sum(1 for line in outcome.calls if line.get("from_journal"))
    same_calls = not diverged and replayed == len(entries) and len(outcome.call_lines) == len(entries)
    if diverged:
        assert outcome.error is not None
        differences.append(outcome.error.removeprefix("journal diverged: "))
    elif outcome.ended_short is not None:
        same_calls = False
        differences.append(outcome.ended_short.removeprefix("journal diverged: "))
    elif not same_calls:
        differences.append(f"the replay made {len(outcome.call_lines)} calls, the record holds {len(entries)}")
    if recorded_error is not None or outcome.error is not None:
        same_result = recorded_error == outcome.error
        if not same_result and not diverged:
            differences.append(f"the recorded run failed with {recorded_error!r}, the replay with {outcome.error!r}"
                               if recorded_error is not None and outcome.error is not None else
                               f"the recorded run {'failed: ' + recorded_error if recorded_error else 'succeeded'}; "
                               f"the replay {'failed: ' + outcome.error if outcome.error else 'succeeded'}")
    else:
        same_result = outcome.result == recorded
        if not same_result:
            differences.append(f"the result differs: recorded {_short(recorded)}, replayed {_short(outcome.result)}")
    return ReplayReport(call_id=call_id, same_result=same_result, same_calls=same_calls, calls=len(entries),
                        replayed=replayed, differences=differences, recorded=recorded, recorded_error=recorded_error,
                        result=outcome.result, error=outcome.error, stdout=outcome.stdout)


def _started_at(record: dict[str, Any]) -> float:
    started = record.get("started_at")
    return float(started) if isinstance(started, (int, float)) else 0.0


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 200 else text[:200] + "..."


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
