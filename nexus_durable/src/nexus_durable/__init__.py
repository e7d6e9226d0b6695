"""The `nexus.durable` plugin: durable runs on DBOS. With it on, a gate's `Ask` becomes a pending
approval stored in a database: answerable from this process's approver or from any other
process (`nexus approvals answer ID allow|deny`, or `Approvals` from Python), expiring as a
denial, and surviving the host: a host killed while an approval waits is taken over by the next
Nexus started with the same config, which runs the call once the approval is answered (a
handler that completed is not run again; one in flight is reported as possibly done).

    plugins:
      nexus.durable:
        enabled: true                  # null (the default): on when `database` is set
        database: null                 # a SQLite file, or postgresql://...; null: durable.sqlite in the session folder
        approval_expiry_seconds: 86400 # null: approvals never expire
        recover: auto                  # take over killed hosts' work: auto (long-lived hosts), start, off

See docs/durable.md.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import attrs
from nexus_core.plugins import Plugin, SettingError, setting

from nexus_core import hookimpl

from ._api import ApprovalError, Approvals
from ._records import PendingApproval

if TYPE_CHECKING:
    from ._backend import DurableBackend

log = logging.getLogger("nexus_durable")

__version__ = "0.1.0"
PLUGIN_ID = "nexus.durable"
#: the SQLite file in the session folder when `database` is not set
DEFAULT_DATABASE = "durable.sqlite"

__all__ = ["PLUGIN_ID", "ApprovalError", "Approvals", "DurablePlugin", "DurableSettings", "PendingApproval",
           "database_url"]


@attrs.frozen
class DurableSettings:
    enabled: bool | None = setting(None, description=(
        "make approvals and the calls that wait on them durable: true, false, or null (the default) to be on "
        "when `database` is set"))
    database: str | None = setting(None, description=(
        "where durable state is kept: a SQLite file (relative paths from the workspace) or a "
        f"postgresql:// URL; null (the default): {DEFAULT_DATABASE} in the session folder"))
    approval_expiry_seconds: float | None = setting(86400.0, description=(
        "how long a pending approval waits for an answer before it is answered as a denial saying it "
        "expired; null: it never expires"), exclusiveMinimum=0)
    recover: Literal["auto", "start", "off"] = setting("auto", description=(
        "when this Nexus takes over what killed hosts left (calls whose approval waits, interrupted run_code "
        "runs): auto, when its program says it is long-lived (Nexus.recover(): nexus chat, nexus mcp serve); "
        "start, whenever it starts; off, never"))

    def on(self) -> bool:
        return self.enabled if self.enabled is not None else self.database is not None


def database_url(settings: DurableSettings, workspace: Path, session_dir: Path) -> str:
    """The SQLAlchemy URL of the durable database these settings name."""
    database = settings.database
    if database is None:
        return f"sqlite:///{session_dir / DEFAULT_DATABASE}"
    if "://" in database:
        scheme = database.split("://", 1)[0].split("+", 1)[0]
        if scheme not in ("postgresql", "postgres", "sqlite"):
            raise SettingError("database", f"{scheme}:// is not a database nexus.durable can use: give a SQLite "
                               "file's path or a postgresql:// URL")
        return database
    path = Path(database).expanduser()
    return f"sqlite:///{(workspace / path) if not path.is_absolute() else path}"


class DurablePlugin(Plugin[DurableSettings]):
    """The plugin of one Nexus: when on, it starts the process's DBOS engine on the configured
    database and makes a `DurableBackend` the Nexus's durability (`backend`; None when off)."""

    NEXUS_PLUGIN_ID = PLUGIN_ID

    def __init__(self, nexus: Any) -> None:
        super().__init__(nexus)
        self.backend: DurableBackend | None = None
        self.url: str | None = None

    def configure(self) -> None:
        settings = self.settings
        if not settings.on():
            return
        config = self.nexus.config
        url = database_url(settings, Path(config.workspace), Path(config.session_dir))
        if url.startswith("sqlite:///"):
            Path(url[len("sqlite:///"):]).parent.mkdir(parents=True, exist_ok=True)
        from . import _engine
        from ._backend import DurableBackend

        try:
            _engine.acquire(url)
        except ValueError as exc:
            raise SettingError("database", str(exc)) from None
        self.url = url
        self.backend = DurableBackend(self.nexus, url, settings.approval_expiry_seconds, settings.recover)
        self.nexus.set_durability(self.backend)

    def recover(self) -> None:
        """What `Nexus.recover()` does: this Nexus is a long-lived host, so it takes over now
        what killed hosts of its machine left (unless `recover: off`); nothing when off."""
        if self.backend is not None:
            self.backend.recover()

    def approvals(self) -> Approvals:
        """The approvals of this Nexus's durable database (raises ApprovalError when off)."""
        if self.url is None:
            raise ApprovalError("nexus.durable is off in this Nexus (set plugins.nexus.durable.enabled: true)")
        return Approvals(self.url)

    @hookimpl
    def nexus_doctor(self) -> list[str] | None:
        import dbos

        version = getattr(dbos, "__version__", None) or _dist_version("dbos")
        if self.url is None:
            return [("durable: off (approvals wait in the asking process only; plugins.nexus.durable.enabled: true "
                     "turns it on)")]
        from ._engine import _redacted

        kind = "Postgres" if self.url.startswith("postgres") else "SQLite"
        return [f"durable: on, DBOS {version} on {kind} ({_redacted(self.url)})"]

    @hookimpl
    def nexus_shutdown(self) -> None:
        if self.backend is not None:
            # first, while the engine runs: the run_code runs going on are left to the next host
            # (their journals kept, their pending approvals neither refused nor answered), whichever
            # of the two plugins shuts down first (nexus.tool.code_exec's close leaves them too)
            self._leave_runs()
            if self.nexus.durability is self.backend:
                self.nexus.durability = None
            self.backend.close()
            self.backend = None

    def _leave_runs(self) -> None:
        try:
            from nexus_tool_code_exec import engine_for
        except ImportError:
            return
        try:
            engine = engine_for(self.nexus)
            if engine is not None:
                engine.leave_runs()
        except Exception:
            log.exception("could not leave the run_code runs to the next host")

    @staticmethod
    @hookimpl
    def nexus_register_commands(cli: Any) -> None:
        from ._cli import approvals_command

        cli.add_command(approvals_command)


def _dist_version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return "?"
