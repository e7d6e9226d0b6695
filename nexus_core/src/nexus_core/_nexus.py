"""`Nexus`: a configured set of plugins, their tools, and the one way to call them."""

from __future__ import annotations

import logging
import os
import threading
import traceback
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import attrs
import pluggy

from ._config import ConfigError, NexusConfig, load_config
from ._invoke import Invoker
from ._models import ToolCall, ToolDef, ToolResult
from ._plugins import (
    PluginFailure,
    PluginInfo,
    call_for_plugin,
    describe_exception,
    load_entry_point,
    new_plugin_manager,
    register_checked,
    select_entry_points,
)
from ._registry import ToolRegistry, as_tooldef

log = logging.getLogger("nexus_core")

ConfigSource = str | os.PathLike[str] | dict[str, Any] | None


class Nexus:
    """Plugins, tools and the gated invocation path, configured once.

    `Nexus()` loads every installed plugin with default settings; `Nexus.from_config(...)` reads
    a YAML file or a dict. `plugins=` adds plugin objects of your own (gates, observers, tools);
    `tools=` adds tools directly. Use it as a context manager, or call `close()`.
    """

    def __init__(
        self,
        config: ConfigSource | NexusConfig = None,
        *,
        plugins: Iterable[object] = (),
        tools: Iterable[Any] = (),
        workspace: str | os.PathLike[str] | None = None,
        autoload: bool = True,
    ) -> None:
        self.config = config if isinstance(config, NexusConfig) else load_config(config)
        if workspace is not None:
            self.config.workspace = Path(workspace).resolve()
        self._pm = new_plugin_manager()
        self._registry = ToolRegistry(on_register=lambda t: self._pm.hook.nexus_tool_register(tool=t))
        self._invoker = Invoker(self, self._pm, self._registry)
        self._failures: list[PluginFailure] = []
        self._skipped: list[PluginInfo] = []
        self._dists: dict[str, tuple[str | None, str | None]] = {}
        self._closed = False
        self._lock = threading.Lock()
        self._data: dict[str, Any] = {}
        self._sections: dict[str, dict[str, Any]] = {}

        if autoload:
            self._load_installed()
        for plugin in plugins:
            self._pm_register_host(plugin)
        self._start_plugins(self._plugin_names())
        for obj in tools:
            self.add_tool(obj)

    @classmethod
    def from_config(cls, source: ConfigSource = None, **kwargs: Any) -> Nexus:
        """A Nexus from a YAML file path, a dict, or None (defaults). Raises ConfigError."""
        return cls(source, **kwargs)

    # -- plugins ----------------------------------------------------------------------------

    def _plugin_names(self) -> list[str]:
        return [name for name, _ in self._pm.list_name_plugin()]

    def _load_installed(self) -> None:
        chosen, skipped = select_entry_points(self.config.active, self.config.blocked)
        self._skipped = skipped
        installed = {ep.name for ep in chosen} | {s.name for s in skipped}
        problems = [
            f"plugins.active[{i}]: no installed plugin is called {name!r}"
            for i, name in enumerate(self.config.active or [])
            if name not in installed
        ]
        problems += [
            f"plugins.{name}: no installed plugin is called {name!r}"
            for name in self.config.plugin_sections
            if name not in installed
        ]
        if problems:
            where = self.config.where
            raise ConfigError(
                [f"{where(('plugins',))}: {p}" if self.config.source else p for p in problems],
                self.config.source,
            )
        for ep in chosen:
            self._dists[ep.name] = (ep.dist.name, ep.dist.version) if ep.dist else (None, None)
            failure = load_entry_point(self._pm, ep)
            if failure is not None:
                self._report(failure)

    def _report(self, failure: PluginFailure) -> None:
        self._failures.append(failure)
        log.warning("plugin %s failed to %s: %s", failure.name, failure.phase, failure.error)

    def _drop(self, name: str, phase: Any, exc: BaseException) -> None:
        self._report(PluginFailure(name, phase, describe_exception(exc), traceback.format_exc()))
        self._registry.remove_plugin(name)
        plugin = self._pm.get_plugin(name)
        if plugin is not None:
            self._pm.unregister(plugin)

    def _pm_register_host(self, plugin: object, name: str | None = None) -> str:
        if name is None:
            base = getattr(plugin, "NEXUS_PLUGIN_ID", None) or getattr(plugin, "__name__", None) or type(plugin).__qualname__
            name, n = base, 1
            while self._pm.has_plugin(name):
                n += 1
                name = f"{base}#{n}"
        register_checked(self._pm, plugin, name)
        return name

    def _start_plugins(self, names: list[str], strict: bool = False) -> None:
        """Configure then collect tools from each named plugin. Config problems of all plugins
        are gathered into one ConfigError; a plugin that raises is dropped and reported (or,
        with `strict`, the error propagates: the host registered it by hand)."""
        problems: list[str] = []
        sections: dict[str, dict[str, Any]] = {}
        for name in names:
            try:
                schemas = call_for_plugin(self._pm, "nexus_config_schema", name)
            except Exception as exc:
                if strict:
                    raise
                self._drop(name, "config", exc)
                continue
            try:
                sections[name] = self.config.validate_plugin_section(name, schemas[0] if schemas else None)
            except ConfigError as exc:
                problems.extend(exc.problems)
        if problems:
            raise ConfigError(problems, self.config.source)
        self._sections.update(sections)
        for name in names:
            if name not in sections:
                continue
            for phase, hook, kwargs in (
                ("configure", "nexus_configure", {"config": sections[name], "nexus": self}),
                ("register_tools", "nexus_register_tools",
                 {"register": self._register_for(name), "nexus": self}),
            ):
                try:
                    call_for_plugin(self._pm, hook, name, **kwargs)
                except Exception as exc:
                    if strict:
                        self._registry.remove_plugin(name)
                        raise
                    self._drop(name, phase, exc)
                    break

    def _register_for(self, plugin: str) -> Callable[..., ToolDef]:
        def register(tool: Any, name: str | None = None) -> ToolDef:
            tooldef = as_tooldef(tool)
            if name is not None:
                tooldef = attrs.evolve(tooldef, name=name)
            return self._registry.add(tooldef, plugin=plugin)

        return register

    def plugin_config(self, plugin: str) -> dict[str, Any]:
        """A plugin's validated config section, defaults applied ({} for an unknown plugin)."""
        return self._sections.get(plugin, {})

    def register(self, plugin: object, name: str | None = None) -> str:
        """Add a plugin object (a module, class instance, anything with hookimpls) or a tool.

        A plugin is validated (a hookimpl that matches no hook is an error), configured from
        `plugins.<name>` and asked for its tools. A `ToolDef` or an `@tool` function is added as
        a tool of the host. Returns the plugin's (or tool's) name.
        """
        if isinstance(plugin, ToolDef) or hasattr(plugin, "__nexus_tool__"):
            return self.add_tool(plugin).name
        name = self._pm_register_host(plugin, name)
        try:
            self._start_plugins([name], strict=True)
        except BaseException:
            self._pm.unregister(plugin)
            raise
        return name

    def unregister(self, name: str) -> None:
        """Remove a plugin and the tools it gave."""
        self._registry.remove_plugin(name)
        plugin = self._pm.get_plugin(name)
        if plugin is not None:
            self._pm.unregister(plugin)

    def add_tool(self, tool: Any) -> ToolDef:
        """Register a tool of the host's own (a `ToolDef`, or a function `@tool` describes)."""
        return self._registry.add(tool, plugin=None)

    def remove_tool(self, name: str) -> ToolDef | None:
        return self._registry.remove(name)

    def check_pending(self) -> None:
        """Raise `pluggy.PluginValidationError` if any registered hookimpl matches no hook."""
        self._pm.check_pending()

    @property
    def hook(self) -> pluggy.HookRelay:
        """The hook relay, for plugins that fire or inspect hooks themselves."""
        return self._pm.hook

    @property
    def plugin_manager(self) -> pluggy.PluginManager:
        return self._pm

    @property
    def failures(self) -> list[PluginFailure]:
        """Plugins that were left out because they failed to load, configure or give tools."""
        return list(self._failures)

    def plugins(self) -> list[PluginInfo]:
        """Every plugin known: active ones with their hooks and tools, then inactive, blocked and
        failed ones with the reason."""
        by_plugin: dict[str, list[str]] = {}
        for tool in self._registry.tools():
            by_plugin.setdefault(tool.plugin or "(host)", []).append(tool.name)
        infos = []
        for name, plugin in self._pm.list_name_plugin():
            if plugin is None:
                continue
            hooks = sorted(c.name for c in self._pm.get_hookcallers(plugin) or [])
            dist, version = self._dists.get(name, (None, None))
            infos.append(PluginInfo(name, "active", dist, version, tuple(hooks), tuple(sorted(by_plugin.get(name, ())))))
        infos.extend(self._skipped)
        for f in self._failures:
            dist, version = self._dists.get(f.name, (None, None))
            infos.append(PluginInfo(f.name, "failed", dist, version, error=f"{f.phase}: {f.error}"))
        return sorted(infos, key=lambda i: (i.status != "active", i.name))

    # -- tools ------------------------------------------------------------------------------

    def tools(self) -> list[ToolDef]:
        """The registered tools, sorted by name."""
        return sorted(self._registry.tools(), key=lambda t: t.name)

    def tool(self, name: str) -> ToolDef | None:
        return self._registry.get(name)

    @property
    def tools_version(self) -> int:
        """Goes up whenever a tool is added or removed; caches built from `tools()` key on it."""
        return self._registry.version

    def invoke(
        self,
        call: ToolCall | str,
        arguments: Mapping[str, Any] | None = None,
        *,
        parent_call_id: str | None = None,
        context: Mapping[str, Any] | None = None,
        answer: Any = None,
    ) -> ToolResult:
        """Run a tool through the gates. Never raises for a tool's failure: unknown tools,
        vetoes, invalid arguments and handler exceptions all come back as error results.

        `invoke("name", {...})` or `invoke(ToolCall(...))`. `context` is data handed to tools
        that take a context; `answer` is a host-supplied answer (to a pending question).
        """
        if isinstance(call, str):
            call = ToolCall(name=call, arguments=dict(arguments or {}), parent_call_id=parent_call_id)
        elif not isinstance(call, ToolCall):
            raise TypeError(f"invoke() takes a tool name or a ToolCall, not {type(call).__name__}")
        if self._closed:
            from ._results import error_result

            return error_result(call, "this Nexus is closed", "cancelled")
        return self._invoker.invoke_call(call, context=context, answer=answer)

    def schemas(self, format: str = "openai") -> Any:
        """The tools in an LLM provider's format: "openai", "anthropic", "gemini" or "mcp"."""
        from .adapters import to_provider_schemas

        return to_provider_schemas(self.tools(), format)

    # -- plugin data and lifecycle ----------------------------------------------------------

    def plugin_state(self, plugin: str, factory: Any = dict) -> Any:
        """A per-Nexus place for a plugin's state (so one plugin module can serve many Nexus)."""
        with self._lock:
            if plugin not in self._data:
                self._data[plugin] = factory()
            return self._data[plugin]

    def close(self) -> None:
        """Shut every plugin down (each one's error is logged; the others still run)."""
        if self._closed:
            return
        self._closed = True
        for name in self._plugin_names():
            try:
                call_for_plugin(self._pm, "nexus_shutdown", name, nexus=self)
            except Exception:
                log.exception("plugin %s raised in nexus_shutdown", name)

    def __enter__(self) -> Nexus:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<Nexus {len(self._registry.tools())} tools, {len(self._plugin_names())} plugins>"
