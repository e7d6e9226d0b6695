"""The framework's own models: tools, calls, results, vetoes, questions and skills.

All are attrs classes. Values that cross a boundary (a call handed to gates, a result handed to
observers) are frozen, so no plugin can change what another plugin sees; gates change a call by
returning a `Rewrite`, never by mutating it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal

import attrs

from ._cancel import CancelToken
from ._content import CONTENT_TYPES, Content

JSONObject = dict[str, Any]

#: Where a model meets a tool (see `ToolDef.exposure`).
Exposure = Literal["both", "direct", "code"]
EXPOSURES: tuple[str, ...] = ("both", "direct", "code")

#: Why a result is an error. `None` on success.
ErrorKind = Literal[
    "unknown_tool",  # no tool of that name is registered
    "vetoed",  # a gate (before or after the handler) refused the call
    "invalid_arguments",  # the arguments do not match the tool's input schema
    "exception",  # the handler raised
    "failure",  # the handler returned a failure value
    "cancelled",  # the call was cancelled before it ran
]


def new_call_id() -> str:
    """A fresh call id: `call_` and 24 lowercase hex digits, all of them random (96 bits from
    the OS per id).

    Random per id, not a per-process prefix and a counter: a run_code script that has seen
    one id must not be able to name the next (run records live in folders named by call id).
    `os.urandom` is safe across threads and forks; an id costs about 0.5 us, 0.2 us more than
    the counter it replaced, on a path that takes microseconds."""
    return "call_" + os.urandom(12).hex()


def _default_input_schema() -> JSONObject:
    return {"type": "object"}


def _no_progress(progress: float, total: float | None = None, message: str | None = None) -> None:
    """What `CallContext.progress` does when nobody asked for the call's progress."""


def _names(value: Iterable[str]) -> tuple[str, ...]:
    if isinstance(value, str):  # tuple("bash") would be five one-letter aliases
        raise TypeError(f"aliases must be a list of names, not one string ({value!r}): use ({value!r},)")
    return tuple(value)


@attrs.frozen(eq=False)
class ToolDef:
    """A tool: its name, what the model reads about it, its schemas and its handler.

    The handler is called as `handler(arguments)`, or `handler(arguments, ctx)` when
    `takes_context` is true. `plugin` is filled in by the registry: which plugin gave the tool.
    `exposure` says where a model meets the tool: "both" (a tool of its own, and a binding in
    run_code scripts), "direct" (only as a tool of its own) or "code" (only inside run_code
    scripts, or a provider's own code execution where `allowed_callers` says so); the config's
    `tools.<name>.exposure` overrides it. `code_description`, when set, is what a run_code
    script's binding says about the tool (its docstring) in place of `description`, for a tool
    whose description speaks of the text a direct call returns (a script gets typed fields).

    `aliases` are more names a model (or a caller) may use for the same tool: the registry
    resolves each to this one `ToolDef`, so gates, observers and the config's `tools.<name>`
    settings meet one identity (`tool.name` is the canonical name whatever was called) while
    the call keeps the name it was made with. `approval_note` is a line an approval of a call
    to the tool shows besides the call (the shell's says its command can do anything the user
    can).
    """

    name: str
    handler: Callable[..., Any] = attrs.field(repr=False)
    description: str = ""
    input_schema: JSONObject = attrs.field(factory=_default_input_schema)
    output_schema: JSONObject | None = None
    takes_context: bool = False
    plugin: str | None = None
    annotations: JSONObject = attrs.field(factory=dict)
    exposure: Exposure = attrs.field(default="both", validator=attrs.validators.in_(EXPOSURES))
    code_description: str = ""
    aliases: tuple[str, ...] = attrs.field(default=(), converter=_names)
    approval_note: str = ""

    @property
    def names(self) -> tuple[str, ...]:
        """Every name the tool answers to: its own, then its aliases."""
        return (self.name, *self.aliases)

    def with_plugin(self, plugin: str | None) -> ToolDef:
        return attrs.evolve(self, plugin=plugin)


@attrs.frozen
class ToolCall:
    """One request to run a tool. `parent_call_id` links a nested call to the call that made it."""

    name: str
    arguments: JSONObject = attrs.field(factory=dict)
    id: str = attrs.field(factory=new_call_id)
    parent_call_id: str | None = None
    #: free-form data about the call; a call parsed from a provider's reply (nexus_core.adapters)
    #: has "provider", "provider_call_id" and, when the next request needs it, "provider_data"
    metadata: JSONObject = attrs.field(factory=dict)


def _content_tuple(blocks: Iterable[Content]) -> tuple[Content, ...]:
    return tuple(blocks)


