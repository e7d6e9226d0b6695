"""The agent's settings (`plugins.nexus.agent`): an attrs class, from which the config section's
JSON Schema is derived (`nexus_core.plugins.settings_schema`)."""

from __future__ import annotations

import attrs
from nexus_core.plugins import setting

PLUGIN_ID = "nexus.agent"

DEFAULT_SYSTEM_PROMPT = (
    "You are an agent that completes the user's task with the tools you are given. Use tools to "
    "find things out rather than guessing; when a task needs several tool calls, run_code (if you "
    "have it) can make them in one script. When a tool call is refused or fails, read why and "
    "adapt. When the task is done, answer briefly with what you found or did."
)


@attrs.frozen
class Settings:
    """How one Nexus's agent loop runs its tasks."""

    max_turns: int = setting(20, minimum=1, description="model requests per task, at most")
    max_tokens: int | None = setting(None, minimum=1,
                                     description="token budget per task (input and output, as the provider counts)")
    system_prompt: str = setting(DEFAULT_SYSTEM_PROMPT, description="the start of the system prompt")
    max_output_tokens: int = setting(4096, minimum=1, description="tokens one model response may have")
    max_parallel_calls: int = setting(8, minimum=1, description="tool calls of one model turn that run at once")
    stream: bool = setting(True, description="stream the model's text")
    transcripts: bool = setting(True, description="write each session's transcript under the session dir")
    stop_grace_seconds: float = setting(10, minimum=0, description="how long an interrupted task waits for its "
                                        "tool calls to end before it returns without them")
