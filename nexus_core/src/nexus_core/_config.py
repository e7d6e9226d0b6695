"""Config from YAML or a dict: the core keys, plus one section per plugin under `plugins:`.

Every key is optional. Unknown keys and wrong types are errors naming their path, and for YAML
the file and line. Plugin sections are checked later, against the schema each plugin declares
(`nexus_config_schema`), because only then is it known which plugins are installed.

YAML is read with bounds (`_yaml.load_yaml`): a file's size, its nesting, and the number of values it
stands for once its aliases are expanded, so a few hundred bytes of aliases (a "billion laughs")
are an error naming the file and line rather than gigabytes of memory. SKILL.md front matter is
read the same way.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from ._schema import SchemaError, apply_defaults, compile_schema, explain, format_path

if TYPE_CHECKING:  # YAML is imported when a config file is read, not at start-up
    import yaml
    from jsonschema.protocols import Validator

CORE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "workspace": {"type": "string", "default": "."},
        "session_dir": {"type": "string"},  # default: default_session_dir(workspace)
        "skills": {"type": "array", "items": {"type": "string"}, "default": ["./skills"]},
        # the model an agent uses, as provider:model (`nexus chat --model` wins over it)
        "model": {"type": ["string", "null"], "default": None},
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
        # per tool, by name: where a model meets it, and who may call it in a provider's own
        # code execution (see ToolDef.exposure and docs/configuration.md)
        "tools": {
            "type": "object",
            "additionalProperties": {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "exposure": {"enum": ["both", "direct", "code"]},
                    "allowed_callers": {"type": "array", "items": {"type": "string"}, "minItems": 1},
                },
            },
            "default": {},
        },
    },
}


def split_model(spec: str) -> tuple[str, str]:
    """`"openai:gpt-4.1"` -> `("openai", "gpt-4.1")`. The provider is what comes before the first
    colon, so a model name may hold colons of its own (`"openai:llama3:8b"` on a local server).
    Raises ValueError for a spec without a provider or a model."""
    provider, sep, model = spec.partition(":")
    if not sep or not provider.strip() or not model.strip():
        raise ValueError(f"model {spec!r} is not provider:model (for example openai:gpt-4.1 or "
                         "anthropic:claude-sonnet-4-5)")
    return provider.strip(), model.strip()


@functools.cache
def _core_validator() -> Validator:
    return compile_schema(CORE_SCHEMA)

RESERVED_PLUGIN_KEYS = frozenset({"active", "blocked"})


class InvalidPluginSchema(Exception):
    """A plugin's `nexus_config_schema` is not a usable JSON Schema (the plugin's fault)."""


#: Keywords that let keys in by some other route than `properties`; a schema using any of them
#: says for itself which keys it accepts, and is left as it is.
_OPEN_KEYWORDS = frozenset({
    "additionalProperties", "patternProperties", "unevaluatedProperties", "propertyNames",
    "$ref", "$dynamicRef", "allOf", "anyOf", "oneOf", "not", "if", "then", "else",
    "dependentSchemas",
})


def close_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """A copy of a plugin's config schema in which each plain object schema (one with
    `properties` and none of the keywords that admit other keys) refuses unknown keys, at the
    top and in nested `properties` / `items`. So a typo in a setting is an error by default,
    while a schema that composes (`$ref`, `allOf`, ...) or opens itself (`additionalProperties`,
    `patternProperties`) means exactly what it says."""
    if not isinstance(schema, dict):
        return schema
    out = dict(schema)
    props = schema.get("properties")
    if isinstance(props, dict):
        out["properties"] = {k: close_schema(v) for k, v in props.items()}
        if not _OPEN_KEYWORDS & schema.keys():
            out["additionalProperties"] = False
    if isinstance(schema.get("items"), dict):
        out["items"] = close_schema(schema["items"])
    return out


#: the largest config file read, in bytes: a config is a page or two of YAML (parsing 256 KiB of
#: YAML takes PyYAML about 2 s)
MAX_CONFIG_BYTES = 256 << 10
def default_session_dir(workspace: Path) -> Path:
    """Where a workspace's sessions are kept when the config names no `session_dir`: a per-user
    state folder outside every workspace, `$XDG_STATE_HOME/nexus/sessions/<name>-<hash>`
    (`~/.local/state/...` when XDG_STATE_HOME is unset or not absolute, as the XDG spec says).
    `<name>` is the workspace folder's name, for people; `<hash>` the first 16 hex digits of the
    SHA-256 of its full path, so two workspaces never share a folder."""
    state = os.environ.get("XDG_STATE_HOME", "")
    base = Path(state) if os.path.isabs(state) else Path.home() / ".local" / "state"
    name = re.sub(r"[^A-Za-z0-9._-]", "_", workspace.name)[:48].lstrip(".") or "root"
    digest = hashlib.sha256(os.fsencode(workspace)).hexdigest()[:16]
    return base / "nexus" / "sessions" / f"{name}-{digest}"


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
    _session_dir: Path | None  # None: the default, which follows the workspace
    skills: list[Path]
    active: list[str] | None
    blocked: list[str]
    plugin_sections: dict[str, dict[str, Any]]
    source: str | None = None
    #: tool name -> {"exposure": ..., "allowed_callers": [...]}, as the config's `tools:` says
    tool_settings: dict[str, dict[str, Any]] = attrs.field(factory=dict)
    #: the model agents use, "provider:model" (checked to have both parts), or None
    model: str | None = None
    _lines: dict[tuple[str, ...], int] = attrs.field(factory=dict, repr=False)

    @property
    def session_dir(self) -> Path:
        """`session_dir` from the config, else `default_session_dir(workspace)`: outside the
        workspace, so no tool a script can call writes there. Worked out from the workspace at
        each use, so `Nexus(..., workspace=...)` moves the default with it."""
        return self._session_dir if self._session_dir is not None else default_session_dir(self.workspace)

    @session_dir.setter
    def session_dir(self, value: str | os.PathLike[str] | None) -> None:
        self._session_dir = Path(value) if value is not None else None

    def where(self, path: tuple[str, ...]) -> str:
        """`file:line` for a key path, as precisely as the YAML tells (else the file name)."""
        if not self.source:
            return ""
        return f"{self.source}:{_nearest(self._lines, path)}"

    def validate_plugin_section(self, plugin_id: str, schema: Any) -> dict[str, Any]:
        """The plugin's section checked against its schema, defaults applied, or ConfigError.

        Unknown keys are refused: an object schema that lists `properties` and says nothing
        else about other keys is taken as closed (see `close_schema`). A schema that is not a
        valid JSON Schema raises `InvalidPluginSchema`: the plugin is at fault, not the config.
        """
        section = self.plugin_sections.get(plugin_id) or {}
        if schema is None:
            if section:
                raise ConfigError(
                    [self.problem(("plugins", plugin_id, str(key)),
                                   f"plugins.{plugin_id}.{key}: unknown key (plugin {plugin_id} takes no settings)")
                     for key in sorted(section, key=str)],
                    self.source,
                )
            return {}
        if not isinstance(schema, dict):
            raise InvalidPluginSchema(
                f"plugin {plugin_id!r}: nexus_config_schema returned {type(schema).__name__}, "
                "not a JSON Schema (a dict) or None"
            )
        schema = close_schema(schema)
        try:
            validator = compile_schema(schema)
        except SchemaError as exc:
            where = "/".join(map(str, exc.absolute_path)) or "(top level)"
            raise InvalidPluginSchema(
                f"plugin {plugin_id!r}: its config schema is not valid JSON Schema at {where}: {exc.message}"
            ) from None
        errors = list(validator.iter_errors(section))
        if errors:
            explained = explain(errors, prefix=f"plugins.{plugin_id}")
            explained.sort(key=lambda e: _nearest(self._lines, ("plugins", plugin_id, *e[0])))  # file order
            raise ConfigError([self.problem(("plugins", plugin_id, *path), text) for path, text in explained],
                              self.source)
        checked: dict[str, Any] = apply_defaults(schema, section)
        return checked

    def settings_for(self, names: Iterable[str]) -> dict[str, Any]:
        """The `tools:` settings of the tool that answers to `names` (`ToolDef.names`: its name,
        then its aliases), merged: a tool has one set of settings whatever name the config gives
        it under. Two of its names setting one key differently is a ConfigError naming both."""
        names = list(names)
        merged: dict[str, Any] = {}
        given_by: dict[str, str] = {}
        problems = []
        for name in names:
            for key, value in (self.tool_settings.get(name) or {}).items():
                if key in merged and merged[key] != value:
                    problems.append(self.problem(
                        ("tools", name, key),
                        f"tools.{name}.{key}: {value!r} differs from tools.{given_by[key]}.{key} "
                        f"({merged[key]!r}), and {names[0]!r} is one tool "
                        f"(aliases: {', '.join(map(repr, names[1:]))}); set it once"))
                    continue
                merged.setdefault(key, value)
                given_by.setdefault(key, name)
        if problems:
            raise ConfigError(problems, self.source)
        return merged

    def problem(self, path: tuple[str, ...], text: str) -> str:
        """`text` prefixed with `file:line` of `path` when the config came from a file."""
        where = self.where(path) if self.source else ""
        return f"{where}: {text}" if where else text


def _line_map(
    node: yaml.Node, path: tuple[str, ...] = (), duplicates: list[tuple[tuple[str, ...], int, int]] | None = None
) -> dict[tuple[str, ...], int]:
    """The line of every key path in the YAML; a key given twice in one mapping (which YAML
    loaders silently resolve to the last) is added to `duplicates` as (path, first, again)."""
    import yaml

    lines = {path: node.start_mark.line + 1}
    if isinstance(node, yaml.MappingNode):
        seen: dict[str, int] = {}
        for key_node, value_node in node.value:
            name = str(key_node.value)
            key = (*path, name)
            line = key_node.start_mark.line + 1
            if name in seen and duplicates is not None:
                duplicates.append((key, seen[name], line))
            seen.setdefault(name, line)
            lines.update(_line_map(value_node, key, duplicates))
            lines[key] = line
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            lines.update(_line_map(item, (*path, str(i)), duplicates))
    return lines


def _empty_sections_as_dicts(data: dict[str, Any]) -> dict[str, Any]:
    """`plugins: {nexus.tool.shell: }` (an empty section in YAML) means `{}`, not null; so does
    an empty `plugins:` itself."""
    if "plugins" in data and data["plugins"] is None:
        data["plugins"] = {}
    plugins = data.get("plugins")
    if isinstance(plugins, dict):
        data["plugins"] = {k: ({} if v is None and k not in RESERVED_PLUGIN_KEYS else v)
                           for k, v in plugins.items()}
    return data


def read_config_bytes(path: str | os.PathLike[str], origin: str) -> bytes:
    """The file's bytes, at most MAX_CONFIG_BYTES, or ConfigError saying why not."""
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise ConfigError([f"{origin}: cannot read config: {exc.strerror or exc}"], origin) from None
    if len(raw) > MAX_CONFIG_BYTES:
        too_big = (f"{origin}: the config file is larger than {MAX_CONFIG_BYTES} bytes "
                   f"({MAX_CONFIG_BYTES >> 10} KiB), the most Nexus reads; is it the right file?")
        raise ConfigError([too_big], origin)
    return raw


