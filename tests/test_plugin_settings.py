"""Every first-party plugin has the one plugin shape (issue 22, item 5): a `Plugin` class with an
attrs settings class from which its config schema is derived; a setting wrong in a way the schema
cannot say (one setting against another, a list entry that does not parse, a program that is not
there) is a config error naming `plugins.<id>.<key>` with the file and line, from Python and from
the `nexus` CLI (exit 2), not a plugin dropped as failed; and the defaults the docs state are the
ones the schema has, written once in the settings class."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import pytest
import yaml
from nexus_core.plugins import Plugin, settings_schema

from nexus_core import ConfigError, Nexus

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
NEXUS_CLI = Path(sys.executable).parent / "nexus"

#: the plugins of this repository's packages, beside the core's built-ins (tests/core/test_plugin_shape.py)
CONVERTED = {"nexus.tool.shell", "nexus.tool.file", "nexus.tool.web", "nexus.agent", "nexus.provider.openai",
             "nexus.provider.anthropic", "nexus.provider.gemini", "nexus.otel", "nexus.durable",
             "nexus.tool.code_exec", "nexus.mcp.client"}
#: not converted yet: their packages were being changed by other slices at the time (none now)
NOT_YET: set[str] = set()
#: plugins that take no settings of their own (`Plugin[None]`): nexus.ray is chosen in code_exec's
#: section (`launcher: ray`, `address`), not in its own
NO_SETTINGS = {"nexus.ray"}


def plugin_class(plugin_id: str) -> type[Plugin[Any]]:
    [ep] = [ep for ep in entry_points(group="nexus.plugins") if ep.name == plugin_id]
    loaded = ep.load()
    assert isinstance(loaded, type) and issubclass(loaded, Plugin), f"{plugin_id}: {ep.value} is not a Plugin class"
    return loaded


def schema_of(plugin_id: str) -> dict[str, Any]:
    settings = plugin_class(plugin_id).settings_class
    assert settings is not None, plugin_id
    return settings_schema(settings)


def defaults(plugin_id: str) -> dict[str, Any]:
    return {key: prop["default"] for key, prop in schema_of(plugin_id)["properties"].items()}


def test_every_first_party_plugin_is_a_plugin_class_with_a_settings_class() -> None:
    packages = {p.name for p in REPO.glob("nexus_*")} - {"nexus_core"}
    ours = {ep.name for ep in entry_points(group="nexus.plugins") if ep.value.split(":")[0].split(".")[0] in packages}
    assert ours == CONVERTED | NOT_YET | NO_SETTINGS
    for plugin_id in sorted(NO_SETTINGS):
        assert plugin_class(plugin_id).settings_class is None, plugin_id
    for plugin_id in sorted(CONVERTED):
        cls = plugin_class(plugin_id)
        assert cls.NEXUS_PLUGIN_ID == plugin_id
        schema = schema_of(plugin_id)
        with Nexus({"skills": [], "plugins": {"active": [plugin_id]}}) as nx:
            plugin = nx.plugin(plugin_id)
            assert plugin.nexus_config_schema() == schema  # derived, not written beside the class
            assert plugin.settings == cls.settings_class()  # nothing configured: the class's defaults
        # every setting has its default in the class, so none is required and the docs can state it
        assert "required" not in schema and all("default" in p for p in schema["properties"].values()), plugin_id
    for plugin_id in sorted(NOT_YET):  # a reminder: once converted, they move to CONVERTED
        [ep] = [ep for ep in entry_points(group="nexus.plugins") if ep.name == plugin_id]
        loaded = ep.load()
        assert not (isinstance(loaded, type) and issubclass(loaded, Plugin)), f"{plugin_id} is converted: move it"


# -- a wrong setting is a config error naming its key ---------------------------------------------

#: (plugin, its section as YAML lines, the line of the key, the problem after `file:line: `)
WRONG = [
    ("nexus.tool.shell", ["max_timeout_seconds: 5", "timeout_seconds: 9"], 6,
     "plugins.nexus.tool.shell.timeout_seconds: 9 is more than max_timeout_seconds (5)"),
    ("nexus.tool.shell", ["shell: no-such-shell-here"], 5,
     "plugins.nexus.tool.shell.shell: cannot find 'no-such-shell-here'"),
    ("nexus.tool.web", ["timeout_seconds: 200"], 5,
     "plugins.nexus.tool.web.timeout_seconds: 200 is more than max_timeout_seconds (120)"),
    ("nexus.tool.web", ["max_bytes_limit: 10", "max_bytes: 100"], 6,
     "plugins.nexus.tool.web.max_bytes: 100 is more than max_bytes_limit (10)"),
    ("nexus.tool.web", ["allow_hosts:", "  - localhost", "  - localhost:8080"], 7,
     ("plugins.nexus.tool.web.allow_hosts[1]: 'localhost:8080' is not a host name, '*.' and a domain, an IP address "
      "or a network (such as 10.0.0.0/8) (ports belong in allow_ports)")),
    ("nexus.tool.file", ["protected_paths: [ok, /etc/x]"], 5,
     ("plugins.nexus.tool.file.protected_paths[1]: '/etc/x': patterns are matched against paths relative to the "
      "workspace")),
    ("nexus.agent", ["max_turns: 0"], 5, "plugins.nexus.agent.max_turns: expected a number >= 1, got 0"),
    ("nexus.provider.openai", ["api: soap"], 5,
     "plugins.nexus.provider.openai.api: expected one of 'chat', 'responses', got 'soap'"),
    ("nexus.provider.anthropic", ["api_key_env: 1-KEY"], 5, "plugins.nexus.provider.anthropic.api_key_env: "),
    ("nexus.provider.gemini", ["api_version: beta"], 5, "plugins.nexus.provider.gemini.api_version: "),
    ("nexus.tool.code_exec", ["require:", "  - net", "  - nope"], 7,
     "plugins.nexus.tool.code_exec.require[1]: expected one of 'env', 'rlimits', 'net', 'uid', 'fs', 'seccomp', got 'nope'"),
    ("nexus.tool.code_exec", ["launcher: fork"], 5,
     "plugins.nexus.tool.code_exec.launcher: expected one of 'auto', 'zygote', 'spawn', 'ray', got 'fork'"),
    # a nested settings class's check names its key from the section (a server of `servers`)
    ("nexus.mcp.client", ["servers:", "  time:", "    command: uvx", "    url: http://127.0.0.1:1/mcp"], 6,
     ("plugins.nexus.mcp.client.servers.time: give either `command` (a stdio server) or `url` (a streamable HTTP "
      "server), not both")),
    ("nexus.mcp.client", ["servers:", "  docs:", "    url: http://127.0.0.1:1/mcp",
                          "    headers: {Authorization: 'Bearer ${NEXUS_TEST_UNSET_VAR}'}"], 8,
     ("plugins.nexus.mcp.client.servers.docs.headers.Authorization: environment variable NEXUS_TEST_UNSET_VAR is not "
      "set (it is used as ${NEXUS_TEST_UNSET_VAR})")),
    ("nexus.mcp.client", ["serve:", "  token: abc", "  token_file: token.txt"], 7,
     "plugins.nexus.mcp.client.serve.token_file: give `token` or `token_file`, not both"),
]
IDS = [f"{plugin}-{lines[-1].split(':')[0].strip(' -')}" for plugin, lines, _, _ in WRONG]


def write_config(tmp_path: Path, plugin: str, lines: list[str]) -> Path:
    config = tmp_path / "nexus.yaml"
    section = "".join(f"    {line}\n" for line in lines)
    config.write_text(f"skills: []\nplugins:\n  active: [{plugin}]\n  {plugin}:\n{section}", encoding="utf-8")
    return config


@pytest.mark.parametrize(("plugin", "lines", "line", "problem"), WRONG, ids=IDS)
def test_a_wrong_setting_is_a_config_error_naming_the_key_and_line(tmp_path: Path, plugin: str, lines: list[str],
                                                                   line: int, problem: str) -> None:
    config = write_config(tmp_path, plugin, lines)
    with pytest.raises(ConfigError) as info:
        Nexus.from_config(config)
    [found] = info.value.problems
    assert found.startswith(f"{config}:{line}: {problem}"), found


@pytest.mark.parametrize(("plugin", "lines", "line", "problem"), WRONG, ids=IDS)
def test_the_cli_exits_2_naming_the_key_and_line(tmp_path: Path, plugin: str, lines: list[str], line: int,
                                                 problem: str) -> None:
    config = write_config(tmp_path, plugin, lines)
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEXUS_")}
    proc = subprocess.run([str(NEXUS_CLI), "--trust-config", "--config", str(config), "tools"], capture_output=True, text=True,
                          cwd=tmp_path, env=env, timeout=120, check=False)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert f"nexus: config error: {config}:{line}: {problem}" in proc.stderr, proc.stderr
    assert "failed" not in proc.stderr  # a config error, not a plugin left out


# -- the docs state the schema's defaults ---------------------------------------------------------


def configuration_block(page: str, plugin_id: str) -> dict[str, Any]:
    """The settings of the ```yaml block under a page's `## Configuration` heading."""
    text = (DOCS / page).read_text(encoding="utf-8")
    section = text[text.index("\n## Configuration\n"):]
    block = re.search(r"```yaml\n(.*?)```", section, re.DOTALL)
    assert block is not None, page
    settings: dict[str, Any] = yaml.safe_load(block.group(1))["plugins"][plugin_id]
    return settings


