"""Plugin loading from the `nexus.plugins` entry points: choosing, blocking, tracing, and a
broken plugin reported by name while the rest keep working."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import pluggy
import pytest

from nexus_core import Nexus, hookimpl, native_tool
from nexus_core._plugins import ENTRY_POINT_GROUP

if TYPE_CHECKING:
    from conftest import FakePlugins


def tool_plugin(tool: str, *extra: str) -> str:
    """Source of a plugin module that gives one tool, `tool`, answering `<tool> ok`."""
    return "\n".join([
        "from nexus_core import hookimpl, native_tool",
        "shutdowns = []",
        "@hookimpl",
        "def nexus_register_tools(register):",
        f"    register(native_tool({tool!r}, 'a test tool', {{'type': 'object'}}, lambda a: {tool + ' ok'!r}))",
        "@hookimpl",
        "def nexus_shutdown(nexus):",
        "    shutdowns.append(nexus)",
        *extra,
    ])


def active_names(nx: Nexus) -> list[str]:
    return [p.name for p in nx.plugins() if p.status == "active"]


def test_entry_point_group_is_nexus_plugins() -> None:
    assert ENTRY_POINT_GROUP == "nexus.plugins"


def test_every_installed_plugin_loads_by_default(fake_plugins: FakePlugins, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_plugins.add("fake.a", tool_plugin("tool_a"))
    fake_plugins.add("fake.b", tool_plugin("tool_b"))
    monkeypatch.setenv("NEXUS_BLOCK_PLUGINS", ",".join(fake_plugins.others()))  # the real ones: not under test
    with Nexus() as nx:
        assert active_names(nx) == ["fake.a", "fake.b"]
        assert nx.invoke("tool_a").output == "tool_a ok"
        assert nx.invoke("tool_b").output == "tool_b ok"
        info = {p.name: p for p in nx.plugins()}["fake.a"]
        assert info.distribution and info.distribution.startswith("fake-plugin-") and info.version == "0.1"
        assert info.tools == ("tool_a",) and "nexus_register_tools" in info.hooks


def test_plugins_active_chooses_among_the_installed(fake_plugins: FakePlugins) -> None:
    fake_plugins.add("fake.a", tool_plugin("tool_a"))
    fake_plugins.add("fake.b", tool_plugin("tool_b"))
    with Nexus({"plugins": {"active": ["fake.b"]}}) as nx:
        assert active_names(nx) == ["fake.b"]
        assert [t.name for t in nx.tools()] == ["tool_b"]
        statuses = {p.name: p.status for p in nx.plugins()}
        assert statuses["fake.a"] == "inactive"
    with Nexus({"plugins": {"active": []}}) as nx:
        assert active_names(nx) == [] and nx.tools() == []


def test_disable_autoload_loads_only_what_active_names(fake_plugins: FakePlugins, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_plugins.add("fake.a", tool_plugin("tool_a"))
    fake_plugins.add("fake.b", tool_plugin("tool_b"))
    monkeypatch.setenv("NEXUS_DISABLE_PLUGIN_AUTOLOAD", "1")
    with Nexus() as nx:
        assert active_names(nx) == []
        assert {p.name: p.status for p in nx.plugins()}["fake.a"] == "inactive"
    with Nexus({"plugins": {"active": ["fake.a"]}}) as nx:
        assert active_names(nx) == ["fake.a"]
    monkeypatch.setenv("NEXUS_DISABLE_PLUGIN_AUTOLOAD", "0")  # a false value is not a switch
    monkeypatch.setenv("NEXUS_BLOCK_PLUGINS", ",".join(fake_plugins.others()))
    with Nexus() as nx:
        assert active_names(nx) == ["fake.a", "fake.b"]


def test_block_plugins_env_and_config_win_over_active(fake_plugins: FakePlugins, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_plugins.add("fake.a", tool_plugin("tool_a"))
    fake_plugins.add("fake.b", tool_plugin("tool_b"))
    fake_plugins.add("fake.c", tool_plugin("tool_c"))
    monkeypatch.setenv("NEXUS_BLOCK_PLUGINS", " fake.a , ")
    with Nexus({"plugins": {"active": ["fake.a", "fake.b", "fake.c"], "blocked": ["fake.c"]}}) as nx:
        assert active_names(nx) == ["fake.b"]
        statuses = {p.name: p.status for p in nx.plugins()}
        assert statuses["fake.a"] == statuses["fake.c"] == "blocked"
        assert nx.tool("tool_a") is None and nx.plugin_manager.get_plugin("fake.a") is None


def test_a_plugin_that_fails_to_import_is_reported_and_the_rest_work(fake_plugins: FakePlugins) -> None:
    fake_plugins.add("fake.broken", "raise RuntimeError('import boom')\n")
    fake_plugins.add("fake.missing", target="no_such_module_for_nexus_tests")
    fake_plugins.add("fake.exits", "import sys\nsys.exit(3)\n")
    fake_plugins.add("fake.good", tool_plugin("good"))
    with Nexus({"plugins": {"active": ["fake.broken", "fake.missing", "fake.exits", "fake.good"]}}) as nx:
        failures = {f.name: (f.phase, f.error) for f in nx.failures}
        assert failures == {
            "fake.broken": ("import", "RuntimeError: import boom"),
            "fake.missing": ("import", "ModuleNotFoundError: No module named 'no_such_module_for_nexus_tests'"),
            "fake.exits": ("import", "SystemExit: 3"),
        }
        assert "import boom" in next(f.detail for f in nx.failures if f.name == "fake.broken")  # the traceback
        assert nx.invoke("good").output == "good ok"
        infos = {p.name: p for p in nx.plugins()}
        assert infos["fake.broken"].status == "failed"
        assert infos["fake.broken"].error == "import: RuntimeError: import boom"
        assert infos["fake.broken"].version == "0.1"


def test_entry_point_may_name_an_object_in_a_module(fake_plugins: FakePlugins) -> None:
    module = fake_plugins.add("fake.obj", """
        from nexus_core import hookimpl, native_tool

        class Plugin:
            @hookimpl
            def nexus_register_tools(self, register):
                register(native_tool("from_object", run=lambda a: "object ok"))

        plugin = Plugin()
    """)
    fake_plugins.add("fake.obj2", target=f"{module}:plugin", dist="fake-obj2")
    with Nexus({"plugins": {"active": ["fake.obj2"]}}) as nx:
        assert nx.invoke("from_object").output == "object ok"


def test_a_hookimpl_with_a_typo_is_reported_with_the_hook_it_meant(fake_plugins: FakePlugins) -> None:
    module = fake_plugins.add("fake.typo", tool_plugin("typo_tool", "@hookimpl", "def nexus_tool_reslt(result):",
                                                       "    pass"))
    fake_plugins.add("fake.good", tool_plugin("good"))
    with Nexus({"plugins": {"active": ["fake.typo", "fake.good"]}}) as nx:
        (failure,) = nx.failures
        assert failure.name == "fake.typo" and failure.phase == "validate"
        assert "hookimpl 'nexus_tool_reslt' matches no nexus hook (did you mean 'nexus_tool_result'?)" in failure.error
        assert f"hookimpl definition: {sys.modules[module].__file__}:9" in failure.error
        assert nx.tool("typo_tool") is None  # none of the refused plugin's hooks run
        assert nx.invoke("good").output == "good ok"
        assert nx.plugin_manager.get_plugin("fake.typo") is None


def test_a_hookimpl_asking_for_an_argument_the_hook_lacks_is_reported(fake_plugins: FakePlugins) -> None:
    fake_plugins.add("fake.badarg", "from nexus_core import hookimpl\n"
                                    "@hookimpl\ndef nexus_tool_result(call, outcome):\n    pass\n")
    with Nexus({"plugins": {"active": ["fake.badarg"]}}) as nx:
        (failure,) = nx.failures
        assert failure.phase == "validate" and "outcome" in failure.error


def test_nexus_configure_that_raises_drops_only_that_plugin(fake_plugins: FakePlugins) -> None:
    module = fake_plugins.add("fake.conf", tool_plugin("conf_tool", "@hookimpl", "def nexus_configure(config):",
                                                       "    raise ValueError('bad settings')"))
    fake_plugins.add("fake.good", tool_plugin("good"))
    with Nexus({"plugins": {"active": ["fake.conf", "fake.good"]}}) as nx:
        (failure,) = nx.failures
        assert (failure.name, failure.phase, failure.error) == ("fake.conf", "configure", "ValueError: bad settings")
        assert nx.tool("conf_tool") is None and nx.invoke("good").output == "good ok"
        assert sys.modules[module].shutdowns == [nx]  # what it began, it may release
    assert len(sys.modules[module].shutdowns) == 1  # not again at close


def test_nexus_register_tools_that_raises_removes_the_tools_it_gave(fake_plugins: FakePlugins) -> None:
    fake_plugins.add("fake.half", """
        from nexus_core import hookimpl, native_tool

        @hookimpl
        def nexus_register_tools(register):
            register(native_tool("first_half", run=lambda a: "x"))
            raise RuntimeError("second half failed")
    """)
    fake_plugins.add("fake.good", tool_plugin("good"))
    with Nexus({"plugins": {"active": ["fake.half", "fake.good"]}}) as nx:
        (failure,) = nx.failures
        assert (failure.name, failure.phase) == ("fake.half", "register_tools")
        assert [t.name for t in nx.tools()] == ["good"]
        assert nx.invoke("first_half").error_kind == "unknown_tool"


def test_nexus_register_tools_duplicate_name_names_both_plugins(fake_plugins: FakePlugins) -> None:
    fake_plugins.add("fake.one", tool_plugin("same"))
    fake_plugins.add("fake.two", tool_plugin("same"))
    with Nexus({"plugins": {"active": ["fake.one", "fake.two"]}}) as nx:
        (failure,) = nx.failures
        assert failure.name == "fake.two" and failure.phase == "register_tools"
        assert failure.error == ("ToolRegistrationError: duplicate tool name 'same': registered by plugin "
                                 "'fake.one' and again by plugin 'fake.two'")
        assert nx.tool("same").plugin == "fake.one"  # type: ignore[union-attr]


def test_nexus_register_tools_records_which_plugin_gave_each_tool(fake_plugins: FakePlugins) -> None:
    fake_plugins.add("fake.a", tool_plugin("tool_a"))

    class Host:
        @hookimpl
        def nexus_register_tools(self, register: Any) -> None:
            register(native_tool("host_tool", run=lambda a: "h"))
            register(native_tool("x", run=lambda a: "renamed"), name="renamed_tool")

    with Nexus({"plugins": {"active": ["fake.a"]}}, plugins=[Host()], tools=[native_tool("direct", run=lambda a: 1)]) as nx:
        assert {t.name: t.plugin for t in nx.tools()} == {
            "tool_a": "fake.a", "host_tool": "Host", "renamed_tool": "Host", "direct": None,
        }
        assert nx.invoke("renamed_tool").output == "renamed"


def test_check_pending_finds_a_hookimpl_registered_around_the_checks() -> None:
    class Fine:
        @hookimpl
        def nexus_tool_result(self, result: Any) -> None:
            pass

    class Typo:
        @hookimpl
        def nexus_tool_resutl(self, result: Any) -> None:
            pass

    with Nexus(autoload=False, plugins=[Fine()]) as nx:
        nx.check_pending()  # all good: no error
        nx.plugin_manager.register(Typo(), name="sneaked-in")  # bypasses Nexus.register's own check
        with pytest.raises(pluggy.PluginValidationError, match="nexus_tool_resutl"):
            nx.check_pending()


def test_host_plugin_with_a_typo_is_refused_at_once() -> None:
    class Typo:
        @hookimpl
        def nexus_before_tool_invok(self, call: Any) -> None:
            pass

    with Nexus(autoload=False) as nx:
        with pytest.raises(pluggy.PluginValidationError) as info:
            nx.register(Typo())
        assert "Plugin 'Typo': hookimpl 'nexus_before_tool_invok' matches no nexus hook" in str(info.value)
        assert "did you mean 'nexus_before_tool_invoke'?" in str(info.value)
        assert f"hookimpl definition: {__file__}:" in str(info.value)
        assert nx.plugin_manager.get_plugin("Typo") is None


def test_trace_hooks_prints_every_hook_call(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("NEXUS_TRACE_HOOKS", "1")

    class Gate:
        @hookimpl
        def nexus_before_tool_invoke(self, call: Any) -> None:
            return None

        @hookimpl
        def nexus_configure(self, config: Any) -> None:
            pass

    with Nexus(autoload=False, plugins=[Gate()], tools=[native_tool("t", run=lambda a: "ok")]) as nx:
        nx.invoke("t")
    err = capsys.readouterr().err
    for hook in ("nexus_configure (plugin Gate)", "nexus_tool_register", "nexus_before_tool_invoke",
                 "nexus_tool_invoke", "nexus_before_tool_result", "nexus_tool_result"):
        assert hook in err, hook


def test_no_tracing_without_the_switch(capsys: pytest.CaptureFixture[str]) -> None:
    with Nexus(autoload=False, tools=[native_tool("t", run=lambda a: "ok")]) as nx:
        nx.invoke("t")
    assert capsys.readouterr().err == ""


# -- hooks a package brings (nexus.hookspecs) -------------------------------------------------

AUDIT_HOOKSPECS = '''
    from nexus_core import hookspec

    @hookspec(kind="observer")
    def nexus_acme_audit_written(entry: dict) -> None:
        """Observe an audit entry once it is written. The return value is ignored."""
'''


def test_a_package_brings_its_own_hooks_and_any_plugin_may_implement_them(fake_plugins: FakePlugins) -> None:
    # "a.listener" sorts, and so registers, before "z.audit" whose package declares the hook
    fake_plugins.add("a.listener", """
        from nexus_core import hookimpl
        seen = []

        @hookimpl
        def nexus_acme_audit_written(entry):
            seen.append(entry)
    """)
    fake_plugins.add("z.audit", "", hookspecs=AUDIT_HOOKSPECS)
    with Nexus({"plugins": {"active": ["a.listener"]}}) as nx:  # the hook's own plugin is not active
        assert nx.failures == [] and active_names(nx) == ["a.listener"]
        assert "nexus_acme_audit_written" in nx.plugin_manager.hook_names()
        assert nx.plugin_manager.kind("nexus_acme_audit_written") == "observer"
        nx.hook.nexus_acme_audit_written(entry={"n": 1})
        assert nx.plugin("a.listener").seen == [{"n": 1}]


def test_a_hook_of_a_package_that_is_not_installed_matches_no_hook(fake_plugins: FakePlugins) -> None:
    fake_plugins.add("a.listener", """
        from nexus_core import hookimpl

        @hookimpl
        def nexus_acme_audit_written(entry):
            pass
    """)
    with Nexus({"plugins": {"active": ["a.listener"]}}) as nx:
        (failure,) = nx.failures
        assert (failure.name, failure.phase) == ("a.listener", "validate")
        assert "hookimpl 'nexus_acme_audit_written' matches no nexus hook" in failure.error


def test_a_hookspec_module_that_fails_is_reported_and_the_rest_work(fake_plugins: FakePlugins) -> None:
    fake_plugins.add("broken.specs", "", hookspecs="raise ImportError('no such thing')\n", plugin=False)
    fake_plugins.add("z.audit", "", hookspecs=AUDIT_HOOKSPECS, plugin=False)
    with Nexus(autoload=False) as nx:
        (failure,) = nx.failures
        assert (failure.name, failure.phase) == ("broken.specs", "hookspecs")
        assert "ImportError: no such thing" in failure.error
        assert "nexus_acme_audit_written" in nx.plugin_manager.hook_names()


def test_a_hookspec_must_say_its_kind() -> None:
    from nexus_core import hookspec

    with pytest.raises(TypeError, match="kind"):
        @hookspec  # type: ignore[call-overload]
        def nexus_no_kind() -> None: ...
    with pytest.raises(ValueError, match="not one of observer, gate, contribution, lifecycle"):
        hookspec(kind="watcher")  # type: ignore[arg-type]
