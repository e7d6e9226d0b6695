"""Config from YAML or a dict: the core keys, plus one section per plugin under `plugins:`.

Every key is optional. Unknown keys and wrong types are errors naming their path, and for YAML
the file and line. Plugin sections are checked later, against the schema each plugin declares
(`nexus_config_schema`), because only then is it known which plugins are installed.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import attrs
import yaml

from ._schema import apply_defaults, compile_schema, explain

CORE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "workspace": {"type": "string", "default": "."},
        "session_dir": {"type": "string", "default": ".nexus/sessions"},
        "skills": {"type": "array", "items": {"type": "string"}, "default": ["./skills"]},
        "plugins": {
            "type": "object",
            "properties": {
                "active": {"type": ["array", "null"], "items": {"type": "string"}},
                "blocked": {"type": "array", "items": {"type": "string"}, "default": []},
            },
            # every other key is a plugin id; its section must be an object (or empty)
            "additionalProperties": {"type": ["object", "null"]},
            "default": {},
        },
    },
}
_CORE_VALIDATOR = compile_schema(CORE_SCHEMA)
RESERVED_PLUGIN_KEYS = frozenset({"active", "blocked"})


class ConfigError(Exception):
    """Config that cannot be used. `problems` are lines of the form `where: what is wrong`."""

    def __init__(self, problems: list[str], source: str | None = None) -> None:
        self.problems = problems
        self.source = source
        super().__init__("\n".join(problems))


@attrs.define
class NexusConfig:
    """Validated core config. Paths are absolute: relative ones resolve against the folder of
    the config file (or the current folder for a dict)."""

    workspace: Path
    session_dir: Path
    skills: list[Path]
    active: list[str] | None
    blocked: list[str]
    plugin_sections: dict[str, dict[str, Any]]
    source: str | None = None
    _lines: dict[tuple[str, ...], int] = attrs.field(factory=dict, repr=False)

    def where(self, path: tuple[str, ...]) -> str:
        """`file:line` for a key path, as precisely as the YAML tells (else the file name)."""
        if not self.source:
            return ""
        return f"{self.source}:{_nearest(self._lines, path)}"

    def validate_plugin_section(self, plugin_id: str, schema: dict[str, Any] | None) -> dict[str, Any]:
        """The plugin's section checked against its schema, defaults applied, or ConfigError."""
        section = self.plugin_sections.get(plugin_id) or {}
        if schema is None:
            if section:
                key = sorted(section)[0]
                raise ConfigError(
                    [self._problem(("plugins", plugin_id, key), f"plugins.{plugin_id}.{key}: unknown key "
                                   f"(plugin {plugin_id} takes no settings)")],
                    self.source,
                )
            return {}
        schema = {"additionalProperties": False, **schema}
        validator = compile_schema(schema)
        errors = list(validator.iter_errors(section))
        if errors:
            raise ConfigError(
                [self._problem(("plugins", plugin_id, *path), text)
                 for path, text in explain(errors, prefix=f"plugins.{plugin_id}")],
                self.source,
            )
        return apply_defaults(schema, section)

    def _problem(self, path: tuple[str, ...], text: str) -> str:
        where = self.where(path) if self.source else ""
        return f"{where}: {text}" if where else text


def _line_map(node: yaml.Node, path: tuple[str, ...] = ()) -> dict[tuple[str, ...], int]:
    lines = {path: node.start_mark.line + 1}
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key = (*path, str(key_node.value))
            lines.update(_line_map(value_node, key))
            lines[key] = key_node.start_mark.line + 1
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            lines.update(_line_map(item, (*path, str(i))))
    return lines


def _empty_sections_as_dicts(data: dict[str, Any]) -> dict[str, Any]:
    """`plugins: {nexus.tool.shell: }` (an empty section in YAML) means `{}`, not null."""
    plugins = data.get("plugins")
    if isinstance(plugins, dict):
        data["plugins"] = {k: ({} if v is None and k not in RESERVED_PLUGIN_KEYS else v)
                           for k, v in plugins.items()}
    return data


def load_config(source: str | os.PathLike[str] | dict[str, Any] | None = None) -> NexusConfig:
    """Read and check the core part of a config: a YAML file's path, a dict, or None for defaults."""
    lines: dict[tuple[str, ...], int] = {}
    origin: str | None = None
    base = Path.cwd()
    if source is None:
        data: Any = {}
    elif isinstance(source, dict):
        data = source
    else:
        path = Path(source)
        origin = str(source)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError([f"{origin}: cannot read config: {exc.strerror or exc}"], origin) from None
        try:
            node = yaml.compose(text)
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f"{origin}:{mark.line + 1}" if mark else origin
            problem = getattr(exc, "problem", None) or str(exc)
            raise ConfigError([f"{where}: invalid YAML: {problem}"], origin) from None
        if node is not None:
            lines = _line_map(node)
        base = path.resolve().parent
        if data is None:
            data = {}
    if not isinstance(data, dict):
        where = f"{origin}:1: " if origin else ""
        raise ConfigError([f"{where}config must be a mapping of keys, got {type(data).__name__}"], origin)
    data = _empty_sections_as_dicts(dict(data))

    errors = list(_CORE_VALIDATOR.iter_errors(data))
    if errors:
        raise ConfigError(
            [(f"{origin}:{_nearest(lines, path)}: " if origin else "") + text
             for path, text in explain(errors)],
            origin,
        )

    data = apply_defaults(CORE_SCHEMA, data)
    plugins = data["plugins"]
    sections = {k: (v or {}) for k, v in plugins.items() if k not in RESERVED_PLUGIN_KEYS}
    return NexusConfig(
        workspace=(base / os.path.expanduser(data["workspace"])).resolve(),
        session_dir=(base / os.path.expanduser(data["session_dir"])),
        skills=[(base / os.path.expanduser(s)) for s in data["skills"]],
        active=plugins.get("active"),
        blocked=list(plugins.get("blocked", [])),
        plugin_sections=sections,
        source=origin,
        lines=lines,
    )


def _nearest(lines: dict[tuple[str, ...], int], path: tuple[str, ...]) -> int:
    for n in range(len(path), -1, -1):
        if tuple(path[:n]) in lines:
            return lines[tuple(path[:n])]
    return 1