def table_after(page: str, heading: str) -> dict[str, str]:
    """`| key | default | ... |` rows of the table that follows `heading` on the page."""
    text = (DOCS / page).read_text(encoding="utf-8")
    rows = text[text.index(heading):].split("\n\n")[1]
    table = {}
    for row in rows.splitlines()[2:]:
        cells = [c.strip() for c in row.strip("|").split("|")]
        table[cells[0].strip("`")] = cells[1].strip("`")
    return table


def listed_in_prose(page: str, start: str, keys: set[str]) -> dict[str, str]:
    """`key` (default, ...) mentions of a paragraph that starts with `start`."""
    text = (DOCS / page).read_text(encoding="utf-8")
    paragraph = text[text.index(start):].split("\n\n")[0]
    found = {m.group(1): m.group(2) for m in re.finditer(r"`(\w+)`\s+\(`?([^`):,]+)`?", paragraph)}
    return {k: v for k, v in found.items() if k in keys}


@pytest.mark.parametrize(("plugin_id", "page"), [
    ("nexus.tool.shell", "tool-shell.md"), ("nexus.tool.file", "tool-file.md"), ("nexus.tool.web", "tool-web.md"),
])
def test_a_tool_pages_configuration_block_states_every_setting_and_its_default(plugin_id: str, page: str) -> None:
    assert configuration_block(page, plugin_id) == defaults(plugin_id)


