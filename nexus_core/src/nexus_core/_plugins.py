"""Finding, loading and checking plugins.

Plugins are entry points in the group `nexus.plugins` (entry name = plugin id). Each is loaded on
its own: one that fails to import, fails pluggy's validation, names a hook that does not exist,
or raises while configuring is recorded as a `PluginFailure` and left out; the rest keep working.

Environment switches (pytest and tox have the same three):
- `NEXUS_DISABLE_PLUGIN_AUTOLOAD=1`: load no entry point unless `plugins.active` names it.
- `NEXUS_BLOCK_PLUGINS=a,b`: never load these plugin ids (adds to `plugins.blocked`).
- `NEXUS_TRACE_HOOKS=1`: print every hook call and its result to stderr.
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Iterable
from importlib.metadata import EntryPoint, entry_points
from typing import Any, Literal

import attrs
import pluggy

from . import hookspecs

ENTRY_POINT_GROUP = "nexus.plugins"
ENV_DISABLE_AUTOLOAD = "NEXUS_DISABLE_PLUGIN_AUTOLOAD"
ENV_BLOCK = "NEXUS_BLOCK_PLUGINS"
ENV_TRACE = "NEXUS_TRACE_HOOKS"

Phase = Literal["import", "validate", "config", "configure", "register_tools"]


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


def env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no")


def env_list(name: str) -> list[str]:
    return [p.strip() for p in os.environ.get(name, "").split(",") if p.strip()]


def new_plugin_manager() -> pluggy.PluginManager:
    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs)
    if env_flag(ENV_TRACE):
        pm.trace.root.setwriter(lambda text: sys.stderr.write(text))
        pm.enable_tracing()
    return pm


def installed_entry_points() -> list[EntryPoint]:
    """The `nexus.plugins` entry points, one per plugin id (the first one wins on a clash)."""
    seen: dict[str, EntryPoint] = {}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        seen.setdefault(ep.name, ep)
    return sorted(seen.values(), key=lambda ep: ep.name)


def describe_exception(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def unknown_hooks(pm: pluggy.PluginManager, plugin: object) -> list[str]:
    """Hookimpls of `plugin` that match no hookspec (a typo in a hook name, usually)."""
    bad = []
    for caller in pm.get_hookcallers(plugin) or []:
        if not caller.has_spec():
            for impl in caller.get_hookimpls():
                if impl.plugin is plugin and not impl.opts.get("optionalhook"):
                    bad.append(caller.name)
    return sorted(set(bad))


def register_checked(pm: pluggy.PluginManager, plugin: object, name: str) -> None:
    """Register `plugin`, then refuse it (unregistered again) if a hookimpl matches no hook.
    Raises `pluggy.PluginValidationError` naming the plugin, the hook and the definition."""
    pm.register(plugin, name=name)
    bad = unknown_hooks(pm, plugin)
    if bad:
        pm.unregister(plugin)
        hook = bad[0]
        impl = getattr(plugin, hook, None)
        where = ""
        code = getattr(impl, "__code__", None)
        if code is not None:
            where = f"\nhookimpl definition: {code.co_filename}:{code.co_firstlineno}"
        raise pluggy.PluginValidationError(
            plugin,
            f"Plugin {name!r}: hookimpl {hook!r} matches no nexus hook "
            f"(see nexus_core.hookspecs for the names){where}",
        )


def call_for_plugin(pm: pluggy.PluginManager, hook_name: str, plugin_name: str, **kwargs: Any) -> list[Any]:
    """Call one plugin's implementations of a hook (those are how per-plugin hooks such as
    `nexus_configure` get only their own section). Returns the non-None results."""
    caller = getattr(pm.hook, hook_name)
    results = []
    for impl in caller.get_hookimpls():
        if impl.plugin_name != plugin_name or impl.hookwrapper or impl.wrapper:
            continue
        value = impl.function(*[kwargs[a] for a in impl.argnames])
        if value is not None:
            results.append(value)
    return results


def plugin_names_with_hook(pm: pluggy.PluginManager, hook_name: str) -> list[str]:
    caller = getattr(pm.hook, hook_name)
    return [impl.plugin_name for impl in caller.get_hookimpls()]


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
        if ep.name in blocked_set:
            skipped.append(PluginInfo(ep.name, "blocked", dist, version))
        elif active is not None and ep.name not in active:
            skipped.append(PluginInfo(ep.name, "inactive", dist, version))
        elif active is None and not autoload:
            skipped.append(PluginInfo(ep.name, "inactive", dist, version))
        else:
            chosen.append(ep)
    return chosen, skipped


def load_entry_point(pm: pluggy.PluginManager, ep: EntryPoint) -> PluginFailure | None:
    """Import and register one entry point; a failure is returned, not raised."""
    try:
        plugin = ep.load()
    except BaseException as exc:  # a plugin's import may raise anything, SystemExit included
        if isinstance(exc, KeyboardInterrupt):
            raise
        return PluginFailure(ep.name, "import", describe_exception(exc), traceback.format_exc())
    try:
        register_checked(pm, plugin, ep.name)
    except Exception as exc:
        return PluginFailure(ep.name, "validate", describe_exception(exc), traceback.format_exc())
    return None
