"""The one invocation path. Every tool call, from any front end, goes through `invoke_call`:

look up the tool -> call gates (veto / rewrite) -> validate the arguments -> observers of
tool.invoke -> the handler -> normalise its return -> result gates -> observers of tool.result.

The lookup resolves an alias to its tool: every hook gets the canonical `ToolDef` as `tool`
(`tool.name == "shell"` when `bash` was called) while the call keeps the name it was made with.

Nothing raises to the caller for a tool's failure: each step's failure is an error result.
Safe to call from many threads at once: the path keeps no state of its own, and the registry
is read without locks (see `_registry`). The gates and observers are called through the plugin
manager (`notify`, `gate`: `_hookcalls`), which holds the rules below once for every gate hook.

Gate rules (datasette's: deny wins whatever the plugin order):
- any `Veto` refuses the call, however many gates let it through or rewrote it; the first veto
  in hook order gives the reason, and `metadata["vetoed_by"]` names its plugin;
- a gate that raises, or returns something other than Veto / Rewrite / None, is a veto naming
  that plugin (fail closed);
- `Rewrite`s are applied only when every rewriting gate agrees on the new arguments; then all
  gates run again on the rewritten call, until none rewrites (at most `MAX_GATE_ROUNDS`); the
  call as it runs and its result carry `metadata["rewritten_by"]`, the plugins that rewrote it;
- `Ask`s count only in the last round, on the call as it will run: one `Question` carries every
  asking gate's question to the approver (the invoke's, else the parent call's, else the
  Nexus's). A denial is a veto with the person's reason; no approver is a veto too.
Result gates follow the same rules with a replacement `ToolResult` in place of a `Rewrite`.
"""

from __future__ import annotations

import difflib
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import attrs

from ._cancel import CancelToken
from ._models import (
    Answer,
    Ask,
    CallContext,
    ErrorKind,
    Question,
    Rewrite,
    ToolCall,
    ToolDef,
    ToolResult,
    Veto,
)
from ._errors import describe_exception
from ._hookcalls import GateRules, canonical, names, quoted
from ._plugins import NexusPluginManager
from ._registry import ToolRegistry
from ._results import error_result, normalize_result
from ._schema import explain

if TYPE_CHECKING:
    from ._durability import Durability
    from ._nexus import Approver, Nexus

log = logging.getLogger("nexus_core")

#: the metadata key, on a call the gates rewrote and on its result, of the gates that rewrote it
REWRITTEN_BY = "rewritten_by"


def _as_given(call: ToolCall) -> ToolCall:
    """`call` without a `rewritten_by` its caller put in its metadata: only the gates say it."""
    if REWRITTEN_BY not in call.metadata:
        return call
    return attrs.evolve(call, metadata={k: v for k, v in call.metadata.items() if k != REWRITTEN_BY})


def _vetoed(call: ToolCall, reason: str, plugin: str | None, kind: ErrorKind = "vetoed") -> ToolResult:
    result = error_result(call, f"vetoed: {reason}", kind)
    if plugin is not None:
        result = attrs.evolve(result, metadata={**result.metadata, "vetoed_by": plugin})
    return result


def _rewritten(call: ToolCall, answer: Any) -> ToolCall | str | None:
    if not isinstance(answer, Rewrite):
        return None
    if not isinstance(answer.arguments, Mapping):
        return f"rewrote the arguments to {type(answer.arguments).__name__}, not an object"
    return attrs.evolve(call, arguments=dict(answer.arguments))


def _replacement_result(call: ToolCall) -> Any:
    def replacement(result: ToolResult, answer: Any) -> ToolResult | None:
        # a replacement belongs to this call whatever id and name it was built with
        return attrs.evolve(answer, id=call.id, name=call.name) if isinstance(answer, ToolResult) else None

    return replacement


#: how `nexus_before_tool_invoke`'s answers are read (the rules are every gate's: `_hookcalls`)
CALL_GATES: GateRules[ToolCall] = GateRules(
    replace=_rewritten, same=lambda a, b: canonical(a.arguments) == canonical(b.arguments),
    name=lambda plugin: f"gate {quoted(plugin)}", gates="gates", replaced="rewrote the arguments",
    replacing="rewriting", answers="Veto, Rewrite, Ask or None", failed="; the call is refused", asks=True,
    replace_action="rewrite")


def _result_gates(call: ToolCall) -> GateRules[ToolResult]:
    """How `nexus_before_tool_result`'s answers are read for the results of `call`."""
    return GateRules(
        replace=_replacement_result(call), same=lambda a, b: a == b, name=lambda plugin: f"result gate {quoted(plugin)}",
        gates="result gates", replaced="replaced the result", replacing="replacing",
        answers="Veto, ToolResult or None", failed="; the result is withheld")


