"""Calling observer and gate hooks, in one place: `notify` and `gate`, which the plugin manager
offers (`NexusPluginManager.notify` / `.gate`) and every path uses (tool calls, results, model
requests, the registry's announcements, the questions a person is asked, run_code's events).

pluggy's own hook call stops at the first implementation that raises and returns the values
without saying which plugin gave which. Nexus needs every observer to run whatever another one
does, and every gate's answer attributed (a veto names its plugin; a gate that raises is a veto
naming it). So for these two kinds the implementations are called one by one, in pluggy's order
(`HookCaller.get_hookimpls()`, tryfirst/trylast honoured), each contained or attributed. When a
hook has hook wrappers, or pluggy's call monitoring is on (`NEXUS_TRACE_HOOKS`), the call still
goes through pluggy: the implementations run as `call_extra` methods of a caller that holds only
the wrappers (`subset_hook_caller`), so wrappers wrap them and tracing sees them as usual. No
`HookImpl` is changed.

Gate rules (datasette's: deny wins whatever the plugin order), the same for every gate hook,
each hook's own answers and words given by a `GateRules`:
- any `Veto` refuses the subject, however many gates let it through or changed it; the first
  veto in hook order gives the reason and names its plugin;
- a gate that raises, or answers something its hook does not take, is a veto naming it (fail
  closed);
- a replacement (a `Rewrite` of a call's arguments, a new result, a new request) is applied only
  when every replacing gate agrees; then all gates run again on it, until none replaces it (at
  most `MAX_GATE_ROUNDS` rounds);
- `Ask`s (call gates only) count in the last round, on the subject as it will be: `approve` puts
  all the gates' questions to a person at once, and a denial refuses it. A veto wins over an ask.

`gate` tells `nexus_gate_decision` observers of each decision (a veto, a rewrite, a replacement,
an ask, the person's answer), for tracing; nothing is built when no plugin implements it.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar

import attrs
import pluggy

from ._errors import describe_exception
from ._models import Answer, Ask, Veto

if TYPE_CHECKING:
    from ._plugins import NexusPluginManager

log = logging.getLogger("nexus_core")

#: how many times gates may replace a subject (rewrite a call, replace a result) before it is refused
MAX_GATE_ROUNDS = 8
#: who answered, when no gate implementation did (a hook wrapper changed the answers)
WRAPPER = "a hook wrapper"

S = TypeVar("S")
Action = Literal["veto", "rewrite", "replace", "ask", "answer"]


@attrs.frozen
class GateDecision:
    """Payload of `nexus_gate_decision`: one gate's decision about a call, a result or a model
    request, or the person's answer to what gates asked.

    `hook` is the gate hook (`nexus_before_tool_invoke`, ...), `plugin` who decided (the gate's
    plugin id, "a hook wrapper", or for an answer who answered: "user", a policy, "nobody"),
    `action` "veto" (a veto, a gate that failed, conflicting or endless replacements), "rewrite"
    (new arguments), "replace" (a new result or request), "ask", or "answer". `subject` is what
    the gate was asked about (the `ToolCall`, `ToolResult` or `ModelRequest` of that round),
    `reason` the veto's reason or the question, `round` the gate round (1, 2, ...), `answer` the
    person's `Answer` for an "answer"."""

    hook: str
    plugin: str | None
    action: Action
    subject: Any = attrs.field(repr=False)
    reason: str = ""
    round: int = 1
    answer: Answer | None = None


@attrs.frozen
class GateRules(Generic[S]):
    """How one gate hook's answers are read and its refusals worded.

    `replace(subject, answer)` is the subject an answer other than a Veto, an Ask or None stands
    for (a Rewrite's new call, a replacement result re-addressed), a string saying what is wrong
    with the answer ("rewrote the arguments to list, not an object", after the gate's name), or
    None when it is not an answer this hook takes. `same(a, b)` says
    whether a replacement changes nothing. The words: `name(plugin)` names one implementation in
    a message ("gate 'x'"), `gates` all of them ("result gates"), `replaced` / `replacing` what
    they do, `failed` what a failing gate costs ("; the call is refused"), `answers` what the hook
    takes ("Veto, Rewrite, Ask or None")."""

    replace: Callable[[S, Any], S | str | None]
    same: Callable[[S, S], bool]
    name: Callable[[str], str]
    gates: str
    replaced: str
    replacing: str
    answers: str
    failed: str = ""
    asks: bool = False
    replace_action: Action = "replace"


