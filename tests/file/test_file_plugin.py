"""The plugin as a whole: its tools and schemas, read_only, config errors, and installing it alone."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from nexus_core import ConfigError, Nexus
from nexus_core.testing import NexusFactory, assert_error, assert_ok

ALL_TOOLS = ["apply_patch", "edit", "glob", "grep", "list", "read", "write"]


def test_registers_seven_tools_with_strict_schemas(files: Nexus) -> None:
    tools = files.tools()
    assert [t.name for t in tools] == ALL_TOOLS
    for tool in tools:
        assert tool.plugin == "nexus.tool.file"
        assert tool.description
        assert tool.input_schema["additionalProperties"] is False, tool.name
        assert tool.output_schema is not None and tool.output_schema["additionalProperties"] is False, tool.name


def test_output_structured_matches_each_output_schema(files: Nexus, nexus_workspace: Path) -> None:
    import jsonschema  # type: ignore[import-untyped]

    (nexus_workspace / "a.txt").write_text("hello\n")
    calls = [
        ("read", {"path": "a.txt"}),
        ("write", {"path": "b.txt", "content": "x\n"}),
        ("edit", {"path": "b.txt", "old_string": "x", "new_string": "y"}),
        ("list", {}),
        ("glob", {"pattern": "*.txt"}),
        ("grep", {"pattern": "hello"}),
        ("apply_patch", {"patch": "*** Begin Patch\n*** Delete File: b.txt\n*** End Patch"}),
    ]
    for name, arguments in calls:
        result = assert_ok(files.invoke(name, arguments))
        tool = files.tool(name)
        assert tool is not None and tool.output_schema is not None
        jsonschema.validate(result.output_structured, tool.output_schema)


def test_read_only_removes_the_writing_tools(nexus_factory: NexusFactory, nexus_workspace: Path) -> None:
    (nexus_workspace / "a.txt").write_text("hello\n")
    nx = nexus_factory(plugins=["nexus.tool.file"], config={"plugins": {"nexus.tool.file": {"read_only": True}}})
    assert [t.name for t in nx.tools()] == ["glob", "grep", "list", "read"]
    assert_ok(nx.invoke("read", {"path": "a.txt"}))
    for name, arguments in [("write", {"path": "a.txt", "content": "x"}),
                            ("edit", {"path": "a.txt", "old_string": "hello", "new_string": "x"}),
                            ("apply_patch", {"patch": "*** Begin Patch\n*** Delete File: a.txt\n*** End Patch"})]:
        assert_error(nx.invoke(name, arguments), f"unknown tool: {name!r}", kind="unknown_tool")
    assert (nexus_workspace / "a.txt").read_text() == "hello\n"


def test_bad_config_is_an_error_naming_the_key(nexus_factory: NexusFactory) -> None:
    with pytest.raises(ConfigError, match=r"plugins\.nexus\.tool\.file\.readonly: unknown key"):
        nexus_factory(plugins=["nexus.tool.file"], config={"plugins": {"nexus.tool.file": {"readonly": True}}})
    with pytest.raises(ConfigError, match=r"plugins\.nexus\.tool\.file\.max_results"):
        nexus_factory(plugins=["nexus.tool.file"], config={"plugins": {"nexus.tool.file": {"max_results": 0}}})


@pytest.mark.slow
def test_installs_alone_beside_nexus_core(fresh_venv: Any, tmp_path: Path) -> None:
    venv = fresh_venv("nexus-rt-core", "nexus-rt-tool-file")
    tools = venv.run("nexus", "tools", cwd=tmp_path)
    assert tools.returncode == 0, tools.stderr
    listed = {line.split()[0]: line.split()[1] for line in tools.stdout.splitlines()}
    assert sorted(name for name, plugin in listed.items() if plugin == "nexus.tool.file") == ALL_TOOLS
    assert "shell" not in listed

    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "a.txt").write_text("hello\n")
    call = venv.run("nexus", "--workspace", str(workspace), "call", "read", '{"path": "a.txt"}', "--json", cwd=tmp_path)
    assert call.returncode == 0, call.stderr
    assert json.loads(call.stdout)["output_structured"]["content"] == "hello\n"
    outside = venv.run("nexus", "--workspace", str(workspace), "call", "read", '{"path": "../ws2/x"}', cwd=tmp_path)
    assert outside.returncode == 1 and "../ws2/x: outside the workspace" in outside.stderr


def test_mcp_hints_say_which_tools_only_read(files: Nexus) -> None:
    hints = {t["name"]: t.get("annotations", {}) for t in files.schemas("mcp")}
    assert {name for name, h in hints.items() if h.get("readOnlyHint")} == {"read", "list", "glob", "grep"}
    assert {name for name, h in hints.items() if h.get("destructiveHint")} == {"write", "edit", "apply_patch"}