def _check_arguments(validator: Any, arguments: Any) -> str:
    """What is wrong with `arguments` for the tool's input schema ("" when nothing). Arguments
    the validator cannot even walk (nesting deeper than the interpreter's recursion limit, on a
    recursive schema) are refused too, rather than raising out of invoke."""
    try:
        errors = list(validator.iter_errors(arguments))
        return "; ".join(text for _, text in explain(errors, prefix="")) if errors else ""
    except RecursionError:
        return "they are nested too deeply to check against the tool's input schema"
    except Exception as exc:
        log.exception("checking arguments against an input schema failed")
        return f"they could not be checked against the tool's input schema ({type(exc).__name__}: {exc})"

def _as_answer(question: Question, reply: Any) -> Answer:
    """What an approver returned, as an `Answer`: for an approval `True`, `False` (or None) or
    `Veto(reason)`; for a question the answer's text, None (no answer) or `Veto(reason)`; for
    either an `Answer`. Anything else is a TypeError."""
    if isinstance(reply, Answer):
        return reply
    if isinstance(reply, Veto):
        return Answer(False, reply.reason)
    if reply is None:
        return Answer(False)
    if question.kind == "approval" and isinstance(reply, bool):
        return Answer(reply)
    if question.kind == "question" and isinstance(reply, str):
        return Answer(True, reply)
    expected = "True, False or Veto(reason)" if question.kind == "approval" else "the answer's text, None or Veto(reason)"
    raise TypeError(f"the approver returned {type(reply).__name__} for an {question.kind}, not {expected} (or an Answer)")


NO_APPROVER = "no one can answer here (give the Nexus, or the invoke, an approver)"


def _ask_approver(question: Question, approver: Approver | None) -> Answer:
    """`approver`'s answer to `question`, fail closed: no approver, one that raises or returns
    something unusable, all come back as a refusal by "nobody"."""
    if approver is None:
        return Answer(False, NO_APPROVER, by="nobody")
    try:
        return _as_answer(question, approver(question))
    except Exception as exc:
        log.exception("the approver raised (call %s)", question.call.id)
        return Answer(False, f"the approver failed ({describe_exception(exc)})", by="nobody")


def denial_text(answer: Answer) -> str:
    if answer.by == "nobody":
        return answer.text or NO_APPROVER
    who = "the user" if answer.by == "user" else answer.by
    return f"denied by {who}: {answer.text}" if answer.text else f"denied by {who}"


def unknown_tool_message(name: str, known: Iterable[str]) -> str:
    """`unknown tool: 'raed' (did you mean 'read'?)`."""
    close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.6) if len(name) <= 200 else []
    return f"unknown tool: {name!r}" + (f" (did you mean {close[0]!r}?)" if close else "")


def _reporter(progress: Callable[..., Any], call: ToolCall) -> Callable[..., None]:
    """`CallContext.progress` for a call whose invoke was given `progress`: it passes each report
    on, and a receiver that raises is logged, never the tool's failure."""
    def report(done: float, total: float | None = None, message: str | None = None) -> None:
        try:
            progress(done, total, message)
        except Exception:
            log.exception("the progress receiver of call %s (%s) raised", call.id, call.name)

    return report


def _cancelled_text(call: ToolCall, cancel: CancelToken) -> str:
    why = f" ({cancel.reason})" if cancel.reason else ""
    return f"cancelled: {call.name} was not run, its caller stopped it{why}"


