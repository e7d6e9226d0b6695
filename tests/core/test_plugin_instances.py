"""A plugin object per Nexus: an entry point naming a class (or a factory taking the Nexus) is
made once for each Nexus, so two Nexus in one process keep their own configuration and state.
Module plugins keep working as before."""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING, Any

import pytest

from nexus_core import ConfigError, Nexus, ToolCall, ToolDef, Veto, hookimpl, native_tool

if TYPE_CHECKING:
    from conftest import FakePlugins

DENY_GATE = """
from nexus_core import Veto, hookimpl, native_tool

made = []

class DenyGate:
    def __init__(self, nexus):
        self.nexus = nexus
        self.deny = []
        made.append(self)

    @hookimpl
    def nexus_config_schema(self):
        return {"type": "object", "properties": {"deny": {"type": "array", "items": {"type": "string"},
                                                          "default": []}}}

    @hookimpl
    def nexus_configure(self, config, nexus):
        assert nexus is self.nexus
        self.deny = config["deny"]

    @hookimpl
    def nexus_register_tools(self, register):
        register(native_tool("say", "say a word", {"type": "object", "properties": {"word": {"type": "string"}}},
                             lambda a: a["word"]))

    @hookimpl
    def nexus_before_tool_invoke(self, call, tool):
        if call.arguments.get("word") in self.deny:
            return Veto(f"{call.arguments['word']!r} is denied here")
        return None
"""


def test_an_entry_point_class_is_made_once_per_nexus_and_each_keeps_its_own_policy(fake_plugins: FakePlugins) -> None:
    module = fake_plugins.add("fake.gate", DENY_GATE, attr="DenyGate")
    strict = {"plugins": {"active": ["fake.gate"], "fake.gate": {"deny": ["rm"]}}}
    loose = {"plugins": {"active": ["fake.gate"], "fake.gate": {"deny": []}}}
    with Nexus(strict) as one, Nexus(loose) as two:
        assert one.invoke("say", {"word": "rm"}).error == "vetoed: 'rm' is denied here"
        assert two.invoke("say", {"word": "rm"}).output == "rm"
        made = __import__(module).made
        assert [gate.nexus for gate in made] == [one, two]
        assert one.plugin("fake.gate") is made[0] and two.plugin("fake.gate") is made[1]
        assert [p.name for p in one.plugins() if p.status == "active"] == ["fake.gate"]


def test_an_entry_point_factory_gets_the_nexus(fake_plugins: FakePlugins) -> None:
    fake_plugins.add("fake.factory", """
        from nexus_core import hookimpl, native_tool

        class Greeter:
            def __init__(self, greeting):
                self.greeting = greeting
            @hookimpl
            def nexus_register_tools(self, register):
                register(native_tool("greet", "greet", {"type": "object"}, lambda a: self.greeting))

        def make(nexus):
            return Greeter(f"hello from {nexus.config.workspace.name}")
    """, attr="make")
    with Nexus({"plugins": {"active": ["fake.factory"]}, "workspace": "/tmp"}) as nx:
        assert nx.invoke("greet").output == "hello from tmp"


def test_a_plugin_class_that_takes_nothing_is_made_without_the_nexus(fake_plugins: FakePlugins) -> None:
    fake_plugins.add("fake.bare", """
        from nexus_core import hookimpl, native_tool

        class Bare:
            count = 0
            def __init__(self):
                Bare.count += 1
                self.n = Bare.count
            @hookimpl
            def nexus_register_tools(self, register):
                register(native_tool("which", "which instance", {"type": "object"}, lambda a: str(self.n)))
    """, attr="Bare")
    with Nexus({"plugins": {"active": ["fake.bare"]}}) as one, Nexus({"plugins": {"active": ["fake.bare"]}}) as two:
        assert (one.invoke("which").output, two.invoke("which").output) == ("1", "2")


def test_a_plugin_that_cannot_be_made_is_reported_and_the_others_still_load(fake_plugins: FakePlugins) -> None:
    fake_plugins.add("fake.raises", """
        class Broken:
            def __init__(self, nexus):
                raise RuntimeError("no licence key")
    """, attr="Broken")
    fake_plugins.add("fake.greedy", """
        def make(nexus, more, arguments):
            return object()
    """, attr="make")
    fake_plugins.add("fake.none", "def make(nexus):\n    return None\n", attr="make")
    fake_plugins.add("fake.ok", """
        from nexus_core import hookimpl, native_tool
        @hookimpl
        def nexus_register_tools(register):
            register(native_tool("ok", "ok", {"type": "object"}, lambda a: "ok"))
    """)
    active = {"plugins": {"active": ["fake.raises", "fake.greedy", "fake.none", "fake.ok"]}}
    with Nexus(active) as nx:
        failures = {f.name: f for f in nx.failures}
        assert set(failures) == {"fake.raises", "fake.greedy", "fake.none"}
        assert all(f.phase == "create" for f in failures.values())
        assert failures["fake.raises"].error == "RuntimeError: no licence key"
        assert "make(nexus, more, arguments)" in failures["fake.greedy"].error
        assert "returned None" in failures["fake.none"].error
        assert nx.invoke("ok").output == "ok"
        statuses = {p.name: p.status for p in nx.plugins()}
        assert statuses["fake.raises"] == "failed" and statuses["fake.ok"] == "active"


