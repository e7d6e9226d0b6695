"""`Nexus`: a configured set of plugins, their tools, and the one way to call them."""

from __future__ import annotations

import difflib
import functools
import logging
import os
import threading
import traceback
from collections.abc import Callable, Collection, Iterable, Mapping
from pathlib import Path
from typing import Any

import attrs
import pluggy

from ._cancel import CancelToken
from ._config import ConfigError, InvalidPluginSchema, NexusConfig, load_config
from ._durability import Durability
from ._invoke import Invoker
from ._llm import ModelCall, ModelRequest, ModelResponse, ProviderRegistry, complete
from ._models import Answer, ErrorKind, Question, ToolCall, ToolDef, ToolResult
from ._hookcalls import ContainedRelay
from ._plugin import SettingError
from ._plugins import (
    Phase,
    PluginFailure,
    PluginInfo,
    call_for_plugin,
    describe_exception,
    installed_entry_points,
    instantiate,
    load_entry_point,
    new_plugin_manager,
    plugin_id_of,
    register_checked,
    select_entry_points,
)
from ._registry import ToolRegistry, as_tooldef
from ._results import error_result

log = logging.getLogger("nexus_core")

ConfigSource = str | os.PathLike[str] | dict[str, Any] | None

#: The person's side of a front end: called with a `Question` (an approval a gate asked for, or
#: the `question` tool), it returns True / False / `Veto(reason)` for an approval, the answer's
#: text or None for a question, or an `Answer`. It may be called from several threads at once.
Approver = Callable[[Question], Any]


def _did_you_mean(name: str, candidates: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, sorted(candidates), n=1, cutoff=0.8)
    return f" (did you mean {close[0]!r}?)" if close else ""


