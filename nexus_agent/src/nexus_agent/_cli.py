"""`nexus chat` and `nexus ask`, added to `nexus` through `nexus_register_commands`."""

from __future__ import annotations

import json
import re
import sys
from typing import TYPE_CHECKING, Any

import click
from nexus_core.cli import EXIT_FAILED, EXIT_OK, CliState, UsageError

from ._settings import PLUGIN_ID

if TYPE_CHECKING:
    from nexus_core import Nexus

    from ._events import AgentResult
    from ._plugin import AgentPlugin
    from ._session import Session

EXIT_INTERRUPTED = 130

_model_option = click.option(
    "--model", metavar="PROVIDER:MODEL",
    help="The model, e.g. openai:gpt-4.1 or anthropic:claude-sonnet-4-5 (default: the config's `model`).")
_turns_option = click.option(
    "--max-turns", type=click.IntRange(min=1), metavar="N",
    help="Model requests per task, at most (default: the config's max_turns, 20).")
_verbose_option = click.option(
    "-v", "--verbose", is_flag=True, help="Show each tool call's full arguments and output, not one line.")


def _open(ctx: click.Context, max_turns: int | None) -> Nexus:
    state = ctx.ensure_object(CliState)
    if max_turns is not None:
        state.plugin_settings.setdefault(PLUGIN_ID, {})["max_turns"] = max_turns
    return state.open(ctx)


def _session(nx: Nexus, model: str | None, **kwargs: Any) -> Session:
    """A session of this Nexus's agent, or UsageError saying what is missing."""
    from nexus_core.llm import ModelError

    agent: AgentPlugin | None = nx.plugin(PLUGIN_ID)
    if agent is None:
        raise UsageError(f"the agent plugin {PLUGIN_ID} is not active here (check plugins.active and "
                         "plugins.blocked; `nexus plugins` shows why)")
    chosen = model or nx.config.model
    if not chosen:
        raise UsageError("no model: pass --model provider:model (e.g. openai:gpt-4.1) or set "
                         "`model:` in the config")
    try:
        nx.check_model(chosen)
    except ValueError as exc:
        raise UsageError(f"--model: {exc}" if model else f"model: {exc}") from None
    except ModelError as exc:  # no such provider here: the closest one, or what to install
        raise UsageError(f"--model {chosen}: {exc}" if model else f"model {chosen}: {exc}") from None
    return agent.session(model=chosen, **kwargs)


#: what `/help` in `nexus chat` shows
CHAT_HELP = """\
the chat's commands:
  /help         this list
  /resume [ID]  go on with session ID's task that was cut when its host stopped (default: the latest
                such session; the chat lists them as it starts)
  /exit, /quit  end the chat (as Ctrl-D does)
Any other line is a task for the agent. Ctrl-C stops the current turn; a second Ctrl-C quits."""

_COMMAND = re.compile(r"/[A-Za-z][\w-]*")


def chat_command_of(line: str) -> str | None:
    """The chat command a line gives (`/help`), or None for a line for the model. A command is
    a first word like `/name`; a path such as `/etc/hosts` is not one."""
    first = line.strip().split(maxsplit=1)[0] if line.strip() else ""
    return first.lower() if _COMMAND.fullmatch(first) else None


def _stop_note(result: AgentResult) -> str | None:
    if result.stop_reason == "final_answer":
        return None
    if result.stop_reason == "interrupted":
        return "stopped: interrupted"
    detail = {"max_turns": f"after {result.turns} model requests (max_turns)",
              "max_tokens": f"after {result.usage.total_tokens} tokens (max_tokens)"}.get(result.stop_reason)
    return f"stopped ({result.stop_reason}): {result.error or detail}"


def _status(result: AgentResult) -> int:
    if result.stop_reason == "final_answer":
        return EXIT_OK
    return EXIT_INTERRUPTED if result.stop_reason == "interrupted" else EXIT_FAILED


def _list_interrupted(agent: Any, display: Any) -> None:
    """Say which sessions have a task that was cut when its host stopped (`nexus chat` starts)."""
    found = agent.interrupted_sessions()
    if not found:
        return
    lines = [f"  {sid}" + (f" (waits for approval: {len(waiting)} call{'s' if len(waiting) > 1 else ''})"
                            if waiting else "") for sid, waiting in found]
    display.note("interrupted sessions (their task was cut when its host stopped; /resume [ID] goes on):\n"
                 + "\n".join(lines))


def _resume_in_chat(nx: Any, model: str | None, line: str, display: Any, approver: Any) -> None:
    """`/resume [ID]`: go on with session ID's interrupted task here (default: the latest one),
    its calls' questions put to the person; the chat's own session is left as it was."""
    from ._console import run_task

    words = line.split()
    if len(words) > 2:
        display.note("usage: /resume [SESSION]")
        return
    if len(words) == 2:
        sid = words[1]
    else:
        found = nx.plugin("nexus.agent").interrupted_sessions()
        if not found:
            display.note("no interrupted session to resume")
            return
        sid = found[-1][0]
    try:
        resumed = _session(nx, model, approver=approver, on_event=display, resume=sid)
    except (LookupError, UsageError) as exc:
        display.note(f"/resume: {exc}")
        return
    display.note(f"[resuming session {sid}]")
    with resumed:
        try:
            result = run_task(resumed, None, display, approver)
        except LookupError as exc:
            display.note(f"/resume: {exc}")
            return
    display.end_text()
    note = _stop_note(result)
    display.note(f"[session {sid}: {note or 'done'}]")


