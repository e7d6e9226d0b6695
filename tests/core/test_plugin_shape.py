"""The one plugin shape (`nexus_core.plugins.Plugin`): a class with an attrs settings class from
which the config schema is derived, its settings read the same way for every plugin, and a bad
setting a config error naming its key, file and line (exit 2), not a broken plugin."""

from __future__ import annotations

import enum
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Literal

import attrs
import pytest
from nexus_core.plugins import Plugin, SettingError, setting, settings_schema

from nexus_core import ConfigError, Nexus, hookimpl, tool


class Mode(enum.Enum):
    FAST = "fast"
    SAFE = "safe"


@attrs.frozen
class Limits:
    low: int = 1
    high: int = 10


@attrs.frozen
class ShopSettings:
    currency: Literal["CHF", "EUR"] = setting("CHF", description="What prices are in.")
    mode: Mode = Mode.SAFE
    discount: float = setting(0.0, minimum=0, maximum=1)
    tags: tuple[str, ...] = setting(factory=tuple)
    catalogue: Path = Path("catalogue.json")
    limits: Limits = setting(factory=Limits)

    def __attrs_post_init__(self) -> None:
        if self.limits.high < self.limits.low:
            raise SettingError(("limits", "high"), f"must be at least limits.low ({self.limits.low})")


class Shop(Plugin[ShopSettings]):
    NEXUS_PLUGIN_ID = "acme.shop"

    def __init__(self, nexus: Nexus) -> None:
        super().__init__(nexus)
        self.seen_at_register: Any = None
        self.configured = 0

    def configure(self) -> None:
        self.configured += 1

    @hookimpl
    def nexus_register_tools(self, register: Any) -> None:
        self.seen_at_register = self.settings

        @tool
        def price(amount: float) -> str:
            """A price in the shop's currency."""
            return f"{amount * (1 - self.settings.discount):.2f} {self.settings.currency}"

        register(price)


def make(section: dict[str, Any] | None = None, source: Any = None) -> Nexus:
    config = source if source is not None else {"plugins": {"acme.shop": section or {}}}
    return Nexus.from_config(config, autoload=False, plugins=[Shop])


def test_the_schema_comes_from_the_settings_class_defaults_written_once() -> None:
    schema = settings_schema(ShopSettings)
    props = schema["properties"]
    assert schema["additionalProperties"] is False and "required" not in schema
    assert props["currency"] == {"enum": ["CHF", "EUR"], "type": "string", "description": "What prices are in.",
                                 "default": "CHF"}
    assert props["mode"] == {"enum": ["fast", "safe"], "type": "string", "default": "safe"}
    assert props["discount"] == {"type": "number", "minimum": 0, "maximum": 1, "default": 0.0}
    assert props["catalogue"] == {"type": "string", "default": "catalogue.json"}
    assert props["limits"]["properties"]["high"] == {"type": "integer", "default": 10}
    with Nexus(autoload=False, plugins=[Shop]) as nx:
        assert nx.plugin("acme.shop").nexus_config_schema() == schema


def test_the_settings_arrive_typed_before_the_tools_are_registered() -> None:
    with make({"currency": "EUR", "mode": "fast", "discount": 0.5, "tags": ["a"], "catalogue": "c.json",
               "limits": {"high": 3}}) as nx:
        shop = nx.plugin("acme.shop")
        assert shop.seen_at_register == ShopSettings("EUR", Mode.FAST, 0.5, ("a",), Path("c.json"), Limits(1, 3))
        assert shop.configured == 1
        assert nx.invoke("price", {"amount": 10}).output == "5.00 EUR"
    with make() as nx:  # nothing configured: the class's defaults
        assert nx.plugin("acme.shop").settings == ShopSettings()


def test_a_wrong_setting_is_a_config_error_naming_its_key() -> None:
    with pytest.raises(ConfigError) as info:
        make({"currency": "USD", "discount": 2, "colour": "red"})
    problems = "\n".join(info.value.problems)
    assert "plugins.acme.shop.currency: expected one of 'CHF', 'EUR'" in problems
    assert "plugins.acme.shop.discount: expected a number <= 1, got 2" in problems
    assert "plugins.acme.shop.colour: unknown key" in problems


def test_a_check_across_settings_is_a_config_error_with_the_file_and_line(tmp_path: Path) -> None:
    config = tmp_path / "nexus.yaml"
    config.write_text("plugins:\n  acme.shop:\n    limits:\n      low: 5\n      high: 2\n", encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        make(source=config)
    assert info.value.problems == [f"{config}:5: plugins.acme.shop.limits.high: must be at least limits.low (5)"]


def test_an_installed_plugin_with_a_bad_setting_stops_the_nexus_it_is_not_dropped(fake_plugins: Any) -> None:
    fake_plugins.add("fake.shop", """
        import attrs
        from nexus_core.plugins import Plugin, SettingError, setting

        @attrs.frozen
        class Settings:
            size: int = setting(1)

            def __attrs_post_init__(self):
                if self.size % 2:
                    raise SettingError("size", "must be even")

        class Sized(Plugin[Settings]):
            pass
    """, attr="Sized")
    with pytest.raises(ConfigError, match=r"plugins\.fake\.shop\.size: must be even"):
        Nexus({"plugins": {"active": ["fake.shop"], "fake.shop": {"size": 3}}})
    with Nexus({"plugins": {"active": ["fake.shop"], "fake.shop": {"size": 4}}}) as nx:
        assert nx.failures == [] and nx.plugin("fake.shop").settings.size == 4


@pytest.mark.parametrize("bare", [True, False], ids=["Plugin", "Plugin[None]"])
def test_a_plugin_without_settings_takes_none(bare: bool) -> None:
    class Plain(Plugin if bare else Plugin[None]):  # type: ignore[misc,type-arg]
        NEXUS_PLUGIN_ID = "acme.plain"

    with pytest.raises(ConfigError, match=r"plugins\.acme\.plain\.x: unknown key \(plugin acme\.plain takes no settings\)"):
        Nexus.from_config({"plugins": {"acme.plain": {"x": 1}}}, autoload=False, plugins=[Plain])
    with Nexus(autoload=False, plugins=[Plain]) as nx:
        assert nx.plugin("acme.plain").settings is None


def test_settings_must_be_an_attrs_class() -> None:
    with pytest.raises(TypeError, match="settings are an attrs class"):
        class Wrong(Plugin[dict]):  # type: ignore[type-arg]
            pass


def test_every_first_party_plugin_of_the_core_and_the_examples_has_the_one_shape() -> None:
    """The core's built-ins are Plugin classes named by their entry points; so are the examples."""
    core = {ep.name: ep for ep in entry_points(group="nexus.plugins") if ep.value.startswith("nexus_core.")}
    assert set(core) == {"nexus.skills", "nexus.tool.todo", "nexus.tool.question"}
    for ep in core.values():
        loaded = ep.load()
        assert isinstance(loaded, type) and issubclass(loaded, Plugin), ep
    import sys

    examples = Path(__file__).resolve().parents[2] / "examples"
    for package, name in (("nexus-rt-example-units", "UnitsPlugin"), ("nexus-rt-example-gate", "DenyGate")):
        sys.path.insert(0, str(examples / package / "src"))
        try:
            module = __import__(package.replace("nexus-rt-example-", "nexus_example_"))
        finally:
            sys.path.pop(0)
        assert issubclass(getattr(module, name), Plugin)
