"""The agent loop's own hooks: this package brings them, not the core (the entry point
`nexus.hookspecs` in pyproject.toml names this module), so a plugin may implement them whether
or not the agent is active in its Nexus. docs/hooks.md documents them with the core's hooks.

Both are observers: an implementation that raises is logged, naming its plugin, and the task
goes on. A tracer opens a span for the task at the start and closes it at the end; the task's
model requests and tool calls happen in between (the model requests on the same thread, the tool
calls on the session's workers, which run in a copy of the thread's context variables).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nexus_core import hookspec

if TYPE_CHECKING:
    from ._events import AgentResult
    from ._session import Session


@hookspec(kind="observer")
def nexus_agent_task_start(session: Session, text: str) -> None:
    """Observe a task starting (`Session.send(text)`), on the thread that sent it, before its
    first model request. `session.id`, `session.provider` and `session.model_name` say which
    conversation and model. The return value is ignored."""


@hookspec(kind="observer")
def nexus_agent_task_end(session: Session, result: AgentResult | None) -> None:
    """Observe a task ending, once for each `nexus_agent_task_start`, on the same thread:
    `result` says why it stopped and what it used (None when the loop itself raised). The
    return value is ignored."""
