"""Every hook Nexus calls: one per event, plus contribution and lifecycle hooks.

Plugins implement these with `@nexus_core.hookimpl`. Every hook is called with keyword arguments
and a hookimpl may accept any subset of them (pluggy's rule). The reference with examples is
docs/hooks.md; a meta-test fails when a hook here is missing from it.

Each hook declares its kind (`@hookspec(kind=...)`, see `_markers`): observer hooks are
contained (an implementation that raises is logged, naming its plugin, and the other
implementations still run; hook wrappers are not contained), gate hooks attribute every answer
to its plugin and fail closed. A package may bring hooks of its own: see `_plugins`
(entry-point group `nexus.hookspecs`); run_code's `nexus_code_exec_*` hooks are its package's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ._markers import PROJECT, hookimpl, hookspec

if TYPE_CHECKING:
    import click

    from ._llm import ModelError, ModelRequest, ModelResponse
    from ._models import (
        Answer,
        Ask,
        Question,
        Rewrite,
        SkillContent,
        ToolCall,
        ToolDef,
        ToolResult,
        Veto,
    )
    from ._hookcalls import GateDecision
    from ._nexus import Nexus

__all__ = ["PROJECT", "hookimpl", "hookspec"]  # and the hookspecs below


# -- contribution and lifecycle -------------------------------------------------------------


@hookspec(kind="contribution")
def nexus_config_schema() -> dict[str, Any] | None:
    """Return the JSON Schema (an object schema) of this plugin's section of the config.

    The section `plugins.<plugin id>` is validated against it, defaults filled in, and handed to
    `nexus_configure`. Return None to accept no settings. Called once per plugin at start.
    Unknown keys are errors: an object schema with `properties` (at the top, or nested under
    `properties` / `items`) is closed unless it says otherwise with `additionalProperties`,
    `patternProperties` or a composition keyword (`$ref`, `allOf`, ...). An invalid schema
    leaves the plugin out, reported as a failure of the plugin, not of the config.
    """


@hookspec(kind="lifecycle")
def nexus_configure(config: dict[str, Any], nexus: Nexus) -> None:
    """Receive this plugin's validated config section (defaults applied) before any tool runs.

    Called once per plugin, with only its own section. An installed plugin that raises here is
    reported by name (`Nexus.failures`) and unregistered; the others keep working. For a plugin
    the host passes in itself, the exception propagates. Raise `ConfigError` for a setting that
    is wrong in a way the schema cannot say (an environment variable it names is not set): the
    Nexus then fails to start with that problem among the config's others, as for a bad key.
    The return value is ignored.
    """


@hookspec(kind="contribution")
def nexus_register_tools(register: Callable[..., Any], nexus: Nexus) -> None:
    """Contribute tools by calling `register(tool)` with a `ToolDef` or an `@tool` function.

    Called once per plugin after `nexus_configure`. The registry records which plugin gave each
    tool; a name registered twice is an error naming both plugins. The return value is ignored.
    """


@hookspec(kind="lifecycle")
def nexus_shutdown(nexus: Nexus) -> None:
    """Release what the plugin holds (processes, files). Called once for each plugin whose
    `nexus_configure` ran: when the Nexus closes (last started first), or earlier when the
    plugin is dropped after a failure or unregistered. The return value is ignored; an exception
    is logged and the others still shut down."""


@hookspec(kind="contribution")
def nexus_doctor(nexus: Nexus) -> list[str] | None:
    """Report, for `nexus doctor`, what this plugin needs from the machine and whether it has
    it: return lines of text (e.g. one per sandbox layer, "active" or "unavailable: why"), or
    None to say nothing. Start a line with "error:" for a requirement that is not met: `nexus
    doctor` then exits 1. Called once per plugin, in the order plugins started.
    """


# -- tools ----------------------------------------------------------------------------------


@hookspec(kind="observer")
def nexus_tool_register(tool: ToolDef) -> None:
    """Observe a tool entering the registry, at start and whenever one is added later
    (a plugin registered later sees only the tools added after it). The return value is
    ignored."""


@hookspec(kind="observer")
def nexus_tool_unregister(tool: ToolDef) -> None:
    """Observe a tool leaving the registry (`Nexus.remove_tool`, or its plugin unregistered or
    dropped), after it is gone. A tool swapped in place by `Nexus.replace_tool` is not removed:
    `nexus_tool_register` sees the new definition. The return value is ignored."""


@hookspec(kind="observer")
def nexus_tool_call_start(call: ToolCall, tool: ToolDef | None) -> None:
    """Observe a call as it enters `Nexus.invoke` (or `Nexus.refuse`), before the gates: every
    call, refusals included, once, on the thread of the call; its `nexus_tool_result` follows on
    the same thread. `tool` is the tool the name resolves to, or None for an unknown tool. For
    tracing and timing a call whole; nothing is called when no plugin implements it. The return
    value is ignored; an exception is logged and the call goes on."""


@hookspec(kind="gate")
def nexus_before_tool_invoke(call: ToolCall, tool: ToolDef) -> Veto | Rewrite | Ask | None:
    """Gate a call before its arguments are validated and its handler runs.

    `tool` is the tool's one identity: for a call made by an alias (`bash`), the canonical
    `ToolDef` (`tool.name == "shell"`, `"bash" in tool.aliases`); `call.name` is the name the
    call was made with. Match `tool.name`, so a gate covers every name the tool goes by.

    Return `Veto(reason)` to refuse it: the call does not run and the reason reaches the result
    (`error` is `"vetoed: <reason>"`, `metadata["vetoed_by"]` the plugin id). A veto wins
    whatever the plugin order; a gate that raises, or returns anything else, counts as a veto
    naming it (fail closed). Return `Rewrite(arguments)` to replace the arguments: all gates then
    run again on the rewritten call, until none rewrites, and the final arguments are validated
    against the tool's schema (the call as it runs and its result carry
    `metadata["rewritten_by"]`, the plugin ids); two gates rewriting the same call differently
    refuse it.
    Return `Ask(question)` to have a person decide once the call is final (no gate rewrites it
    any more): the approver of the invoke, of its parent call, or of the Nexus is asked all the
    gates' questions at once; a denial is a veto carrying the person's reason, and with no
    approver the call is refused (fail closed). A veto wins over an ask. Return None to let the
    call through.
    """


@hookspec(kind="observer")
def nexus_tool_invoke(call: ToolCall, tool: ToolDef) -> None:
    """Observe a call that passed the gates and validation, just before its handler runs
    (`tool`: the canonical `ToolDef`, also for a call made by an alias). The return value is
    ignored."""


@hookspec(kind="gate")
def nexus_before_tool_result(call: ToolCall, result: ToolResult, tool: ToolDef | None) -> Veto | ToolResult | None:
    """Gate a result before anyone sees it.

    `tool` is the canonical `ToolDef` of the call's tool (also when it was called by an alias:
    `call.name` and `result.name` keep that name), or None when no tool of that name is
    registered (an unknown tool's refusal).

    Return `Veto(reason)` to replace it with an error result carrying the reason, or a
    `ToolResult` to replace it (its id and name are set to the call's; result gates then run
    again on the replacement, until none replaces it; two different replacements refuse the
    result). Return None to pass it on. A gate that raises counts as a veto. Runs for every
    result, errors (unknown tool, veto, invalid arguments) included.
    """


@hookspec(kind="observer")
def nexus_tool_result(call: ToolCall, result: ToolResult, tool: ToolDef | None) -> None:
    """Observe the final result of every call, errors included. `tool` is the canonical
    `ToolDef` (whatever name the call used), or None for a call to no registered tool. The
    return value is ignored; an exception is logged and does not change the result."""


@hookspec(kind="contribution", firstresult=True)
def nexus_question_answer(question: str, options: list[str], call: ToolCall) -> str | None:
    """Answer a `question` tool call for the user: return the answer's text, or None to leave it
    to another plugin. Stops at the first non-None result; when no plugin answers, the question
    comes back as a pending result the host can resume."""


@hookspec(kind="observer")
def nexus_ask_start(question: Question) -> None:
    """Observe a person being asked (an approval a gate's `Ask` wants, or the `question` tool),
    before the approver is called; the asking call waits until `nexus_ask_end`. `question.chain`
    holds the calls in flight it comes through (a run_code script's inner call: the run_code
    call). A plugin that runs scripts under a deadline (run_code) uses the pair to stop the
    clock of the script whose inner call waits (`question.call.parent_call_id`). The return
    value is ignored; an exception is logged and the person is still asked."""


@hookspec(kind="observer")
def nexus_ask_end(question: Question, answer: Answer) -> None:
    """Observe the person's answer (also a denial for want of an approver, or an approver that
    failed): called once for every `nexus_ask_start`, in the same thread. The return value is
    ignored; an exception is logged and the answer stands."""


# -- skills ---------------------------------------------------------------------------------


@hookspec(kind="observer")
def nexus_skill_loaded(skill: SkillContent) -> None:
    """Observe a skill being activated (its SKILL.md body and resources now in use).
    The return value is ignored."""


@hookspec(kind="observer")
def nexus_skill_deactivate(name: str) -> None:
    """Observe a skill being deactivated; drop anything staged for it. The return value is
    ignored."""


# -- model requests ---------------------------------------------------------------------------


@hookspec(kind="contribution")
def nexus_register_providers(register: Callable[..., Any], nexus: Nexus) -> None:
    """Contribute model providers by calling `register(provider)` with an object that has a
    `name` (the part of `provider:model` before the colon) and `complete(request, call)`
    (`nexus_core.llm.ModelProvider`). Called once per plugin after `nexus_configure`. A name
    registered twice is an error naming both plugins; a plugin that raises here is reported
    and left out, like one whose `nexus_register_tools` raises. The return value is ignored.
    """


@hookspec(kind="observer")
def nexus_model_request_start(request: ModelRequest) -> None:
    """Observe a model request as `Nexus.complete` receives it, before the request gates, on the
    caller's thread: each one then ends, on the same thread, in `nexus_model_response` or in
    `nexus_model_request_error`. For tracing and timing a request whole; nothing is called when
    no plugin implements it. The return value is ignored; an exception is logged."""


@hookspec(kind="gate")
def nexus_before_model_request(request: ModelRequest) -> Veto | ModelRequest | None:
    """Gate a model request before it is sent (`Nexus.complete`, which every agent loop uses).

    Return `Veto(reason)` to refuse it: `complete` raises `ModelError(kind="vetoed")` carrying
    the reason and naming the plugin. Return a `ModelRequest` to send that one instead (its id
    is kept; request gates then run again on it, until none replaces it; two different
    replacements refuse the request). Return None to let it through. A veto wins whatever the
    plugin order; a gate that raises, or returns anything else, counts as a veto (fail closed).
    """


@hookspec(kind="observer")
def nexus_model_response(request: ModelRequest, response: ModelResponse) -> None:
    """Observe each model response with the request that was sent (after the request gates):
    its text, tool calls and `usage`, for logging or metering. Not called for a request that
    failed or was vetoed. The return value is ignored; an exception is logged and the response
    still reaches the loop."""


@hookspec(kind="observer")
def nexus_model_request_error(request: ModelRequest, error: ModelError) -> None:
    """Observe a model request that got no response: vetoed by a request gate, cancelled, naming
    no provider here, or failed (`error.kind` says which). `request` is the request as the gates
    left it. The return value is ignored; an exception is logged and the error still reaches the
    caller."""


@hookspec(kind="observer")
def nexus_gate_decision(decision: GateDecision) -> None:
    """Observe each decision of a gate hook, for tracing and audit: a gate that vetoed (a
    failing gate, conflicting or endless rewrites count as vetoes), rewrote a call, replaced a
    result or a request, or asked a person, and the person's answer. Called as the decision is
    made, on the thread of the call; nothing is built when no plugin implements this hook. The
    return value is ignored; an exception is logged and the decision stands."""


# -- the command line -----------------------------------------------------------------------


@hookspec(kind="contribution")
def nexus_register_commands(cli: click.Group) -> None:
    """Add subcommands to the `nexus` command line: `cli` is its click group, so call
    `cli.add_command(command)` or decorate with `@cli.command()`.

    Called once per process, when the command line starts and before any Nexus exists, on the
    plugin's entry-point object itself: a module's function, or a `@staticmethod` of a plugin
    class (above `@hookimpl`). A command that needs the configured Nexus takes it with
    `nexus_core.cli.pass_nexus`; `--config` and `--workspace` reach every command, before or
    after its name. A plugin that raises here is reported on stderr and its commands left out;
    the other plugins' commands still work. The return value is ignored.
    """
