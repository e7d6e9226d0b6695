"""Finding, loading and checking plugins.

Plugins are entry points in the group `nexus.plugins` (entry name = plugin id). An entry point
names a module of hookimpls, or a class (or a factory function) that each `Nexus` calls once to
make its own plugin object, so the plugin's state and configuration belong to that Nexus. Each is
loaded on its own: one that fails to import or to be made, fails pluggy's validation, names a hook
that does not exist, or raises while configuring is recorded as a `PluginFailure` and left out;
the rest keep working.

A package may bring hooks of its own (pytest's `pytest_addhooks` is the model): an entry point
in the group `nexus.hookspecs` names a module of `@hookspec(kind=...)` functions. Every plugin
manager adds the core's hookspecs and then every installed package's, before any plugin is
registered, so a plugin may implement a package's hook in any order and whether or not that
package's plugin is active; a hookimpl of a package that is not installed matches no hook and is
refused like a typo. A hookspec module that fails to import is recorded as a failure of its
entry point's name (phase "hookspecs").

Environment switches (pytest and tox have the same three):
- `NEXUS_DISABLE_PLUGIN_AUTOLOAD=1`: load no entry point unless `plugins.active` names it.
- `NEXUS_BLOCK_PLUGINS=a,b`: never load these plugin ids (adds to `plugins.blocked`).
- `NEXUS_TRACE_HOOKS=1`: print every hook call and its result to stderr.
"""

from __future__ import annotations

import difflib
import functools
import inspect
import logging
import os
import sys
import traceback
from collections.abc import Callable, Iterable, Mapping
from importlib.metadata import EntryPoint, entry_points
from typing import Any, Literal, TypeVar

import attrs
import pluggy

from . import hookspecs
from ._errors import describe_exception as describe_exception  # where the core has always found it
from ._hookcalls import GateRules, HookCalls, Verdict
from ._markers import PROJECT, hook_kind

log = logging.getLogger("nexus_core")
# A library logs, the application decides where it goes: without this, Python's last-resort
# handler would print every warning to stderr a second time next to the CLI's own report.
log.addHandler(logging.NullHandler())

ENTRY_POINT_GROUP = "nexus.plugins"
#: the entry points that name a package's own hookspec modules
HOOKSPECS_GROUP = "nexus.hookspecs"
ENV_DISABLE_AUTOLOAD = "NEXUS_DISABLE_PLUGIN_AUTOLOAD"
ENV_BLOCK = "NEXUS_BLOCK_PLUGINS"
ENV_TRACE = "NEXUS_TRACE_HOOKS"

Phase = Literal["hookspecs", "import", "create", "validate", "config", "configure", "register_tools",
                "register_providers"]


@attrs.frozen
class PluginFailure:
    """A plugin that was left out, and why."""

    name: str
    phase: Phase
    error: str
    detail: str = attrs.field(default="", repr=False)  # the traceback, for `nexus plugins -v`


@attrs.frozen
class PluginInfo:
    """What `nexus plugins` shows for one plugin."""

    name: str
    status: Literal["active", "inactive", "blocked", "failed"]
    distribution: str | None = None
    version: str | None = None
    hooks: tuple[str, ...] = ()
    tools: tuple[str, ...] = ()
    error: str | None = None
    providers: tuple[str, ...] = ()


def env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no")


def env_list(name: str) -> list[str]:
    return [p.strip() for p in os.environ.get(name, "").split(",") if p.strip()]


S = TypeVar("S")


