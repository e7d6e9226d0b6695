"""`nexus approvals` (list the pending approvals) and `nexus approvals answer ID allow|deny`,
added to `nexus` through `nexus_register_commands`.

Neither opens a Nexus: the config alone says where the durable database is, and the commands
are DBOS clients (`Approvals`), so answering never starts an engine in this short-lived
process, which would take over a killed host's calls and run them here.
"""

from __future__ import annotations

import datetime
import json
import time
from pathlib import Path

import click
from nexus_core.cli import EXIT_OK, CliState, UsageError
from nexus_core.plugins import read_settings, settings_schema
from nexus_core.terminal import escape

from ._api import ApprovalError, Approvals


def _database(ctx: click.Context, database: str | None) -> str:
    """The durable database's URL: `--database`, else the config's."""
    from . import PLUGIN_ID, DurableSettings, database_url

    if database is not None:
        return database_url(DurableSettings(enabled=True, database=database), Path.cwd(), Path.cwd())
    config = ctx.ensure_object(CliState).loaded_config()
    section = config.validate_plugin_section(PLUGIN_ID, settings_schema(DurableSettings))
    settings = read_settings(DurableSettings, section)
    return database_url(settings, Path(config.workspace), Path(config.session_dir))


def _missing(url: str) -> str | None:
    """The SQLite file `url` names when it does not exist yet (no approval was ever asked)."""
    if url.startswith("sqlite:///") and not Path(url[len("sqlite:///"):]).is_file():
        return url[len("sqlite:///"):]
    return None


def _when(timestamp: float | None) -> str:
    if timestamp is None:
        return "never"
    return datetime.datetime.fromtimestamp(timestamp).strftime("%Y-%m-%d %H:%M:%S")


def _left(expires_at: float | None) -> str:
    if expires_at is None:
        return "no expiry"
    left = expires_at - time.time()
    if left <= 0:
        return "expiring"
    return f"expires in {left / 3600:.1f} h" if left >= 3600 else f"expires in {max(left, 0) / 60:.0f} min"


@click.group("approvals", invoke_without_command=True, epilog="""\b
Examples:
  nexus approvals
  nexus approvals --json
  nexus approvals answer approval-3f2a1b allow
  nexus approvals answer approval-3f2a1b deny --note "not the production database\"""")
@click.option("--database", metavar="PATH|URL",
              help="The durable database (default: plugins.nexus.durable.database, else the session folder's).")
@click.option("--full", is_flag=True, help="Show each call whole (long values are folded otherwise).")
@click.option("--json", "as_json", is_flag=True, help="Print the pending approvals as JSON.")
@click.pass_context
def approvals_command(ctx: click.Context, database: str | None, full: bool, as_json: bool) -> int:
    """List the approvals waiting for an answer (nexus.durable): each one's id, the whole call
    as the host's console would show it, who asked and when it expires."""
    ctx.meta["nexus_durable.database"] = database
    if ctx.invoked_subcommand is not None:
        return EXIT_OK
    url = _database(ctx, database)
    if _missing(url):
        pending = []  # a database is made when a durable Nexus first starts: nothing asked yet
    else:
        with Approvals(url) as approvals:
            pending = approvals.pending()
    if as_json:
        click.echo(json.dumps([p.to_json() for p in pending], indent=2))  # ASCII: no control character
        return EXIT_OK
    if not pending:
        click.echo("no approval is waiting", err=True)
        return EXIT_OK
    for n, approval in enumerate(pending):
        if n:
            click.echo("")
        click.echo(f"{approval.id}  asked {_when(approval.asked_at)}, {_left(approval.expires_at)}")
        # rendered by nexus_core.terminal (escaped there); indented so no line of it passes for a header
        for line in (approval.rendered_full if full else approval.rendered).splitlines():
            click.echo(f"  {line}")
    click.echo("\nanswer with: nexus approvals answer ID allow|deny [--note TEXT]", err=True)
    return EXIT_OK


@approvals_command.command("answer")
@click.argument("approval_id", metavar="ID")
@click.argument("decision", type=click.Choice(["allow", "deny"]))
@click.option("--note", default="", help="Why (a denial's reason is what the model is told).")
@click.option("--json", "as_json", is_flag=True, help="Print what was answered as JSON.")
@click.pass_context
def answer_command(ctx: click.Context, approval_id: str, decision: str, note: str, as_json: bool) -> int:
    """Answer the pending approval ID: allow the call, or deny it. The host waiting on it goes on
    (or, when it was killed, the next Nexus started on the database runs the call)."""
    url = _database(ctx, ctx.meta.get("nexus_durable.database"))
    missing = _missing(url)
    if missing:
        raise UsageError(f"no approval {approval_id!r}: there is no durable database at {missing} yet (is "
                         "plugins.nexus.durable on in this config?)")
    with Approvals(url) as approvals:
        try:
            pending = approvals.get(approval_id)
            approvals.answer(approval_id, allow=decision == "allow", note=note, by="user")
        except ApprovalError as exc:
            raise UsageError(str(exc)) from None
    if as_json:
        click.echo(json.dumps({"id": approval_id, "decision": decision, "note": note, "tool": pending.tool}))
    else:
        verb = "allowed" if decision == "allow" else "denied"
        click.echo(f"{verb}: {escape(pending.tool, multiline=False)} ({escape(approval_id, multiline=False)})")
    return EXIT_OK
