"""The pytest plugin for plugin authors (`nexus_core.testing`, entry point `pytest11: nexus`),
tested as its users meet it: inside a pytest run of their own (pytester)."""

from __future__ import annotations

from importlib.metadata import entry_points
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from conftest import FakePlugins

GATE_PLUGIN = """
    from nexus_core import Veto, hookimpl, native_tool

    shutdowns = []

    @hookimpl
    def nexus_register_tools(register):
        register(native_tool("greet", "Greet.", {"type": "object", "properties": {"who": {"type": "string"}},
                                                  "required": ["who"]}, lambda a: "hello " + a["who"]))

    @hookimpl
    def nexus_before_tool_invoke(call):
        if call.arguments.get("who") == "mallory":
            return Veto("mallory is not welcome")

    @hookimpl
    def nexus_shutdown(nexus):
        shutdowns.append(nexus)
"""


def test_the_plugin_is_declared_under_pytest11() -> None:
    (ep,) = [ep for ep in entry_points(group="pytest11") if ep.name == "nexus"]
    assert ep.value == "nexus_core.testing"


def test_fixtures_and_helpers_for_an_installed_plugin(pytester: pytest.Pytester, fake_plugins: FakePlugins) -> None:
    module = fake_plugins.add("fake.greeter", GATE_PLUGIN)
    pytester.makepyfile(f"""
        import sys
        from nexus_core.testing import assert_error, assert_ok, assert_vetoed

        def test_ok(nexus_factory):
            nx = nexus_factory(plugins=["fake.greeter"])
            assert_ok(nx.invoke("greet", {{"who": "ann"}}), "hello ann")

        def test_vetoed(nexus_factory):
            nx = nexus_factory(plugins=["fake.greeter"])
            assert_vetoed(nx.invoke("greet", {{"who": "mallory"}}), "not welcome")

        def test_invalid(nexus_factory):
            nx = nexus_factory(plugins=["fake.greeter"])
            assert_error(nx.invoke("greet", {{}}), "who", kind="invalid_arguments")

        def test_only_named_plugins_load(nexus):
            assert nexus.tools() == [] and [p for p in nexus.plugins() if p.status == "active"] == []

        def test_workspace(nexus_factory, nexus_workspace):
            nx = nexus_factory()
            assert nx.config.workspace == nexus_workspace and nexus_workspace.is_dir()
            assert list(nexus_workspace.iterdir()) == []

        def test_closed_after_the_test():
            assert len(sys.modules[{module!r}].shutdowns) == 3
    """)
    result = pytester.runpytest_inprocess("-p", "no:randomly")
    result.assert_outcomes(passed=6)


def test_assert_helpers_fail_with_what_happened(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        from nexus_core import Veto, hookimpl, native_tool
        from nexus_core.testing import assert_error, assert_ok, assert_vetoed

        def tools():
            return [native_tool("boom", run=lambda a: 1 / 0), native_tool("fine", run=lambda a: "fine")]

        def test_ok_on_error(nexus_factory):
            assert_ok(nexus_factory(tools=tools()).invoke("boom"))

        def test_ok_wrong_output(nexus_factory):
            assert_ok(nexus_factory(tools=tools()).invoke("fine"), "other")

        def test_error_on_success(nexus_factory):
            assert_error(nexus_factory(tools=tools()).invoke("fine"))

        def test_vetoed_on_exception(nexus_factory):
            assert_vetoed(nexus_factory(tools=tools()).invoke("boom"))

        def test_error_text(nexus_factory):
            assert_error(nexus_factory(tools=tools()).invoke("boom"), "KeyError")
    """)
    result = pytester.runpytest_inprocess()
    result.assert_outcomes(failed=5)
    result.stdout.fnmatch_lines([
        "*expected boom to succeed, got error (exception): ZeroDivisionError: division by zero*",
        "*expected output 'other' from fine, got 'fine'*",
        "*expected fine to fail, got output 'fine'*",
        "*expected error kind 'vetoed', got 'exception': ZeroDivisionError: division by zero*",
        "*expected 'KeyError' in the error, got 'ZeroDivisionError: division by zero'*",
    ])
    assert "__tracebackhide__" not in result.stdout.str()
    assert "testing.py" not in result.stdout.str()  # the helpers' own frames are hidden


def test_factory_takes_host_plugins_config_and_tools(pytester: pytest.Pytester, fake_plugins: FakePlugins) -> None:
    fake_plugins.add("fake.greeter", GATE_PLUGIN)
    pytester.makepyfile("""
        from nexus_core import hookimpl, native_tool
        from nexus_core.testing import assert_ok

        class Settings:
            NEXUS_PLUGIN_ID = "settings"
            seen = None

            @hookimpl
            def nexus_config_schema(self):
                return {"type": "object", "properties": {"level": {"type": "integer", "default": 1}}}

            @hookimpl
            def nexus_configure(self, config):
                Settings.seen = config

        def test_all(nexus_factory):
            nx = nexus_factory(
                plugins=[Settings(), "fake.greeter"],
                config={"plugins": {"settings": {"level": 3}}},
                tools=[native_tool("t", run=lambda a: "t")],
            )
            assert Settings.seen == {"level": 3}
            assert_ok(nx.invoke("greet", {"who": "x"}))
            assert_ok(nx.invoke("t"), "t")

        def test_config_active_and_named_ids_add_up(nexus_factory):
            nx = nexus_factory(plugins=["fake.greeter"], config={"plugins": {"active": ["fake.greeter"]}})
            assert [t.name for t in nx.tools()] == ["greet"]
    """)
    pytester.runpytest_inprocess().assert_outcomes(passed=2)


def test_factory_fails_the_test_when_a_named_plugin_breaks(pytester: pytest.Pytester, fake_plugins: FakePlugins) -> None:
    fake_plugins.add("fake.broken", "raise RuntimeError('cannot import today')\n")
    pytester.makepyfile("""
        def test_loud(nexus_factory):
            nexus_factory(plugins=["fake.broken"])

        def test_allowed(nexus_factory):
            nx = nexus_factory(plugins=["fake.broken"], allow_failures=True)
            assert [f.name for f in nx.failures] == ["fake.broken"]
    """)
    result = pytester.runpytest_inprocess()
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*plugins failed to load:*", "*fake.broken (import): RuntimeError: cannot import today*"])


def test_factory_reports_config_errors_as_errors(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        import pytest
        from nexus_core import ConfigError

        def test_bad_key(nexus_factory):
            with pytest.raises(ConfigError, match="plugins.nope: no installed plugin is called 'nope'"):
                nexus_factory(config={"plugins": {"nope": {}}})
    """)
    pytester.runpytest_inprocess().assert_outcomes(passed=1)
