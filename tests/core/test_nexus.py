"""`Nexus` itself: building one, registering plugins and tools, and its lifecycle."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from nexus_core import Nexus, ToolDef, ToolRegistrationError, hookimpl, native_tool, tool


def echo(name: str = "echo") -> ToolDef:
    return native_tool(name, "Echo.", {"type": "object"}, lambda a: a)


class Lifecycle:
    """Records its lifecycle hooks into a shared journal, under its own label."""

    def __init__(self, label: str, journal: list[str], fail_in: str = "") -> None:
        self.label, self.journal, self.fail_in = label, journal, fail_in
        self.NEXUS_PLUGIN_ID = label

    def _note(self, what: str) -> None:
        self.journal.append(f"{what} {self.label}")
        if self.fail_in == what:
            raise RuntimeError(f"{self.label} fails in {what}")

    @hookimpl
    def nexus_configure(self, config: dict[str, Any], nexus: Nexus) -> None:
        self._note("configure")

    @hookimpl
    def nexus_register_tools(self, register: Any) -> None:
        register(echo(f"{self.label}_tool"))
        self._note("register_tools")

    @hookimpl
    def nexus_shutdown(self, nexus: Nexus) -> None:
        self._note("shutdown")


def test_from_config_takes_a_path_a_dict_or_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "nexus.yaml").write_text("workspace: ws\nplugins:\n  active: []\n", encoding="utf-8")
    for source in (tmp_path / "nexus.yaml", str(tmp_path / "nexus.yaml")):
        with Nexus.from_config(source) as nx:
            assert nx.config.workspace == tmp_path / "ws" and nx.config.source == str(source)
    with Nexus.from_config({"workspace": "other", "plugins": {"active": []}}) as nx:
        assert nx.config.workspace == tmp_path / "other"
    with Nexus.from_config(autoload=False) as nx:
        assert nx.config.workspace == tmp_path
    with Nexus({"plugins": {"active": []}}, workspace=tmp_path / "override") as nx:
        assert nx.config.workspace == tmp_path / "override"


def test_tools_are_sorted_and_looked_up_by_name() -> None:
    with Nexus(autoload=False, tools=[echo("b"), echo("a")]) as nx:
        assert [t.name for t in nx.tools()] == ["a", "b"]
        assert nx.tool("a") is not None and nx.tool("a").plugin is None  # type: ignore[union-attr]
        assert nx.tool("zzz") is None
        before = nx.tools_version
        nx.add_tool(echo("c"))
        assert nx.tools_version > before
        assert nx.remove_tool("c") is not None and nx.tool("c") is None
        assert nx.remove_tool("c") is None
        assert repr(nx) == "<Nexus 2 tools, 0 plugins>"


def test_register_takes_a_plugin_or_a_tool() -> None:
    @tool
    def shout(text: str) -> str:
        """Uppercase the text."""
        return text.upper()

    journal: list[str] = []
    with Nexus(autoload=False) as nx:
        assert nx.register(shout) == "shout"
        assert nx.register(echo("plain")) == "plain"
        assert nx.register(Lifecycle("life", journal)) == "life"
        assert journal == ["configure life", "register_tools life"]
        assert nx.invoke("shout", {"text": "hi"}).output == "HI"
        assert {t.name: t.plugin for t in nx.tools()} == {"shout": None, "plain": None, "life_tool": "life"}


def test_registering_one_plugin_twice_is_an_error_naming_its_name() -> None:
    plugin = Lifecycle("once", [])
    with Nexus(autoload=False) as nx:
        nx.register(plugin)
        with pytest.raises(ValueError, match=r"is already registered, as 'once'"):
            nx.register(plugin)
        with pytest.raises(ValueError, match=r"a plugin named 'once' is already registered"):
            nx.register(Lifecycle("other", []), name="once")
        assert [t.name for t in nx.tools()] == ["once_tool"]


def test_two_instances_of_one_class_get_distinct_names() -> None:
    class Gate:
        @hookimpl
        def nexus_before_tool_invoke(self, call: Any) -> None:
            return None

    with Nexus(autoload=False, plugins=[Gate(), Gate()]) as nx:
        assert nx.register(Gate()) == "Gate#3"
        assert sorted(p.name for p in nx.plugins()) == ["Gate", "Gate#2", "Gate#3"]


def test_a_host_plugin_that_fails_raises_and_leaves_nothing_behind() -> None:
    journal: list[str] = []
    with Nexus(autoload=False) as nx:
        with pytest.raises(RuntimeError, match="bad fails in register_tools"):
            nx.register(Lifecycle("bad", journal, fail_in="register_tools"))
        assert nx.tools() == [] and nx.plugin_manager.get_plugin("bad") is None
        assert journal == ["configure bad", "register_tools bad", "shutdown bad"]  # what it began, it released
        assert nx.register(Lifecycle("bad", [])) == "bad"  # the name is free again


def test_a_failed_start_shuts_down_what_had_started() -> None:
    journal: list[str] = []
    with pytest.raises(RuntimeError, match="two fails in configure"):
        Nexus(autoload=False, plugins=[Lifecycle("one", journal), Lifecycle("two", journal, fail_in="configure")])
    assert journal == ["configure one", "register_tools one", "configure two", "shutdown two", "shutdown one"]

    journal.clear()
    with pytest.raises(ToolRegistrationError, match="duplicate tool name 'one_tool'"):
        Nexus(autoload=False, plugins=[Lifecycle("one", journal)], tools=[echo("one_tool")])
    assert journal == ["configure one", "register_tools one", "shutdown one"]


def test_nexus_shutdown_runs_once_last_started_first_even_if_one_raises(caplog: pytest.LogCaptureFixture) -> None:
    journal: list[str] = []
    nx = Nexus(autoload=False, plugins=[Lifecycle("a", journal), Lifecycle("b", journal, fail_in="shutdown")])
    nx.register(Lifecycle("c", journal))
    journal.clear()
    with caplog.at_level(logging.ERROR, logger="nexus_core"):
        nx.close()
        nx.close()
    assert journal == ["shutdown c", "shutdown b", "shutdown a"]
    assert [r.getMessage() for r in caplog.records] == ["plugin 'b' raised in nexus_shutdown"]


def test_nexus_shutdown_on_leaving_the_with_block_and_on_unregister() -> None:
    journal: list[str] = []
    with Nexus(autoload=False, plugins=[Lifecycle("a", journal), Lifecycle("b", journal)]) as nx:
        journal.clear()
        nx.unregister("a")
        assert journal == ["shutdown a"] and nx.tool("a_tool") is None and nx.tool("b_tool") is not None
        with pytest.raises(ValueError, match="no plugin named 'a' is registered"):
            nx.unregister("a")
    assert journal == ["shutdown a", "shutdown b"]


def test_after_close_invoke_is_an_error_result_and_register_raises() -> None:
    ran: list[int] = []
    nx = Nexus(autoload=False, tools=[native_tool("t", run=lambda a: ran.append(1))])
    nx.close()
    result = nx.invoke("t")
    assert result.is_error and result.error_kind == "cancelled"
    assert result.error == "cannot call t: this Nexus is closed" and ran == []
    with pytest.raises(RuntimeError, match="closed"):
        nx.register(Lifecycle("late", []))


def test_nexus_configure_gets_the_nexus_and_a_plugin_object_registered_twice_is_configured_twice() -> None:
    class Counter:
        NEXUS_PLUGIN_ID = "counter"

        def __init__(self) -> None:
            self.configured: list[Nexus] = []

        @hookimpl
        def nexus_configure(self, nexus: Nexus) -> None:
            self.configured.append(nexus)

    plugin = Counter()
    with Nexus(autoload=False, plugins=[plugin]) as one, Nexus(autoload=False) as two:
        two.register(plugin)
        two.unregister("counter")
        two.register(plugin)
        assert plugin.configured == [one, two, two]
        assert one.plugin("counter") is plugin and two.plugin("counter") is plugin
        assert one.plugin("nothing") is None


def test_failures_is_a_copy() -> None:
    with Nexus(autoload=False) as nx:
        nx.failures.append("junk")  # type: ignore[arg-type]
        assert nx.failures == []


@pytest.mark.parametrize("fmt", ["openai", "anthropic", "gemini", "mcp"])
def test_schemas_describe_every_tool_in_each_format(fmt: str) -> None:
    schema = {"type": "object", "properties": {"x": {"type": "integer"}}}
    with Nexus(autoload=False, tools=[native_tool("t1", "first", schema, run=lambda a: 1), echo("t2")]) as nx:
        text = repr(nx.schemas(fmt))
        assert "t1" in text and "t2" in text and "first" in text and "'x'" in text


def test_schemas_refuse_an_unknown_format() -> None:
    with Nexus(autoload=False) as nx, pytest.raises(ValueError, match="unknown format 'openia'"):
        nx.schemas("openia")


def test_replace_tool_swaps_a_definition_in_one_step_and_only_for_its_owner() -> None:
    with Nexus(autoload=False, tools=[native_tool("greet", "v1", run=lambda a: "one")]) as nx:
        seen = nx.tools_version
        nx.replace_tool(native_tool("greet", "v2", run=lambda a: "two"))
        assert nx.tool("greet").description == "v2"
        assert nx.invoke("greet", {}).output == "two"
        assert nx.tools_version > seen
        with pytest.raises(ToolRegistrationError):
            nx.replace_tool(native_tool("greet", "v3", run=lambda a: "three"), plugin="someone.else")
        with pytest.raises(ToolRegistrationError):
            nx.replace_tool(native_tool("missing", run=lambda a: ""))
