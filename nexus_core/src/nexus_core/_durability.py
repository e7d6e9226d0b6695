"""The seam a durable backend plugs into: where an approval waits for its answer, and where a
tool's handler runs. The core knows nothing of any engine; `nexus.durable` (on DBOS) is the
backend this project ships.

Without a backend (`Nexus.durability is None`) a gate's `Ask` is put to the approver in the
asking thread and the handler runs in place, exactly as they always have. With one:

- `await_answer` is called for every approval (a question of kind "approval") in place of the
  approver: the backend stores it as pending, answerable from this process (through `ask_here`,
  the approver the call would have used, or None when it has none) or from another one, and
  returns the first answer; the asking call's cancel token ends the wait. Questions of the `question` tool are not approvals and still go to
  the approver directly.
- `run_handler` runs each call's handler: `run(key)` runs it with `ctx.idempotency_key` set to
  `key` and returns its result (it never raises). The backend decides the key and may record the
  run, or answer from a record without calling `run` (a call that completed before its host
  was killed), or refuse to repeat a call that may have happened.
- `started` is called once the Nexus has started (every plugin configured, every tool
  registered).
- `recover()`, optional (a backend without it is not asked), is called by `Nexus.recover()`: the program says it is a long-lived host (a chat, a
  server), so the backend may take over the work killed hosts left (calls that wait on an
  approval, interrupted runs) and run it here. A short-lived program (`nexus call`, `nexus
  approvals`) never calls it: work it took over would be cut when it exits.

One backend per Nexus: `Nexus.set_durability` refuses a second.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, runtime_checkable

from ._cancel import CancelToken
from ._models import Answer, Question, ToolCall, ToolDef, ToolResult


@runtime_checkable
class Durability(Protocol):
    """What a durable backend implements (see the module's docstring)."""

    def await_answer(self, question: Question, ask_here: Callable[[], Answer] | None,
                     cancel: CancelToken | None) -> Answer:
        """The answer to an approval, waited for durably. `ask_here()` asks this process's
        approver (the core's rules: fail closed, never raises). `cancel` is the asking call's
        token (None: nobody stops it): once cancelled, stop waiting and refuse. A raise is a
        refusal."""
        ...

    def run_handler(self, call: ToolCall, tool: ToolDef, run: Callable[[str], ToolResult]) -> ToolResult:
        """The result of the call's handler: `run(idempotency_key)`, or a recorded result."""
        ...

    def started(self) -> None:
        """The Nexus has started: every plugin configured, every tool registered."""
        ...
