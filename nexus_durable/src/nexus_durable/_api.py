"""`Approvals`: the pending approvals of a durable database, for front ends (a web page, a chat
bot, `nexus approvals`) in any process: list them, answer one.

It is a DBOS client (`DBOSClient`): it reads and writes the database and starts no engine, so
it never takes over a killed host's work and can run beside the hosts, on another machine too
when the database is Postgres.

    from nexus_durable import Approvals

    with Approvals("sqlite:////home/me/.local/state/nexus/sessions/proj-1a2b/durable.sqlite") as approvals:
        for pending in approvals.pending():
            print(pending.id, pending.rendered)
        approvals.answer("approval-3f2a...", allow=False, note="not on Fridays")
"""

from __future__ import annotations

from typing import Any

from ._records import ANSWER_TOPIC, APPROVAL_WORKFLOW, PendingApproval, answer_message

#: the states of an approval's workflow that wait for the answer: PENDING, or ENQUEUED (its host
#: was killed and a host that took it over has not picked it up yet)
WAITING = ("PENDING", "ENQUEUED")


class ApprovalError(Exception):
    """An approval that cannot be answered: no such id, answered already, or no database."""


class Approvals:
    def __init__(self, url: str) -> None:
        from dbos import DBOSClient

        self.url = url
        self._client = DBOSClient(system_database_url=url)

    def pending(self) -> list[PendingApproval]:
        """The approvals waiting for an answer, oldest first."""
        try:
            statuses = self._client.list_workflows(name=APPROVAL_WORKFLOW, status=list(WAITING), load_input=True,
                                                   load_output=False, sort_desc=False)
        except Exception as exc:
            if _not_made_yet(exc):
                return []  # no durable Nexus has started on this database yet: nothing was asked
            raise
        found = []
        for status in statuses:
            record = _record_of(status)
            if record is not None:
                found.append(PendingApproval.from_record(record))
        return found

    def get(self, approval_id: str) -> PendingApproval:
        """The pending approval `approval_id`; ApprovalError when there is none such, or it is
        answered already."""
        status = self._status(approval_id)
        if status.status not in WAITING:
            raise ApprovalError(f"approval {approval_id} is answered already ({status.status.lower()})")
        record = _record_of(status)
        if record is None:
            raise ApprovalError(f"{approval_id} is not an approval")
        return PendingApproval.from_record(record)

    def answer(self, approval_id: str, allow: bool, note: str = "", by: str = "user") -> None:
        """Answer the pending approval `approval_id`: allow the call, or deny it (`note` is the
        reason the model is told). The call goes on in the host waiting on it (or, when that
        host was killed, in the next one started on the database). Raises ApprovalError for an
        approval that does not exist or is answered already; when two answers race, the first
        one the waiting side receives counts."""
        self.get(approval_id)
        self._client.send(approval_id, answer_message(allow, note, by), topic=ANSWER_TOPIC)

    def outcome(self, approval_id: str) -> dict[str, Any] | None:
        """What an answered approval came to: {"answer": {...}} and, when its call ran in a host
        that took over from a killed one, "result" (the call's result as data). None while it
        waits."""
        status = self._status(approval_id)
        if status.status in WAITING:
            return None
        output: Any = self._client.retrieve_workflow(approval_id).get_result()
        return output if isinstance(output, dict) else None

    def _status(self, approval_id: str) -> Any:
        try:
            found = self._client.list_workflows(workflow_ids=[approval_id], load_input=True, load_output=False)
        except Exception as exc:
            if not _not_made_yet(exc):
                raise
            found = []
        if not found or found[0].name != APPROVAL_WORKFLOW:
            raise ApprovalError(f"no approval {approval_id!r} in {_shown(self.url)}")
        return found[0]

    def close(self) -> None:
        self._client.destroy()

    def __enter__(self) -> Approvals:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _not_made_yet(exc: BaseException) -> bool:
    """Whether `exc` says DBOS's tables are not there yet (the database was never launched on)."""
    import sqlalchemy as sa

    text = str(getattr(exc, "orig", exc))
    return isinstance(exc, sa.exc.DBAPIError) and ("does not exist" in text or "no such table" in text)


def _record_of(status: Any) -> dict[str, Any] | None:
    data = status.input
    args = data.get("args", ()) if isinstance(data, dict) else getattr(data, "args", ())
    if args and isinstance(args[0], dict) and "call" in args[0]:
        record: dict[str, Any] = args[0]
        return record
    return None


def _shown(url: str) -> str:
    from ._engine import _redacted

    return _redacted(url)