@attrs.frozen
class ToolResult:
    """What a tool call produced. Errors carry their message in both `error` and `output`,
    so a model that reads only `output` still sees why the call failed."""

    id: str
    name: str
    output: str = ""
    error: str | None = None
    output_file: str | None = None
    output_structured: Any = None
    error_kind: ErrorKind | None = None
    metadata: JSONObject = attrs.field(factory=dict)
    #: the result as content blocks, for providers that take more than text (images, documents);
    #: empty means one text block holding `output`. When set, `output` is their text form.
    content: tuple[Content, ...] = attrs.field(
        default=(), converter=_content_tuple,
        validator=attrs.validators.deep_iterable(attrs.validators.instance_of(CONTENT_TYPES)))

    @property
    def is_error(self) -> bool:
        return self.error is not None

    @property
    def vetoed(self) -> bool:
        return self.error_kind == "vetoed"


@attrs.frozen
class Veto:
    """A gate's refusal. The reason reaches the result's `error`, and so the model."""

    reason: str


@attrs.frozen
class Rewrite:
    """A gate's replacement for a call's arguments. Every gate then sees the rewritten call
    (gates run again until none rewrites), and the result is validated against the schema."""

    arguments: JSONObject
    reason: str = ""


@attrs.frozen
class Ask:
    """A gate's answer that a person must decide: the call runs only if the front end's approver
    approves it. A veto from any gate still wins; several gates asking make one question."""

    question: str


@attrs.frozen
class Question:
    """What the person behind a front end is asked, through the approver.

    `kind` is "approval" when gates answered a call with `Ask` (`text` holds their questions,
    `asked_by` their plugin ids, `call` the call that would run), or "question" when the
    `question` tool asks (`text` is the model's question, `options` its suggested answers,
    `call` the question tool's own call). `call.parent_call_id` tells which call is waiting
    (a script's timeout should not run while a person decides). `tool` is the canonical
    `ToolDef` of an approval's call (its `name` may be an alias).

    `chain` says where the call comes from: the calls in flight it comes through, outermost
    first, filled in by `Nexus.ask`. Empty for a direct call; for an inner call of a run_code
    script it ends with the run_code call, whose `script` argument is the script, and
    `call.metadata["script_line"]` is the script's line that made the call.
    `nexus_core.terminal.render_question` shows all of it.
    """

    kind: Literal["approval", "question"]
    call: ToolCall
    text: str
    options: tuple[str, ...] = ()
    asked_by: tuple[str, ...] = ()
    tool: ToolDef | None = attrs.field(default=None, eq=False, repr=False)
    chain: tuple[ToolCall, ...] = ()


@attrs.frozen
class Answer:
    """What the person answered: for an approval, `approved` and maybe the reason (`text`) for a
    denial; for a question, `approved` true and the answer in `text`, or `approved` false when
    they did not answer. `by` says who answered ("user", or a policy such as "--yes")."""

    approved: bool
    text: str = ""
    by: str = "user"


@attrs.frozen
class CallContext:
    """What a context-taking handler receives besides its arguments."""

    call_id: str
    parent_call_id: str | None = None
    tool_name: str = ""
    #: an answer the host supplied (e.g. to a pending `question`), if any
    answer: Any = None
    #: the host's own data, passed through untouched (e.g. a user id)
    data: Mapping[str, Any] = attrs.field(factory=dict)
    #: the Nexus running the call, for tools that call other tools
    nexus: Any = attrs.field(default=None, repr=False)
    #: the approver that answers for this call (the invoke's, a parent call's, or the Nexus's),
    #: for tools that ask the person something: `ctx.nexus.ask(question, approver=ctx.approver)`
    approver: Any = attrs.field(default=None, repr=False)
    #: set when the caller stops the call (Ctrl-C, the run_code script that made it ended): a
    #: handler that blocks registers with `ctx.cancel.on_cancel(fn)` what stops it at once (the
    #: shell kills the command's processes) or checks `ctx.cancel.cancelled` between steps. The
    #: invoke's token, else the parent call's, else one nobody cancels.
    cancel: CancelToken = attrs.field(factory=CancelToken, repr=False)
    #: tells whoever made the call how far it has got: `ctx.progress(done, total=None,
    #: message=None)` (numbers that grow from report to report; `total` when known). The
    #: invoke's `progress` receives it (an MCP client sees `notifications/progress`); with none,
    #: it does nothing. It never raises, whatever the receiver does. Not inherited: the calls this
    #: call makes report on scales of their own, so they report to nobody unless given one.
    progress: Callable[..., None] = attrs.field(default=_no_progress, repr=False)
    #: a key that stays the same when this call is run again for the same request, for a tool
    #: that changes something outside to do it once (an idempotency key to a payment API, a
    #: row's unique id): the call id, unless a durable backend (nexus.durable) gives the key of
    #: the recorded call it runs again after its host was killed (docs/durable.md)
    idempotency_key: str = ""

    def __attrs_post_init__(self) -> None:
        if not self.idempotency_key:
            object.__setattr__(self, "idempotency_key", self.call_id)


@attrs.frozen
class SkillContent:
    """A skill read from a SKILL.md: its front matter, body and the files beside it."""

    name: str
    description: str = ""
    body: str = ""
    path: str = ""
    resources: tuple[str, ...] = ()
    metadata: JSONObject = attrs.field(factory=dict)
