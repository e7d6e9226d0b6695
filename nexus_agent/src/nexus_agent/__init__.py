"""The `nexus.agent` plugin: an agent loop on the Nexus, and the `nexus chat` / `nexus ask` commands.

The loop talks to a model only through `Nexus.complete` (a provider plugin, such as
nexus-rt-provider-openai, answers it) and runs tools only through `Nexus.invoke`, so every gate,
approval and observer of the Nexus sees what it does. It is a plugin like any other: block it
(`plugins.blocked: [nexus.agent]`) and install another to replace it. See docs/agent.md.

```python
from nexus_core import Nexus

with Nexus.from_config("agent.yaml") as nx:
    agent = nx.plugin("nexus.agent")
    result = agent.run("What does README.md say about installing?")
    print(result.text, result.stop_reason)
```
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from nexus_core import hookimpl

if TYPE_CHECKING:  # imported on first use: `nexus --help` imports this module, and stays fast
    import click

    from nexus_core import Nexus, Question

    from ._events import (
        AgentEvent,
        AgentResult,
        ModelResponded,
        StoppedCall,
        StopReason,
        TaskStopped,
        TextDelta,
        ToolCallFinished,
        ToolCallStarted,
    )
    from ._session import Session
    from ._transcript import read_transcript

PLUGIN_ID = "nexus.agent"

#: public name -> the private module that defines it
_LAZY = {
    "AgentEvent": "._events", "AgentResult": "._events", "ModelResponded": "._events",
    "StopReason": "._events", "StoppedCall": "._events", "TaskStopped": "._events", "TextDelta": "._events",
    "ToolCallFinished": "._events", "ToolCallStarted": "._events",
    "Session": "._session", "read_transcript": "._transcript",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value

DEFAULT_SYSTEM_PROMPT = (
    "You are an agent that completes the user's task with the tools you are given. Use tools to "
    "find things out rather than guessing; when a task needs several tool calls, run_code (if you "
    "have it) can make them in one script. When a tool call is refused or fails, read why and "
    "adapt. When the task is done, answer briefly with what you found or did."
)


def config_schema() -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "max_turns": {"type": "integer", "minimum": 1, "default": 20,
                          "description": "model requests per task, at most"},
            "max_tokens": {"type": ["integer", "null"], "minimum": 1, "default": None,
                           "description": "token budget per task (input and output, as the provider counts)"},
            "system_prompt": {"type": "string", "default": DEFAULT_SYSTEM_PROMPT},
            "max_output_tokens": {"type": "integer", "minimum": 1, "default": 4096,
                                  "description": "tokens one model response may have"},
            "max_parallel_calls": {"type": "integer", "minimum": 1, "default": 8,
                                   "description": "tool calls of one model turn that run at once"},
            "stream": {"type": "boolean", "default": True, "description": "stream the model's text"},
            "transcripts": {"type": "boolean", "default": True,
                            "description": "write each session's transcript under the session dir"},
            "stop_grace_seconds": {"type": "number", "minimum": 0, "default": 10,
                                   "description": "how long an interrupted task waits for its tool calls "
                                                  "to end before it returns without them"},
        },
    }


class AgentPlugin:
    """The plugin object of one Nexus (the entry point names this class): its settings, and the
    sessions it makes."""

    NEXUS_PLUGIN_ID = PLUGIN_ID

    def __init__(self, nexus: Nexus) -> None:
        self.nexus = nexus
        #: the validated `plugins.nexus.agent` section, defaults applied
        self.config: dict[str, Any] = {}

    @hookimpl
    def nexus_config_schema(self) -> dict[str, Any]:
        return config_schema()

    @hookimpl
    def nexus_configure(self, config: dict[str, Any]) -> None:
        self.config = dict(config)

    @staticmethod
    @hookimpl
    def nexus_register_commands(cli: click.Group) -> None:
        from ._cli import ask_command, chat_command

        cli.add_command(chat_command)
        cli.add_command(ask_command)

    def session(self, *, model: str | None = None, approver: Callable[[Question], Any] | None = None,
                on_event: Callable[[AgentEvent], None] | None = None,
                transcript: bool | None = None) -> Session:
        """A new conversation. `model` is "provider:model" (default: the config's `model`);
        `approver` answers for the person when a gate asks or the model asks a question
        (default: the Nexus's); `on_event` sees text as it streams and each tool call;
        `transcript` overrides the `transcripts` setting. Raises ValueError when there is no
        model to use."""
        from ._session import Session, Settings

        chosen = model or self.nexus.config.model
        if not chosen:
            raise ValueError("no model: set `model: provider:model` in the config (for example "
                             "openai:gpt-4.1), or pass one")
        settings = Settings(**{"system_prompt": DEFAULT_SYSTEM_PROMPT, **self.config})
        return Session(self.nexus, settings, model=chosen, approver=approver, on_event=on_event,
                       transcript=transcript)

    def run(self, prompt: str, **kwargs: Any) -> AgentResult:
        """One task in a new session (closed after it): `session(**kwargs).send(prompt)`."""
        with self.session(**kwargs) as session:
            return session.send(prompt)


__all__ = [
    "DEFAULT_SYSTEM_PROMPT",
    "PLUGIN_ID",
    "AgentEvent",
    "AgentPlugin",
    "AgentResult",
    "ModelResponded",
    "Session",
    "StopReason",
    "StoppedCall",
    "TaskStopped",
    "TextDelta",
    "ToolCallFinished",
    "ToolCallStarted",
    "read_transcript",
]
