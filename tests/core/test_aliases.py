"""One identity per tool: a `ToolDef` with `aliases` is one tool under several names. Every hook
that receives the tool gets the canonical `ToolDef` whatever name was called, the call keeps the
name it was made with, names are unique across tools and aliases, the config's per-tool settings
follow the tool, and a model is offered every name."""

from __future__ import annotations

from typing import Any

import pytest

from nexus_core import (
    Ask,
    ConfigError,
    Nexus,
    Question,
    ToolCall,
    ToolDef,
    ToolRegistrationError,
    ToolResult,
    Veto,
    hookimpl,
)
from nexus_core.adapters import parse_tool_call
from nexus_core.testing import assert_ok, assert_vetoed


def run_tool(name: str = "run", aliases: tuple[str, ...] = ("bash", "sh"), plugin: str | None = None) -> ToolDef:
    return ToolDef(name=name, handler=lambda args: f"ran {args.get('command', '')}", description="Run a command.",
                   input_schema={"type": "object", "properties": {"command": {"type": "string"},
                                                                  "cwd": {"type": "string"}},
                                 "required": ["command"]},
                   aliases=aliases, plugin=plugin)


class Seen:
    """Records what every tool hook receives."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, str | None]] = []

    @hookimpl
    def nexus_before_tool_invoke(self, call: ToolCall, tool: ToolDef) -> None:
        self.events.append(("gate", call.name, tool.name))

    @hookimpl
    def nexus_tool_invoke(self, call: ToolCall, tool: ToolDef) -> None:
        self.events.append(("invoke", call.name, tool.name))

    @hookimpl
    def nexus_before_tool_result(self, call: ToolCall, result: ToolResult, tool: ToolDef | None) -> None:
        self.events.append(("result gate", call.name, tool.name if tool else None))

    @hookimpl
    def nexus_tool_result(self, call: ToolCall, result: ToolResult, tool: ToolDef | None) -> None:
        self.events.append(("result", result.name, tool.name if tool else None))


def test_an_alias_is_the_same_tool_and_the_call_keeps_its_name() -> None:
    seen = Seen()
    with Nexus(autoload=False, plugins=[seen], tools=[run_tool()]) as nx:
        assert [t.name for t in nx.tools()] == ["run"]  # listed once
        tool = nx.tool("bash")
        assert tool is nx.tool("run") and tool is not None and tool.name == "run" and tool.names == ("run", "bash", "sh")
        result = assert_ok(nx.invoke(ToolCall(id="c1", name="bash", arguments={"command": "ls"})), "ran ls")
        assert (result.id, result.name) == ("c1", "bash")  # a provider pairs the result by the name it called
    assert seen.events == [("gate", "bash", "run"), ("invoke", "bash", "run"),
                           ("result gate", "bash", "run"), ("result", "bash", "run")]


def test_hooks_that_see_only_results_get_no_tool_for_an_unknown_name() -> None:
    seen = Seen()
    with Nexus(autoload=False, plugins=[seen], tools=[run_tool()]) as nx:
        nx.invoke("bsh", {})
        nx.refuse(ToolCall(name="sh", arguments={}), "not now")
    assert seen.events == [("result gate", "bsh", None), ("result", "bsh", None),
                           ("result gate", "sh", "run"), ("result", "sh", "run")]


def test_an_unknown_name_suggests_aliases_too() -> None:
    with Nexus(autoload=False, tools=[run_tool(aliases=("bash",))]) as nx:
        assert nx.invoke("bsah", {}).error == "unknown tool: 'bsah' (did you mean 'bash'?)"


class NoRun:
    """A gate written for the canonical name only."""

    @hookimpl
    def nexus_before_tool_invoke(self, call: ToolCall, tool: ToolDef) -> Veto | None:
        return Veto(f"no {tool.name} (called as {call.name})") if tool.name == "run" else None


@pytest.mark.parametrize("name", ["run", "bash", "sh"])
def test_a_gate_for_the_canonical_name_vetoes_every_alias(name: str) -> None:
    with Nexus(autoload=False, plugins=[NoRun()], tools=[run_tool()]) as nx:
        assert_vetoed(nx.invoke(name, {"command": "id"}), f"no run (called as {name})")


def test_an_approval_about_an_alias_names_the_canonical_tool() -> None:
    asked: list[Question] = []

    class AskRun:
        @hookimpl
        def nexus_before_tool_invoke(self, call: ToolCall, tool: ToolDef) -> Ask | None:
            return Ask("run it?") if tool.name == "run" else None

    def person(question: Question) -> bool:
        asked.append(question)
        return False

    with Nexus(autoload=False, plugins=[AskRun()], tools=[run_tool()], approver=person) as nx:
        assert_vetoed(nx.invoke("sh", {"command": "id"}), "denied by the user")
    [question] = asked
    assert question.call.name == "sh" and question.tool is not None and question.tool.name == "run"


# -- one name, one tool ------------------------------------------------------------------------


@pytest.mark.parametrize(("first", "second", "message"), [
    (run_tool(), ToolDef(name="bash", handler=print, plugin="other"),
     "duplicate tool name 'bash': registered by the host (an alias of 'run') and again by plugin 'other'"),
    (ToolDef(name="bash", handler=print, plugin="other"), run_tool(),
     "duplicate tool name 'bash': registered by plugin 'other' and again by the host (an alias of 'run')"),
    (run_tool(), run_tool(name="exec", aliases=("sh",), plugin="other"),
     "duplicate tool name 'sh': registered by the host (an alias of 'run') and again by plugin 'other' "
     "(an alias of 'exec')"),
    (run_tool(), run_tool(name="exec", aliases=("run",), plugin="other"),
     "duplicate tool name 'run': registered by the host and again by plugin 'other' (an alias of 'exec')"),
])
def test_a_name_taken_by_a_tool_or_an_alias_is_a_registration_error_naming_both(
        first: ToolDef, second: ToolDef, message: str) -> None:
    with Nexus(autoload=False, tools=[first]) as nx:
        with pytest.raises(ToolRegistrationError) as info:
            nx.add_tool(second)
        assert str(info.value) == message
        assert [t.name for t in nx.tools()] == [first.name]  # nothing of the second is left behind


@pytest.mark.parametrize(("aliases", "message"), [
    (("run",), "alias 'run' of tool 'run' from the host is the tool's own name"),
    (("sh", "sh"), "alias 'sh' of tool 'run' from the host is given twice"),
    (("two words",), "alias 'two words' of tool 'run' from the host is not valid: use 1-64 of a-z A-Z 0-9 _ -"),
])
def test_bad_aliases_are_refused(aliases: tuple[str, ...], message: str) -> None:
    with Nexus(autoload=False) as nx:
        with pytest.raises(ToolRegistrationError, match="^" + message.replace("(", r"\(").replace(")", r"\)")):
            nx.add_tool(run_tool(aliases=aliases))
        assert nx.tools() == []


def test_aliases_given_as_one_string_are_refused_not_split_into_letters() -> None:
    with pytest.raises(TypeError, match="aliases must be a list of names, not one string"):
        ToolDef(name="run", handler=print, aliases="bash")  # type: ignore[arg-type]


def test_removing_a_tool_by_any_name_removes_every_name() -> None:
    with Nexus(autoload=False, tools=[run_tool()]) as nx:
        removed = nx.remove_tool("sh")
        assert removed is not None and removed.name == "run"
        assert nx.tool("run") is None and nx.tool("bash") is None and nx.tools() == []
        nx.add_tool(ToolDef(name="bash", handler=print))  # the names are free again


def test_a_replacement_may_change_its_aliases_but_not_take_anothers_name() -> None:
    with Nexus(autoload=False, tools=[run_tool(), ToolDef(name="other", handler=print)]) as nx:
        nx.replace_tool(run_tool(aliases=("zsh",)))
        assert nx.tool("bash") is None and nx.tool("zsh") is nx.tool("run")
        with pytest.raises(ToolRegistrationError, match="duplicate tool name 'other'"):
            nx.replace_tool(run_tool(aliases=("other",)))
        with pytest.raises(ToolRegistrationError, match="cannot replace tool 'zsh': it is registered by the host "
                                                        r"\(an alias of 'run'\)"):
            nx.replace_tool(run_tool(name="zsh", aliases=()))
        assert [t.name for t in nx.tools()] == ["other", "run"] and nx.tool("zsh") is nx.tool("run")


def test_a_plugin_that_goes_takes_its_aliases_with_it() -> None:
    class Gives:
        NEXUS_PLUGIN_ID = "gives"

        @hookimpl
        def nexus_register_tools(self, register: Any) -> None:
            register(run_tool())

    with Nexus(autoload=False) as nx:
        nx.register(Gives())
        assert [p.tools for p in nx.plugins() if p.name == "gives"] == [("run",)]
        nx.unregister("gives")
        assert nx.tool("bash") is None and nx.tools() == []


# -- the config's per-tool settings follow the tool --------------------------------------------


@pytest.mark.parametrize("key", ["run", "bash"])
def test_exposure_applies_to_the_tool_under_any_of_its_names(key: str) -> None:
    with Nexus({"tools": {key: {"exposure": "code"}}}, autoload=False, tools=[run_tool()]) as nx:
        tool = nx.tool("sh")
        assert tool is not None and tool.exposure == "code"
        assert nx.schemas("openai") == []  # neither `run` nor an alias is offered directly


def test_two_names_of_one_tool_setting_one_key_differently_is_a_config_error() -> None:
    config = {"tools": {"run": {"exposure": "code"}, "bash": {"exposure": "direct"}}}
    with Nexus(config, autoload=False) as nx:
        with pytest.raises(ConfigError) as info:
            nx.add_tool(run_tool())
    assert info.value.problems == [
        "tools.bash.exposure: 'direct' differs from tools.run.exposure ('code'), and 'run' is one tool "
        "(aliases: 'bash', 'sh'); set it once"]


def test_allowed_callers_of_the_tool_reach_its_aliases() -> None:
    config = {"tools": {"bash": {"exposure": "code", "allowed_callers": ["code_execution_20250825"]}}}
    with Nexus(config, autoload=False, tools=[run_tool()]) as nx:
        declared = {t["name"]: t.get("allowed_callers") for t in nx.schemas("anthropic")}
    assert declared == {"run": ["code_execution_20250825"], "bash": ["code_execution_20250825"],
                        "sh": ["code_execution_20250825"]}


# -- a model is offered every name -------------------------------------------------------------


def declared_names(schemas: Any, fmt: str) -> list[str]:
    if fmt == "openai":
        return [s["function"]["name"] for s in schemas]
    if fmt == "gemini":
        return [d["name"] for d in schemas[0]["functionDeclarations"]]
    return [s["name"] for s in schemas]


@pytest.mark.parametrize("fmt", ["openai", "openai-responses", "anthropic", "gemini", "mcp"])
def test_schemas_declare_each_alias_a_model_may_call(fmt: str) -> None:
    with Nexus(autoload=False, tools=[run_tool()]) as nx:
        schemas = nx.schemas(fmt)
    assert declared_names(schemas, fmt) == ["run", "bash", "sh"]
    text = str(schemas)
    assert text.count("Same tool as `run`") == 2


def test_a_models_call_by_an_alias_is_parsed_against_the_tools_schema() -> None:
    # strict mode makes a model send null for an optional argument; parsing drops it by the
    # schema of the tool the name belongs to, an alias's too (else the call would be invalid)
    seen = Seen()
    with Nexus(autoload=False, plugins=[seen], tools=[run_tool()]) as nx:
        reply = {"id": "call_1", "type": "function",
                 "function": {"name": "sh", "arguments": '{"command": "pwd", "cwd": null}'}}
        call = parse_tool_call(reply, "openai", tools=nx)
        assert (call.name, call.arguments) == ("sh", {"command": "pwd"})
        assert_ok(nx.invoke(call), "ran pwd")
    assert ("gate", "sh", "run") in seen.events
