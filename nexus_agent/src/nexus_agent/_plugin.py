"""The plugin object of `nexus.agent`: one Nexus's agent settings, the sessions it makes, and the
`nexus chat` / `nexus ask` commands."""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from nexus_core.plugins import Plugin

from nexus_core import hookimpl

from ._settings import PLUGIN_ID, Settings

if TYPE_CHECKING:  # imported on first use: `nexus --help` loads this class, and stays fast
    import click

    from nexus_core import Question

    from ._events import AgentEvent, AgentResult
    from ._session import InterruptedTurn, Session, SessionLock


#: what the `take_over_turns` of an AgentPlugin made now starts as. `nexus chat` sets it False
#: before it opens its Nexus: with `recover: start` the durable plugin's recover() runs as the Nexus
#: starts, before the chat could set the flag on the plugin, and would go on with the turns itself
TAKE_OVER_TURNS: ContextVar[bool] = ContextVar("nexus_agent_take_over_turns", default=True)


class AgentPlugin(Plugin[Settings]):
    """The plugin object of one Nexus (the entry point names this class): its settings, and the
    sessions it makes."""

    NEXUS_PLUGIN_ID = PLUGIN_ID

    def __init__(self, nexus: Any) -> None:
        super().__init__(nexus)
        import weakref

        #: the open sessions, by id: a person asked about one of their calls is noted in its transcript
        self._sessions: weakref.WeakValueDictionary[str, Session] = weakref.WeakValueDictionary()
        #: whether `Nexus.recover()` goes on with the interrupted turns it finds (`interrupted_turns`):
        #: a front end that lets the person choose (`nexus chat`'s /resume) sets it False first
        self.take_over_turns = TAKE_OVER_TURNS.get()

    @hookimpl
    def nexus_ask_start(self, question: Question) -> None:
        self._asking(question, True)

    @hookimpl
    def nexus_ask_end(self, question: Question) -> None:
        self._asking(question, False)

    def _asking(self, question: Question, waiting: bool) -> None:
        key = question.call.metadata.get("durable_key") if isinstance(question.call.metadata, dict) else None
        if question.kind != "approval" or not isinstance(key, str) or "/" not in key:
            return
        session = self._sessions.get(key.split("/", 1)[0])
        if session is not None:
            session.asking(question.call.id, waiting)

    @staticmethod
    @hookimpl
    def nexus_register_commands(cli: click.Group) -> None:
        from ._cli import ask_command, chat_command

        cli.add_command(chat_command)
        cli.add_command(ask_command)

    def session(self, *, model: str | None = None, approver: Callable[[Question], Any] | None = None,
                on_event: Callable[[AgentEvent], None] | None = None,
                transcript: bool | None = None, resume: str | None = None,
                lock: SessionLock | None = None) -> Session:
        """A new conversation. `model` is "provider:model" (default: the config's `model`);
        `approver` answers for the person when a gate asks or the model asks a question
        (default: the Nexus's); `on_event` sees text as it streams and each tool call;
        `transcript` overrides the `transcripts` setting; `resume` is the id of a session to go
        on with (its transcript's history; `Session.resume()` goes on with its interrupted task).
        Raises ValueError when there is no model to use, LookupError for no such session or one
        open in another process (`lock`: the session's lock, taken already by the caller)."""
        from ._session import Session

        chosen = model or self.nexus.config.model
        if not chosen:
            raise ValueError("no model: set `model: provider:model` in the config (for example "
                             "openai:gpt-4.1), or pass one")
        session = Session(self.nexus, self.settings, model=chosen, approver=approver, on_event=on_event,
                          transcript=transcript, resume=resume, lock=lock)
        self._sessions[session.id] = session
        return session

    def resume(self, session_id: str, **kwargs: Any) -> AgentResult:
        """Go on with the task of session `session_id` (its transcript) that was running when its
        host stopped, and close the session after it: `session(resume=session_id).resume()`.
        Calls that have a result in the transcript are not run again and no model request that
        has its response there is made again (see `Session.resume`); raises LookupError when
        there is no such session, or its last task ended."""
        with self.session(resume=session_id, **kwargs) as session:
            return session.resume()

    def interrupted_turns(self) -> list[InterruptedTurn]:
        """The sessions of this session folder whose task was cut while a call of it waited for
        a person (its approval), and that no live process has open: each is returned with the
        session's lock taken, so no other host goes on with it; `turn.resume()` goes on with it
        here, `turn.release()` leaves it. nexus.durable's `recover()` calls it (none when
        `take_over_turns` is False)."""
        from ._session import interrupted_turns

        return interrupted_turns(self, self.nexus) if self.take_over_turns else []

    def interrupted_sessions(self) -> list[tuple[str, tuple[str, ...]]]:
        """The sessions of this session folder whose last task was cut (its host killed, or it
        crashed) and that no live process has open, oldest first: each as its id and the ids of
        the task's calls that were waiting for a person. `resume(ID)` goes on with one."""
        from ._session import interrupted_sessions

        return interrupted_sessions(self.nexus)

    def run(self, prompt: str, **kwargs: Any) -> AgentResult:
        """One task in a new session (closed after it): `session(**kwargs).send(prompt)`."""
        with self.session(**kwargs) as session:
            return session.send(prompt)
