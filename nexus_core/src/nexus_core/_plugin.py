"""The one shape of a Nexus plugin: a class (the entry point names it; each Nexus makes its own
instance) whose settings are an attrs class, from which its config schema is derived.

    @attrs.frozen
    class GreetSettings:
        greeting: str = setting("Hello", description="How to greet.")
        times: int = setting(1, minimum=1)

    class Greet(Plugin[GreetSettings]):
        NEXUS_PLUGIN_ID = "acme.tool.greet"

        @hookimpl
        def nexus_register_tools(self, register):
            register(self.greet_tool())

Defaults are written once, in the settings class: the JSON Schema of the plugin's config section
(`nexus_config_schema`) is derived from it (`settings_schema`, by the same type-hint engine as
`@tool`), the section is checked against that schema (a wrong key or type is a `ConfigError`
naming its file and line) and then structured into the class by the core's cattrs converter
(`read_settings`). A check across settings raises `SettingError(key, message)` from the class's
`__attrs_post_init__`: Nexus reports it as `plugins.<id>.<key>: message`, with the file and line,
among the config's other problems (exit 2), not as a broken plugin. Every plugin of this shape
gets its settings the same way, as `self.settings`, before `nexus_register_tools`.
"""

from __future__ import annotations

import sys
import typing
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

import attrs

from ._config import ConfigError
from ._markers import hookimpl
from ._schema import format_path
from ._typeschema import resolve_attrs_types, schema_for_type

if TYPE_CHECKING:
    from ._nexus import Nexus

SettingsT = TypeVar("SettingsT")


class SettingError(ConfigError, ValueError):
    """A setting that is wrong in a way its schema cannot say (one setting against another, a
    variable it names that is not set, a list entry that does not parse): `key` is its path in
    the plugin's section ("max_size", ("limits", "max"), or ("allow_hosts", 2) for a list's
    third entry). Raised from a settings class (or a plugin's `configure`), Nexus reports it as
    `plugins.<id>.<key>: <message>` with the config file's line. It is a ValueError too, for
    code that builds a settings class by hand."""

    def __init__(self, key: str | Sequence[str | int], message: str) -> None:
        self.key: tuple[str | int, ...] = (key,) if isinstance(key, str) else tuple(key)
        self.message = message
        super().__init__([f"{format_path(self.key) or '(the section)'}: {message}"])

    def problem_in(self, plugin_id: str) -> tuple[tuple[str, ...], str]:
        """(the key's path in the whole config, the problem's text) for the plugin `plugin_id`."""
        path = ("plugins", plugin_id, *map(str, self.key))
        return path, f"{format_path(self.key, f'plugins.{plugin_id}')}: {self.message}"


def setting(default: Any = attrs.NOTHING, *, factory: Callable[[], Any] | None = None, description: str = "",
            **schema: Any) -> Any:
    """A field of a settings class: its default (or `factory` for a mutable one, whose value the
    schema shows as the default too), what it is for (`description`, shown in the schema), and
    JSON Schema keywords the type cannot say (`minimum=1`, `pattern="^[a-z]+$"`, `enum=[...]`),
    checked with the config's other rules."""
    metadata: dict[str, Any] = {}
    if description:
        metadata["description"] = description
    if schema:
        metadata["schema"] = schema
    if factory is not None:
        metadata["default_from_factory"] = True
        return attrs.field(factory=factory, metadata=metadata)
    return attrs.field(default=default, metadata=metadata)


def settings_schema(cls: type, localns: dict[str, Any] | None = None) -> dict[str, Any]:
    """The JSON Schema of a config section, from an attrs settings class: a property per field
    (its type, its default when JSON can write it, its `setting(...)` description and keywords),
    required where there is no default, no other key. `localns` resolves the names of a class
    defined inside a function."""
    if not (isinstance(cls, type) and attrs.has(cls)):
        raise TypeError(f"a plugin's settings are an attrs class, not {cls!r}")
    if localns is not None:
        resolve_attrs_types(cls, localns)  # so the converter can build the class too
    return schema_for_type(cls, localns=localns)