def test_the_agent_page_states_the_agents_and_the_providers_defaults() -> None:
    agent = {k: yaml.safe_load(v) for k, v in table_after("agent.md", "Settings, `plugins.nexus.agent`:").items()}
    assert agent.pop("system_prompt") == "a short generic one"
    expected = defaults("nexus.agent")
    assert expected.pop("system_prompt").startswith("You are an agent")
    assert agent == expected
    openai = table_after("agent.md", "`plugins.nexus.provider.openai` (Chat Completions")
    assert {k: yaml.safe_load(v) for k, v in openai.items()} == defaults("nexus.provider.openai")
    for plugin_id in ("nexus.provider.anthropic", "nexus.provider.gemini"):
        wanted = defaults(plugin_id)
        stated = listed_in_prose("agent.md", f"`plugins.{plugin_id}` (", set(wanted))
        assert {k: yaml.safe_load(v) for k, v in stated.items()} == wanted, plugin_id


def setting_names(schema: dict[str, Any]) -> set[str]:
    """The keys a section's schema takes, those of its nested settings too (a server's, in
    `servers`)."""
    names = set(schema.get("properties", {}))
    nested = [*schema.get("properties", {}).values(), *schema.get("anyOf", ())]
    if isinstance(schema.get("additionalProperties"), dict):
        nested.append(schema["additionalProperties"])
    for sub in nested:
        names |= setting_names(sub)
    return names


def test_the_configuration_reference_lists_every_setting() -> None:
    text = (DOCS / "configuration.md").read_text(encoding="utf-8")
    for plugin_id in sorted(CONVERTED):
        [row] = [line for line in text.splitlines() if line.startswith(f"| `{plugin_id}` |")]
        listed = set(re.findall(r"`(\w+)`", row.split("|")[2]))
        assert listed == setting_names(schema_of(plugin_id)), plugin_id
