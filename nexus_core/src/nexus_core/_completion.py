"""Shell completion of tool names (`nexus call TOOL`, `nexus tools NAME`): cheap, and safe in any
folder.

A completion runs on every Tab, often in a folder whose config nobody has looked at, so it reads
no config at all (not `--config`, `$NEXUS_CONFIG` or `./nexus.yaml`: a workspace's config is not
to be trusted before the person says so) and starts no process. The names it offers are the tools
of the installed plugins with their default settings and no skills folder, the Nexus
`Nexus({"skills": []})` builds; none of the shipped plugins starts a process for that (run_code
starts its zygote on its first run, the MCP client has no server without a config). Tools that
only a config brings, an MCP server's, are not offered: listing them would start the server.

Building that Nexus costs what `nexus tools` costs, so the names are kept in one small file,
`$XDG_CACHE_HOME/nexus/completion.json` (`~/.cache/nexus/` by default), under a key of what
decides them: the version of nexus-rt-core, each selected plugin's entry point, distribution and
version and its module's modification time (an editable install being edited), and the
environment switches. Anything else changing them is out of reach of a Tab: delete the file.

Nothing here may print: stdout carries the completion protocol, stderr lands in the person's
prompt. Any failure offers no names.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
from pathlib import Path

from ._plugins import ENV_BLOCK, ENV_DISABLE_AUTOLOAD, select_entry_points

CACHE_FILE = "completion.json"


def cache_path() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "nexus" / CACHE_FILE


def _module_mtime(module: str) -> int | None:
    loaded = sys.modules.get(module)
    path = getattr(loaded, "__file__", None)
    try:
        return os.stat(path).st_mtime_ns if path else None
    except OSError:
        return None


def fingerprint() -> str:
    """What the installed plugins' tool names depend on, as a short hash."""
    from . import __version__

    chosen, _ = select_entry_points(None, ())
    parts: list[object] = [__version__, os.environ.get(ENV_BLOCK, ""), os.environ.get(ENV_DISABLE_AUTOLOAD, "")]
    for ep in sorted(chosen, key=lambda e: e.name):
        dist = ep.dist
        parts.append([ep.name, ep.value, dist.name if dist else None, dist.version if dist else None,
                      _module_mtime(ep.module)])
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:32]


def _installed_tool_names() -> list[str]:
    from ._nexus import Nexus

    with (open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink),
          Nexus({"skills": []}) as nx):
        names = {t.name for t in nx.tools()}
        for tool in nx.tools():
            names.update(getattr(tool, "aliases", ()) or ())  # one ToolDef per tool, aliases on it
    return sorted(names)


def _read_cache(path: Path, key: str) -> list[str] | None:
    from ._registry import TOOL_NAME

    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("key") != key or not isinstance(data.get("tools"), list):
        return None
    # only names a tool may have: whatever is in the file, the shell gets no other text
    return [n for n in data["tools"] if isinstance(n, str) and TOOL_NAME.match(n)]


def _write_cache(path: Path, key: str, names: list[str]) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".{path.name}.{os.getpid()}")
        partial.write_text(json.dumps({"key": key, "tools": names}), encoding="utf-8")
        os.replace(partial, path)
    except OSError:
        pass  # a read-only home: completion still works, it is only slower


def tool_names() -> list[str]:
    """The installed plugins' tool names (aliases included), from the cache when it is current."""
    key = fingerprint()
    path = cache_path()
    names = _read_cache(path, key)
    if names is None:
        names = _installed_tool_names()
        _write_cache(path, key, names)
    return names


def complete_tool_name(incomplete: str) -> list[str]:
    """The tool names that start with `incomplete`; none when anything fails."""
    try:
        return [name for name in tool_names() if name.startswith(incomplete)]
    except Exception:
        return []