class NexusPluginManager(pluggy.PluginManager):
    """pluggy's manager, plus the two ways Nexus calls a hook by its kind (`_hookcalls`):
    `notify` for an observer hook (each implementation contained), `gate` for a gate hook
    (rounds, veto, replacement, ask, conflicts, each answer attributed). Other hooks are
    called as pluggy calls them."""

    def __init__(self) -> None:
        super().__init__(PROJECT)
        #: the hooks that have at least one implementation (or all of them while tracing): the
        #: invocation path skips calling the others, which on the per-call path adds up
        self.implemented: frozenset[str] = frozenset()
        self._calls = HookCalls(self)

    def notify(self, hook: str, **kwargs: Any) -> None:
        """Call the observer hook `hook` with `kwargs`: every implementation runs, in pluggy's
        order; one that raises is logged, naming its plugin, and the others still run. Costs a
        dict lookup when nothing implements it. Raises ValueError for a hook that is no
        observer (its failures must not be swallowed)."""
        if hook not in self.implemented:
            return
        self._check_kind(hook, "observer")
        self._calls.notify(hook, kwargs)

    def gate(self, hook: str, rules: GateRules[S], subject: S, kwargs: Callable[[S], Mapping[str, Any]],
             approve: Callable[[S, tuple[tuple[str, Any], ...]], tuple[Any, str | None]] | None = None) -> Verdict[S]:
        """Run the gate hook `hook` on `subject` (see `_hookcalls`): the `Verdict` says what goes
        on, or why not and which plugin said so. `nexus_gate_decision` observers hear of each
        decision. Raises ValueError for a hook that is no gate."""
        if hook not in self.implemented:
            return Verdict(subject)
        self._check_kind(hook, "gate")
        return self._calls.gate(hook, rules, subject, kwargs, approve)

    def _check_kind(self, hook: str, kind: str) -> None:
        if self.kind(hook) != kind:
            raise ValueError(f"{hook} is not an {kind} hook (its spec declares {self.kind(hook) or 'no kind'})")

    def add_hookcall_monitoring(self, before: Any, after: Any) -> Callable[[], None]:
        # monitoring (and tracing, built on it) sees every call: notify and gate go through pluggy
        undo = super().add_hookcall_monitoring(before, after)
        self._calls.monitored = True

        def undo_monitoring() -> None:
            undo()
            self._calls.monitored = False

        return undo_monitoring

    def hook_names(self) -> list[str]:
        """Every hook that has a spec here: the core's and the installed packages'."""
        return sorted(name for name, caller in vars(self.hook).items()
                      if isinstance(caller, pluggy.HookCaller) and caller.has_spec())

    def kind(self, hook: str) -> str | None:
        """The kind the hook's spec declares ("observer", "gate", ...), or None."""
        caller = getattr(self.hook, hook, None)
        spec = caller.spec if isinstance(caller, pluggy.HookCaller) else None
        return hook_kind(spec.function) if spec is not None else None

    def _refresh_implemented(self) -> None:
        self._calls.refresh()
        if env_flag(ENV_TRACE):
            self.implemented = frozenset(self.hook_names())
            return
        self.implemented = frozenset(
            name for name, caller in vars(self.hook).items()
            if isinstance(caller, pluggy.HookCaller) and caller.get_hookimpls()
        )

    def unregister(self, plugin: object | None = None, name: str | None = None) -> Any:
        removed = super().unregister(plugin, name)
        self._refresh_implemented()
        return removed

    def register(self, plugin: object, name: str | None = None) -> str | None:
        registered = super().register(plugin, name)
        self._refresh_implemented()
        return registered


def installed_hookspecs() -> list[EntryPoint]:
    """The `nexus.hookspecs` entry points: one module of hookspecs each, by entry name."""
    seen: dict[str, EntryPoint] = {}
    for ep in entry_points(group=HOOKSPECS_GROUP):
        seen.setdefault(ep.name, ep)
    return sorted(seen.values(), key=lambda ep: ep.name)


def add_package_hookspecs(pm: pluggy.PluginManager) -> list[PluginFailure]:
    """Add the hookspecs of every installed package; each module that cannot be imported or
    added (a hook another package specifies already) is returned as a failure."""
    failures = []
    for ep in installed_hookspecs():
        try:
            pm.add_hookspecs(ep.load())
        except BaseException as exc:  # an import may raise anything, SystemExit included
            if isinstance(exc, KeyboardInterrupt):
                raise
            failures.append(PluginFailure(ep.name, "hookspecs", describe_exception(exc), traceback.format_exc()))
    return failures


def new_plugin_manager() -> tuple[NexusPluginManager, list[PluginFailure]]:
    """A plugin manager with every hookspec (the core's, then the installed packages'), and the
    hookspec modules that failed."""
    pm = NexusPluginManager()
    pm.add_hookspecs(hookspecs)
    failures = add_package_hookspecs(pm)
    if env_flag(ENV_TRACE):
        pm.trace.root.setwriter(lambda text: sys.stderr.write(text))
        pm.enable_tracing()
    return pm, failures


def installed_entry_points() -> list[EntryPoint]:
    """The `nexus.plugins` entry points, one per plugin id (the first one wins on a clash)."""
    seen: dict[str, EntryPoint] = {}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        seen.setdefault(ep.name, ep)
    return sorted(seen.values(), key=lambda ep: ep.name)


