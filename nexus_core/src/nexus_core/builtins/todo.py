"""Core built-in plugin `nexus.tool.todo`: `todowrite`, the session's todo list.

The model sends the whole list each time (opencode's contract): it replaces the previous one,
and the tool echoes it as lines, `[ ]` pending, `[~]` in progress, `[x]` completed, `[-]`
cancelled. The list is kept per Nexus; `todos(nx)` gives it to the host.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

import attrs

from .._markers import hookimpl
from .._models import ToolResult
from .._plugin import Plugin
from .._tool import native_tool

if TYPE_CHECKING:
    from .._nexus import Nexus

NEXUS_PLUGIN_ID = "nexus.tool.todo"

Status = Literal["pending", "in_progress", "completed", "cancelled"]
Priority = Literal["high", "medium", "low"]
MARKS: dict[str, str] = {"pending": "[ ]", "in_progress": "[~]", "completed": "[x]", "cancelled": "[-]"}


@attrs.frozen
class Todo:
    """One item of the list."""

    content: str
    status: Status = "pending"
    id: str | None = None
    priority: Priority | None = None

    def line(self) -> str:
        return f"{MARKS[self.status]} {self.content}"


TODOWRITE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "todos": {
            "type": "array",
            "description": "The whole list; it replaces the previous one.",
            "items": {
                "type": "object",
                "properties": {
                    "content": {"type": "string", "minLength": 1, "description": "What to do, briefly."},
                    "status": {"type": "string", "enum": list(MARKS),
                               "description": "One in_progress at a time."},
                    "id": {"type": "string", "description": "A stable id."},
                    "priority": {"type": "string", "enum": ["high", "medium", "low"]},
                },
                "required": ["content", "status"],
                "additionalProperties": False,
            },
        }
    },
    "required": ["todos"],
    "additionalProperties": False,
}

DESCRIPTION = (
    "Write the todo list for this session: send the whole list each time, it replaces the "
    "previous one. Use it for work of three or more steps: add the steps, mark one in_progress "
    "before starting it, completed as soon as it is done, cancelled if it is no longer needed. "
    "Called directly, the current list comes back, one line per item."
)

#: what a run_code script reads of it (the advice on when to use it is for the direct call)
CODE_DESCRIPTION = "Replace this session's todo list with `todos`; the list comes back as `.todos`."

#: the list as it is now, for programs and run_code scripts (the text lists the same items)
TODOWRITE_OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "todos": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "content": {"type": "string"},
                    "status": {"type": "string", "enum": list(MARKS)},
                    "id": {"type": "string"},
                    "priority": {"type": "string", "enum": ["high", "medium", "low"]},
                },
                "required": ["content", "status"],
            },
        }
    },
    "required": ["todos"],
}


class TodoList:
    """The todo list of one Nexus; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: tuple[Todo, ...] = ()

    def replace(self, items: list[Todo]) -> None:
        with self._lock:
            self._items = tuple(items)

    def items(self) -> list[Todo]:
        with self._lock:
            return list(self._items)

    def render(self) -> str:
        items = self.items()
        return "\n".join(t.line() for t in items) if items else "(the todo list is empty)"


def todo_list(nexus: Nexus) -> TodoList:
    """The `TodoList` of `nexus` (LookupError when `nexus.tool.todo` is not active in it)."""
    plugin = nexus.plugin(NEXUS_PLUGIN_ID)
    if not isinstance(plugin, TodoPlugin):
        raise LookupError(f"{NEXUS_PLUGIN_ID} is not active in {nexus!r}")
    return plugin.todos


def todos(nexus: Nexus) -> list[Todo]:
    """The session's current todo items, in the model's order."""
    return todo_list(nexus).items()


def make_todowrite(todo: TodoList) -> Any:
    def run(arguments: dict[str, Any]) -> ToolResult:
        items = [Todo(content=t["content"], status=t["status"], id=t.get("id"), priority=t.get("priority"))
                 for t in arguments["todos"]]
        todo.replace(items)
        structured = {"todos": [attrs.asdict(t, filter=lambda _, v: v is not None) for t in items]}
        return ToolResult(id="", name="", output=todo.render(), output_structured=structured)

    tool = native_tool("todowrite", DESCRIPTION, TODOWRITE_SCHEMA, run=run, output_schema=TODOWRITE_OUTPUT_SCHEMA)
    return attrs.evolve(tool, code_description=CODE_DESCRIPTION)


class TodoPlugin(Plugin[None]):
    """The plugin object each Nexus makes (the entry point names this class): one list each. It
    takes no settings."""

    NEXUS_PLUGIN_ID = NEXUS_PLUGIN_ID

    def __init__(self, nexus: Nexus) -> None:
        super().__init__(nexus)
        self.todos = TodoList()

    @hookimpl
    def nexus_register_tools(self, register: Callable[..., Any]) -> None:
        register(make_todowrite(self.todos))