class Nexus:
    """Plugins, tools and the gated invocation path, configured once.

    `Nexus()` loads every installed plugin with default settings; `Nexus.from_config(...)` reads
    a YAML file or a dict. `plugins=` adds plugin objects of your own (gates, observers, tools);
    `tools=` adds tools directly. `approver=` answers for the person when a gate asks
    (`Ask`) or the `question` tool asks; without one, such calls are refused. Use it as a
    context manager, or call `close()`.
    """

    def __init__(
        self,
        config: ConfigSource | NexusConfig = None,
        *,
        plugins: Iterable[object] = (),
        tools: Iterable[Any] = (),
        workspace: str | os.PathLike[str] | None = None,
        autoload: bool = True,
        approver: Approver | None = None,
    ) -> None:
        self.config = config if isinstance(config, NexusConfig) else load_config(config)
        if workspace is not None:
            self.config.workspace = Path(workspace).resolve()
        self._pm, hookspec_failures = new_plugin_manager()
        self._relay = ContainedRelay(self._pm)
        self._registry = ToolRegistry(on_register=self._announce, on_unregister=self._announce_removal,
                                      prepare=self._apply_tool_settings)
        self._providers = ProviderRegistry(
            left_out=lambda: {i.name: i.status for i in self.plugins() if i.status != "active"})
        #: who answers when a gate asks or the question tool asks, unless an invoke names its own
        self.approver: Approver | None = approver
        #: the durable backend (a plugin sets it: `set_durability`), or None: approvals are put to
        #: the approver in the asking thread and handlers run in place
        self.durability: Durability | None = None
        self._invoker = Invoker(self, self._pm, self._registry)
        self._failures: list[PluginFailure] = []
        self._skipped: list[PluginInfo] = []
        self._dists: dict[str, tuple[str | None, str | None]] = {}
        self._closed = False
        self._lock = threading.Lock()
        self._skills: Any = None
        self._sections: dict[str, dict[str, Any]] = {}
        #: plugins whose nexus_configure was called, in order: the ones nexus_shutdown is owed to
        self._started: list[str] = []
        for failure in hookspec_failures:
            self._report(failure)

        installed = self._load_installed() if autoload else {ep.name for ep in installed_entry_points()}
        host = [self._pm_register_host(plugin) for plugin in plugins]
        self._check_plugin_names(installed)
        try:
            self._start_plugins(self._plugin_names(), strict=set(host))
            for obj in tools:
                self.add_tool(obj)
            if self.durability is not None:
                self.durability.started()
        except BaseException:
            self.close()  # what started must stop, or a plugin's processes outlive a failed start
            raise

    @classmethod
    def from_config(cls, source: ConfigSource = None, **kwargs: Any) -> Nexus:
        """A Nexus from a YAML file path, a dict, or None (defaults). Raises ConfigError."""
        return cls(source, **kwargs)

    # -- plugins ----------------------------------------------------------------------------

    def _plugin_names(self) -> list[str]:
        return [name for name, plugin in self._pm.list_name_plugin() if plugin is not None]

    def _load_installed(self) -> set[str]:
        """Load the chosen entry points (each failure recorded); returns every installed id."""
        chosen, skipped = select_entry_points(self.config.active, self.config.blocked)
        self._skipped = skipped
        for ep in chosen:
            self._dists[ep.name] = (ep.dist.name, ep.dist.version) if ep.dist else (None, None)
            failure = load_entry_point(self._pm, ep, self)
            if failure is not None:
                self._report(failure)
        return {ep.name for ep in chosen} | {s.name for s in skipped}

    def _check_plugin_names(self, installed: set[str]) -> None:
        """`plugins.active` may name only installed plugins, and a `plugins.<id>` section only an
        installed plugin or one the host passed in `plugins=`: anything else is a typo, or a
        package that is missing, and silently ignoring it would hide that."""
        known = installed | set(self._plugin_names())
        problems = []
        for i, name in enumerate(self.config.active or []):
            if name not in known:
                problems.append(self.config.problem(
                    ("plugins", "active", str(i)),
                    f"plugins.active[{i}]: no installed plugin is called {name!r}{_did_you_mean(name, installed)}",
                ))
        passed_in = sorted(set(self._plugin_names()) - installed)
        for name in self.config.plugin_sections:
            if name not in known:
                hint = _did_you_mean(name, known)
                if passed_in and not hint:
                    # the guide's pattern: a plugin module handed in by a test or a host
                    hint = (f"; the plugins passed in go by {', '.join(map(repr, passed_in))}: a plugin "
                            "object takes its id from its NEXUS_PLUGIN_ID attribute, else from the "
                            "installed entry point that names it, else from its module or class name")
                problems.append(self.config.problem(
                    ("plugins", name), f"plugins.{name}: no installed plugin is called {name!r}{hint}",
                ))
        if problems:
            raise ConfigError(problems, self.config.source)

    def _report(self, failure: PluginFailure) -> None:
        self._failures.append(failure)
        log.warning("plugin %r failed (%s): %s", failure.name, failure.phase, failure.error)

    def _drop(self, name: str, phase: Phase, exc: BaseException) -> None:
        self._report(PluginFailure(name, phase, describe_exception(exc), traceback.format_exc()))
        self._stop(name)

    def _stop(self, name: str) -> None:
        """Remove a plugin's tools, shut it down if it was started, and unregister it."""
        self._registry.remove_plugin(name)
        self._providers.remove_plugin(name)
        if name in self._started:
            self._started.remove(name)
            self._shutdown(name)
        plugin = self._pm.get_plugin(name)
        if plugin is not None:
            self._pm.unregister(plugin)

    def _shutdown(self, name: str) -> None:
        try:
            call_for_plugin(self._pm, "nexus_shutdown", name, nexus=self)
        except Exception:
            log.exception("plugin %r raised in nexus_shutdown", name)

    def _pm_register_host(self, plugin: object, name: str | None = None) -> str:
        """Register a plugin the host passed in (a class or factory is called first, once, for
        this Nexus); returns the name it goes by."""
        if name is None:
            base = plugin_id_of(plugin)
            name, n = base, 1
            while self._pm.has_plugin(name):
                n += 1
                name = f"{base}#{n}"
        register_checked(self._pm, instantiate(plugin, self), name)
        return name

    def _start_plugins(self, names: list[str], strict: Collection[str] = frozenset()) -> None:
        """Configure, then collect tools from, each named plugin.

        Config problems of all plugins are gathered into one ConfigError. A plugin that raises
        (or declares an unusable config schema) is dropped and reported, the others keep
        working; a plugin in `strict` (one the host passed in by hand) raises instead.
        """
        problems: list[str] = []
        sections: dict[str, dict[str, Any]] = {}
        for name in names:
            try:
                schemas = call_for_plugin(self._pm, "nexus_config_schema", name)
                sections[name] = self.config.validate_plugin_section(name, schemas[0] if schemas else None)
            except ConfigError as exc:
                problems.extend(exc.problems)
            except Exception as exc:
                if name in strict:
                    message = str(exc) if isinstance(exc, InvalidPluginSchema) else (
                        f"plugin {name!r} raised in nexus_config_schema: {describe_exception(exc)}")
                    raise pluggy.PluginValidationError(self._pm.get_plugin(name), message) from exc
                self._drop(name, "config", exc)
        if problems:
            raise ConfigError(problems, self.config.source)
        self._sections.update(sections)
        for name in names:
            if name not in sections or self._pm.get_plugin(name) is None:
                continue
            self._started.append(name)
            for phase, hook, kwargs in (
                ("configure", "nexus_configure", {"config": sections[name], "nexus": self}),
                ("register_tools", "nexus_register_tools", {"register": self._register_for(name), "nexus": self}),
                ("register_providers", "nexus_register_providers",
                 {"register": functools.partial(self._providers.add, plugin=name), "nexus": self}),
            ):
                try:
                    call_for_plugin(self._pm, hook, name, **kwargs)
                except ConfigError as exc:
                    # the user's config is wrong (a setting only the plugin could check, such as
                    # a ${VAR} that is not set): a config error like any other, not a broken plugin
                    self._stop(name)
                    problems.extend(self._setting_problems(name, exc))
                    break
                except Exception as exc:
                    if name in strict:
                        self._stop(name)
                        raise
                    self._drop(name, phase, exc)  # type: ignore[arg-type]
                    break
        if problems:
            raise ConfigError(problems, self.config.source)

    def _setting_problems(self, plugin: str, exc: ConfigError) -> list[str]:
        """A plugin's ConfigError as the config's problems: a `SettingError` names its key as
        `plugins.<id>.<key>`, with the file and line."""
        if isinstance(exc, SettingError):
            path, text = exc.problem_in(plugin)
            return [self.config.problem(path, text)]
        return list(exc.problems)

    def _register_for(self, plugin: str) -> Callable[..., ToolDef]:
        def register(tool: Any, name: str | None = None) -> ToolDef:
            tooldef = as_tooldef(tool)
            if name is not None:
                tooldef = attrs.evolve(tooldef, name=name)
            return self._registry.add(tooldef, plugin=plugin)

        return register

    def _apply_tool_settings(self, tool: ToolDef) -> ToolDef:
        """The config's `tools.<name>.exposure` (under the tool's name or an alias) over the
        tool's own."""
        exposure = self.config.settings_for(tool.names).get("exposure")
        return attrs.evolve(tool, exposure=exposure) if exposure and exposure != tool.exposure else tool

    def _announce(self, tool: ToolDef) -> None:
        self._pm.notify("nexus_tool_register", tool=tool)

    def _announce_removal(self, tool: ToolDef) -> None:
        self._pm.notify("nexus_tool_unregister", tool=tool)

    def notify(self, hook: str, **kwargs: Any) -> None:
        """Tell the observers of `hook` (an observer hook, the core's or a package's) of an event:
        each implementation runs, in pluggy's order, and one that raises is logged, naming its
        plugin, while the others still run. A plugin that fires its own package's hooks calls
        this (run_code does); `nx.hook.<name>(...)` of an observer hook does the same."""
        self._pm.notify(hook, **kwargs)

    def plugin_config(self, plugin: str) -> dict[str, Any]:
        """A plugin's validated config section, defaults applied ({} for an unknown plugin)."""
        return self._sections.get(plugin, {})

    def register(self, plugin: object, name: str | None = None) -> str:
        """Add a plugin (a module or object with hookimpls, or a class or factory that is called
        once to make this Nexus's plugin object) or a tool.

        A plugin is validated (a hookimpl that matches no hook is an error), configured from
        `plugins.<name>` and asked for its tools; any failure raises, and leaves the plugin
        out. Registering the same object twice, or a second plugin under a taken name, is a
        ValueError. A `ToolDef` or an `@tool` function is added as a tool of the host.
        Returns the plugin's (or tool's) name.
        """
        if self._closed:
            raise RuntimeError("this Nexus is closed; register plugins before closing it")
        if isinstance(plugin, ToolDef) or hasattr(plugin, "__nexus_tool__"):
            return self.add_tool(plugin).name
        name = self._pm_register_host(plugin, name)
        try:
            self._start_plugins([name], strict={name})
        except BaseException:
            if self._pm.get_plugin(name) is not None:
                self._stop(name)
            raise
        return name

    def unregister(self, name: str) -> None:
        """Remove a plugin and the tools it gave, shutting it down first (`nexus_shutdown`)."""
        if self._pm.get_plugin(name) is None:
            raise ValueError(f"no plugin named {name!r} is registered")
        self._stop(name)

    def add_tool(self, tool: Any) -> ToolDef:
        """Register a tool of the host's own (a `ToolDef`, or a function `@tool` describes)."""
        return self._registry.add(tool, plugin=None)

    def remove_tool(self, name: str) -> ToolDef | None:
        """Remove a tool (whoever registered it), named by its name or an alias, with all its
        names; returns its definition, or None when there was no such tool.
        `nexus_tool_unregister` observers see it go."""
        return self._registry.remove(name)

    def replace_tool(self, tool: Any, plugin: str | None = None) -> ToolDef:
        """Swap in a new definition of a tool that `plugin` (None: the host) registered, in one
        step: no concurrent call finds it missing in between (run_code refreshes its
        description this way). Raises ToolRegistrationError for a tool it does not own."""
        return self._registry.replace(tool, plugin=plugin)

    def check_pending(self) -> None:
        """Raise `pluggy.PluginValidationError` if any registered hookimpl matches no hook."""
        self._pm.check_pending()

    def plugin(self, name: str) -> Any:
        """The plugin object registered under `name` (for an entry point naming a class: this
        Nexus's instance of it), or None."""
        return self._pm.get_plugin(name)

    @property
    def hook(self) -> ContainedRelay:
        """The hook relay, for plugins that fire or inspect hooks themselves: `nx.hook.<name>`
        is pluggy's hook caller, except that calling an observer hook through it is
        `notify` (each implementation contained). `plugin_manager.hook` is pluggy's own."""
        return self._relay

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
            providers = tuple(p for p, owner in self._providers.names().items() if owner == name)
            infos.append(PluginInfo(name, "active", dist, version, tuple(hooks), tuple(sorted(by_plugin.get(name, ()))),
                                    providers=providers))
        infos.extend(self._skipped)
        for f in self._failures:
            dist, version = self._dists.get(f.name, (None, None))
            infos.append(PluginInfo(f.name, "failed", dist, version, error=f"{f.phase}: {f.error}"))
        return sorted(infos, key=lambda i: (i.status != "active", i.name))

    # -- tools ------------------------------------------------------------------------------

    def tools(self) -> list[ToolDef]:
        """The registered tools, sorted by name: each once, its aliases in `ToolDef.aliases`."""
        return sorted(self._registry.tools(), key=lambda t: t.name)

    def tool(self, name: str) -> ToolDef | None:
        """The tool called `name`, by its own name or an alias (then `tool.name` is the
        canonical name and `name in tool.aliases`), or None."""
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
        approver: Approver | None = None,
        cancel: CancelToken | None = None,
        progress: Callable[[float, float | None, str | None], Any] | None = None,
    ) -> ToolResult:
        """Run a tool through the gates. Never raises for a tool's failure: unknown tools,
        vetoes, invalid arguments and handler exceptions all come back as error results.

        `invoke("name", {...})` or `invoke(ToolCall(...))`. `context` is data handed to tools
        that take a context; `answer` is a host-supplied answer (to a pending question);
        `approver` answers for the person during this call and the calls it makes (a run_code
        script's), in place of the Nexus's `approver`. `cancel` stops the call from another
        thread: cancelled before the handler runs, the call is refused (`error_kind`
        "cancelled"); while it runs, the handler sees it as `ctx.cancel` and stops. The calls
        this call makes inherit both (an inner call given its own keeps that). `progress` is
        called as `progress(done, total, message)` each time the handler reports how far it has
        got (`ctx.progress(...)`), from the handler's thread; calls this call makes do not
        report to it.
        """
        if isinstance(call, str):
            if arguments is not None and not isinstance(arguments, Mapping):
                raise TypeError(f"invoke() arguments must be a mapping (a JSON object), not {type(arguments).__name__}")
            call = ToolCall(name=call, arguments=dict(arguments or {}), parent_call_id=parent_call_id)
        elif isinstance(call, ToolCall):
            if arguments is not None or parent_call_id is not None:
                raise TypeError("invoke(ToolCall(...)) takes no arguments or parent_call_id: the call carries them")
        else:
            raise TypeError(f"invoke() takes a tool name or a ToolCall, not {type(call).__name__}")
        if self._closed:
            return error_result(call, f"cannot call {call.name}: this Nexus is closed", "cancelled")
        return self._invoker.invoke_call(call, context=context, answer=answer, approver=approver, cancel=cancel,
                                         progress=progress)

    def set_durability(self, backend: Durability) -> None:
        """Make `backend` this Nexus's durable backend (see `nexus_core.Durability`): a plugin
        calls it from its `configure`. Raises ValueError when another backend is set already: two
        could each run a recovered call."""
        if not isinstance(backend, Durability):
            raise TypeError(f"a durable backend implements nexus_core.Durability, not {type(backend).__name__}")
        if self.durability is not None and self.durability is not backend:
            raise ValueError(f"this Nexus has a durable backend already ({type(self.durability).__name__}); "
                             "one backend per Nexus")
        self.durability = backend

    def recover(self) -> None:
        """Say that this Nexus is a long-lived host (a chat, a server, a program that runs for
        long): its durable backend takes over the work that hosts killed before left (a call
        whose approval is answered, an interrupted run_code run) and runs it here, in threads of
        its own. Does nothing without a durable backend. A short-lived program does not call it:
        what it took over would be cut when it exits. See docs/durable.md."""
        recover = getattr(self.durability, "recover", None)  # optional in a backend
        if callable(recover):
            recover()

    def ask(self, question: Question, approver: Approver | None = None) -> Answer:
        """Ask the person behind the front end (`approver`, else the Nexus's) and return the
        `Answer`. Announced to `nexus_ask_start` / `nexus_ask_end`. Never raises: with no
        approver, or one that fails, the answer is a refusal (`approved` false, `by` "nobody")."""
        return self._invoker.ask(question, approver)

    def refuse(self, call: ToolCall, error: str, kind: ErrorKind = "failure") -> ToolResult:
        """Answer `call` with an error without running it, as a front end does for a call it
        will not make (run_code: a script's call to a tool it was not given, or past its call
        limit). The result takes the result gates and observers like every other result, so an
        audit sees refusals too."""
        return self._invoker.refuse(call, error, kind)

    # -- models -----------------------------------------------------------------------------

    def complete(self, request: ModelRequest, call: ModelCall | None = None) -> ModelResponse:
        """Send a model request through the request gates to its provider, and show the
        response to the observers. `call` carries streamed text and cancellation (default: no
        streaming). Raises `ModelError`: "vetoed" by a gate, "unknown_provider", "cancelled",
        or "failed" (the provider got no answer)."""
        return complete(self._pm, self._providers, request, call)

    def providers(self) -> dict[str, str | None]:
        """The registered model providers: name -> the plugin that registered it."""
        return self._providers.names()

    def check_model(self, model: str) -> tuple[str, str]:
        """`"openai:gpt-4.1"` -> `("openai", "gpt-4.1")`, once its provider is known to be
        registered here. Raises ValueError for a string that is not provider:model, and
        `ModelError` ("unknown_provider") for a provider that is not here, with the closest one
        (`opnai` -> did you mean 'openai'?) or what to install. A front end calls it before
        it starts, to fail with that message rather than at the first model request."""
        return self._providers.check(model)

    def schemas(self, format: str = "openai", *, code_only: bool = False, **options: Any) -> Any:
        """The tools a model calls directly, in an LLM provider's format: "openai",
        "openai-responses", "anthropic", "gemini" or "mcp"; `options` as
        `nexus_core.adapters.to_provider_schemas` takes them (`strict=True`,
        `allowed_callers=...`, `json_schema=...`).

        Tools whose `exposure` is "code" are left out (a model meets them inside run_code), unless
        the config gives them `allowed_callers` (a provider's own code execution calls them) or
        `code_only=True` asks for every tool. For the formats that have `allowed_callers`, the
        config's `tools.<name>.allowed_callers` is sent unless `allowed_callers=` is given."""
        from .adapters import OPTION_FORMATS, to_provider_schemas

        tools = self.model_tools(code_only=code_only)
        if "allowed_callers" not in options and format in OPTION_FORMATS["allowed_callers"]:
            configured = {t.name: self.config.settings_for(t.names)["allowed_callers"] for t in tools
                          if self.config.settings_for(t.names).get("allowed_callers")}
            if configured:
                options["allowed_callers"] = configured
        return to_provider_schemas(tools, format, **options)

    def model_tools(self, *, code_only: bool = False) -> list[ToolDef]:
        """The tools `schemas()` declares, as ToolDefs: those a model calls directly (an agent
        loop offers these). Tools whose `exposure` is "code" are left out unless the config gives
        them `allowed_callers`, or `code_only=True` asks for every tool."""
        return [t for t in self.tools()
                if code_only or t.exposure != "code" or self.config.settings_for(t.names).get("allowed_callers")]

    # -- plugin data and lifecycle ----------------------------------------------------------

    def _skill_set(self, make: Callable[[], Any]) -> Any:
        """This Nexus's skills (`nexus_core.skills.skill_set`), made on first use."""
        with self._lock:
            if self._skills is None:
                self._skills = make()
            return self._skills

    def close(self) -> None:
        """Shut the started plugins down, last started first (each one's error is logged; the
        others still shut down). A second call does nothing; `invoke` afterwards returns an
        error result, `register` raises."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        while self._started:
            self._shutdown(self._started.pop())

    def __enter__(self) -> Nexus:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<Nexus {len(self._registry.tools())} tools, {len(self._plugin_names())} plugins>"