def unknown_hooks(pm: pluggy.PluginManager, plugin: object) -> list[tuple[str, pluggy.HookImpl]]:
    """`(hook name, hookimpl)` for each hookimpl of `plugin` that matches no hookspec (a typo in
    a hook name, usually), sorted by hook name."""
    bad: list[tuple[str, pluggy.HookImpl]] = []
    for caller in pm.get_hookcallers(plugin) or []:
        if not caller.has_spec():
            bad.extend(
                (caller.name, impl) for impl in caller.get_hookimpls()
                if impl.plugin is plugin and not impl.optionalhook
            )
    return sorted(bad, key=lambda pair: pair[0])


def register_checked(pm: NexusPluginManager, plugin: object, name: str) -> None:
    """Register `plugin`, then refuse it (unregistered again) if a hookimpl matches no hook.
    Raises `pluggy.PluginValidationError` naming the plugin, the hook, the closest real hook
    name and where the hookimpl is defined. Registering one plugin object twice is a
    `ValueError` naming the name it already has."""
    existing = pm.get_name(plugin)
    if existing is not None:
        raise ValueError(f"plugin {plugin!r} is already registered, as {existing!r}")
    if pm.has_plugin(name):
        raise ValueError(f"a plugin named {name!r} is already registered ({pm.get_plugin(name)!r})")
    pm.register(plugin, name=name)
    bad = unknown_hooks(pm, plugin)
    if bad:
        pm.unregister(plugin)
        lines = []
        known = pm.hook_names()
        for hook, impl in bad:
            close = difflib.get_close_matches(hook, known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else (
                " (nexus_core.hookspecs lists the core's hooks; a package's own hooks exist where it is installed)")
            line = f"Plugin {name!r}: hookimpl {hook!r} matches no nexus hook{hint}"
            code = getattr(inspect.unwrap(impl.function), "__code__", None)
            if code is not None:
                line += f"\nhookimpl definition: {code.co_filename}:{code.co_firstlineno}"
            lines.append(line)
        raise pluggy.PluginValidationError(plugin, "\n".join(lines))


def call_for_plugin(pm: pluggy.PluginManager, hook_name: str, plugin_name: str, **kwargs: Any) -> list[Any]:
    """Call one plugin's implementation of a hook (this is how per-plugin hooks such as
    `nexus_configure` give each plugin only its own section). Returns the non-None results.
    Traced like any hook call when tracing is on; hook wrappers are not involved."""
    caller = getattr(pm.hook, hook_name)
    results = []
    for impl in caller.get_hookimpls():
        if impl.plugin_name != plugin_name or impl.hookwrapper or impl.wrapper:
            continue
        pm.trace.root.get("hook")(f"{hook_name} (plugin {plugin_name})", kwargs)
        args = [kwargs[a] for a in impl.argnames]
        extra = {a: kwargs[a] for a in impl.kwargnames if a in kwargs}
        value = impl.function(*args, **extra)
        if value is not None:
            results.append(value)
    return results


def select_entry_points(
    active: list[str] | None, blocked: Iterable[str]
) -> tuple[list[EntryPoint], list[PluginInfo]]:
    """Which entry points to load, and a PluginInfo for each one left out on purpose."""
    blocked_set = set(blocked) | set(env_list(ENV_BLOCK))
    autoload = not env_flag(ENV_DISABLE_AUTOLOAD)
    chosen: list[EntryPoint] = []
    skipped: list[PluginInfo] = []
    for ep in installed_entry_points():
        dist = ep.dist.name if ep.dist else None
        version = ep.dist.version if ep.dist else None
        wanted = ep.name in active if active is not None else autoload  # `active` overrides autoload
        if ep.name in blocked_set:
            skipped.append(PluginInfo(ep.name, "blocked", dist, version))
        elif not wanted:
            skipped.append(PluginInfo(ep.name, "inactive", dist, version))
        else:
            chosen.append(ep)
    return chosen, skipped


def _takes_nexus(factory: Callable[..., Any]) -> bool | None:
    """Whether `factory` is called with the Nexus: True when it has a required positional
    parameter or one named `nexus`, False when it takes nothing, None when it needs more."""
    try:
        parameters = list(inspect.signature(factory).parameters.values())
    except (TypeError, ValueError):  # a builtin without a signature: call it bare
        return False
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    required = [p for p in parameters if p.default is p.empty and p.kind in
                (*positional, inspect.Parameter.KEYWORD_ONLY)]
    if not required:
        return any(p.name == "nexus" for p in parameters)
    if len(required) == 1 and (required[0].kind in positional or required[0].name == "nexus"):
        return True
    return None


def is_factory(obj: object) -> bool:
    """A class, or a function that makes a plugin object; a module or an object is used as is."""
    return inspect.isclass(obj) or inspect.isfunction(obj) or isinstance(obj, functools.partial)


def instantiate(obj: Any, nexus: Any) -> Any:
    """The plugin object one Nexus registers for `obj`: a module or a plugin object as it is; a
    class or factory called once, with the Nexus when it takes an argument (`cls(nexus)`,
    `factory(nexus)`), else with none. Raises TypeError naming the signature it cannot call."""
    if not is_factory(obj):
        return obj
    takes = _takes_nexus(obj)
    name = getattr(obj, "__qualname__", repr(obj))
    if takes is None:
        bare = inspect.signature(obj).replace(return_annotation=inspect.Signature.empty)
        bare = bare.replace(parameters=[p.replace(annotation=p.empty) for p in bare.parameters.values()])
        raise TypeError(f"cannot make a plugin from {name}{bare}: a plugin class or factory takes "
                        "no argument, or one (the Nexus)")
    plugin = obj(nexus) if takes else obj()
    if plugin is None:
        raise TypeError(f"plugin factory {name} returned None, not a plugin object")
    return plugin


def entry_point_for(obj: object) -> EntryPoint | None:
    """The installed `nexus.plugins` entry point that names `obj` (a module, a class, a factory,
    or an instance of a class an entry point names), if there is one."""
    if inspect.ismodule(obj):
        target = obj.__name__
    elif is_factory(obj):
        target = f"{getattr(obj, '__module__', '')}:{getattr(obj, '__qualname__', '')}"
    else:
        cls = type(obj)
        target = f"{cls.__module__}:{cls.__qualname__}"
    for ep in installed_entry_points():
        if ep.value.replace(" ", "") == target:
            return ep
    return None


def plugin_id_of(obj: object) -> str:
    """The id a plugin object goes by (and its config section): its `NEXUS_PLUGIN_ID`, else the
    name of the installed entry point that names it, else its module's or class's name."""
    declared = getattr(obj, "NEXUS_PLUGIN_ID", None)
    if isinstance(declared, str) and declared:
        return declared
    ep = entry_point_for(obj)
    if ep is not None:
        return ep.name
    if inspect.ismodule(obj) or is_factory(obj):
        return str(getattr(obj, "__name__", None) or repr(obj))
    return type(obj).__name__


def static_hookimpl(obj: object, hook: str) -> Callable[..., Any] | None:
    """The implementation of `hook` that can be called on an entry point's object itself, before
    any Nexus exists (for process-wide hooks such as `nexus_register_commands`): a module's
    function, a class's staticmethod or classmethod, an object's method. None when `obj` has
    no hookimpl of that name (a factory function cannot have one). A class whose hookimpl is a
    plain method, which needs an instance, is a TypeError saying how to declare it."""
    marker = f"{PROJECT}_impl"
    if inspect.isclass(obj):
        raw = inspect.getattr_static(obj, hook, None)
        if raw is None:
            return None
        function = raw.__func__ if isinstance(raw, (staticmethod, classmethod)) else raw
        if not hasattr(function, marker):
            return None
        if not isinstance(raw, (staticmethod, classmethod)):
            raise TypeError(f"{obj.__qualname__}.{hook} is called before any Nexus (so without an "
                            "instance): make it a @staticmethod (above @hookimpl)")
        bound: Callable[..., Any] = getattr(obj, hook)
        return bound
    if is_factory(obj):
        return None
    function = getattr(obj, hook, None)
    return function if callable(function) and hasattr(function, marker) else None


def load_entry_point(pm: NexusPluginManager, ep: EntryPoint, nexus: Any) -> PluginFailure | None:
    """Import one entry point, make this Nexus's plugin object from it, and register that; a
    failure is returned, not raised."""
    try:
        loaded = ep.load()
    except BaseException as exc:  # a plugin's import may raise anything, SystemExit included
        if isinstance(exc, KeyboardInterrupt):
            raise
        return PluginFailure(ep.name, "import", describe_exception(exc), traceback.format_exc())
    try:
        plugin = instantiate(loaded, nexus)
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        return PluginFailure(ep.name, "create", describe_exception(exc), traceback.format_exc())
    try:
        register_checked(pm, plugin, ep.name)
    except Exception as exc:
        return PluginFailure(ep.name, "validate", describe_exception(exc), traceback.format_exc())
    return None