@attrs.frozen
class Verdict(Generic[S]):
    """What the gates decided: the subject as it goes on (maybe replaced), or why it is refused
    (`refusal`, with the plugin it names in `by`, the exception of a gate that raised in
    `raised`). `asks` are the gates that asked, when a person answered; `replaced_by` the
    gates whose replacement (a rewrite of a call's arguments) the subject went on with, in the
    order of their rounds."""

    subject: S
    refusal: str | None = None
    by: str | None = None
    raised: BaseException | None = attrs.field(default=None, eq=False)
    asks: tuple[tuple[str, Ask], ...] = ()
    replaced_by: tuple[str, ...] = ()


class _GateRaised(Exception):
    def __init__(self, plugin: str, error: BaseException) -> None:
        super().__init__(plugin)
        self.plugin = plugin
        self.error = error


class _Observed:
    """An observer hook's caller as `Nexus.hook` hands it out: calling it is `notify`; anything
    else (`get_hookimpls()`, `spec`, `name`) is pluggy's caller's."""

    def __init__(self, pm: NexusPluginManager, caller: pluggy.HookCaller) -> None:
        self._pm = pm
        self._caller = caller

    def __call__(self, **kwargs: Any) -> list[Any]:
        self._pm.notify(self._caller.name, **kwargs)
        return []  # what pluggy returns for a hook whose implementations return None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._caller, name)


class ContainedRelay:
    """`Nexus.hook`: pluggy's hook relay, but an observer hook fired through it (`nx.hook.x(...)`)
    runs each implementation contained, as `notify` does, whoever fires it."""

    def __init__(self, pm: NexusPluginManager) -> None:
        self._pm = pm

    def __getattr__(self, name: str) -> Any:
        caller = getattr(self._pm.hook, name)
        if isinstance(caller, pluggy.HookCaller) and self._pm.kind(name) == "observer":
            return _Observed(self._pm, caller)
        return caller


def quoted(plugin: str) -> str:
    return plugin if plugin == WRAPPER else repr(plugin)


def names(plugins: Sequence[str]) -> str:
    """`'a'`, `'a' and 'b'`, `'a', 'b' and 'c'`, each plugin once."""
    unique = [quoted(p) for p in dict.fromkeys(plugins)]
    return unique[0] if len(unique) == 1 else ", ".join(unique[:-1]) + " and " + unique[-1]


def canonical(value: Any) -> str:
    """A value's JSON text with sorted keys: two arguments are the same when these are."""
    return json.dumps(value, sort_keys=True, default=repr)


