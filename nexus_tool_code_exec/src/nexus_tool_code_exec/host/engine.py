"""The run_code engine of one Nexus (runs in the host): its settings, the tool and its
description, the bindings cache, the launcher, and the flow of a run.

A run, top to bottom (`CodeExec.execute`), each step in one place:

    request   the call's script and id, and its session folder          _request
    check     the AST check (check.py) and the layers `require` names    _check
    launch    a child from the launcher (launchers/)                     _run: Seat.take
    serve     START, then the script's calls and output (runner.py)      _run: ScriptRun.run
    finish    the child ended, how the run ended (runner.py)             _run: ScriptRun.run
    persist   the session folder (session.py), the result event          _persist

The latency tricks (fastpath.py, launchers/zygote.py) stay behind names: the spare child a run
takes (a `Seat`), and what the host does while the child starts the script (`_announce`: the
request event and the session folder).
"""

from __future__ import annotations

import ast
import json
import logging
import os
import statistics
import threading
import time
from pathlib import Path
from typing import Any

import attrs

from nexus_core import (
    CallContext,
    CodeExecChunk,
    CodeExecRequest,
    CodeExecResult,
    Nexus,
    SkillContent,
    ToolDef,
    ToolResult,
)

from .. import protocol, sandbox
from ..launchers.base import Launcher
from ..launchers.spawn import SpawnLauncher
from ..launchers.zygote import ZygoteLauncher
from .bindings import Bindings, generate
from .check import ScriptRejected, check_script, skill_module_name
from .fastpath import Seat
from .runner import Outcome, ScriptRun, Settings
from .session import SessionFiles, SessionStore, folder_for

log = logging.getLogger("nexus_tool_code_exec")

TOOL_NAME = "run_code"

INPUT_SCHEMA = {
    "type": "object",
    "properties": {
        "script": {
            "type": "string",
            "description": "A complete Python script that defines `def run(ctx):`; its return value "
                           "(JSON-serializable) is the result.",
        }
    },
    "required": ["script"],
    "additionalProperties": False,
}

OUTPUT_SCHEMA = {
    "type": "object",
    "properties": {
        "stdout": {"type": "string", "description": "what the script printed (stdout and stderr)"},
        "result": {"description": "run's return value"},
        "stdout_truncated": {"type": "boolean"},
    },
}

INTRO = """Run one Python script that calls many tools in a single step, in a sandbox.

The script must define `def run(ctx):`; whatever it returns (JSON-serializable) is the result, and
what it prints is streamed back. Import `tools` to call the tools below (typed: pass an Args object
or keywords), `parallel` to fan out (`parallel.map(items, fn)`, `parallel.for_each(items, fn)`,
`parallel.all(*fns)`: ordered results, at most {max_workers} at once, the first error is raised),
and only these modules: {allowed}.{skills} No threads, processes, files outside the scratch
folder or network. Limits: {timeout}s, {output} bytes of output, {calls} tool calls.

Example:
    import tools, parallel

    def run(ctx):
        paths = ...
        texts = parallel.map(paths, lambda p: tools.read(path=p).content)
        print(len(texts), "files")
        return {{"count": len(texts)}}

"""


@attrs.define
class _Run:
    """One call of run_code on its way through `execute`."""

    call_id: str
    script: str
    record: bool  # persist it and fire the code.exec events (not for `nexus doctor`'s runs)
    folder: Path | None  # its session folder, where scripts are persisted
    skills: dict[str, list[tuple[str, str]]] = attrs.field(factory=dict)  # the active skills' helpers
    tree: ast.Module | None = None  # the script, as its check parsed it
    files: SessionFiles | None = None  # its session folder's files, open while it runs
    announced: bool = False  # the request event fired


