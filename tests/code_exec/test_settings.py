"""run_code's settings class (`CodeExecSettings`, the one plugin shape): the defaults that are not
constants, and the checks the schema cannot make for a class built by hand. That a wrong setting
in a config file is a config error naming its key and line is tests/test_plugin_settings.py's."""

from __future__ import annotations

import os

import pytest
from nexus_core.plugins import SettingError, settings_schema

from nexus_core import Nexus
from nexus_tool_code_exec import CodeExecSettings, engine_for


def test_max_workers_defaults_to_this_machines_cpu_count_in_the_class_and_the_schema() -> None:
    assert CodeExecSettings().max_workers == (os.cpu_count() or 1)
    assert settings_schema(CodeExecSettings)["properties"]["max_workers"]["default"] == (os.cpu_count() or 1)


def test_cpu_seconds_defaults_to_a_second_past_the_timeout_worked_out_once() -> None:
    assert CodeExecSettings().cpu_seconds is None
    assert CodeExecSettings(timeout_seconds=7.5).cpu_limit == 8
    assert CodeExecSettings(timeout_seconds=7.5, cpu_seconds=3).cpu_limit == 3
    with Nexus({"skills": [], "plugins": {"active": ["nexus.tool.code_exec"],
                                          "nexus.tool.code_exec": {"timeout_seconds": 4}}}) as nx:
        engine = engine_for(nx)
        assert engine is not None
        assert engine.settings.cpu_seconds == 5.0 and engine.policy()["limits"]["cpu_seconds"] == 5


def test_require_names_sandbox_layers_and_a_class_built_by_hand_is_checked_too() -> None:
    schema = settings_schema(CodeExecSettings)["properties"]["require"]
    assert schema["items"] == {"enum": ["env", "rlimits", "net", "uid", "fs", "seccomp"]}
    assert CodeExecSettings(require=("net", "fs")).require == ("net", "fs")
    with pytest.raises(SettingError) as info:
        CodeExecSettings(require=("net", "landlock"))
    assert info.value.key == ("require", 1)
    assert info.value.problem_in("nexus.tool.code_exec")[1] == (
        "plugins.nexus.tool.code_exec.require[1]: 'landlock' is not a sandbox layer (one of env, rlimits, net, uid, "
        "fs, seccomp)")


def test_a_bad_ray_address_is_a_config_error_naming_address() -> None:
    assert CodeExecSettings(launcher="ray").address == "auto"
    assert CodeExecSettings(launcher="ray", address="10.0.0.5:6379").address == "10.0.0.5:6379"
    assert CodeExecSettings(launcher="ray", address="ray://head:10001").address == "ray://head:10001"
    with pytest.raises(SettingError) as info:
        CodeExecSettings(launcher="ray", address="not an address")
    assert info.value.key == ("address",)
    assert info.value.problem_in("nexus.tool.code_exec")[1] == (
        "plugins.nexus.tool.code_exec.address: 'not an address' is not auto, host:port or ray://host:port")
