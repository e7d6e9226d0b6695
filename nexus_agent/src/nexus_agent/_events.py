"""What a session tells its front end while it works (the `on_event` callback), and what a task
ends with (`AgentResult`)."""

from __future__ import annotations

from typing import Literal

import attrs
from nexus_core.llm import ModelResponse, Usage

from nexus_core import ToolCall, ToolResult

#: Why a task ended: the model answered without asking for tools ("final_answer"), the turn
#: limit or the token budget was reached, the person interrupted it, a request gate vetoed a
#: model request, or the model request failed.
StopReason = Literal["final_answer", "max_turns", "max_tokens", "interrupted", "vetoed", "error"]


@attrs.frozen
class TextDelta:
    """A piece of the model's text, as it streams."""

    text: str


@attrs.frozen
class ModelResponded:
    """The model's whole response to request number `turn` of the task."""

    turn: int
    response: ModelResponse


@attrs.frozen
class ToolCallStarted:
    """A tool call of the model's is about to go through `Nexus.invoke`."""

    call: ToolCall


@attrs.frozen
class ToolCallFinished:
    """A tool call's result (vetoes, denials and refusals included)."""

    call: ToolCall
    result: ToolResult


@attrs.frozen
class StoppedCall:
    """A tool call that was running when its task was interrupted, and its result: the tool's
    own when the call ended (`ended`; a stopped shell says what it killed), else the session's
    "interrupted" result for a call that had not ended `stop_grace_seconds` later."""

    call: ToolCall
    result: ToolResult
    ended: bool = True


@attrs.frozen
class AgentResult:
    """How a task ended: the model's last text, why it stopped, how many model requests it
    made (`turns`) and the tokens they used, the error for "error" and "vetoed", where the
    transcript is (None when transcripts are off), and, for "interrupted", the tool calls that
    were running then (`stopped`)."""

    text: str
    stop_reason: StopReason
    turns: int
    usage: Usage
    session_id: str
    transcript: str | None = None
    error: str | None = None
    stopped: tuple[StoppedCall, ...] = ()


@attrs.frozen
class TaskStopped:
    """The task ended."""

    result: AgentResult


AgentEvent = TextDelta | ModelResponded | ToolCallStarted | ToolCallFinished | TaskStopped
