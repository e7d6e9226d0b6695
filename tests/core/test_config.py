"""Config from YAML or a dict: every error names its key path (and file:line for YAML), each
plugin gets its own validated section with defaults, and nothing wrong is silently ignored."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pluggy
import pytest
from nexus_core._config import close_schema, default_session_dir

from nexus_core import ConfigError, Nexus, hookimpl
from nexus_core._config import load_config

if TYPE_CHECKING:
    from conftest import FakePlugins

CODE_EXEC_LIKE = """
    from nexus_core import hookimpl

    configured = []

    @hookimpl
    def nexus_config_schema():
        return {
            "type": "object",
            "properties": {
                "timeout_seconds": {"type": "integer", "minimum": 1, "default": 30},
                "allowed_packages": {"type": "array", "items": {"type": "string"}, "default": ["json"]},
                "limits": {
                    "type": "object",
                    "properties": {"memory_mb": {"type": "integer", "default": 256}},
                    "default": {},
                },
            },
        }

    @hookimpl
    def nexus_configure(config, nexus):
        configured.append(config)
"""


def write(tmp_path: Path, text: str, name: str = "nexus.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


def problems(exc: pytest.ExceptionInfo[ConfigError]) -> list[str]:
    return exc.value.problems


class Settings:
    """A host plugin with a config schema, remembering what it was configured with."""

    NEXUS_PLUGIN_ID = "settings"

    def __init__(self, schema: dict[str, Any] | None) -> None:
        self.schema = schema
        self.configured: list[dict[str, Any]] = []

    @hookimpl
    def nexus_config_schema(self) -> dict[str, Any] | None:
        return self.schema

    @hookimpl
    def nexus_configure(self, config: dict[str, Any]) -> None:
        self.configured.append(config)


# -- the core keys ----------------------------------------------------------------------------


def test_defaults_without_any_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    sources: list[dict[str, Any] | None] = [None, {}]
    for source in sources:
        cfg = load_config(source)
        assert cfg.workspace == tmp_path.resolve()
        assert cfg.session_dir == default_session_dir(tmp_path.resolve())
        assert cfg.skills == [tmp_path / "skills"]
        assert cfg.active is None and cfg.blocked == [] and cfg.plugin_sections == {}
        assert cfg.source is None


def test_relative_paths_resolve_against_the_config_files_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "conf").mkdir()
    path = write(tmp_path / "conf", """
        workspace: ../ws
        session_dir: state
        skills: [my_skills, /abs/skills]
    """)
    monkeypatch.chdir("/")
    cfg = load_config(path)
    assert cfg.workspace == (tmp_path / "ws").resolve()
    assert cfg.session_dir == tmp_path / "conf" / "state"
    assert cfg.skills == [tmp_path / "conf" / "my_skills", Path("/abs/skills")]


def test_empty_yaml_file_and_empty_plugins_key_mean_defaults(tmp_path: Path) -> None:
    assert load_config(write(tmp_path, "")).plugin_sections == {}
    cfg = load_config(write(tmp_path, "plugins:\n", "b.yaml"))
    assert cfg.active is None and cfg.plugin_sections == {}


def test_unknown_key_in_a_dict_names_its_path() -> None:
    with pytest.raises(ConfigError) as info:
        load_config({"worksapce": ".", "plugins": {"blocked": "x"}})
    assert problems(info) == ["plugins.blocked: expected array, got 'x'", "worksapce: unknown key"]


def test_unknown_key_and_wrong_type_in_yaml_name_file_and_line(tmp_path: Path) -> None:
    path = write(tmp_path, """
        workspace: .
        skills:
          - ./skills
          - 7
        sesion_dir: x
    """)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert problems(info) == [f"{path}:4: skills[1]: expected string, got 7", f"{path}:5: sesion_dir: unknown key"]
    assert info.value.source == str(path)


def test_malformed_yaml_is_an_error_with_its_line(tmp_path: Path) -> None:
    path = write(tmp_path, """
        workspace: .
        plugins:
          active: [a, b
        skills: []
    """)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    (problem,) = problems(info)
    assert problem.startswith((f"{path}:4: invalid YAML:", f"{path}:5: invalid YAML:"))  # where the list ends


def test_a_key_given_twice_is_an_error_not_a_silent_override(tmp_path: Path) -> None:
    path = write(tmp_path, """
        workspace: .
        plugins:
          blocked: []
          blocked: [x]
    """)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert problems(info) == [f"{path}:4: plugins.blocked: duplicate key (first given at line 3)"]


def test_config_that_is_not_a_mapping(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"a.yaml:1: config must be a mapping of keys, got list"):
        load_config(write(tmp_path, "- a\n- b\n", "a.yaml"))


def test_missing_config_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="nope.yaml: cannot read config: No such file"):
        load_config(tmp_path / "nope.yaml")


def test_non_string_keys_are_reported_not_crashed_on(tmp_path: Path) -> None:
    path = write(tmp_path, "1: a\nzz: b\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert problems(info) == [f"{path}:1: 1: unknown key", f"{path}:2: zz: unknown key"]


# -- plugin sections --------------------------------------------------------------------------


def test_nexus_config_schema_wrong_type_names_path_and_line(tmp_path: Path, fake_plugins: FakePlugins) -> None:
    fake_plugins.add("fake.code_exec", CODE_EXEC_LIKE)
    path = write(tmp_path, """
        plugins:
          active: [fake.code_exec]
          fake.code_exec:
            timeout_seconds: ten
            limits:
              memory_gb: 1
    """)
    with pytest.raises(ConfigError) as info:
        Nexus.from_config(path)
    assert problems(info) == [
        f"{path}:4: plugins.fake.code_exec.timeout_seconds: expected integer, got 'ten'",
        f"{path}:6: plugins.fake.code_exec.limits.memory_gb: unknown key",
    ]


def test_nexus_configure_gets_the_validated_section_with_defaults(tmp_path: Path, fake_plugins: FakePlugins) -> None:
    module = fake_plugins.add("fake.code_exec", CODE_EXEC_LIKE)
    path = write(tmp_path, """
        plugins:
          active: [fake.code_exec]
          fake.code_exec:
            timeout_seconds: 10
    """)
    with Nexus.from_config(path) as nx:
        expected = {"timeout_seconds": 10, "allowed_packages": ["json"], "limits": {"memory_mb": 256}}
        assert nx.plugin_config("fake.code_exec") == expected
        assert sys.modules[module].configured == [expected]
        assert nx.plugin_config("not.a.plugin") == {}


def test_nexus_configure_of_a_plugin_without_a_section_gets_all_defaults(fake_plugins: FakePlugins) -> None:
    module = fake_plugins.add("fake.code_exec", CODE_EXEC_LIKE)
    with Nexus.from_config({"plugins": {"active": ["fake.code_exec"]}}):
        assert sys.modules[module].configured == [
            {"timeout_seconds": 30, "allowed_packages": ["json"], "limits": {"memory_mb": 256}}
        ]


def test_a_section_for_a_plugin_that_is_not_installed_is_an_error(tmp_path: Path, fake_plugins: FakePlugins) -> None:
    fake_plugins.add("fake.code_exec", CODE_EXEC_LIKE)
    path = write(tmp_path, """
        plugins:
          active: [fake.code_exec, fake.nope]
          fake.code_exc:
            timeout_seconds: 1
    """)
    with pytest.raises(ConfigError) as info:
        Nexus.from_config(path)
    assert problems(info) == [
        f"{path}:2: plugins.active[1]: no installed plugin is called 'fake.nope'",
        (f"{path}:3: plugins.fake.code_exc: no installed plugin is called 'fake.code_exc' "
         "(did you mean 'fake.code_exec'?)"),
    ]


def test_a_section_for_a_plugin_the_host_passes_in_is_allowed() -> None:
    plugin = Settings({"type": "object", "properties": {"level": {"type": "string", "default": "low"}}})
    with Nexus({"plugins": {"active": [], "settings": {"level": "high"}}}, plugins=[plugin]) as nx:
        assert plugin.configured == [{"level": "high"}]
        assert nx.plugin_config("settings") == {"level": "high"}


def test_a_section_for_a_plugin_without_a_schema_lists_every_key() -> None:
    with pytest.raises(ConfigError) as info:
        Nexus({"plugins": {"active": [], "settings": {"b": 1, "a": 2}}}, plugins=[Settings(None)])
    assert problems(info) == [
        "plugins.settings.a: unknown key (plugin settings takes no settings)",
        "plugins.settings.b: unknown key (plugin settings takes no settings)",
    ]


def test_problems_of_all_plugins_come_in_one_error() -> None:
    one = Settings({"type": "object", "properties": {"n": {"type": "integer"}}})
    two = Settings({"type": "object", "properties": {"s": {"type": "string"}}})
    two.NEXUS_PLUGIN_ID = "other"
    with pytest.raises(ConfigError) as info:
        Nexus({"plugins": {"active": [], "settings": {"n": "x"}, "other": {"s": 1}}}, plugins=[one, two])
    assert sorted(problems(info)) == ["plugins.other.s: expected string, got 1",
                                      "plugins.settings.n: expected integer, got 'x'"]
    assert one.configured == [] and two.configured == []  # nothing configured from a bad config


@pytest.mark.parametrize(
    ("schema", "section"),
    [
        # a composed schema says itself which keys it takes: no additionalProperties is forced on
        ({"$ref": "#/$defs/c", "$defs": {"c": {"type": "object", "properties": {"a": {"type": "integer"}}}}},
         {"a": 1}),
        ({"allOf": [{"properties": {"a": {"type": "integer"}}}, {"properties": {"b": {"type": "integer"}}}]},
         {"a": 1, "b": 2}),
        ({"type": "object", "properties": {"a": {}}, "patternProperties": {"^x_": {"type": "integer"}}},
         {"a": 1, "x_b": 2}),
        ({"type": "object", "properties": {"a": {}}, "additionalProperties": True}, {"a": 1, "zzz": 2}),
        ({"type": "object"}, {"anything": 1}),  # no properties at all: free-form settings
    ],
)
def test_nexus_config_schema_is_taken_as_written_when_it_says_which_keys_it_takes(
    schema: dict[str, Any], section: dict[str, Any]
) -> None:
    plugin = Settings(schema)
    with Nexus({"plugins": {"active": [], "settings": section}}, plugins=[plugin]):
        assert plugin.configured == [section]


def test_close_schema_closes_plain_object_schemas_at_every_level() -> None:
    schema = {
        "type": "object",
        "properties": {
            "a": {"type": "object", "properties": {"b": {"type": "integer"}}},
            "list": {"type": "array", "items": {"type": "object", "properties": {"c": {}}}},
            "open": {"type": "object", "properties": {"d": {}}, "additionalProperties": {"type": "string"}},
        },
    }
    closed = close_schema(schema)
    assert closed["additionalProperties"] is False
    assert closed["properties"]["a"]["additionalProperties"] is False
    assert closed["properties"]["list"]["items"]["additionalProperties"] is False
    assert closed["properties"]["open"]["additionalProperties"] == {"type": "string"}
    assert "additionalProperties" not in schema  # the plugin's own schema is not changed


def test_nested_unknown_key_in_a_list_item_names_the_index() -> None:
    schema = {"type": "object", "properties": {"rules": {"type": "array", "items": {
        "type": "object", "properties": {"name": {"type": "string"}}}}}}
    with pytest.raises(ConfigError) as info:
        Nexus({"plugins": {"active": [], "settings": {"rules": [{"name": "a"}, {"nmae": "b"}]}}},
              plugins=[Settings(schema)])
    assert problems(info) == ["plugins.settings.rules[1].nmae: unknown key"]


def test_an_invalid_nexus_config_schema_is_the_plugins_fault_not_the_configs(fake_plugins: FakePlugins) -> None:
    fake_plugins.add("fake.badschema", """
        from nexus_core import hookimpl

        @hookimpl
        def nexus_config_schema():
            return {"type": "object", "properties": {"n": {"type": "integr"}}}
    """)
    fake_plugins.add("fake.fine", "")
    with Nexus({"plugins": {"active": ["fake.badschema", "fake.fine"]}}) as nx:
        (failure,) = nx.failures
        assert failure.name == "fake.badschema" and failure.phase == "config"
        assert "not valid JSON Schema at properties/n/type" in failure.error
        assert [p.name for p in nx.plugins() if p.status == "active"] == ["fake.fine"]
    # the host's own plugin raises instead
    with pytest.raises(pluggy.PluginValidationError, match="plugin 'settings': its config schema is not valid"):
        Nexus({"plugins": {"active": []}}, plugins=[Settings({"type": "objekt"})])
    with pytest.raises(pluggy.PluginValidationError, match="returned list, not a JSON Schema"):
        Nexus({"plugins": {"active": []}}, plugins=[Settings([1])])  # type: ignore[arg-type]


def test_nexus_config_schema_that_raises_leaves_the_plugin_out(fake_plugins: FakePlugins) -> None:
    fake_plugins.add("fake.raises", """
        from nexus_core import hookimpl

        @hookimpl
        def nexus_config_schema():
            raise RuntimeError("no schema today")
    """)
    with Nexus({"plugins": {"active": ["fake.raises"]}}) as nx:
        (failure,) = nx.failures
        assert (failure.name, failure.phase, failure.error) == ("fake.raises", "config", "RuntimeError: no schema today")
