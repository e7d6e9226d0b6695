"""`nexus run SCRIPT.py` (runs in the host: the `nexus` command): a script through run_code from
the command line, its output streamed live and the result JSON printed last; and `nexus runs` /
`nexus runs show ID`, which read the runs' session records back (`runs`); `nexus runs resume ID`,
which finishes a run whose host stopped (journal.py); and `nexus replay CALL_ID` (replay.py). Added
to `nexus` through `nexus_register_commands`."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from nexus_core import ToolCall, hookimpl
from nexus_core.cli import EXIT_FAILED, EXIT_OK, CliState, UsageError, print_result

from .events import CodeExecChunk

PLUGIN_ID = "nexus.tool.code_exec"


@click.command("run", epilog="""\b
Examples:
  nexus run script.py
  nexus run script.py --timeout 120 --json
  echo 'def run(ctx): return 1' | nexus run -""")
@click.argument("script", metavar="SCRIPT.py")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), metavar="SECONDS",
              help="Wall-clock limit of the script (default: the config's timeout_seconds, 30).")
@click.option("--json", "as_json", is_flag=True, help="Print the whole result as JSON last.")
@click.pass_context
def run_command(ctx: click.Context, script: str, timeout: float | None, as_json: bool) -> int:
    """Run SCRIPT.py (a script with `def run(ctx)`; '-' reads stdin) through run_code: the same
    static check, sandbox and gates as a model's script. Exits 1 when the script fails."""
    state = ctx.ensure_object(CliState)
    if timeout is not None:
        state.plugin_settings.setdefault(PLUGIN_ID, {})["timeout_seconds"] = timeout
    try:
        source = sys.stdin.read() if script == "-" else Path(script).read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot read {script}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise UsageError(f"cannot read {script}: not UTF-8 text (byte {exc.start})") from None
    nx = state.open(ctx)
    if nx.tool("run_code") is None:
        raise UsageError("run_code is not available: install nexus-rt-tool-code-exec (or activate "
                         f"{PLUGIN_ID} in plugins.active)")
    call = ToolCall(name="run_code", arguments={"script": source})

    class LiveOutput:
        piped_away = False  # the reader of our stdout went away (`nexus run x.py | head`)

        @hookimpl
        def nexus_code_exec_stdout(self, chunk: CodeExecChunk) -> None:
            if chunk.call_id != call.id or not chunk.data or self.piped_away:
                return
            stream = sys.stderr if chunk.stream == "stderr" else sys.stdout
            try:
                stream.write(chunk.data)
                stream.flush()
            except BrokenPipeError:
                self.piped_away = True  # the run goes on; printing its result ends the command quietly

    name = nx.register(LiveOutput(), name="nexus.cli.live-output")
    try:
        result = nx.invoke(call)
    finally:
        nx.unregister(name)
    structured = result.output_structured if isinstance(result.output_structured, dict) else {}
    if structured.get("stdout") and not structured["stdout"].endswith("\n"):
        click.echo()
    if structured.get("stdout_truncated"):
        click.echo("nexus: output truncated at max_output_bytes", err=True)
    if as_json or result.is_error:
        return print_result(result, as_json)
    click.echo(json.dumps(structured.get("result"), indent=2, ensure_ascii=False))
    return EXIT_FAILED if result.is_error else EXIT_OK


_SESSION_DIR = "nexus.tool.code_exec.runs.session_dir"


def _session_dir(ctx: click.Context, session_dir: Path | None) -> Path:
    if session_dir is not None:
        return session_dir
    # the config alone says where the records are: no Nexus (no plugin, no server) is started
    return ctx.ensure_object(CliState).session_dir()


@click.group("runs", invoke_without_command=True, epilog="""\b
Examples:
  nexus runs
  nexus runs --limit 5 --json
  nexus runs show call_3f2a""")
@click.option("--session-dir", type=click.Path(file_okay=False, path_type=Path),
              help="The session folder to read (default: the config's session_dir).")
