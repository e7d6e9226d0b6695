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
class AgentResult:
    """How a task ended: the model's last text, why it stopped, how many model requests it
    made (`turns`) and the tokens they used, the error for "error" and "vetoed", and where the
    transcript is (None when transcripts are off)."""

    text: str
    stop_reason: StopReason
    turns: int
    usage: Usage
    session_id: str
    transcript: str | None = None
    error: str | None = None


@attrs.frozen
class TaskStopped:
    """The task ended."""

    result: AgentResult


AgentEvent = TextDelta | ModelResponded | ToolCallStarted | ToolCallFinished | TaskStopped