def decode_config(raw: bytes, origin: str) -> str:
    """The config's bytes as text, or ConfigError naming the line of the first byte that is
    not UTF-8."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise ConfigError([f"{origin}:{line}: the config is not UTF-8 text (byte {raw[exc.start]:#04x} at "
                           f"offset {exc.start}: {exc.reason}); save it as UTF-8"], origin) from None


def _read_config_text(path: Path, origin: str) -> str:
    """The file's text, at most MAX_CONFIG_BYTES of UTF-8, or ConfigError saying why not."""
    return decode_config(read_config_bytes(path, origin), origin)


def load_config(source: str | os.PathLike[str] | dict[str, Any] | None = None, *,
                text: str | None = None, base: Path | None = None) -> NexusConfig:
    """Read and check the core part of a config: a YAML file's path, a dict, or None for defaults.
    `text`: the file's text, read already (the command line parses the very bytes it checked
    were trusted), for a path `source`. `base`: the folder relative paths resolve against
    instead of the file's (an installed distribution's config: the working folder)."""
    lines: dict[tuple[str, ...], int] = {}
    origin: str | None = None
    given_base, base = base, Path.cwd()
    if source is None:
        data: Any = {}
    elif isinstance(source, dict):
        data = source
    else:
        path = Path(source)
        origin = str(source)
        if text is None:
            text = _read_config_text(path, origin)
        import yaml  # here, not at import: the CLI's start-up does not pay for PyYAML

        from ._yaml import YAMLLimitError, load_yaml

        try:
            node, data = load_yaml(text)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f"{origin}:{mark.line + 1}" if mark else origin
            problem = getattr(exc, "problem", None) or str(exc)
            what = "" if isinstance(exc, YAMLLimitError) else "invalid YAML: "
            raise ConfigError([f"{where}: {what}{problem}"], origin) from None
        if node is not None:
            duplicates: list[tuple[tuple[str, ...], int, int]] = []
            lines = _line_map(node, (), duplicates)
            if duplicates:
                raise ConfigError(
                    [f"{origin}:{again}: {format_path(key)}: duplicate key (first given at line {first})"
                     for key, first, again in duplicates],
                    origin,
                )
        base = given_base if given_base is not None else path.resolve().parent
        if data is None:
            data = {}
    if not isinstance(data, dict):
        where = f"{origin}:1: " if origin else ""
        raise ConfigError([f"{where}config must be a mapping of keys, got {type(data).__name__}"], origin)
    data = _empty_sections_as_dicts(dict(data))

    errors = list(_core_validator().iter_errors(data))
    if errors:
        explained = sorted(explain(errors), key=lambda e: _nearest(lines, e[0]))  # file order
        raise ConfigError(
            [(f"{origin}:{_nearest(lines, path)}: " if origin else "") + text for path, text in explained],
            origin,
        )

    data = apply_defaults(CORE_SCHEMA, data)
    if data["model"] is not None:
        try:
            split_model(data["model"])
        except ValueError as exc:
            where = f"{origin}:{_nearest(lines, ('model',))}: " if origin else ""
            raise ConfigError([f"{where}model: {exc}"], origin) from None
    plugins = data["plugins"]
    sections = {k: (v or {}) for k, v in plugins.items() if k not in RESERVED_PLUGIN_KEYS}
    return NexusConfig(
        workspace=(base / os.path.expanduser(data["workspace"])).resolve(),
        session_dir=(base / os.path.expanduser(data["session_dir"])) if "session_dir" in data else None,
        skills=[(base / os.path.expanduser(s)) for s in data["skills"]],
        active=plugins.get("active"),
        blocked=list(plugins.get("blocked", [])),
        plugin_sections=sections,
        source=origin,
        tool_settings={name: dict(settings or {}) for name, settings in data["tools"].items()},
        model=data["model"],
        lines=lines,
    )


def _nearest(lines: dict[tuple[str, ...], int], path: tuple[str, ...]) -> int:
    for n in range(len(path), -1, -1):
        if tuple(path[:n]) in lines:
            return lines[tuple(path[:n])]
    return 1
