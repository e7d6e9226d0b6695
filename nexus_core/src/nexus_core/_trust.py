"""Which config files the `nexus` command line may load: a config a tool could have written is
loaded only once the person has trusted it.

A config is code: it picks the plugins, starts MCP servers (`command: sh -c ...`), and sets the
gates' policy. A script whose calls are confined to the workspace can still write a file there,
so the command line treats a config inside the workspace it configures, or inside the working
folder (the folder `./nexus.yaml` is found in, and the default workspace), as untrusted until
the person trusts it: `nexus trust FILE` records its SHA-256 in a file of their own, outside any
workspace (`$NEXUS_TRUST_FILE`, else `$XDG_CONFIG_HOME/nexus/trusted-configs.json`, else
`~/.config/nexus/trusted-configs.json`), or `--trust-config` trusts it for one command. A file
that changed since is untrusted again. A config outside both folders, named with `--config` or
`$NEXUS_CONFIG`, is the person's own choice and loads as before; so does any config a Python
host passes to `Nexus.from_config` (the host chose it).

The hash is of the bytes the command then parses (`load_config(path, text=...)`), so a file
changed between the check and the load cannot slip in.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shlex
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ._config import ConfigError

TRUST_FILE_ENV = "NEXUS_TRUST_FILE"
_FORMAT = 1
#: `${VAR}` in a setting: an environment variable a plugin expands (a secret it may send away)
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)")


def trust_file() -> Path:
    """Where the records of trusted configs are kept."""
    given = os.environ.get(TRUST_FILE_ENV)
    if given:
        return Path(given).expanduser().absolute()
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base).absolute() / "nexus" / "trusted-configs.json"


def config_key(path: str | os.PathLike[str]) -> str:
    """A config's name in the records: its absolute path, symlinks not followed (a symlink is a
    file of the folder it is in, and a tool there can point it elsewhere; the hash is of what it
    points to)."""
    return os.path.abspath(path)


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# -- the records --------------------------------------------------------------------------------


def _load_records(where: Path) -> dict[str, dict[str, Any]]:
    try:
        data = json.loads(where.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise ConfigError([f"{where}: the record of trusted configs cannot be read ({exc}); "
                           f"fix or delete it (then trust the configs again)"]) from None
    configs = data.get("configs") if isinstance(data, dict) else None
    if not isinstance(configs, dict):
        raise ConfigError([f"{where}: the record of trusted configs is not in the expected form "
                           f"(a JSON object with \"configs\"); fix or delete it"])
    return {k: v for k, v in configs.items() if isinstance(v, dict)}


@contextlib.contextmanager
def _locked(where: Path) -> Iterator[None]:
    """One writer at a time (two `nexus trust` at once must not lose a record)."""
    where.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        import fcntl
    except ImportError:  # no fcntl (Windows): the replace below is still atomic
        yield
        return
    with open(where.with_name(where.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _save_records(where: Path, records: dict[str, dict[str, Any]]) -> None:
    text = json.dumps({"format": _FORMAT, "configs": records}, indent=2, sort_keys=True) + "\n"
    fd, temp = tempfile.mkstemp(prefix=".trusted-", dir=where.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(temp, 0o600)
        os.replace(temp, where)  # readers see the old records or the new, never half
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise


def recorded_digest(path: str | os.PathLike[str]) -> str | None:
    """The SHA-256 the person trusted for this config, or None."""
    entry = _load_records(trust_file()).get(config_key(path))
    value = entry.get("sha256") if entry else None
    return value if isinstance(value, str) else None


def record_trust(path: str | os.PathLike[str], data: bytes) -> Path:
    """Record that the config at `path`, with exactly these bytes, is trusted. Returns the
    record file."""
    where = trust_file()
    with _locked(where):
        records = _load_records(where)
        records[config_key(path)] = {"sha256": digest(data)}
        _save_records(where, records)
    return where


def forget_trust(path: str | os.PathLike[str]) -> bool:
    """Take the config out of the records; False when it was not in them."""
    where = trust_file()
    with _locked(where):
        records = _load_records(where)
        if records.pop(config_key(path), None) is None:
            return False
        _save_records(where, records)
    return True


# -- the rule -----------------------------------------------------------------------------------


def _inside(path: Path, folder: Path) -> bool:
    return Path(os.path.realpath(path)).is_relative_to(os.path.realpath(folder))


def why_untrusted(path: str | os.PathLike[str], workspace: Path | None, found: bool) -> str | None:
    """Why the config at `path` must be trusted before the command line loads it, or None when
    it is the person's own choice. `found`: the command line found it (`./nexus.yaml`) rather
    than being told its name; `workspace`: the folder it configures (None: not known yet)."""
    if found:
        return "it was found in the working folder, where a tool or a script could have written it"
    if _inside(Path(path), Path.cwd()):
        return "it is inside the working folder, where a tool or a script could have written it"
    if workspace is not None and _inside(Path(path), workspace):
        return (f"it is inside the workspace it configures ({workspace}), where a tool or a script "
                "could have written it")
    return None


def trust_command(shown: str) -> str:
    return f"nexus trust {shlex.quote(shown)}"


def check_trusted(shown: str, data: bytes, reason: str, workspace: Path | None) -> None:
    """Raise ConfigError unless the person trusted exactly these bytes of the config `shown`
    (its name as the command line got it), saying why it needs trust and how to give it. Records
    kept inside the workspace vouch for nothing: a tool could have written them too."""
    where = trust_file()
    if workspace is not None and _inside(where, workspace):
        raise ConfigError([
            f"{shown} is not trusted: {reason}, and the record of trusted configs ({where}) is inside the "
            f"workspace too, so it cannot vouch for it; nothing in the config was loaded",
            f"keep the record outside the workspace (set ${TRUST_FILE_ENV} to a file elsewhere), or pass "
            f"--trust-config to use the config for one command",
        ], shown)
    recorded = recorded_digest(shown)
    now = digest(data)
    if recorded == now:
        return
    if recorded is None:
        state = f"{shown} is not trusted: {reason}"
    else:
        state = (f"{shown} changed since it was trusted (sha256 {recorded[:12]}... then, {now[:12]}... now) "
                 f"and {reason.removeprefix('it ')}")
    raise ConfigError([
        f"{state}; nothing in it was loaded",
        f"read it, then trust it with: {trust_command(shown)}  (or pass --trust-config to use it for "
        f"one command; trusted configs are recorded in {where})",
    ], shown)


# -- what a config does, for `nexus trust` --------------------------------------------------------


def summary(data: dict[str, Any], workspace: Path) -> list[str]:
    """Lines saying what a config makes the command line do: the workspace, which plugins it
    activates or blocks, the plugins it configures, every command it would run and server it
    would reach (`command`, `args`, `url` keys in any plugin's section, an MCP server's among
    them), and the environment variables it reads (`${VAR}`)."""
    given = data.get("plugins")
    plugins: dict[str, Any] = given if isinstance(given, dict) else {}
    active = plugins.get("active")
    lines = [f"workspace: {workspace}"]
    lines.append("plugins: " + (", ".join(map(str, active)) if isinstance(active, list) and active else
                                "none" if isinstance(active, list) else "every installed plugin (no plugins.active)"))
    blocked = plugins.get("blocked")
    if isinstance(blocked, list) and blocked:
        lines.append("blocked: " + ", ".join(map(str, blocked)))
    sections = [k for k in plugins if k not in ("active", "blocked")]
    if sections:
        lines.append("settings for: " + ", ".join(sections))
    runs: list[str] = []
    reaches: list[str] = []
    variables: set[str] = set()

    def walk(value: Any, where: str) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                here = f"{where}.{key}"
                if key == "command" and isinstance(item, str):
                    args = value.get("args")
                    line = shlex.join([item, *map(str, args)]) if isinstance(args, list) else item
                    runs.append(f"{here}: {line}")
                elif key == "url" and isinstance(item, str):
                    reaches.append(f"{here}: {item}")
                walk(item, here)
        elif isinstance(value, list):
            for i, item in enumerate(value):
                walk(item, f"{where}[{i}]")
        elif isinstance(value, str):
            variables.update(_VARIABLE.findall(value))

    walk(plugins, "plugins")
    lines.extend(f"runs: {r}" for r in runs)
    lines.extend(f"connects to: {r}" for r in reaches)
    if variables:
        lines.append("reads environment variables: " + ", ".join(sorted(variables)))
    if not runs:
        lines.append("runs: no command of its own")
    return lines

