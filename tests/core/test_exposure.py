"""Declare each tool once: whether a model meets it directly, only inside run_code, or both
(`ToolDef.exposure`, overridden by the config's `tools.<name>.exposure`), and which tools a
provider's own code execution may call (`tools.<name>.allowed_callers`)."""

from __future__ import annotations

import pytest

from nexus_core import ConfigError, Nexus, native_tool, tool


def tools() -> list[object]:
    @tool(exposure="code")
    def lookup(key: str) -> str:
        """Look a key up (meant for scripts)."""
        return key

    return [
        native_tool("everywhere", "a tool for both", {"type": "object"}, lambda a: "x"),
        native_tool("direct_only", "only as a tool", {"type": "object"}, lambda a: "x", exposure="direct"),
        lookup,
    ]


def names(schemas: list[dict]) -> list[str]:
    return sorted(s.get("name") or s["function"]["name"] for s in schemas)


def test_a_code_only_tool_is_left_out_of_the_direct_schemas_but_still_callable() -> None:
    with Nexus(autoload=False, tools=tools()) as nx:
        assert nx.tool("lookup").exposure == "code" and nx.tool("direct_only").exposure == "direct"
        for fmt in ("openai", "openai-responses", "anthropic", "gemini", "mcp"):
            declared = nx.schemas(fmt)
            if fmt == "gemini":
                declared = declared[0]["functionDeclarations"] if isinstance(declared, list) else declared
            assert "lookup" not in str(declared), fmt
        assert names(nx.schemas("openai")) == ["direct_only", "everywhere"]
        assert names(nx.schemas("openai", code_only=True)) == ["direct_only", "everywhere", "lookup"]
        assert nx.invoke("lookup", {"key": "k"}).output == "k"  # the host may still call it


def test_the_config_overrides_a_tools_exposure_and_gives_allowed_callers() -> None:
    config = {"tools": {"everywhere": {"exposure": "code"},
                        "lookup": {"allowed_callers": ["code_execution_20250825"]},
                        "direct_only": {"exposure": "both", "allowed_callers": ["direct", "code_execution_20250825"]}}}
    with Nexus(config, autoload=False, tools=tools()) as nx:
        assert nx.tool("everywhere").exposure == "code" and nx.tool("direct_only").exposure == "both"
        anthropic = {s["name"]: s for s in nx.schemas("anthropic")}
        assert sorted(anthropic) == ["direct_only", "lookup"]  # code-only but callable by Claude's code
        assert anthropic["lookup"]["allowed_callers"] == ["code_execution_20250825"]
        assert anthropic["direct_only"]["allowed_callers"] == ["direct", "code_execution_20250825"]
        responses = {s["name"]: s for s in nx.schemas("openai-responses")}
        assert responses["lookup"]["allowed_callers"] == ["code_execution_20250825"]
        assert names(nx.schemas("openai")) == ["direct_only", "lookup"]  # no allowed_callers in chat
        explicit = {s["name"]: s for s in nx.schemas("anthropic", allowed_callers={"direct_only": ["direct"]})}
        assert explicit["direct_only"]["allowed_callers"] == ["direct"] and "allowed_callers" not in explicit["lookup"]


@pytest.mark.parametrize(("settings", "message"), [
    ({"read": {"exposure": "sometimes"}}, "tools.read.exposure"),
    ({"read": {"allowed_callers": []}}, "tools.read.allowed_callers"),
    ({"read": {"expose": "code"}}, "tools.read.expose: unknown key"),
])
def test_bad_tool_settings_are_config_errors_naming_the_key(settings: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        Nexus({"tools": settings}, autoload=False)


def test_a_bad_exposure_on_a_tooldef_is_refused() -> None:
    with pytest.raises(ValueError, match="exposure"):
        native_tool("t", "t", {"type": "object"}, lambda a: "x", exposure="nowhere")  # type: ignore[arg-type]