def read_settings(cls: type[SettingsT], section: dict[str, Any]) -> SettingsT:
    """A checked config section (defaults applied) as an instance of the settings class. A
    `SettingError` the class raises passes through; any other refusal of the class's own
    validators becomes a `SettingError` of the whole section."""
    from ._converter import STRUCTURE_ERRORS, converter, explain_structure_error

    try:
        return converter.structure(section, cls)
    except STRUCTURE_ERRORS as exc:
        found = _setting_error(exc)
        if found is not None:
            raise found from None
        raise SettingError((), explain_structure_error(exc, cls, cls.__name__)) from None


def _setting_error(exc: BaseException, path: tuple[str | int, ...] = ()) -> SettingError | None:
    """The first SettingError in cattrs's tree of structuring errors, its key made a path from
    the section: one raised by a nested settings class (a server of a `servers` map) names
    `("servers", "docs", "headers")`, not its own `"headers"`. cattrs notes on each inner error
    the attribute, list index or mapping key it was structuring."""
    if isinstance(exc, SettingError):
        return SettingError((*path, *exc.key), exc.message) if path else exc
    for inner in getattr(exc, "exceptions", ()):
        found = _setting_error(inner, (*path, *_where(inner)))
        if found is not None:
            return found
    return None


def _where(exc: BaseException) -> tuple[str | int, ...]:
    """The key an inner structuring error belongs to, from its cattrs note (empty when none)."""
    from cattrs.errors import AttributeValidationNote, IterableValidationNote

    for note in getattr(exc, "__notes__", ()):
        if isinstance(note, AttributeValidationNote):
            return (note.name,)
        if isinstance(note, IterableValidationNote):
            return (note.index,)
    return ()


class Plugin(Generic[SettingsT]):
    """A base for a plugin class: `class Greet(Plugin[GreetSettings])` with an attrs settings
    class, or `class Greet(Plugin[None])` for a plugin that takes no settings. It implements
    `nexus_config_schema` (the schema derived from the settings class) and `nexus_configure`
    (`self.settings`, then `configure()`); the subclass sets `NEXUS_PLUGIN_ID` and implements the
    hooks it needs (`nexus_register_tools`, gates, observers). `self.nexus` is the Nexus that
    made the instance."""

    NEXUS_PLUGIN_ID: ClassVar[str]
    #: the settings class, found in `Plugin[...]`'s parameter (None: the plugin takes no settings)
    settings_class: ClassVar[type | None] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for base in getattr(cls, "__orig_bases__", ()):
            if typing.get_origin(base) is Plugin:
                (declared,) = typing.get_args(base)
                if isinstance(declared, TypeVar) or declared is Any:
                    continue  # a generic subclass (SDKProvider): its own subclasses name the class
                if declared is None or declared is type(None):  # Plugin[None]: takes no settings
                    cls.settings_class = None
                    continue
                # an attrs class (or a TypeError here, at import), its hints resolved where it
                # was written, which may be a function's scope
                defining = sys._getframe(1)
                settings_schema(declared, {**defining.f_globals, **defining.f_locals})
                cls.settings_class = declared

    def __init__(self, nexus: Nexus) -> None:
        self.nexus = nexus
        # the defaults until the config is read (when the class has a default for every setting)
        self.settings: SettingsT = self._defaults()

    def _defaults(self) -> Any:
        if self.settings_class is None:
            return None
        try:
            return self.settings_class()
        except (TypeError, ConfigError):
            return None  # a setting without a default: known once nexus_configure has run

    def configure(self) -> None:
        """Called once `self.settings` holds this Nexus's settings, before any tool is
        registered: prepare what the settings decide. Raise `SettingError` for a bad setting."""

    @hookimpl
    def nexus_config_schema(self) -> dict[str, Any] | None:
        return settings_schema(self.settings_class) if self.settings_class is not None else None

    @hookimpl
    def nexus_configure(self, config: dict[str, Any]) -> None:
        if self.settings_class is not None:
            self.settings = read_settings(self.settings_class, config)
        self.configure()