def test_a_class_the_host_passes_is_made_for_each_nexus() -> None:
    class Audit:
        NEXUS_PLUGIN_ID = "audit"

        def __init__(self, nexus: Nexus) -> None:
            self.nexus = nexus
            self.seen: list[str] = []

        @hookimpl
        def nexus_tool_result(self, call: ToolCall) -> None:
            self.seen.append(call.name)

    tool = native_tool("t", "t", {"type": "object"}, lambda a: "t")
    with Nexus(autoload=False, plugins=[Audit], tools=[tool]) as one, Nexus(autoload=False, tools=[tool]) as two:
        assert two.register(Audit) == "audit"
        one.invoke("t")
        one.invoke("t")
        two.invoke("t")
        assert one.plugin("audit").seen == ["t", "t"] and two.plugin("audit").seen == ["t"]
        assert one.plugin("audit").nexus is one and two.plugin("audit").nexus is two


def test_module_plugins_still_work_and_an_object_is_registered_as_it_is() -> None:
    module = ModuleType("my_gate_module")

    @hookimpl
    def nexus_before_tool_invoke(call: ToolCall, tool: ToolDef) -> Veto | None:
        return Veto("module gate")

    module.nexus_before_tool_invoke = nexus_before_tool_invoke  # type: ignore[attr-defined]
    tool = native_tool("t", "t", {"type": "object"}, lambda a: "t")
    with Nexus(autoload=False, plugins=[module], tools=[tool]) as nx:
        assert nx.invoke("t").error == "vetoed: module gate"
        assert nx.plugin("my_gate_module") is module


def test_a_module_handed_in_takes_the_id_of_the_entry_point_that_names_it(fake_plugins: FakePlugins) -> None:
    """The guide's pattern: `nexus_factory(plugins=[my_plugin_module], config={"plugins": {id: ...}})`."""
    name = fake_plugins.add("fake.words", """
        from nexus_core import hookimpl, native_tool
        settings = {}
        @hookimpl
        def nexus_config_schema():
            return {"type": "object", "properties": {"word": {"type": "string", "default": "hi"}}}
        @hookimpl
        def nexus_register_tools(register, nexus):
            word = nexus.plugin_config("fake.words")["word"]
            register(native_tool("word", "a word", {"type": "object"}, lambda a: word))
    """)
    module = __import__(name)
    config = {"plugins": {"active": [], "fake.words": {"word": "configured"}}}
    with Nexus(config, plugins=[module]) as nx:
        assert nx.invoke("word").output == "configured"
        assert nx.plugin("fake.words") is module


def test_configuring_a_handed_in_plugin_under_an_id_it_does_not_have_says_how(fake_plugins: FakePlugins) -> None:
    module = ModuleType("loose_module")
    with pytest.raises(ConfigError) as info:
        Nexus({"plugins": {"active": [], "acme.policy": {"x": 1}}}, plugins=[module])
    message = str(info.value)
    assert "plugins.acme.policy: no installed plugin is called 'acme.policy'" in message
    assert "'loose_module'" in message and "NEXUS_PLUGIN_ID" in message


def test_a_plugin_class_without_a_usable_constructor_fails_registration_by_the_host() -> None:
    class NeedsMore:
        def __init__(self, a: Any, b: Any) -> None:
            pass

    with Nexus(autoload=False) as nx, pytest.raises(TypeError, match=r"cannot make a plugin from .*NeedsMore\(a, b\)"):
        nx.register(NeedsMore)


def test_a_config_error_a_plugin_raises_while_configuring_is_a_config_error(fake_plugins: FakePlugins) -> None:
    fake_plugins.add("fake.env", """
        from nexus_core import ConfigError, hookimpl

        class NeedsToken:
            @hookimpl
            def nexus_config_schema(self):
                return {"type": "object", "properties": {"token_env": {"type": "string"}}}

            @hookimpl
            def nexus_configure(self, config):
                raise ConfigError([f"plugins.fake.env.token_env: ${{{config['token_env']}}} is not set"])
    """, attr="NeedsToken")
    fake_plugins.add("fake.fine", "", attr=None)
    with pytest.raises(ConfigError) as info:
        Nexus({"plugins": {"active": ["fake.env", "fake.fine"], "fake.env": {"token_env": "NOPE_TOKEN"}}})
    assert info.value.problems == ["plugins.fake.env.token_env: ${NOPE_TOKEN} is not set"]