class CodeExec:
    """run_code for one Nexus: made by that Nexus's `CodeExecPlugin`, whose hooks keep it
    current with that Nexus's tools and skills."""

    def __init__(self, nexus: Nexus, config: dict[str, Any], plugin_id: str) -> None:
        self.nexus = nexus
        self.config = config
        self.plugin_id = plugin_id
        self.settings = Settings(
            timeout_seconds=float(config["timeout_seconds"]),
            max_output_bytes=int(config["max_output_bytes"]),
            max_workers=int(config["max_workers"]),
            max_tool_calls=int(config["max_tool_calls"]),
            max_result_bytes=int(config["max_result_bytes"]),
            # by default one second past the wall clock, so a busy loop meets the timeout (and
            # its clear "timed out after Ns") first
            cpu_seconds=float(config["cpu_seconds"] or int(config["timeout_seconds"]) + 1),
        )
        self.sessions = SessionStore()
        self._lock = threading.Lock()
        self._bindings: tuple[Any, Bindings] | None = None
        self._launcher: Launcher | None = None
        self.launcher_note = "not started yet"
        self._closed = False
        self._missing: tuple[str, list[str]] | None = None
        #: the runs being served, by run_code call id (to stop a run's clock while a person decides)
        self._serving: dict[str, ScriptRun] = {}

    # -- the tool ---------------------------------------------------------------------------

    def tooldef(self) -> ToolDef:
        return ToolDef(
            name=TOOL_NAME,
            handler=self.handle,
            description=self.description(),
            input_schema=INPUT_SCHEMA,
            output_schema=OUTPUT_SCHEMA,
            takes_context=True,
        )

    def description(self) -> str:
        skills = self.skill_helpers()
        skill_text = ""
        if skills:
            skill_text = " Skill helpers: " + ", ".join(f"skills.{n}" for n in sorted(skills)) + "."
        intro = INTRO.format(
            max_workers=self.settings.max_workers,
            allowed=", ".join(self.config["allowed_packages"]),
            skills=skill_text,
            timeout=f"{self.settings.timeout_seconds:g}",
            output=self.settings.max_output_bytes,
            calls=self.settings.max_tool_calls,
        )
        return intro + self.bindings().stubs

    def _refresh_description(self) -> None:
        current = self.nexus.tool(TOOL_NAME)
        if current is None or current.plugin != self.plugin_id or self._closed:
            return
        self.nexus.replace_tool(self.tooldef(), plugin=self.plugin_id)

    # -- bindings and skills ----------------------------------------------------------------

    def skill_helpers(self) -> dict[str, list[tuple[str, str]]]:
        """`{module name: [(file name, source), ...]}` for the active skills' .py files."""
        try:
            from nexus_core.skills import active_skills
        except ImportError:
            return {}
        helpers: dict[str, list[tuple[str, str]]] = {}
        for skill in active_skills(self.nexus):
            folder = Path(skill.path)
            if folder.is_file():
                folder = folder.parent
            files = sorted(p for p in folder.glob("*.py") if p.is_file() and not p.name.startswith("test_"))
            if files:
                helpers[skill_module_name(skill.name)] = [
                    (p.name, p.read_text(encoding="utf-8", errors="replace")) for p in files
                ]
        return helpers

    def bindings(self) -> Bindings:
        key = self.nexus.tools_version
        with self._lock:
            if self._bindings is None or self._bindings[0] != key:
                self._bindings = (key, generate(self.nexus.tools(), skip={TOOL_NAME}))
            return self._bindings[1]

    def tools_changed(self, tool: ToolDef) -> None:
        """A tool came or went (the plugin's nexus_tool_register / nexus_tool_unregister):
        the description lists the tools, so it follows."""
        if tool.name != TOOL_NAME:
            self._refresh_description()

    def skills_changed(self) -> None:
        """A skill was activated or deactivated: the description lists the skills' helpers."""
        self._refresh_description()

    # -- a run, top to bottom ------------------------------------------------------------------

    def handle(self, arguments: dict[str, Any], ctx: CallContext) -> ToolResult:
        return self._result(self.execute(arguments["script"], ctx.call_id))

    def execute(self, script: str, call_id: str, *, record: bool = True) -> Outcome:
        """Check and run one script. With `record` (the tool's own calls), persist it and fire
        the code.exec events; without (`nexus doctor`'s timing runs), do neither."""
        run = self._request(script, call_id, record)
        outcome = self._check(run)
        if outcome is None:
            outcome = self._run(run)
        return self._persist(run, outcome)

    def _request(self, script: str, call_id: str, record: bool) -> _Run:
        folder = None
        if record and self.config["persist_scripts"]:
            folder = folder_for(self.nexus.config.session_dir, self.plugin_id, call_id)
        return _Run(call_id, script, record, folder)

    def _check(self, run: _Run) -> Outcome | None:
        """The script's check, and the sandbox's: None if it may run, else why not."""
        run.skills = self.skill_helpers()
        try:
            run.tree = check_script(run.script, self.config["allowed_packages"], active_skills=run.skills,
                                    reject_threads=self.config["reject_threads"])
        except ScriptRejected as exc:
            return Outcome(error=str(exc))
        missing = self.missing_required()
        if missing:
            return Outcome(error="sandbox unavailable: run_code requires " + "; ".join(missing))
        return None

    def _run(self, run: _Run) -> Outcome:
        """Launch the script's process and serve it to its end."""
        bindings = self.bindings()
        launcher = self.launcher()
        start = self._start_message(run, bindings, launcher)
        try:
            seat = Seat.take(launcher)
        except Exception as exc:
            self._announce(run)  # announced all the same
            return Outcome(error=f"runtime error: could not start the script's process: {exc}")
        served = ScriptRun(self.nexus, run.call_id, self.settings, frozenset(bindings.functions.values()),
                           emit_chunk=self._emit_chunk if run.record else (lambda chunk: None))
        self._serving[run.call_id] = served
        try:
            return served.run(launcher, seat, start, meanwhile=lambda: self._announce(run))
        finally:
            self._serving.pop(run.call_id, None)

    def pause_clock(self, call_id: str | None) -> None:
        """Stop the clock of run `call_id` (a run_code call id): one of its inner calls waits for
        a person. Nestable; every pause is undone by one `resume_clock`. Other ids are ignored."""
        served = self._serving.get(call_id or "")
        if served is not None:
            served.pause()

    def resume_clock(self, call_id: str | None) -> None:
        served = self._serving.get(call_id or "")
        if served is not None:
            served.resume()

    def _start_message(self, run: _Run, bindings: Bindings, launcher: Launcher) -> protocol.StartMessage:
        """The START: the script (and its code, compiled here), the bindings (which the
        launcher's next children get compiled), the limits."""
        key = f"{id(self)}:{self.nexus.tools_version}"
        launcher.preload(key, bindings.source)
        start: protocol.StartMessage = {
            "t": protocol.START,
            "call_id": run.call_id,
            "script": run.script,
            "bindings": bindings.source,
            "bindings_key": key,
            "skills": run.skills,
            "max_workers": self.settings.max_workers,
            "max_output_bytes": self.settings.max_output_bytes,
            "max_result_bytes": self.settings.max_result_bytes,
            "timeout": self.settings.timeout_seconds,
        }
        # compiled here, from the tree the check parsed: the child only loads it (a fresh child
        # compiles several times slower than this warm process, see child.runtime.load_code)
        assert run.tree is not None
        start["code"] = protocol.pack_code(compile(run.tree, protocol.SCRIPT_FILENAME, "exec", dont_inherit=True))
        return start

    def _announce(self, run: _Run) -> None:
        """While the child starts the script: the request event, and the run's session folder
        (the end of the run then only writes into the folder's open files)."""
        if not run.record:
            return
        run.announced = True
        self.nexus.hook.nexus_code_exec_request(request=CodeExecRequest(
            call_id=run.call_id, script=run.script, session_dir=str(run.folder) if run.folder else None))
        if run.folder is not None:
            run.files = self.sessions.open(run.folder, run.script)

    def _persist(self, run: _Run, outcome: Outcome) -> Outcome:
        """The run's session folder, and the result event for a run that was announced."""
        if run.record:
            if run.folder is not None:
                self.sessions.persist(run.folder, run.files, run.script, outcome)
            if run.announced:
                self.nexus.hook.nexus_code_exec_result(result=CodeExecResult(
                    call_id=run.call_id, stdout=outcome.stdout, result=outcome.result, error=outcome.error,
                    stdout_truncated=outcome.stdout_truncated, duration_seconds=outcome.duration,
                    tool_calls=len(outcome.call_lines),
                ))
        return outcome

    def _emit_chunk(self, chunk: CodeExecChunk) -> None:
        try:
            self.nexus.hook.nexus_code_exec_stdout(chunk=chunk)
        except Exception:
            log.exception("an observer of nexus_code_exec_stdout raised")

    @staticmethod
    def _result(outcome: Outcome) -> ToolResult:
        body: dict[str, Any] = {}
        if outcome.stdout:
            body["stdout"] = outcome.stdout
        if outcome.error is None and outcome.result is not None:
            body["result"] = outcome.result
        if outcome.stdout_truncated:
            body["stdout_truncated"] = True
        if outcome.error is not None:
            text = outcome.error + (f"\n--- stdout ---\n{outcome.stdout}" if outcome.stdout else "")
            return ToolResult(id="", name=TOOL_NAME, output=text, error=outcome.error,
                              output_structured=body or None, error_kind="failure")
        return ToolResult(id="", name=TOOL_NAME, output=json.dumps(body, ensure_ascii=False),
                          output_structured=body)

    # -- the launcher and the sandbox ---------------------------------------------------------

    def launcher(self) -> Launcher:
        """The zygote launcher, started on first use; a fresh-interpreter launcher where a
        zygote cannot run (the reason is kept for `nexus doctor`)."""
        with self._lock:
            if self._launcher is None:
                self._launcher, self.launcher_note = self._start_launcher()
            return self._launcher

    def _start_launcher(self) -> tuple[Launcher, str]:
        mode = self.config["launcher"]
        policy = self.policy()
        if mode == "spawn":
            return SpawnLauncher(policy), "fresh interpreter per script (launcher: spawn in config)"
        zygote = ZygoteLauncher(self.config["allowed_packages"], policy)
        try:
            zygote.start()
        except Exception as exc:
            if mode == "zygote":
                raise
            return SpawnLauncher(policy), f"fresh interpreter per script: the zygote could not start ({exc})"
        return zygote, "warm zygote forks each script"

    def layer_statuses(self) -> dict[str, sandbox.LayerStatus]:
        """Each sandbox layer, probed once per process: active, or unavailable and why."""
        return sandbox.layer_statuses()

    def active_layers(self) -> list[str]:
        return sorted(name for name, status in self.layer_statuses().items() if status.active)

    def missing_required(self) -> list[str]:
        # asked on every run: worked out again only when the switch that disables layers changes
        switch = os.environ.get(sandbox.ENV_DISABLE_LAYERS, "")
        cached = self._missing
        if cached is not None and cached[0] == switch:
            return list(cached[1])
        statuses = self.layer_statuses()
        missing = [f"{name} ({statuses[name].detail if name in statuses else 'unknown layer'})"
                   for name in self.config["require"] if name not in statuses or not statuses[name].active]
        self._missing = (switch, missing)
        return list(missing)

    def policy(self) -> protocol.ChildPolicy:
        """How every child of this engine is isolated (each also gets its own scratch folder)."""
        cpu = int(self.settings.cpu_seconds or 1)
        return {
            "layers": self.active_layers(),
            "limits": {"memory_mb": int(self.config["memory_mb"]), "cpu_seconds": cpu},
            "read_paths": list(sandbox.runtime_read_paths()),
        }

    # -- nexus doctor -------------------------------------------------------------------------

    def trivial_run_ms(self, runs: int = 20, pause: float = 0.02) -> float:
        """The median wall time of `def run(ctx): return 1`, launch to result, in ms, runs
        `pause` seconds apart: each finds a spare child ready, as runs an agent makes do (back
        to back, a run may wait for the spare the last one's end started)."""
        times = []
        for i in range(runs + 1):
            time.sleep(pause)
            began = time.perf_counter()
            outcome = self.execute("def run(ctx):\n    return 1\n", f"doctor-{i}", record=False)
            if outcome.error:
                raise RuntimeError(outcome.error)
            times.append((time.perf_counter() - began) * 1000)
        return statistics.median(times[1:])  # the first one may start the zygote

    def doctor_lines(self) -> list[str]:
        lines = []
        try:
            launcher = self.launcher()
        except Exception as exc:
            lines.append(f"error: no way to start a script's process: {exc}")
            return lines
        pid = launcher.pid  # the zygote's, as of now: it is replaced if it dies
        lines.append(f"launcher: {self.launcher_note}" + (f" (pid {pid})" if pid else ""))
        lines += sandbox.doctor_lines(self.layer_statuses())
        for missing in self.missing_required():
            lines.append(f"error: required layer {missing} is unavailable, so run_code refuses to run")
        if not self.missing_required():
            try:
                lines.append(f"a trivial run costs {self.trivial_run_ms():.2f} ms (median of 20, a spare child waiting)")
            except Exception as exc:
                lines.append(f"error: a trivial run failed: {exc}")
        return lines

    # -- lifetime -----------------------------------------------------------------------------

    def held_fds(self) -> set[int]:
        """The fds this engine keeps open between runs: the spare children's pipe ends and the
        files of the session folder made ahead. Both are replaced after every run."""
        with self._lock:
            launcher = self._launcher
        return (launcher.held_fds() if launcher is not None else set()) | self.sessions.held_fds()

    def close(self) -> None:
        self._closed = True
        with self._lock:
            launcher, self._launcher = self._launcher, None
        if launcher is not None:
            launcher.close()
        self.sessions.close()