@click.option("--limit", type=click.IntRange(min=1), default=20, show_default=True, help="How many runs to list.")
@click.option("--json", "as_json", is_flag=True, help="Print the runs as JSON.")
@click.pass_context
def runs_command(ctx: click.Context, session_dir: Path | None, limit: int, as_json: bool) -> int:
    """List the recent run_code runs of a session folder: when, status, duration, inner calls,
    vetoes; `nexus runs show ID` draws one."""
    ctx.meta[_SESSION_DIR] = session_dir  # for `runs show`, whose own context is a child of this one
    if ctx.invoked_subcommand is not None:
        return EXIT_OK
    from .runs import list_runs, table

    runs = list_runs(_session_dir(ctx, session_dir))[:limit]
    if as_json:
        click.echo(json.dumps([run.summary() for run in runs], indent=2, ensure_ascii=False))
    elif runs:
        click.echo(table(runs))
    else:
        click.echo("no run_code runs recorded here", err=True)
    return EXIT_OK


@runs_command.command("show")
@click.argument("run_id", metavar="ID")
@click.option("--json", "as_json", is_flag=True, help="Print the run (script, calls, stdout, result) as JSON.")
@click.pass_context
def runs_show_command(ctx: click.Context, run_id: str, as_json: bool) -> int:
    """Draw the run ID (a run_code call id, or the start of one) as a tree: its inner calls in
    order, parallel ones grouped, each with its gate outcome, duration and a short result; its
    stdout; its result."""
    from .runs import draw, find_run, list_runs

    folder = _session_dir(ctx, ctx.meta.get(_SESSION_DIR))
    run = find_run(folder, run_id)
    if run is None:
        known = ", ".join(r.id for r in list_runs(folder)[:5]) or "none"
        raise UsageError(f"no run_code run {run_id!r} in {folder} (recent: {known})")
    if as_json:
        click.echo(json.dumps(run.details(), indent=2, ensure_ascii=False))
    else:
        click.echo(draw(run))
    return EXIT_OK


@runs_command.command("resume", epilog="""\b
Examples:
  nexus runs resume call_3f2a""")
@click.argument("run_id", metavar="ID")
@click.option("--json", "as_json", is_flag=True, help="Print the whole result as JSON.")
@click.pass_context
def runs_resume_command(ctx: click.Context, run_id: str, as_json: bool) -> int:
    """Finish the run ID, whose host stopped before it ended (`nexus runs` shows it running, and
    its folder holds a journal): its script runs again, every inner call that completed answered
    from the journal without running; one that was running is answered as possibly done; the
    rest run. Exits 1 when the script fails."""
    from .. import engine_for

    nx = ctx.ensure_object(CliState).open(ctx)
    engine = engine_for(nx)
    if engine is None:
        raise UsageError(f"run_code is not available: activate {PLUGIN_ID} in plugins.active")
    try:
        result = engine.resume(run_id)
    except LookupError as exc:
        waiting = ", ".join(engine.interrupted_runs()) or "none"
        raise UsageError(f"{exc} (runs that can be resumed: {waiting})") from None
    return print_result(result, as_json)


@click.command("replay", epilog="""\b
Examples:
  nexus replay call_3f2a
  nexus replay call_3f2a --script changed.py --json""")
@click.argument("call_id", metavar="CALL_ID")
@click.option("--script", "script_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Replay this script in place of the recorded one (to check a change).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.pass_context
def replay_command(ctx: click.Context, call_id: str, script_path: Path | None, as_json: bool) -> int:
    """Re-run the recorded run_code call CALL_ID with every inner call answered from its record
    (no tool runs, no gate asks), with the bindings of this config, and say whether it produced
    the same result and the same calls. Exits 0 when both are the same, 1 when not."""
    from .replay import ReplayError, replay
    from .runs import find_run

    script = None
    if script_path is not None:
        try:
            script = script_path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"cannot read {script_path}: {exc}") from None
    state = ctx.ensure_object(CliState)
    run = find_run(state.session_dir(), call_id)  # the id, or the start of one
    nx = state.open(ctx)
    try:
        report = replay(nx, run.id if run is not None else call_id, script)
    except ReplayError as exc:
        raise UsageError(str(exc)) from None
    if as_json:
        click.echo(json.dumps(report.as_json(), indent=2, ensure_ascii=False, default=str))
    else:
        from .runs import escape

        click.echo(escape(report.text()))
    return EXIT_OK if report.same else EXIT_FAILED