def _arguments(impl: pluggy.HookImpl, kwargs: Mapping[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    # what pluggy passes: the hookimpl's positional parameters, and those with defaults it has
    return [kwargs[a] for a in impl.argnames], {a: kwargs[a] for a in impl.kwargnames if a in kwargs}


def _observe(impl: pluggy.HookImpl, hook: str, args: Sequence[Any], extra: Mapping[str, Any]) -> None:
    """Call one observer implementation, contained: an exception is logged, naming its plugin."""
    try:
        impl.function(*args, **extra)
    except Exception:
        log.exception("plugin %r raised in %s; the other observers still run", impl.plugin_name, hook)


class HookCalls:
    """The implementations of each observer and gate hook of one plugin manager, in call order,
    found again when a plugin comes or goes (`refresh`), and the two ways to call them."""

    def __init__(self, pm: NexusPluginManager) -> None:
        self._pm = pm
        #: hook -> its non-wrapper implementations in call order; whether it has wrappers
        self._plans: dict[str, tuple[tuple[pluggy.HookImpl, ...], bool]] = {}
        #: pluggy's call monitoring is on (tracing): every call goes through pluggy
        self.monitored = False

    def refresh(self) -> None:
        plans = {}
        for name, caller in vars(self._pm.hook).items():
            if isinstance(caller, pluggy.HookCaller):
                impls = caller.get_hookimpls()
                if impls:
                    plain = tuple(i for i in reversed(impls) if not (i.wrapper or i.hookwrapper))
                    plans[name] = (plain, len(plain) < len(impls))
        self._plans = plans

    def _through_pluggy(self, hook: str, plain: Sequence[pluggy.HookImpl],
                        run: Callable[[pluggy.HookImpl], Callable[..., Any]],
                        kwargs: Mapping[str, Any]) -> Any:
        """Call `run(impl)` for each plain implementation as extra methods of a caller that
        holds only the hook's wrappers, so wrappers and call monitoring see the call."""
        caller: pluggy.HookCaller = getattr(self._pm.hook, hook)
        wrapping = {i.plugin for i in caller.get_hookimpls() if i.wrapper or i.hookwrapper}
        # a plugin that wraps the hook and implements it too stays in (its implementation is
        # then pluggy's to call, unattributed): pluggy keeps or drops a plugin, not one impl
        mine = [i for i in plain if i.plugin not in wrapping]
        subset = self._pm.subset_hook_caller(hook, {i.plugin for i in mine})
        # call_extra puts each method after the ones before it, and pluggy calls the list from
        # its end: given in reverse, they run in `plain`'s order
        return subset.call_extra([run(i) for i in reversed(mine)], kwargs)

    # -- observers --------------------------------------------------------------------------

    def notify(self, hook: str, kwargs: Mapping[str, Any]) -> None:
        """Call every implementation of an observer hook; one that raises is logged, naming its
        plugin, and the others still run. A hook wrapper that raises is logged too."""
        plan = self._plans.get(hook)
        if plan is None and not self.monitored:
            return
        plain, wrapped = plan if plan is not None else ((), False)
        if not wrapped and not self.monitored:
            for impl in plain:
                _observe(impl, hook, *_arguments(impl, kwargs))
            return

        def contained(impl: pluggy.HookImpl) -> Callable[..., Any]:
            @functools.wraps(impl.function)
            def observe(*args: Any, **extra: Any) -> None:
                _observe(impl, hook, args, extra)

            return observe

        try:
            self._through_pluggy(hook, plain, contained, kwargs)
        except Exception:
            log.exception("a hook wrapper of %s raised", hook)

    # -- gates ------------------------------------------------------------------------------

    def _answers(self, hook: str, kwargs: Mapping[str, Any]) -> list[tuple[str, Any]]:
        """`(plugin, answer)` for each implementation that answered (not None), in call order;
        raises `_GateRaised` naming the implementation (or hook wrapper) that raised."""
        plain, wrapped = self._plans.get(hook, ((), False))
        if not wrapped and not self.monitored:
            answers = []
            for impl in plain:
                args, extra = _arguments(impl, kwargs)
                try:
                    value = impl.function(*args, **extra)
                except (Exception, SystemExit) as exc:  # a gate calling sys.exit() must not end the host
                    raise _GateRaised(impl.plugin_name, exc) from exc
                if value is not None:
                    answers.append((impl.plugin_name, value))
            return answers

        given: list[tuple[str, Any]] = []
        failed: list[tuple[str, BaseException]] = []

        def attributed(impl: pluggy.HookImpl) -> Callable[..., Any]:
            @functools.wraps(impl.function)
            def decide(*args: Any, **extra: Any) -> Any:
                try:
                    value = impl.function(*args, **extra)
                except BaseException as exc:
                    failed.append((impl.plugin_name, exc))
                    raise
                if value is not None:
                    given.append((impl.plugin_name, value))
                return value

            return decide

        try:
            values = self._through_pluggy(hook, plain, attributed, kwargs)
        except (Exception, SystemExit) as exc:
            raise _GateRaised(next((p for p, e in failed if e is exc), WRAPPER), exc) from exc
        # pluggy returns the answers in call order, as they were recorded, unless a wrapper
        # changed the list: then each is looked up by identity
        if len(values) == len(given) and all(v is g for v, (_, g) in zip(values, given, strict=True)):
            return given
        return [(next((p for p, g in given if g is v), WRAPPER), v) for v in values]

    def gate(self, hook: str, rules: GateRules[S], subject: S, kwargs: Callable[[S], Mapping[str, Any]],
             approve: Callable[[S, tuple[tuple[str, Ask], ...]], tuple[Answer, str | None]] | None = None,
             ) -> Verdict[S]:
        """Run the gates of `hook` on `subject` (the hook's arguments for it: `kwargs(subject)`)
        in rounds until none replaces it, then, if gates asked, have `approve(subject, asks)`
        ask a person (it returns the `Answer` and, for a denial, the reason). See the module's
        rules."""
        if hook not in self._plans and not self.monitored:
            return Verdict(subject)
        told = "nexus_gate_decision" in self._plans
        replaced_by: dict[str, None] = {}  # the gates whose replacements were taken, once each, in order

        def tell(action: Action, plugin: str | None, on: Any, reason: str = "", round_: int = 1,
                 answer: Answer | None = None) -> None:
            if told:
                self.notify("nexus_gate_decision", {"decision": GateDecision(
                    hook, plugin, action, on, reason, round_, answer)})

        def refuse(on: S, reason: str, plugin: str | None, round_: int,
                   raised: BaseException | None = None) -> Verdict[S]:
            tell("veto", plugin, on, reason, round_)
            return Verdict(on, refusal=reason, by=plugin, raised=raised, replaced_by=tuple(replaced_by))

        for round_ in range(1, MAX_GATE_ROUNDS + 1):
            try:
                answers = self._answers(hook, kwargs(subject))
            except _GateRaised as exc:
                reason = f"{rules.name(exc.plugin)} failed ({describe_exception(exc.error)}){rules.failed}"
                return refuse(subject, reason, exc.plugin, round_, exc.error)
            replacements: list[tuple[str, S]] = []
            asks: list[tuple[str, Ask]] = []
            for plugin, answer in answers:
                if isinstance(answer, Veto):
                    return refuse(subject, answer.reason, plugin, round_)
                if isinstance(answer, Ask) and rules.asks:
                    if not isinstance(answer.question, str) or not answer.question.strip():
                        reason = f"{rules.name(plugin)} asked without a question (Ask needs the text to show)"
                        return refuse(subject, reason, plugin, round_)
                    tell("ask", plugin, subject, answer.question, round_)
                    asks.append((plugin, answer))
                    continue
                replaced = None if isinstance(answer, Ask) else rules.replace(subject, answer)
                if replaced is None:
                    reason = f"{rules.name(plugin)} returned {type(answer).__name__}, not {rules.answers}"
                    return refuse(subject, reason, plugin, round_)
                if isinstance(replaced, str):
                    return refuse(subject, f"{rules.name(plugin)} {replaced}", plugin, round_)
                if not rules.same(replaced, subject):
                    tell(rules.replace_action, plugin, subject, "", round_)
                    replacements.append((plugin, replaced))
            if not replacements:
                applied = tuple(replaced_by)
                if not asks or approve is None:
                    return Verdict(subject, replaced_by=applied)
                # a veto of this round has returned already: deny wins over ask
                person, denial = approve(subject, tuple(asks))
                tell("answer", person.by, subject, person.text, round_, person)
                if denial is None:
                    return Verdict(subject, asks=tuple(asks), replaced_by=applied)
                return Verdict(subject, refusal=denial, by=person.by, asks=tuple(asks), replaced_by=applied)
            first = replacements[0][1]
            if any(not rules.same(r, first) for _, r in replacements[1:]):
                plugins = [p for p, _ in replacements]
                reason = f"{rules.gates} {rules.replaced} in conflicting ways ({names(plugins)})"
                return refuse(subject, reason, plugins[0], round_)
            subject = first
            replaced_by.update(dict.fromkeys(p for p, _ in replacements))
        return refuse(subject, f"{rules.gates} still {rules.replacing} after {MAX_GATE_ROUNDS} rounds", None,
                      MAX_GATE_ROUNDS)
