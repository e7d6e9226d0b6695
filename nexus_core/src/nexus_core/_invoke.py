"""The one invocation path. Every tool call, from any front end, goes through `invoke_call`:

look up the tool -> call gates (veto / rewrite) -> validate the arguments -> observers of
tool.invoke -> the handler -> normalise its return -> result gates -> observers of tool.result.

Nothing raises to the caller for a tool's failure: each step's failure is an error result.
Safe to call from many threads at once: the path keeps no state of its own.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import attrs
import pluggy

from ._models import CallContext, Rewrite, ToolCall, ToolDef, ToolResult, Veto
from ._plugins import describe_exception
from ._registry import ToolRegistry
from ._results import error_result, normalize_result
from ._schema import explain

if TYPE_CHECKING:
    from ._nexus import Nexus

log = logging.getLogger("nexus_core")

#: how many times gates may rewrite a call (or replace a result) before it is refused
MAX_GATE_ROUNDS = 8


def _raising_plugin(pm: pluggy.PluginManager, hook_name: str, exc: BaseException) -> str:
    """Which plugin's hookimpl raised `exc`, found by walking the traceback."""
    codes = {}
    for impl in getattr(pm.hook, hook_name).get_hookimpls():
        code = getattr(impl.function, "__code__", None)
        if code is not None:
            codes[code] = impl.plugin_name
    tb = exc.__traceback__
    found = None
    while tb is not None:
        found = codes.get(tb.tb_frame.f_code, found)
        tb = tb.tb_next
    return found or "a plugin"


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=repr)


class Invoker:
    def __init__(self, nexus: Nexus, pm: pluggy.PluginManager, registry: ToolRegistry) -> None:
        self._nexus = nexus
        self._pm = pm
        self._registry = registry
        self._hook = pm.hook

    # -- the path ---------------------------------------------------------------------------

    def invoke_call(self, call: ToolCall, context: Mapping[str, Any] | None = None, answer: Any = None) -> ToolResult:
        found = self._registry.lookup(call.name)
        if found is None:
            result = error_result(call, f"unknown tool: {call.name!r}", "unknown_tool")
            return self._finish(call, result)
        tool, validator = found

        call, refused = self._gate_call(call, tool)
        if refused is not None:
            return self._finish(call, refused)

        if validator is not None:
            errors = list(validator.iter_errors(call.arguments))
            if errors:
                problems = "; ".join(text for _, text in explain(errors, prefix=""))
                result = error_result(call, f"invalid arguments for {call.name}: {problems}", "invalid_arguments")
                return self._finish(call, result)

        try:
            self._hook.nexus_tool_invoke(call=call, tool=tool)
        except Exception:
            log.exception("an observer of nexus_tool_invoke raised (call %s)", call.id)

        try:
            if tool.takes_context:
                ctx = CallContext(
                    call_id=call.id,
                    parent_call_id=call.parent_call_id,
                    tool_name=call.name,
                    answer=answer,
                    data=dict(context or {}),
                    nexus=self._nexus,
                )
                value = tool.handler(call.arguments, ctx)
            else:
                value = tool.handler(call.arguments)
            result = normalize_result(value, call)
        except Exception as exc:
            result = error_result(call, describe_exception(exc), "exception")
        return self._finish(call, result)

    # -- gates ------------------------------------------------------------------------------

    def _gate_call(self, call: ToolCall, tool: ToolDef) -> tuple[ToolCall, ToolResult | None]:
        """Run the call gates until none rewrites. Returns the (maybe rewritten) call and, when
        refused, the error result. Any veto wins; a raising gate or a bad return is a veto."""
        for _ in range(MAX_GATE_ROUNDS):
            try:
                outcomes = self._hook.nexus_before_tool_invoke(call=call, tool=tool)
            except Exception as exc:
                plugin = _raising_plugin(self._pm, "nexus_before_tool_invoke", exc)
                reason = f"gate {plugin} failed ({describe_exception(exc)}); the call is refused"
                return call, error_result(call, f"vetoed: {reason}", "vetoed")
            rewrites: list[Rewrite] = []
            for outcome in outcomes:
                if isinstance(outcome, Veto):
                    return call, error_result(call, f"vetoed: {outcome.reason}", "vetoed")
                if isinstance(outcome, Rewrite):
                    if _canonical(outcome.arguments) != _canonical(call.arguments):
                        rewrites.append(outcome)
                else:
                    reason = f"a gate returned {type(outcome).__name__}, not Veto, Rewrite or None"
                    return call, error_result(call, f"vetoed: {reason}", "vetoed")
            if not rewrites:
                return call, None
            if len({_canonical(r.arguments) for r in rewrites}) > 1:
                return call, error_result(call, "vetoed: gates rewrote the arguments in conflicting ways", "vetoed")
            if not isinstance(rewrites[0].arguments, dict):
                return call, error_result(call, "vetoed: a gate rewrote the arguments to a non-object", "vetoed")
            call = attrs.evolve(call, arguments=rewrites[0].arguments)
        return call, error_result(call, f"vetoed: gates still rewriting after {MAX_GATE_ROUNDS} rounds", "vetoed")

    def _gate_result(self, call: ToolCall, result: ToolResult) -> ToolResult:
        for _ in range(MAX_GATE_ROUNDS):
            try:
                outcomes = self._hook.nexus_before_tool_result(call=call, result=result)
            except Exception as exc:
                plugin = _raising_plugin(self._pm, "nexus_before_tool_result", exc)
                reason = f"result gate {plugin} failed ({describe_exception(exc)}); the result is withheld"
                return error_result(call, f"vetoed: {reason}", "vetoed")
            replacements: list[ToolResult] = []
            for outcome in outcomes:
                if isinstance(outcome, Veto):
                    return error_result(call, f"vetoed: {outcome.reason}", "vetoed")
                if isinstance(outcome, ToolResult):
                    if outcome != result:
                        replacements.append(outcome)
                else:
                    reason = f"a result gate returned {type(outcome).__name__}, not Veto, ToolResult or None"
                    return error_result(call, f"vetoed: {reason}", "vetoed")
            if not replacements:
                return result
            if any(r != replacements[0] for r in replacements[1:]):
                return error_result(call, "vetoed: result gates replaced the result in conflicting ways", "vetoed")
            result = attrs.evolve(replacements[0], id=call.id, name=call.name)
        return error_result(call, f"vetoed: result gates still replacing after {MAX_GATE_ROUNDS} rounds", "vetoed")

    def _finish(self, call: ToolCall, result: ToolResult) -> ToolResult:
        result = self._gate_result(call, result)
        try:
            self._hook.nexus_tool_result(call=call, result=result)
        except Exception:
            log.exception("an observer of nexus_tool_result raised (call %s)", call.id)
        return result