@click.command("ask", epilog="""\b
Examples:
  nexus ask "What does README.md say about installing?"
  nexus ask --model anthropic:claude-sonnet-4-5 --yes "Tidy up the imports in app.py"
  echo "Summarise CHANGES.md" | nexus ask - --json
  nexus ask --resume 20261202T030411Z-1a2b3c4d --yes""")
@click.argument("prompt", nargs=-1)
@_model_option
@click.option("--yes", "policy", flag_value="yes", help="Approve every call a gate asks about.")
@click.option("--no", "policy", flag_value="no", help="Refuse every call a gate asks about (the default).")
@click.option("--json", "as_json", is_flag=True,
              help="Print the whole transcript and the result as JSON instead of the streamed answer.")
@click.option("--resume", "resume", metavar="SESSION",
              help="Go on with the task of session SESSION (its transcript) that was running when its host "
                   "stopped, instead of giving a new one (no PROMPT).")
@_turns_option
@_verbose_option
@click.pass_context
def ask_command(ctx: click.Context, prompt: tuple[str, ...], model: str | None, policy: str | None,
                as_json: bool, resume: str | None, max_turns: int | None, verbose: bool) -> int:
    """Give the agent one task (PROMPT; '-' reads stdin) and print its answer as it streams.
    Tool calls show one line each on stderr. Exits 0 on an answer, 1 when the task stopped
    otherwise (turn limit, token budget, an error), 130 when interrupted."""
    from ._console import Display, PolicyApprover, run_task

    text: str | None = None
    if resume is not None:
        if prompt:
            raise UsageError("--resume goes on with a session's task: give no PROMPT with it")
    else:
        text = sys.stdin.read() if prompt == ("-",) else " ".join(prompt)
        if not text.strip():
            raise UsageError("the prompt is empty" if prompt else "give a PROMPT (or --resume SESSION)")
    nx = _open(ctx, max_turns)
    display = Display(sys.stdout, sys.stderr, verbose=verbose, show_text=not as_json)
    try:
        opened = _session(nx, model, approver=PolicyApprover(display, policy), on_event=display, resume=resume)
    except LookupError as exc:
        raise UsageError(f"--resume: {exc}") from None
    with opened as session:
        try:
            result = run_task(session, text, display, None)
        except LookupError as exc:
            raise UsageError(f"--resume: {exc}") from None
        records = list(session.transcript.records)
    display.end_text()
    if as_json:
        from ._session import _usage_json

        click.echo(json.dumps({
            "session": result.session_id, "transcript": result.transcript, "answer": result.text,
            "stop_reason": result.stop_reason, "turns": result.turns, "usage": _usage_json(result.usage),
            "error": result.error, "records": records,
        }, indent=2, ensure_ascii=False, default=str))
    note = _stop_note(result)
    if note:
        click.echo(f"nexus: {note}", err=True)
    return _status(result)


@click.command("chat", epilog="""\b
Examples:
  nexus chat
  nexus --config agent.yaml chat --model openai:gpt-4.1 -v

\b
Ctrl-C stops the current turn (the chat goes on; a second Ctrl-C quits);
Ctrl-D or /exit ends the chat; /help lists the chat's commands.""")
@_model_option
@_turns_option
@_verbose_option
@click.pass_context
def chat_command(ctx: click.Context, model: str | None, max_turns: int | None, verbose: bool) -> int:
    """Talk with the agent: each message is a task; its text streams as it comes, each tool call
    shows as one line, and calls a gate asks about are put to you at the prompt."""
    from ._console import ConsoleApprover, Display, LineReader, run_task
    from ._plugin import TAKE_OVER_TURNS

    # a chat is long-lived: it takes over what killed hosts left (docs/durable.md), except their
    # agent turns: the person chooses to go on with one (/resume), not the chat. Said before the
    # Nexus opens, for `recover: start` takes over as it starts
    chosen = TAKE_OVER_TURNS.set(False)
    try:
        nx = _open(ctx, max_turns)
    finally:
        TAKE_OVER_TURNS.reset(chosen)
    display = Display(sys.stdout, sys.stdout, verbose=verbose)
    read = LineReader(prompt_out=sys.stdout)
    approver = ConsoleApprover(display, read)
    agent = nx.plugin("nexus.agent")
    with _session(nx, model, approver=approver, on_event=display) as session:
        agent.take_over_turns = False  # (already so: made under TAKE_OVER_TURNS False)
        nx.recover()
        where = f"; transcript: {session.transcript_path}" if session.transcript_path else ""
        click.echo(f"nexus chat with {session.model} (Ctrl-C stops a turn, Ctrl-D or /exit ends){where}", err=True)
        _list_interrupted(agent, display)
        while True:
            try:
                line = read("> ")
            except EOFError:
                display.end_text()
                break
            except KeyboardInterrupt:
                display.note("\n(Ctrl-D or /exit ends the chat)")
                continue
            if not line.strip():
                continue
            command = chat_command_of(line)
            if command in ("/exit", "/quit"):
                break
            if command == "/resume":
                _resume_in_chat(nx, model, line, display, approver)
                continue
            if command is not None:
                display.note(CHAT_HELP if command == "/help" else
                             f"unknown command {command} (a line sent to the model cannot start with "
                             f"one)\n{CHAT_HELP}")
                continue
            result = run_task(session, line, display, approver)
            display.end_text()
            note = _stop_note(result)
            if note:
                display.note(f"[{note}]")
    return EXIT_OK