class Invoker:
    def __init__(self, nexus: Nexus, pm: NexusPluginManager, registry: ToolRegistry) -> None:
        self._nexus = nexus
        self._pm = pm
        self._registry = registry
        #: call id -> the approver and cancel token given to that call (or inherited from its
        #: parent), while it runs: an inner call (run_code's, a tool's) finds its parent's here
        self._inherited: dict[str, tuple[Approver | None, CancelToken | None]] = {}
        #: call id -> the call, from its gates' verdict until it ends: where an inner call comes
        #: from, for the question a person is asked about it (`chain`)
        self._running: dict[str, ToolCall] = {}

    # -- the path ---------------------------------------------------------------------------

    def invoke_call(self, call: ToolCall, context: Mapping[str, Any] | None = None, answer: Any = None,
                    approver: Approver | None = None, cancel: CancelToken | None = None,
                    progress: Callable[..., Any] | None = None) -> ToolResult:
        if call.parent_call_id is not None and (approver is None or cancel is None):
            parent = self._inherited.get(call.parent_call_id)
            if parent is not None:
                approver = approver if approver is not None else parent[0]
                cancel = cancel if cancel is not None else parent[1]
        try:
            if approver is None and cancel is None:
                return self._invoke(call, context, answer, None, None, progress)
            self._inherited[call.id] = (approver, cancel)
            try:
                return self._invoke(call, context, answer, approver, cancel, progress)
            finally:
                self._inherited.pop(call.id, None)
        finally:
            self._running.pop(call.id, None)

    def _invoke(self, call: ToolCall, context: Mapping[str, Any] | None, answer: Any,
                approver: Approver | None, cancel: CancelToken | None,
                progress: Callable[..., Any] | None = None) -> ToolResult:
        call = _as_given(call)
        found = self._registry.lookup(call.name)
        self._pm.notify("nexus_tool_call_start", call=call, tool=found[0] if found is not None else None)
        if found is None:
            return self._refuse(call, None, unknown_tool_message(call.name, self._registry.names()), "unknown_tool")
        tool, validator = found
        if cancel is not None and cancel.cancelled:  # stopped before anything ran (or asked)
            return self._refuse(call, tool, _cancelled_text(call, cancel), "cancelled")

        call, refused = self._gate_call(call, tool, approver, cancel)
        if refused is not None:
            return self._finish(call, refused, tool)
        self._running[call.id] = call  # as the gates left it: what an inner call's question shows

        if validator is not None:
            problems = _check_arguments(validator, call.arguments)
            if problems:
                result = error_result(call, f"invalid arguments for {call.name}: {problems}", "invalid_arguments")
                return self._finish(call, result, tool)

        self._pm.notify("nexus_tool_invoke", call=call, tool=tool)

        if cancel is not None and cancel.cancelled:  # stopped while a person decided, say
            return self._refuse(call, tool, _cancelled_text(call, cancel), "cancelled")

        def run(idempotency_key: str) -> ToolResult:
            try:
                if tool.takes_context:
                    ctx = CallContext(
                        call_id=call.id,
                        parent_call_id=call.parent_call_id,
                        tool_name=call.name,
                        answer=answer,
                        data=dict(context or {}),
                        nexus=self._nexus,
                        approver=approver if approver is not None else self._nexus.approver,
                        cancel=cancel if cancel is not None else CancelToken(),
                        idempotency_key=idempotency_key,
                        **({"progress": _reporter(progress, call)} if progress is not None else {}),
                    )
                    value = tool.handler(call.arguments, ctx)
                else:
                    value = tool.handler(call.arguments)
                return normalize_result(value, call, typed=tool.output_schema is not None)
            except (Exception, SystemExit) as exc:  # a tool calling sys.exit() must not end the host
                return error_result(call, describe_exception(exc), "exception")

        durability = self._nexus.durability
        if durability is None:
            result = run(call.id)
        else:
            try:
                result = durability.run_handler(call, tool, run)
            except Exception as exc:
                log.exception("the durable backend failed to run call %s (%s)", call.id, call.name)
                result = error_result(call, f"the durable backend failed ({describe_exception(exc)})", "failure")
        return self._finish(call, result, tool)

    def refuse(self, call: ToolCall, error: str, kind: ErrorKind) -> ToolResult:
        """An error result for a call that is not run (`Nexus.refuse`): announced to
        `nexus_tool_call_start` like any call, then through the result gates and observers."""
        call = _as_given(call)
        tool = self._registry.get(call.name)
        self._pm.notify("nexus_tool_call_start", call=call, tool=tool)
        return self._refuse(call, tool, error, kind)

    def _refuse(self, call: ToolCall, tool: ToolDef | None, error: str, kind: ErrorKind) -> ToolResult:
        return self._finish(call, error_result(call, error, kind), tool)

    def chain(self, call: ToolCall) -> tuple[ToolCall, ...]:
        """The calls in flight that `call` comes through, outermost first, by `parent_call_id`
        (a run_code script's inner call: the run_code call); empty for a direct call."""
        out: list[ToolCall] = []
        seen = {call.id}
        parent_id = call.parent_call_id
        while parent_id is not None and parent_id not in seen:
            parent = self._running.get(parent_id)
            if parent is None:
                break
            out.append(parent)
            seen.add(parent_id)
            parent_id = parent.parent_call_id
        return tuple(reversed(out))

    # -- asking a person --------------------------------------------------------------------

    def ask(self, question: Question, approver: Approver | None = None, cancel: CancelToken | None = None) -> Answer:
        """Put `question` to `approver` (else the Nexus's), announced to `nexus_ask_start` and
        `nexus_ask_end`. Never raises for the approver's failure: no approver, one that raises
        or returns something unusable, all come back as a refusal (fail closed). `cancel` is the
        asking call's token, which a durable backend's wait ends on."""
        if approver is None:
            approver = self._nexus.approver
        if not question.chain and question.call.parent_call_id is not None:
            question = attrs.evolve(question, chain=self.chain(question.call))
        self._pm.notify("nexus_ask_start", question=question)
        answer = Answer(False, "the question was abandoned", by="nobody")
        try:
            durability = self._nexus.durability
            if durability is not None and question.kind == "approval":
                answer = self._await_durably(durability, question, approver, cancel)
            else:
                answer = _ask_approver(question, approver)
        finally:
            self._pm.notify("nexus_ask_end", question=question, answer=answer)
        return answer

    @staticmethod
    def _await_durably(durability: Durability, question: Question, approver: Approver | None,
                       cancel: CancelToken | None) -> Answer:
        """The durable backend's answer (it stores the approval, answerable from anywhere); a
        backend that fails, or answers with something other than an `Answer`, refuses."""
        ask_here = (lambda: _ask_approver(question, approver)) if approver is not None else None
        try:
            answer = durability.await_answer(question, ask_here, cancel)
        except Exception as exc:
            log.exception("the durable backend failed to wait for an approval (call %s)", question.call.id)
            return Answer(False, f"the durable backend failed ({describe_exception(exc)})", by="nobody")
        if not isinstance(answer, Answer):
            return Answer(False, f"the durable backend answered {type(answer).__name__}, not an Answer", by="nobody")
        return answer

    def _approval(self, tool: ToolDef, approver: Approver | None, cancel: CancelToken | None = None) -> Any:
        """What the call gates' `approve` is for this call: the approver's answer to every
        asking gate's question at once, and the reason of a denial."""

        def approve(call: ToolCall, asks: tuple[tuple[str, Ask], ...]) -> tuple[Answer, str | None]:
            plugins = tuple(dict.fromkeys(p for p, _ in asks))
            questions = tuple(dict.fromkeys(a.question for _, a in asks))
            answer = self.ask(Question("approval", call, "\n".join(questions), asked_by=plugins, tool=tool), approver,
                              cancel)
            if answer.approved:
                return answer, None
            if answer.by == "nobody":
                asked = "; ".join(questions)
                return answer, f"gate {names(plugins)} asks {asked!r}, and {answer.text}; the call is refused"
            return answer, denial_text(answer)

        return approve

    # -- gates ------------------------------------------------------------------------------

    def _gate_call(self, call: ToolCall, tool: ToolDef, approver: Approver | None = None,
                   cancel: CancelToken | None = None) -> tuple[ToolCall, ToolResult | None]:
        """The call gates' verdict: the (maybe rewritten) call and, when refused, the error result."""
        verdict = self._pm.gate("nexus_before_tool_invoke", CALL_GATES, call, lambda c: {"call": c, "tool": tool},
                                self._approval(tool, approver, cancel))
        if verdict.replaced_by:
            rewritten = {**verdict.subject.metadata, REWRITTEN_BY: list(verdict.replaced_by)}
            verdict = attrs.evolve(verdict, subject=attrs.evolve(verdict.subject, metadata=rewritten))
        if verdict.refusal is None:
            return verdict.subject, None
        result = _vetoed(verdict.subject, verdict.refusal, verdict.by)
        if verdict.asks:
            result = attrs.evolve(result, metadata={**result.metadata, "asked_by": list(dict.fromkeys(
                p for p, _ in verdict.asks))})
        return verdict.subject, result

    def _gate_result(self, call: ToolCall, result: ToolResult, tool: ToolDef | None) -> ToolResult:
        verdict = self._pm.gate("nexus_before_tool_result", _result_gates(call), result,
                                lambda r: {"call": call, "result": r, "tool": tool})
        return verdict.subject if verdict.refusal is None else _vetoed(call, verdict.refusal, verdict.by)

    def _finish(self, call: ToolCall, result: ToolResult, tool: ToolDef | None) -> ToolResult:
        rewritten_by = call.metadata.get(REWRITTEN_BY) if call.metadata else None
        if rewritten_by:  # the result says which gates rewrote the call it answers (run records show it)
            result = attrs.evolve(result, metadata={**result.metadata, REWRITTEN_BY: rewritten_by})
        result = self._gate_result(call, result, tool)
        self._pm.notify("nexus_tool_result", call=call, result=result, tool=tool)
        return result
